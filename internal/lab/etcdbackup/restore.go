// Package etcdbackup is the etcd backup lab's operation: restoring every
// member of the cluster's etcd from one snapshot, the procedure upstream
// documents for a multi-member cluster
// (https://etcd.io/docs/v3.6/op-guide/recovery/#restoring-a-cluster) within
// the one Kubernetes documents around it: stop every apiserver, restore
// every member, start the apiservers, restart what watches the API
// (https://kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd/#restoring-an-etcd-cluster).
//
// Every phase is shown as the shell commands it stands for, and the
// commands on the nodes are run as they are shown: what a student types
// by hand is what khw ran. khw etcd restore runs them while the drill
// prober watches (Restore.Run, operation.go), and so does khw lab 13
// (RunLab).
//
// The lab itself (13-etcd-backup, text labs/13-etcd-backup.md) is lab.go:
// what it records before it begins, its objects, the commands a student
// types by hand, and its check, which grades a restore however it was
// done.
package etcdbackup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/etcdsnap"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/etcd"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/steps"
)

// Paths on every control plane.
const (
	// DataDir is etcd's --data-dir (etcd.service).
	DataDir = "/var/lib/etcd"
	// RestoredDir is where etcdutl writes the restored member before it
	// replaces DataDir, so that a failed restore leaves DataDir as it was.
	RestoredDir = "/var/lib/etcd.restored"
	// OldDataDir keeps the member's data from before the last restore.
	OldDataDir = "/var/lib/etcd.before-restore"
	// RemoteSnapshot is the snapshot's copy on the node while it is
	// restored (0600: it holds every object of the cluster); removed at
	// the end.
	RemoteSnapshot = "/var/lib/khw/restore/snapshot.db"
)

// DefaultBump is how far the restore moves etcd's revision past the
// snapshot's (etcdutl snapshot restore --bump-revision, with
// --mark-compacted): further than any write the cluster made after the
// snapshot, so that no revision is handed out twice and every watcher
// that saw a later revision (informers in the controller-manager, the
// scheduler, kubelets) gets "compacted" and lists again instead of
// missing changes. This is the amount etcd's maintainers suggested for
// Kubernetes (etcd-io/etcd#16028, the issue; etcd-io/etcd#16029, the change
// that added the flags).
const DefaultBump = 1_000_000_000

// Restore is one restore of a cluster's etcd from a snapshot file.
type Restore struct {
	Cluster *config.Cluster
	// File is the snapshot on the jumpbox; SHA256 its hex digest, Revision
	// the etcd revision it holds (etcdsnap.Revision), Size in bytes.
	File     string
	SHA256   string
	Revision int64
	Size     int64
	// Token is the new cluster's --initial-cluster-token. A new one for
	// every restore gives the restored cluster a new cluster ID, so a
	// member left on its old data cannot join it (etcd rejects a peer of
	// another cluster).
	Token string
	// Bump is --bump-revision (DefaultBump).
	Bump int64
}

// New reads the snapshot file (its SHA-256 and revision) and returns the
// restore of c's etcd from it, with a token made from c's name and now.
// Errors: the file cannot be read, it is not a valid etcd snapshot
// (etcdsnap.Revision: not a database, damaged, cut short), its revision
// plus DefaultBump would overflow int64, or it lacks or fails the SHA-256
// a snapshot ends with (etcdsnap.CheckHash), which etcdutl would refuse
// only once etcd is stopped.
func New(c *config.Cluster, file string, now time.Time) (*Restore, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	rev, _, err := etcdsnap.Revision(file)
	if err != nil {
		return nil, err
	}
	// etcd's revisions are int64: the restored cluster's would start past
	// the largest one.
	if rev > math.MaxInt64-DefaultBump {
		return nil, fmt.Errorf("%s holds revision %d: the restore's --bump-revision %d would take it past the largest etcd revision (%d); no cluster gets near it, so this file is not a snapshot etcd saved; use another snapshot", file, rev, int64(DefaultBump), int64(math.MaxInt64))
	}
	if err := etcdsnap.CheckHash(file); err != nil {
		return nil, err
	}
	return &Restore{
		Cluster: c, File: file, SHA256: hex.EncodeToString(h.Sum(nil)), Revision: rev, Size: n,
		Token: "etcd-" + c.Name + "-restore-" + now.UTC().Format("20060102-150405"),
		Bump:  DefaultBump,
	}, nil
}

