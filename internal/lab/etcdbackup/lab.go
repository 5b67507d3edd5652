package etcdbackup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/etcdsnap"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/etcd"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// The lab's objects: Kept is made before the snapshot and deleted after it,
// Lost is made after it. A restore from the snapshot brings Kept back and
// takes Lost away.
const (
	Namespace = "khw-lab13"
	Kept      = "kept"
	Lost      = "lost"
)

// Start is what the cluster was when lab 13 began, recorded by Begin: the
// check compares the restored cluster with it.
type Start struct {
	// ClusterID is etcd's cluster ID (hex) before the restore; a restore
	// with a new --initial-cluster-token makes a new one.
	ClusterID string `json:"clusterID"`
	// Revision is etcd's revision then: every revision up to it was handed
	// out by the old cluster, so the restored one must have moved past it
	// and marked it compacted.
	Revision int64     `json:"revision"`
	At       time.Time `json:"at"`
}

// Check says what in s Begin could not have recorded: a cluster ID that
// is not hex, a revision below 1 (etcd's first), no time.
func (s *Start) Check() error {
	if _, err := strconv.ParseUint(s.ClusterID, 16, 64); err != nil {
		return fmt.Errorf("clusterID %q is not etcd's hex cluster ID", s.ClusterID)
	}
	if s.Revision < 1 {
		return fmt.Errorf("revision %d is below 1, etcd's first", s.Revision)
	}
	if s.At.IsZero() {
		return fmt.Errorf("at is missing")
	}
	return nil
}

// StartPath is <state>/labs/13-etcd-backup-start.json.
func StartPath(d state.Dir) string {
	return labcheck.StartPath(d, labid.EtcdBackup)
}

// LoadStart reads the recorded Start; ok is false when the lab never began.
// Errors: the file cannot be read, or does not hold a Start (Check).
func LoadStart(d state.Dir) (s Start, ok bool, err error) {
	ok, err = labcheck.LoadStart(d, labid.EtcdBackup, &s)
	return s, ok, err
}

// Begin records the cluster's etcd as it is now (Start). When the lab is
// tried again (again), a Start already recorded is kept: the check
// compares with the cluster from before the first try, not with one the
// student's restore made. Errors: etcd has no healthy cluster to record.
func Begin(ctx context.Context, t health.Target, d state.Dir, again bool) (Start, error) {
	if s, ok, err := LoadStart(d); err != nil || (ok && again) {
		return s, err
	}
	rep, err := health.Etcd(ctx, t)
	if err != nil {
		return Start{}, err
	}
	s := Start{At: time.Now().UTC()}
	for _, e := range rep.Endpoints {
		if !e.OK {
			return Start{}, fmt.Errorf("etcd on %s does not answer (%s): lab 13 starts from a healthy cluster (khw status, khw up)", e.Node, e.Err)
		}
		if s.ClusterID == "" {
			s.ClusterID = e.ClusterID
		}
		s.Revision = max(s.Revision, e.Revision)
	}
	if s.ClusterID == "" {
		return Start{}, fmt.Errorf("no etcd member answered: lab 13 starts from a healthy cluster (khw status, khw up)")
	}
	return s, labcheck.SaveStart(d, labid.EtcdBackup, s)
}

// MakeObjects creates the namespace and ConfigMap Kept (what the snapshot
// must hold); existing ones are kept.
func MakeObjects(ctx context.Context, cs kubernetes.Interface) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", Namespace, err)
	}
	return createConfigMap(ctx, cs, Kept, madeBefore)
}

// Change deletes Kept and creates Lost: what the restore must undo.
func Change(ctx context.Context, cs kubernetes.Interface) error {
	if err := cs.CoreV1().ConfigMaps(Namespace).Delete(ctx, Kept, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete ConfigMap %s/%s: %w", Namespace, Kept, err)
	}
	return createConfigMap(ctx, cs, Lost, madeAfter)
}

// The "made" value of Kept and of Lost.
const (
	madeBefore = "before the snapshot"
	madeAfter  = "after the snapshot"
)

// MakeObjectsCommand is what MakeObjects does, as kubectl commands.
func MakeObjectsCommand() steps.Command {
	return steps.Command{Why: "part 1: objects the snapshot must hold", Shell: "kubectl create namespace " + Namespace + "\n" +
		"kubectl -n " + Namespace + " create configmap " + Kept + " --from-literal=made='" + madeBefore + "'"}
}

