package etcdbackup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/khw-dev/khw/internal/etcdsnap/etcdsnaptest"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/state"
)

// restored is what a good restore looks like from the jumpbox.
func restored() Observed {
	ep := func(node string) health.EtcdEndpoint {
		return health.EtcdEndpoint{Node: node, OK: true, ClusterID: "new", Revision: 1_000_001_300}
	}
	return Observed{
		Etcd:      &health.EtcdReport{Leader: "cp2", Healthy: 3, Size: 3, Endpoints: []health.EtcdEndpoint{ep("cp1"), ep("cp2"), ep("cp3")}},
		Probes:    []Probe{{File: "/s/etcd-snapshots/lab13-snapshot.db", Revision: 1300, Result: "compacted"}},
		Current:   1_000_001_300,
		Namespace: true, Kept: true, KeptRevision: 1290,
		APIServers: []health.Readyz{{Target: "cp1", OK: true}, {Target: "cp2", OK: true}, {Target: "cp3", OK: true}, {Target: "lb", OK: true}},
	}
}

// TestJudge grades hand-made restores: each mistake a student can make
// is named once, with its node, and a good restore has no finding.
func TestJudge(t *testing.T) {
	start := Start{ClusterID: "old", Revision: 1300, At: time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)}
	cases := []struct {
		name   string
		break_ func(o *Observed)
		want   []string // "node: what" of each finding, in order
	}{
		{"good", func(*Observed) {}, nil},
		{"nothing restored, changes made", func(o *Observed) {
			for i := range o.Etcd.Endpoints {
				o.Etcd.Endpoints[i].ClusterID = "old"
			}
			o.Probes[0].Result, o.Current, o.Kept, o.Lost = "future", 1310, false, true
		}, []string{": etcd was not restored: its cluster ID old is the one from before the lab began",
			": revision 1001300, the snapshot's plus 1000000, is not compacted in the restored cluster",
			": ConfigMap khw-lab13/kept is missing", ": ConfigMap khw-lab13/lost exists"}},
		{"cp3 left on its old data", func(o *Observed) {
			o.Etcd.Endpoints[2].ClusterID = "old"
		}, []string{"cp3: this member is still on its data from before the restore (the old cluster ID old)"}},
		{"each member its own token", func(o *Observed) {
			o.Etcd.Endpoints[1].ClusterID, o.Etcd.Endpoints[2].ClusterID = "other", "third"
			o.Etcd.Leader = ""
		}, []string{": the members are in different clusters", ": etcd has no leader"}},
		{"no --bump-revision", func(o *Observed) {
			o.Probes[0].Result, o.Current = "future", 1250
		}, []string{": revision 1001300, the snapshot's plus 1000000, is not compacted in the restored cluster: restored without --bump-revision and --mark-compacted"}},
		{"a bump too small", func(o *Observed) {
			o.Probes[0].Result, o.Current = "readable", 1_500_000
		}, []string{": revision 1001300, the snapshot's plus 1000000, is not compacted in the restored cluster: restored without --bump-revision and --mark-compacted, or with a bump under 1000000"}},
		{"restored from the first snapshot, a second one saved since", func(o *Observed) {
			o.Probes = append(o.Probes, Probe{File: "/s/etcd-snapshots/later.db", Revision: 1_000_001_350, Result: "future"})
		}, nil},
		{"no snapshot saved since the start", func(o *Observed) {
			o.Probes = nil
		}, []string{": no etcd snapshot saved since the lab began is in etcd-snapshots"}},
		{"the old token", func(o *Observed) {
			for i := range o.Etcd.Endpoints {
				o.Etcd.Endpoints[i].ClusterID = "old"
			}
		}, []string{": etcd was restored with the old --initial-cluster-token"}},
		{"kept made again after the snapshot", func(o *Observed) {
			o.KeptRevision = 1_000_001_290
		}, []string{": ConfigMap khw-lab13/kept was made after the snapshot"}},
		{"cp2's member down, cp2's apiserver not ready", func(o *Observed) {
			o.Etcd.Endpoints[1] = health.EtcdEndpoint{Node: "cp2", Err: "connection refused"}
			o.APIServers[1] = health.Readyz{Target: "cp2", Err: "connection refused"}
		}, []string{"cp2: etcd does not answer", "cp2: kube-apiserver is not ready"}},
		{"objects unreadable", func(o *Observed) {
			o.ObjectsErr = "the server is currently unable to handle the request"
		}, []string{": the lab's objects could not be read through the API"}},
		{"no part 1", func(o *Observed) {
			o.Namespace, o.Kept = false, false
		}, []string{": namespace khw-lab13 does not exist"}},
	}
	for _, tc := range cases {
		o := restored()
		tc.break_(&o)
		got := Judge(start, o)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d findings, want %d:\n%s", tc.name, len(got), len(tc.want), findings(got))
			continue
		}
		for i, f := range got {
			if !strings.HasPrefix(f.Node+": "+f.What, tc.want[i]) {
				t.Errorf("%s: finding %d is %q, want %q…", tc.name, i+1, f.Node+": "+f.What, tc.want[i])
			}
			if f.Lab != "13-etcd-backup" || f.Fix == "" || f.Evidence == "" {
				t.Errorf("%s: finding %d lacks its lab, fix or evidence: %+v", tc.name, i+1, f)
			}
		}
	}
}

func findings(fs []grade.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "  %s\n", f.String())
	}
	return b.String()
}