// FirstReplacingPhase is the index in Phases of the first phase that
// replaces a member's data directory: a restore that fails before it
// leaves every member's data as it was.
const FirstReplacingPhase = 4

// Phase is one phase of the restore: the commands it stands for, and
// what khw does. Commands on a node are run on it as they are; the
// jumpbox's (Node "") are done by khw itself (the copy goes over SFTP).
type Phase struct {
	Name     string
	Commands []steps.Command
	// upload: the phase's copy (scp, install) khw does itself over SFTP;
	// of its node commands it runs only those after the install, the
	// check (skip: how many of each node's commands the upload stands
	// for).
	upload bool
	skip   int
	// wait: khw's own check that the phase reached its goal, after the
	// commands (the shown wait loops give up silently; this does not).
	wait func(ctx context.Context, r *Restore, rn *Runner) error
}

// MinRevision is the lowest revision the restored cluster may report:
// the snapshot's plus the bump.
func (r *Restore) MinRevision() int64 { return r.Revision + r.Bump }

// onEach is one command per node, the same text with {node} and {ip}
// filled in; why is shown above the first.
func onEach(nodes []config.Node, why, shell string) []steps.Command {
	var out []steps.Command
	for i, n := range nodes {
		c := steps.Command{Node: n.Name, Shell: strings.NewReplacer("{node}", n.Name, "{ip}", n.IP).Replace(shell)}
		if i == 0 {
			c.Why = why
		}
		out = append(out, c)
	}
	return out
}

// Phases are the restore's phases in order.
func (r *Restore) Phases() []Phase {
	cps := r.Cluster.ControlPlanes()
	var copyCmds []steps.Command
	for _, n := range cps {
		copyCmds = append(copyCmds, steps.Command{Why: "copy the snapshot to " + n.Name,
			Shell: `scp -F "$KHW_SSH_CONFIG" ` + steps.Quote(r.File) + " " + n.Name + ":snapshot.db"})
	}
	copyCmds = append(copyCmds, onEach(cps, "put it where only root reads it",
		"sudo install -D -m 0600 snapshot.db "+RemoteSnapshot+" && rm -f snapshot.db")...)
	copyCmds = append(copyCmds, onEach(cps, "check that it arrived whole",
		"echo '"+r.SHA256+"  "+RemoteSnapshot+"' | sudo sha256sum -c --quiet -")...)

	restore := "sudo rm -rf " + RestoredDir + "\n" +
		"sudo etcdutl snapshot restore " + RemoteSnapshot + " \\\n" +
		"  --name {node} \\\n" +
		"  --initial-cluster " + render.EtcdInitialCluster(cps) + " \\\n" +
		"  --initial-cluster-token " + r.Token + " \\\n" +
		"  --initial-advertise-peer-urls https://{ip}:2380 \\\n" +
		fmt.Sprintf("  --bump-revision %d --mark-compacted \\\n", r.Bump) +
		"  --data-dir " + RestoredDir

	workers := r.Cluster.Workers()
	phases := []Phase{
		{Name: "copy the snapshot to every control plane", Commands: copyCmds, upload: true, skip: 1},
		{Name: "stop the apiservers, controller-managers and schedulers",
			Commands: onEach(cps, "nothing may read or write etcd while it is replaced",
				"sudo systemctl stop kube-apiserver kube-controller-manager kube-scheduler")},
		{Name: "stop etcd on every member",
			Commands: onEach(cps, "a member's data directory is replaced only while it is stopped", "sudo systemctl stop etcd")},
		{Name: "restore each member from the snapshot into a new data directory",
			Commands: onEach(cps, "a new member of a new cluster (new token, so a new cluster ID) holding the snapshot's keys, its revision moved past any the old cluster handed out", restore)},
		{Name: "put the restored data directories in place",
			Commands: onEach(cps, "keep the old data beside it until the restored cluster works",
				"sudo rm -rf "+OldDataDir+"\n"+
					"if sudo test -e "+DataDir+"; then sudo mv "+DataDir+" "+OldDataDir+"; fi\n"+
					"sudo mv "+RestoredDir+" "+DataDir)},
		{Name: "start etcd on every member together",
			Commands: append(onEach(cps, "a member of a new cluster waits for its peers: start them all without waiting (--no-block)",
				"sudo systemctl start --no-block etcd"), etcd.CheckCommands(r.Cluster)...),
			wait: waitEtcd},
		{Name: "start the apiservers",
			Commands: onEach(cps, "each serves the restored objects once it is ready",
				"sudo systemctl start kube-apiserver\n"+
					steps.WaitLoop(60, 1, "curl -fsS --cacert /var/lib/kubernetes/ca.pem https://127.0.0.1:6443/readyz")+"\n"+
					"curl -fsS --cacert /var/lib/kubernetes/ca.pem https://127.0.0.1:6443/readyz; echo"),
			wait: waitAPIServers},
		{Name: "start the controller-managers and schedulers",
			Commands: onEach(cps, "they list every object again from the restored cluster",
				"sudo systemctl start kube-controller-manager kube-scheduler")},
	}
	if len(workers) > 0 {
		phases = append(phases, Phase{Name: "restart kubelet and kube-proxy on every worker",
			Commands: onEach(workers, "upstream's advice after a restore: no component goes on from what it saw after the snapshot",
				"sudo systemctl restart kubelet kube-proxy")})
	}
	phases = append(phases, Phase{Name: "remove the snapshot's copies from the control planes",
		Commands: onEach(cps, "it holds every object of the cluster", "sudo rm -f "+RemoteSnapshot)})
	return phases
}