// ChangeCommand is what Change does, as kubectl commands.
func ChangeCommand() steps.Command {
	return steps.Command{Why: "part 2: changes made after the snapshot, which the restore must undo",
		Shell: "kubectl -n " + Namespace + " delete configmap " + Kept + "\n" +
			"kubectl -n " + Namespace + " create configmap " + Lost + " --from-literal=made='" + madeAfter + "'"}
}

func createConfigMap(ctx context.Context, cs kubernetes.Interface, name, made string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace}, Data: map[string]string{"made": made}}
	if _, err := cs.CoreV1().ConfigMaps(Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ConfigMap %s/%s: %w", Namespace, name, err)
	}
	return nil
}

// SnapshotsDirName is the state directory's folder for etcd snapshots:
// where khw etcd snapshot save writes by default, and the only place inside
// the state directory it writes to.
const SnapshotsDirName = "etcd-snapshots"

// SnapshotsDir is <state>/etcd-snapshots.
func SnapshotsDir(d state.Dir) string { return filepath.Join(d.Root, SnapshotsDirName) }

// The name of a by-hand snapshot in SnapshotsDir, and its place on cp1
// while etcdctl writes it.
const (
	byHandFile   = "lab13-snapshot.db"
	byHandOnNode = "/var/lib/khw/lab13-snapshot.db"
)

// ByHandCommands are the commands of the lab's first two parts for the
// student to type in khw shell: the objects, the snapshot (etcdctl on the
// first control plane, through its own client URL, then copied to
// SnapshotsDir(d)), the changes. The restore's own commands depend on the
// file (its SHA-256), so the last command prints them: khw etcd restore
// FILE --dry-run (khw shell has khw in its PATH).
func ByHandCommands(c *config.Cluster, d state.Dir) []steps.Command {
	cps := c.ControlPlanes()
	if len(cps) == 0 {
		return nil
	}
	cp := cps[0].Name
	return []steps.Command{
		MakeObjectsCommand(),
		{Node: cp, Why: "part 1: a snapshot from one member (a consistent copy of the whole keyspace at one revision)",
			Shell: "sudo install -d -m 0700 " + filepath.Dir(byHandOnNode) + "\n" +
				"sudo etcdctl --endpoints=https://127.0.0.1:2379" + etcd.EtcdctlTLS + " snapshot save " + byHandOnNode + "\n" +
				"sudo etcdutl snapshot status -w table " + byHandOnNode},
		{Why: "part 1: the snapshot to the jumpbox, readable only by you (it holds every Secret, encrypted, and every other object in clear)",
			Shell: "install -d -m 0700 \"$KHW_STATE_DIR/$KHW_CLUSTER/etcd-snapshots\"\n" +
				"(umask 077; ssh -F \"$KHW_SSH_CONFIG\" " + cp + " 'sudo cat " + byHandOnNode + "' > \"$KHW_STATE_DIR/$KHW_CLUSTER/etcd-snapshots/" + byHandFile + "\")\n" +
				"sha256sum \"$KHW_STATE_DIR/$KHW_CLUSTER/etcd-snapshots/" + byHandFile + "\""},
		{Node: cp, Why: "part 1: the same SHA-256 as on the jumpbox? Then off the node", Shell: "sudo sha256sum " + byHandOnNode + "\nsudo rm -f " + byHandOnNode},
		ChangeCommand(),
		{Why: "part 3: the restore's commands for your file (they hold its SHA-256), printed by khw; type them phase by phase",
			Shell: "khw etcd restore " + steps.Quote(filepath.Join(SnapshotsDir(d), byHandFile)) + " --dry-run"},
	}
}

// Observed is what Grade reads of the cluster.
type Observed struct {
	Etcd *health.EtcdReport
	// Probes are the snapshots saved since the lab began, oldest first,
	// each with what reading etcd at its revision plus MinBump gave: the
	// restore from one of them must have compacted that revision.
	Probes []Probe
	// Current is the highest revision a member reported.
	Current int64
	// Namespace, Kept and Lost say whether each exists; ObjectsErr is why
	// they could not be read ("" when they could). KeptRevision is Kept's
	// resourceVersion: the etcd revision of its last change.
	Namespace, Kept, Lost bool
	KeptRevision          int64
	ObjectsErr            string
	// APIServers are the /readyz answers of each apiserver and of the
	// load balancer.
	APIServers []health.Readyz
}