// TestReadAtARealMember reads a real etcd (from the mirror) at revisions
// below its compaction, at and below its current one, and above it: what
// the grading calls compacted, readable and future.
func TestReadAtARealMember(t *testing.T) {
	tg, _ := etcdsnaptest.RealMember(t)
	cli, err := tg.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rev int64
	for i := range 10 {
		r, err := cli.Put(ctx, fmt.Sprintf("/registry/khw-test/%d", i), "v")
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	if _, err := cli.Compact(ctx, rev-3, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rev  int64
		want string
	}{{rev - 5, "compacted"}, {rev - 3, "readable"}, {rev, "readable"}, {rev + 100, "future"}} {
		if got := readAt(ctx, cli, tc.rev); got != tc.want {
			t.Errorf("read at %d (current %d, compacted at %d): %q, want %q", tc.rev, rev, rev-3, got, tc.want)
		}
	}
}

// TestByHandCommands: the student's part 1 and 2 commands make exactly
// the objects the check looks for, the snapshot is taken on the first
// control plane, and part 3 points at the restore's own commands.
func TestByHandCommands(t *testing.T) {
	d := state.New("/root/.local/state/khw", "t1")
	cmds := ByHandCommands(testCluster(t), d)
	var all []string
	for _, c := range cmds {
		all = append(all, c.String())
	}
	text := strings.Join(all, "\n")
	for _, want := range []string{
		"$ kubectl create namespace khw-lab13",
		"$ kubectl -n khw-lab13 create configmap kept ",
		"cp1$ sudo etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/etc/etcd/ca.pem --cert=/etc/etcd/kubernetes.pem --key=/etc/etcd/kubernetes-key.pem snapshot save /var/lib/khw/lab13-snapshot.db",
		"(umask 077; ssh -F \"$KHW_SSH_CONFIG\" cp1 'sudo cat /var/lib/khw/lab13-snapshot.db' > \"$KHW_STATE_DIR/$KHW_CLUSTER/etcd-snapshots/lab13-snapshot.db\")",
		"cp1$ sudo rm -f /var/lib/khw/lab13-snapshot.db",
		"$ kubectl -n khw-lab13 delete configmap kept",
		"$ kubectl -n khw-lab13 create configmap lost ",
		"$ khw etcd restore /root/.local/state/khw/t1/etcd-snapshots/lab13-snapshot.db --dry-run",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("by-hand commands lack %q:\n%s", want, text)
		}
	}
	if strings.Index(text, "snapshot save") > strings.Index(text, "delete configmap kept") {
		t.Errorf("the snapshot must come before the changes:\n%s", text)
	}
}

// The probes are the snapshots written since the lab began, oldest
// first; older ones and other files do not count.
func TestSnapshotsSince(t *testing.T) {
	d := state.New(t.TempDir(), "t1")
	dir := SnapshotsDir(d)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Hour)
	if got := snapshotsSince(d, start); len(got) != 0 {
		t.Errorf("probes without any snapshot: %v", got)
	}
	old, mine, newer := filepath.Join(dir, "old.db"), filepath.Join(dir, "lab13-snapshot.db"), filepath.Join(dir, "later.db")
	etcdsnaptest.Write(t, old, 500)
	etcdsnaptest.Write(t, mine, 1200)
	etcdsnaptest.Write(t, newer, 1500)
	if err := os.WriteFile(filepath.Join(dir, "notes.db"), []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	touch := func(p string, at time.Time) {
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	touch(old, start.Add(-time.Minute))
	touch(mine, start.Add(time.Minute))
	touch(newer, start.Add(2*time.Minute))
	got := snapshotsSince(d, start)
	if len(got) != 2 || got[0].File != mine || got[0].Revision != 1200 || got[1].Revision != 1500 || got[0].At() != 1200+MinBump {
		t.Errorf("probes %+v, want lab13-snapshot.db at 1200, then later.db at 1500", got)
	}
}

// TestLoadStartRefusesWhatBeginCannotRecord: a start record read back
// with a revision below 1, a cluster ID that is not hex or no time is an
// error naming the file and the fix.
func TestLoadStartRefusesWhatBeginCannotRecord(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"negative revision", `{"clusterID": "8e9e05c52164694d", "revision": -5, "at": "2026-12-05T03:00:00Z"}`, "revision -5 is below 1"},
		{"cluster ID not hex", `{"clusterID": "../x", "revision": 1300, "at": "2026-12-05T03:00:00Z"}`, `clusterID "../x" is not etcd's hex cluster ID`},
		{"null", `null`, `clusterID "" is not etcd's hex cluster ID`},
		{"no time", `{"clusterID": "8e9e05c52164694d", "revision": 1300}`, "at is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := state.Dir{Root: t.TempDir(), Name: "t"}
			p := StartPath(d)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			s, ok, err := LoadStart(d)
			if err == nil || !strings.Contains(err.Error(), p+" is damaged: "+tc.want) || !strings.Contains(err.Error(), "remove it and begin khw lab 13-etcd-backup again") {
				t.Fatalf("LoadStart: %+v, %v, %v; want an error naming %s and %q", s, ok, err, p, tc.want)
			}
		})
	}
	d := state.Dir{Root: t.TempDir(), Name: "t"}
	want := Start{ClusterID: "8e9e05c52164694d", Revision: 1300, At: time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)}
	if err := os.MkdirAll(filepath.Dir(StartPath(d)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(StartPath(d), []byte(`{"clusterID": "8e9e05c52164694d", "revision": 1300, "at": "2026-12-05T03:00:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, ok, err := LoadStart(d); err != nil || !ok || s != want {
		t.Errorf("LoadStart of a good record: %+v, %v, %v", s, ok, err)
	}
}
