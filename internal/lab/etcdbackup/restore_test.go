package etcdbackup

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/etcdsnap/etcdsnaptest"
	"github.com/khw-dev/khw/internal/health"
)

func testCluster(t *testing.T) *config.Cluster {
	t.Helper()
	return config.Default("t1", "amd64", "nspawn")
}

func TestNewReadsRevisionAndDigest(t *testing.T) {
	c := testCluster(t)
	p := filepath.Join(t.TempDir(), "snap.db")
	etcdsnaptest.Write(t, p, 42)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	r, err := New(c, p, time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if r.Revision != 42 || r.SHA256 != hex.EncodeToString(sum[:]) || r.Size != int64(len(data)) {
		t.Fatalf("revision %d sha %s size %d; want 42, %x, %d", r.Revision, r.SHA256, r.Size, sum, len(data))
	}
	if r.Token != "etcd-t1-restore-20261204-100000" || r.MinRevision() != 42+DefaultBump {
		t.Fatalf("token %q, min revision %d", r.Token, r.MinRevision())
	}

	notEtcd := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(notEtcd, []byte("not a database"), 0o600)
	if _, err := New(c, notEtcd, time.Now()); err == nil || !strings.Contains(err.Error(), "not an etcd database") {
		t.Fatalf("a text file: err %v, want 'not an etcd database'", err)
	}
	// A member's data file has no SHA-256 at its end; a changed byte
	// fails it. etcdutl would refuse both only after etcd is stopped.
	raw := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(raw, data[:len(data)-sha256.Size], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(c, raw, time.Now()); err == nil || !strings.Contains(err.Error(), "member/snap/db") {
		t.Errorf("a data file without the hash: err %v, want one naming member/snap/db", err)
	}
	damaged := append([]byte(nil), data...)
	damaged[len(damaged)-sha256.Size-1] ^= 1
	if err := os.WriteFile(raw, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(c, raw, time.Now()); err == nil || !strings.Contains(err.Error(), "is damaged") {
		t.Errorf("a damaged snapshot: err %v, want 'is damaged'", err)
	}
}

func TestPhasesFollowTheUpstreamOrder(t *testing.T) {
	c := testCluster(t)
	r := &Restore{Cluster: c, File: "/backups/my snap.db", SHA256: "ab12", Revision: 7, Token: "etcd-t1-restore-x", Bump: DefaultBump}
	var names []string
	for _, p := range r.Phases() {
		names = append(names, p.Name)
	}
	want := []string{
		"copy the snapshot to every control plane",
		"stop the apiservers, controller-managers and schedulers",
		"stop etcd on every member",
		"restore each member from the snapshot into a new data directory",
		"put the restored data directories in place",
		"start etcd on every member together",
		"start the apiservers",
		"start the controller-managers and schedulers",
		"restart kubelet and kube-proxy on every worker",
		"remove the snapshot's copies from the control planes",
	}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Fatalf("phases:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}

	phases := r.Phases()
	// The copy: the path quoted, one per control plane, then the check.
	var scp, check int
	for _, cmd := range phases[0].Commands {
		if cmd.Node == "" && strings.Contains(cmd.Shell, `scp -F "$KHW_SSH_CONFIG" '/backups/my snap.db' `) {
			scp++
		}
		if cmd.Node != "" && strings.Contains(cmd.Shell, "echo 'ab12  "+RemoteSnapshot+"' | sudo sha256sum -c") {
			check++
		}
	}
	if scp != 3 || check != 3 {
		t.Fatalf("copy phase: %d scp and %d checks, want 3 and 3:\n%v", scp, check, phases[0].Commands)
	}

	// The restore: each member its own name and peer URL, all the same
	// --initial-cluster and token, the bump, into the new directory.
	initial := "--initial-cluster cp1=https://192.168.122.11:2380,cp2=https://192.168.122.12:2380,cp3=https://192.168.122.13:2380 "
	for i, cmd := range phases[3].Commands {
		n := c.ControlPlanes()[i]
		for _, want := range []string{
			"sudo etcdutl snapshot restore " + RemoteSnapshot,
			"--name " + n.Name + " ",
			initial,
			"--initial-cluster-token etcd-t1-restore-x ",
			"--initial-advertise-peer-urls https://" + n.IP + ":2380 ",
			"--bump-revision 1000000000 --mark-compacted",
			"--data-dir " + RestoredDir,
		} {
			if !strings.Contains(cmd.Shell, want) || cmd.Node != n.Name {
				t.Errorf("%s: restore command lacks %q:\n%s", n.Name, want, cmd.Shell)
			}
		}
	}
	// The old data is kept, the restored data put in its place, only
	// after every member was restored (a later phase).
	swap := phases[4].Commands[0].Shell
	if !strings.Contains(swap, "sudo mv "+DataDir+" "+OldDataDir) || !strings.HasSuffix(swap, "sudo mv "+RestoredDir+" "+DataDir) {
		t.Fatalf("swap:\n%s", swap)
	}
	// Workers restart their kubelet and kube-proxy.
	var restarted []string
	for _, cmd := range phases[8].Commands {
		restarted = append(restarted, cmd.Node)
	}
	if strings.Join(restarted, ",") != "w1,w2,w3" {
		t.Fatalf("kubelet restarted on %v, want w1,w2,w3", restarted)
	}
}

func TestRestoredProblem(t *testing.T) {
	r := &Restore{Revision: 100, Bump: 1000}
	ep := func(node, cluster string, rev int64) health.EtcdEndpoint {
		return health.EtcdEndpoint{Node: node, OK: true, ClusterID: cluster, Revision: rev}
	}
	cases := []struct {
		name string
		rep  health.EtcdReport
		want string
	}{
		{"healthy", health.EtcdReport{Leader: "cp1", Endpoints: []health.EtcdEndpoint{ep("cp1", "a", 1100), ep("cp2", "a", 1100), ep("cp3", "a", 1101)}}, ""},
		{"a member on its old data", health.EtcdReport{Leader: "cp1", Endpoints: []health.EtcdEndpoint{ep("cp1", "a", 1100), ep("cp2", "b", 5000), ep("cp3", "a", 1100)}},
			"the members are in different clusters"},
		{"old revision", health.EtcdReport{Leader: "cp1", Endpoints: []health.EtcdEndpoint{ep("cp1", "a", 1100), ep("cp2", "a", 900)}},
			"member cp2 is at revision 900, below the snapshot's 100 plus 1000"},
		{"down", health.EtcdReport{Leader: "cp1", Endpoints: []health.EtcdEndpoint{ep("cp1", "a", 1100), {Node: "cp3", Err: "connection refused"}}},
			"member cp3 does not answer: connection refused"},
		{"no leader", health.EtcdReport{Healthy: 0, Size: 3, Endpoints: []health.EtcdEndpoint{ep("cp1", "a", 1100)}}, "no leader yet"},
	}
	for _, tc := range cases {
		got := restoredProblem(r, &tc.rep)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// khw runs each phase's node commands as shown; of the copy it runs only
// the check (its SFTP upload stands for scp and install).
func TestNodeScriptsRunTheShownCommands(t *testing.T) {
	r := &Restore{Cluster: testCluster(t), File: "/b/s.db", SHA256: "ab12", Revision: 7, Token: "tok", Bump: DefaultBump}
	phases := r.Phases()
	order, scripts := phases[0].nodeScripts()
	if strings.Join(order, ",") != "cp1,cp2,cp3" {
		t.Fatalf("copy phase runs on %v", order)
	}
	for _, n := range order {
		if want := "set -e\necho 'ab12  " + RemoteSnapshot + "' | sudo sha256sum -c --quiet -"; scripts[n] != want {
			t.Errorf("%s runs %q, want only the check %q", n, scripts[n], want)
		}
	}
	_, scripts = phases[3].nodeScripts()
	if !strings.HasPrefix(scripts["cp2"], "set -e\nsudo rm -rf "+RestoredDir+"\nsudo etcdutl snapshot restore "+RemoteSnapshot+" \\\n  --name cp2 \\\n") {
		t.Errorf("cp2's restore script:\n%s", scripts["cp2"])
	}
	order, scripts = phases[5].nodeScripts()
	// Every member starts etcd; cp1 also runs lab 04's wait and status.
	if strings.Join(order, ",") != "cp1,cp2,cp3" || !strings.Contains(scripts["cp1"], "endpoint health") || strings.Contains(scripts["cp2"], "endpoint health") {
		t.Errorf("start phase: %v\n%v", order, scripts)
	}
}

// The phases before FirstReplacingPhase leave every member's data
// directory as it was; that one moves it.
func TestFirstReplacingPhase(t *testing.T) {
	r := &Restore{Cluster: testCluster(t), File: "/s.db", Token: "tok", Bump: DefaultBump}
	ps := r.Phases()
	for i, p := range ps[:FirstReplacingPhase+1] {
		moves := false
		for _, c := range p.Commands {
			moves = moves || strings.Contains(c.Shell, "sudo mv "+DataDir+" ")
		}
		if moves != (i == FirstReplacingPhase) {
			t.Errorf("phase %d (%s) moves %s: %v", i, p.Name, DataDir, moves)
		}
	}
}

// TestNewRefusesRevisionsTheBumpOverflows: a snapshot whose revision plus
// DefaultBump is past int64 is refused before any node is touched, and
// the largest revision the bump still fits is taken.
func TestNewRefusesRevisionsTheBumpOverflows(t *testing.T) {
	c := testCluster(t)
	p := filepath.Join(t.TempDir(), "snap.db")
	etcdsnaptest.WriteRevisions(t, p, math.MaxInt64-DefaultBump+1)
	r, err := New(c, p, time.Now())
	if err == nil || !strings.Contains(err.Error(), p+" holds revision 9223372035854775808: the restore's --bump-revision 1000000000 would take it past the largest etcd revision") {
		t.Fatalf("New: %+v, %v; want an error that the bump overflows", r, err)
	}
	ok := filepath.Join(t.TempDir(), "snap.db")
	etcdsnaptest.WriteRevisions(t, ok, math.MaxInt64-DefaultBump)
	if r, err := New(c, ok, time.Now()); err != nil || r.MinRevision() != math.MaxInt64 {
		t.Fatalf("New at the largest revision the bump fits: %+v, %v", r, err)
	}
}

// TestNewRefusesDamagedSnapshots: a snapshot bbolt panics on (with its
// trailing SHA-256 right, so only reading it finds the damage) is an
// error naming the file, not a crash.
func TestNewRefusesDamagedSnapshots(t *testing.T) {
	p := filepath.Join(t.TempDir(), "snap.db")
	etcdsnaptest.WriteDamaged(t, p, etcdsnaptest.PageIDChanged)
	if r, err := New(testCluster(t), p, time.Now()); err == nil || !strings.Contains(err.Error(), p+" is not a valid etcd snapshot: its database is damaged") {
		t.Fatalf("New: %+v, %v; want an error naming %s as damaged", r, err, p)
	}
}