// Probe is one snapshot file and what etcd said to a read at its
// revision plus MinBump: "compacted", "future" (above the current
// revision), "readable", or another error's text.
type Probe struct {
	File     string
	Revision int64
	Result   string
}

// At is the revision probed: the snapshot's plus MinBump.
func (p Probe) At() int64 { return p.Revision + MinBump }

// Observe reads what Grade needs: etcd's members, etcd at each probe
// revision, the lab's objects and each apiserver's /readyz.
func Observe(ctx context.Context, s *cluster.Session, start Start) (Observed, error) {
	t := s.Target()
	var o Observed
	rep, err := health.Etcd(ctx, t)
	if err != nil {
		return o, err
	}
	o.Etcd = rep
	for _, e := range rep.Endpoints {
		o.Current = max(o.Current, e.Revision)
	}
	o.Probes = snapshotsSince(s.Dir, start.At)
	if cli, err := t.EtcdClient(); err != nil {
		for i := range o.Probes {
			o.Probes[i].Result = err.Error()
		}
	} else {
		for i := range o.Probes {
			gctx, cancel := context.WithTimeout(ctx, t.Scaled(5*time.Second, 30*time.Second))
			o.Probes[i].Result = readAt(gctx, cli, o.Probes[i].At())
			cancel()
		}
		cli.Close()
	}
	o.APIServers = health.APIServers(ctx, t, s.AdminKubeconfig())
	cfg, err := s.AdminRESTConfig()
	if err != nil {
		o.ObjectsErr = err.Error()
		return o, nil
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		o.ObjectsErr = err.Error()
		return o, nil
	}
	exists := func(get func() error) bool {
		err := get()
		if err != nil && !apierrors.IsNotFound(err) && o.ObjectsErr == "" {
			o.ObjectsErr = err.Error()
		}
		return err == nil
	}
	o.Namespace = exists(func() error { _, err := cs.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}); return err })
	o.Kept = exists(func() error {
		cm, err := cs.CoreV1().ConfigMaps(Namespace).Get(ctx, Kept, metav1.GetOptions{})
		if err == nil {
			o.KeptRevision, _ = strconv.ParseInt(cm.ResourceVersion, 10, 64)
		}
		return err
	})
	o.Lost = exists(func() error {
		_, err := cs.CoreV1().ConfigMaps(Namespace).Get(ctx, Lost, metav1.GetOptions{})
		return err
	})
	return o, nil
}

// MinBump is the smallest --bump-revision the check accepts: more than
// the writes the old cluster can make between a snapshot and a restore
// (the Lease renewals, about two a second, take days to make a million),
// and more than the apiserver's periodic compaction can reach in that
// time. Upstream uses DefaultBump; a million is the floor its maintainers
// discussed (etcd-io/etcd#16029).
const MinBump = 1_000_000

// snapshotsSince are the etcd snapshots in SnapshotsDir(d) written since
// the lab began (since), oldest first, with their revisions; files that
// are not etcd databases are left out.
func snapshotsSince(d state.Dir, since time.Time) []Probe {
	files, _ := filepath.Glob(filepath.Join(SnapshotsDir(d), "*.db"))
	type dated struct {
		p  Probe
		at time.Time
	}
	var list []dated
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil || fi.ModTime().Before(since) {
			continue
		}
		if rev, _, err := etcdsnap.Revision(f); err == nil {
			list = append(list, dated{Probe{File: f, Revision: rev}, fi.ModTime()})
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].at.Before(list[j].at) })
	out := make([]Probe, len(list))
	for i, x := range list {
		out[i] = x.p
	}
	return out
}

// readAt says what a read of etcd at revision rev gives: "compacted"
// (rev is below the revision etcd compacted at), "future" (rev is above the current
// revision), "readable", or the error's text.
func readAt(ctx context.Context, cli *clientv3.Client, rev int64) string {
	_, err := cli.Get(ctx, "/registry/namespaces/"+Namespace, clientv3.WithRev(rev), clientv3.WithCountOnly())
	switch {
	case err == nil:
		return "readable"
	case errors.Is(err, rpctypes.ErrCompacted):
		return "compacted"
	case errors.Is(err, rpctypes.ErrFutureRev):
		return "future"
	}
	return err.Error()
}