// Commands are every phase's commands in order (what khw lab --by-hand
// and khw etcd restore --dry-run show).
func (r *Restore) Commands() []steps.Command {
	var out []steps.Command
	for _, p := range r.Phases() {
		out = append(out, p.Commands...)
	}
	return out
}

// Runner runs a restore's phases on the nodes of a cluster.
type Runner struct {
	Pool   *remote.Pool
	Target health.Target
	// AdminKubeconfig is <state>/kubeconfigs/admin.kubeconfig (the
	// apiservers' /readyz).
	AdminKubeconfig string
	// Out receives one line per phase and per node command that failed.
	Out io.Writer
	// Timeout bounds each phase on one node (5 min on nspawn; scale it
	// for slow nodes).
	Timeout time.Duration
}

// Preflight checks, before anything is stopped, that every control plane
// answers SSH and has etcdutl (lab 04 installs it). Errors name the node
// and the fix.
func (rn *Runner) Preflight(ctx context.Context, r *Restore) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range r.Cluster.ControlPlanes() {
		g.Go(func() error {
			_, _, err := rn.Pool.Run(gctx, nodeplan.RemoteNode(n), "command -v etcdutl", remote.RunOptions{})
			if err != nil {
				return fmt.Errorf("%s: no etcdutl in PATH, or the node does not answer (%w): run khw up, whose step 04-etcd installs it", n.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// RunPhase runs one phase: the copy (SFTP, then the shown check on each
// node), or each node's commands in order (nodes in parallel, each node's
// commands in one shell with set -e), then the phase's own wait. The
// commands run to their end even when ctx ends: a phase is never left
// half done on some nodes. Errors name the node and the command.
func (rn *Runner) RunPhase(ctx context.Context, r *Restore, p Phase) error {
	ctx = context.WithoutCancel(ctx)
	order, scripts := p.nodeScripts()
	var data []byte
	if p.upload {
		var err error
		if data, err = os.ReadFile(r.File); err != nil {
			return err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, name := range order {
		n, ok := r.Cluster.Node(name)
		if !ok {
			return fmt.Errorf("%q is not a node of cluster %s", name, r.Cluster.Name)
		}
		g.Go(func() error {
			nctx, cancel := context.WithTimeout(gctx, rn.Timeout)
			defer cancel()
			if p.upload {
				cl, err := rn.Pool.Get(nctx, nodeplan.RemoteNode(n))
				if err != nil {
					return err
				}
				if _, err := cl.Install(nctx, remote.File{Path: RemoteSnapshot, Data: data, Mode: 0o600}); err != nil {
					return fmt.Errorf("%s: copy the snapshot: %w", name, err)
				}
			}
			if scripts[name] == "" {
				return nil
			}
			if _, _, err := rn.Pool.Run(nctx, nodeplan.RemoteNode(n), scripts[name], remote.RunOptions{}); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if p.wait != nil {
		wctx, cancel := context.WithTimeout(ctx, rn.Timeout)
		defer cancel()
		return p.wait(wctx, r, rn)
	}
	return nil
}

// nodeScripts is what khw runs of p on each node, nodes in the order of
// their first command: the node's commands in order in one shell that
// stops at the first failure (set -e), without the first p.skip of them
// (those the SFTP upload stands for; "" when none is left).
func (p Phase) nodeScripts() (order []string, scripts map[string]string) {
	cmds := map[string][]string{}
	for _, c := range p.Commands {
		if c.Node == "" {
			continue
		}
		if _, ok := cmds[c.Node]; !ok {
			order = append(order, c.Node)
		}
		cmds[c.Node] = append(cmds[c.Node], c.Shell)
	}
	scripts = map[string]string{}
	for node, list := range cmds {
		if len(list) > p.skip {
			scripts[node] = "set -e\n" + strings.Join(list[p.skip:], "\n")
		}
	}
	return order, scripts
}

// waitEtcd waits until every member answers with one leader, one cluster
// ID, and a revision at least the snapshot's plus the bump (a member
// still on its old data has another cluster ID and a lower revision).
func waitEtcd(ctx context.Context, r *Restore, rn *Runner) error {
	var last string
	for {
		rep, err := health.Etcd(ctx, rn.Target)
		switch {
		case err != nil:
			last = err.Error()
		default:
			last = restoredProblem(r, rep)
			if last == "" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the restored etcd cluster is not healthy: %s", last)
		case <-time.After(time.Second):
		}
	}
}

// restoredProblem says why rep is not a healthy cluster restored by r:
// a member not answering, no leader, two cluster IDs, a revision below
// r.MinRevision. "" when there is nothing wrong.
func restoredProblem(r *Restore, rep *health.EtcdReport) string {
	ids := map[string][]string{}
	for _, e := range rep.Endpoints {
		if !e.OK {
			return fmt.Sprintf("member %s does not answer: %s", e.Node, e.Err)
		}
		ids[e.ClusterID] = append(ids[e.ClusterID], e.Node)
		if e.Revision < r.MinRevision() {
			return fmt.Sprintf("member %s is at revision %d, below the snapshot's %d plus %d: it is not on the restored data", e.Node, e.Revision, r.Revision, r.Bump)
		}
	}
	if len(ids) > 1 {
		var parts []string
		for id, nodes := range ids {
			parts = append(parts, strings.Join(nodes, ", ")+" in cluster "+id)
		}
		return "the members are in different clusters: " + strings.Join(parts, "; ")
	}
	if rep.Leader == "" {
		return fmt.Sprintf("no leader yet (%d of %d members healthy)", rep.Healthy, rep.Size)
	}
	return ""
}

// waitAPIServers waits until every apiserver's /readyz is ok.
func waitAPIServers(ctx context.Context, _ *Restore, rn *Runner) error {
	var last string
	for {
		ready := true
		for _, a := range health.APIServers(ctx, rn.Target, rn.AdminKubeconfig) {
			if !a.OK {
				ready = false
				last = a.Target + ": " + a.Err + strings.Join(a.Failed, ", ")
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the apiservers are not ready: %s", last)
		case <-time.After(time.Second):
		}
	}
}