// Judge grades a restore from what was observed against the recorded
// start: every member answers, in one cluster that is not the one from
// before (a new --initial-cluster-token; the same token gives the old
// member and cluster IDs), with a leader; one snapshot saved since the
// start whose revision plus MinBump reads as compacted (--bump-revision
// past every revision the old cluster handed out after the snapshot,
// with --mark-compacted, which etcdutl requires with it:
// etcd-io/etcd#16028); Kept back, with a revision from before that
// snapshot, and Lost gone; every apiserver and the load balancer ready.
// Findings are in that order; none means the lab passes.
func Judge(start Start, o Observed) []grade.Finding {
	var out []grade.Finding
	add := func(node string, kind grade.Kind, what, why, evidence, fix string) {
		out = append(out, grade.Finding{Lab: labid.EtcdBackup, Node: node, Kind: kind, What: what, Why: why, Evidence: evidence, Fix: fix})
	}
	ids := map[string][]string{}
	answered := 0
	for _, e := range o.Etcd.Endpoints {
		if !e.OK {
			add(e.Node, grade.NotRunning, "etcd does not answer", "a member restored with another --name, --initial-cluster or peer URL than its own, or started on data of another cluster, exits at start",
				e.Err, "sudo journalctl -u etcd -n 30 --no-pager on "+e.Node+"; restore it as the others (same --initial-cluster and --initial-cluster-token, its own --name and peer URL), then start it")
			continue
		}
		answered++
		ids[e.ClusterID] = append(ids[e.ClusterID], e.Node)
	}
	// The snapshot restored from: the first whose revision plus MinBump
	// reads as compacted.
	var passed *Probe
	for i, p := range o.Probes {
		if p.Result == "compacted" {
			passed = &o.Probes[i]
			break
		}
	}
	switch {
	case len(ids) > 1:
		var parts []string
		for id, nodes := range ids {
			sort.Strings(nodes)
			parts = append(parts, strings.Join(nodes, ", ")+" in cluster "+id)
		}
		sort.Strings(parts)
		for id, nodes := range ids {
			if id != start.ClusterID {
				continue
			}
			for _, n := range nodes {
				add(n, grade.Wrong, "this member is still on its data from before the restore (the old cluster ID "+id+")",
					"etcd rejects a peer whose cluster ID differs: this member serves nobody, and the restored cluster has one member less for its quorum",
					strings.Join(parts, "; "), "on "+n+": stop etcd, move /var/lib/etcd aside, etcdutl snapshot restore into it with this member's --name and peer URL and the others' --initial-cluster-token, start etcd")
			}
		}
		if _, old := ids[start.ClusterID]; !old {
			add("", grade.Wrong, "the members are in different clusters", "members restored with different --initial-cluster-token values expect peers with other IDs: they do not form one cluster, and none reaches a quorum",
				strings.Join(parts, "; "), "restore every member from the same snapshot with the same --initial-cluster and --initial-cluster-token, then start them together")
		}
	case len(ids) == 1 && answered > 0:
		for id := range ids {
			switch {
			case id != start.ClusterID:
			case passed != nil:
				add("", grade.Wrong, "etcd was restored with the old --initial-cluster-token: its cluster ID "+id+" is the one from before the lab began",
					"the token and the peer URLs make the member IDs and the cluster ID, so the restored members have the old ones: a member forgotten on its old data would be taken as a peer, and its longer raft log could win",
					"cluster ID "+id+", recorded "+start.At.Format(time.RFC3339), "restore again with a new --initial-cluster-token, the same on every member")
			default:
				add("", grade.Wrong, "etcd was not restored: its cluster ID "+id+" is the one from before the lab began",
					"a restore with a new --initial-cluster-token makes a new cluster ID; with the same ID and no compaction at the bumped revision, the members run on their old data (or on empty data directories, which make the old cluster ID again)",
					"cluster ID "+id+", recorded "+start.At.Format(time.RFC3339), "khw etcd restore FILE --dry-run prints the phases for your snapshot; type them in khw shell")
			}
		}
	}
	if answered > 0 && o.Etcd.Leader == "" {
		add("", grade.NotRunning, "etcd has no leader", "without a leader nothing can be read or written: too few members of one cluster run",
			fmt.Sprintf("%d of %d members healthy", o.Etcd.Healthy, o.Etcd.Size), "start etcd on every restored member together (systemctl start --no-block etcd on each)")
	}
	if answered > 0 && passed == nil {
		what := fmt.Sprintf("no etcd snapshot saved since the lab began is in %s: the check reads the restored cluster at the snapshot's revision", SnapshotsDirName)
		evidence, fix := "no *.db file there newer than "+start.At.Format(time.RFC3339), "copy the snapshot you restored from to <state>/"+SnapshotsDirName+"/ (part 1's commands save it there)"
		if len(o.Probes) > 0 {
			last := o.Probes[len(o.Probes)-1]
			what = fmt.Sprintf("revision %d, the snapshot's plus %d, is not compacted in the restored cluster: restored without --bump-revision and --mark-compacted, or with a bump under %d", last.At(), MinBump, MinBump)
			evidence = fmt.Sprintf("etcd at revision %d: %s (current revision %d; snapshot %s at revision %d)", last.At(), last.Result, o.Current, filepath.Base(last.File), last.Revision)
			switch last.Result {
			case "future":
				evidence = fmt.Sprintf("etcd's current revision %d is below %d (snapshot %s at revision %d)", o.Current, last.At(), filepath.Base(last.File), last.Revision)
			case "readable":
				evidence = fmt.Sprintf("etcd answers a read at revision %d (current %d; snapshot %s at revision %d)", last.At(), o.Current, filepath.Base(last.File), last.Revision)
			}
			fix = fmt.Sprintf("restore again with etcdutl snapshot restore … --bump-revision %d --mark-compacted", DefaultBump)
		}
		add("", grade.Wrong, what,
			"the restored cluster hands out again the revisions the old one gave to the changes after the snapshot; an informer or kubelet that saw them resumes its watch there and misses changes, instead of being told \"compacted\" and listing everything again (etcd-io/etcd#16028)",
			evidence, fix)
	}
	switch {
	case o.ObjectsErr != "":
		add("", grade.NotRunning, "the lab's objects could not be read through the API", "", o.ObjectsErr, "start the apiservers (systemctl start kube-apiserver on each control plane) and check khw status")
	case !o.Namespace:
		add("", grade.Wrong, "namespace "+Namespace+" does not exist: it was made before the snapshot, so the restored cluster must have it",
			"", "kubectl get namespace "+Namespace+": NotFound", "restore from the snapshot of part 1, which holds it; a snapshot taken before part 1 does not (khw lab reset 13 starts over)")
	default:
		if !o.Kept {
			add("", grade.Wrong, "ConfigMap "+Namespace+"/"+Kept+" is missing: it was in the snapshot, so the restore must bring it back",
				"the cluster is not at the snapshot's state: etcd still has the data from after it, or the snapshot was taken after the deletion",
				"kubectl -n "+Namespace+" get configmap "+Kept+": NotFound", "restore every member from the snapshot of part 1")
		}
		if o.Kept && passed != nil && o.KeptRevision > passed.Revision {
			add("", grade.Wrong, fmt.Sprintf("ConfigMap %s/%s was made after the snapshot: it was made again, not restored", Namespace, Kept),
				"a restored object keeps the revision of its last change before the snapshot",
				fmt.Sprintf("its resourceVersion %d is above the snapshot's revision %d", o.KeptRevision, passed.Revision), "restore every member from the snapshot of part 1")
		}
		if o.Lost {
			add("", grade.Wrong, "ConfigMap "+Namespace+"/"+Lost+" exists: it was made after the snapshot, so the restore must take it away",
				"a restore puts the whole keyspace back to the snapshot's revision", "kubectl -n "+Namespace+" get configmap "+Lost+": found",
				"restore every member from the snapshot of part 1, taken before part 2")
		}
	}
	for _, a := range o.APIServers {
		if !a.OK {
			add(a.Target, grade.NotRunning, "kube-apiserver is not ready", "the restore ends when every apiserver serves the restored objects",
				strings.TrimSpace(a.Err+" "+strings.Join(a.Failed, ", ")), "sudo systemctl start kube-apiserver on "+a.Target+" (the control plane, or every one behind lb), then curl --cacert /var/lib/kubernetes/ca.pem https://127.0.0.1:6443/readyz")
		}
	}
	return out
}

// Grade grades lab 13 on the live cluster: Judge of Observe against the
// recorded Start. Errors: no Start (the lab never began: khw lab 13
// records it), or etcd could not be asked.
func Grade(ctx context.Context, s *cluster.Session) ([]grade.Finding, error) {
	start, ok, err := LoadStart(s.Dir)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("lab %s has not begun: khw lab 13 (or khw lab 13 --by-hand) records the cluster as it is before the restore, which the check compares with", labid.EtcdBackup)
	}
	o, err := Observe(ctx, s, start)
	if err != nil {
		return nil, err
	}
	return Judge(start, o), nil
}
