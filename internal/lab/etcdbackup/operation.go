package etcdbackup

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/etcdsnap"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// WritePlan prints to out what khw etcd restore restores on cluster
// (its name): the file, its revision, size and SHA-256; with dryRun also
// each phase and its commands, and that each run makes a new
// --initial-cluster-token.
func (r *Restore) WritePlan(out io.Writer, cluster string, dryRun bool) {
	fmt.Fprintf(out, "Restore etcd of cluster %s from %s\n  revision %d, %s, sha256 %s\n", cluster, r.File, r.Revision, sizeText(r.Size), r.SHA256)
	if !dryRun {
		return
	}
	phases := r.Phases()
	for i, p := range phases {
		fmt.Fprintf(out, "\n[%d/%d] %s\n", i+1, len(phases), p.Name)
		for _, cmd := range p.Commands {
			fmt.Fprintln(out, steps.Indent(cmd.String(), "  "))
		}
	}
	fmt.Fprintf(out, "\n(--dry-run: nothing was done. Each run makes a new --initial-cluster-token (%s here): to restore by hand, take every member's command from this one output.)\n", r.Token)
}

// Run runs each phase of r on cluster c (state d) under the caller's lock
// while a read-only prober watches what the cluster's clients see, writes
// the operation's report under <state>/operations and prints to out its
// summary and the restored cluster's facts (its revision, cluster ID and
// leader). Ctrl-C and SIGTERM stop it between phases. Errors: a control
// plane not ready for it (Runner.Preflight, nothing done), a phase's
// (saying whether anything was replaced yet and how to go on).
func (r *Restore) Run(parent context.Context, c *config.Cluster, d state.Dir, out io.Writer) error {
	abs, phases := r.File, r.Phases()
	env, err := drill.OpenCluster(c, d)
	if err != nil {
		return err
	}
	defer env.S.Close()
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	t := env.S.Target()
	rn := &Runner{Pool: env.S.Pool, Target: t, AdminKubeconfig: env.S.AdminKubeconfig(), Timeout: t.Scaled(5*time.Minute, 30*time.Minute)}
	fmt.Fprintln(out, "Checking every control plane…")
	if err := rn.Preflight(ctx, r); err != nil {
		return err
	}
	// Read-only: the probe's ConfigMap could be one of the objects the
	// restore takes back.
	env.Prober.ReadOnly = true
	w, err := drill.StartWatch(drill.OperationsOf(d), env.Prober, out, c.Name, "etcd restore", "khw etcd restore "+abs)
	if err != nil {
		return err
	}
	w.Fact("snapshot", fmt.Sprintf("%s (sha256 %s, %d bytes)", abs, r.SHA256, r.Size))
	w.Fact("snapshot revision", fmt.Sprint(r.Revision))
	w.Fact("new --initial-cluster-token", r.Token)
	var opErr error
	for i, p := range phases {
		if ctx.Err() != nil {
			opErr = fmt.Errorf("interrupted before phase %d (%s): run khw etcd restore again to restore from the start, or khw up to start what is stopped", i+1, p.Name)
			break
		}
		fmt.Fprintf(out, "\n[%d/%d] %s\n", i+1, len(phases), p.Name)
		for _, cmd := range p.Commands {
			fmt.Fprintln(out, steps.Indent(cmd.String(), "  "))
		}
		start := time.Now()
		if err := w.Step(p.Name, func() error { return rn.RunPhase(ctx, r, p) }); err != nil {
			opErr = fmt.Errorf("phase %d (%s): %w", i+1, p.Name, err)
			if i < FirstReplacingPhase {
				opErr = fmt.Errorf("%w; nothing was replaced yet (every member's data is still in %s): khw up starts etcd and the control plane again", opErr, DataDir)
			}
			fmt.Fprintf(out, "  ✗ failed after %s\n", time.Since(start).Round(100*time.Millisecond))
			break
		}
		fmt.Fprintf(out, "  ✓ done in %s\n", time.Since(start).Round(100*time.Millisecond))
	}
	before := 3 // the facts above; those after it are the restore's results
	if opErr == nil {
		if rep, err := health.Etcd(ctx, t); err == nil && len(rep.Endpoints) > 0 {
			e := rep.Endpoints[0]
			w.Fact("revision after the restore", fmt.Sprintf("%d (the snapshot's %d + --bump-revision %d)", e.Revision, r.Revision, r.Bump))
			id := e.ClusterID
			if n, err := strconv.ParseUint(id, 16, 64); err == nil {
				id = fmt.Sprintf("%s (%d in decimal, as etcdctl -w fields and -w json print it)", id, n)
			}
			w.Fact("etcd cluster ID", id)
			w.Fact("etcd leader", rep.Leader)
		}
	}
	rep, err := w.End(ctx, out, opErr)
	if err != nil {
		return err
	}
	for _, f := range rep.Facts[before:] {
		fmt.Fprintf(out, "  %s: %s\n", f.Name, f.Value)
	}
	fmt.Fprintf(out, "Each member's data from before the restore is in %s on its control plane: remove it once the cluster works (it holds every object as it was).\n", OldDataDir)
	return nil
}

// RunLab is lab 13 done by khw on the open cluster s, under the caller's
// lock: the objects the snapshot must hold, a snapshot from etcd's leader
// into <state>/etcd-snapshots/, the changes it must undo, then khw etcd
// restore from it (Restore.Run). Each part prints to out what it stands
// for (the by-hand commands are in khw lab 13 --by-hand).
func RunLab(ctx context.Context, s *cluster.Session, out io.Writer) error {
	cfg, err := s.AdminRESTConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "── part 1: what the snapshot must hold\n%s\n", steps.Indent(shellLines(MakeObjectsCommand()), "  $ "))
	if err := MakeObjects(ctx, cs); err != nil {
		return err
	}
	path := filepath.Join(SnapshotsDir(s.Dir), labid.EtcdBackup+"-"+time.Now().UTC().Format("20060102-150405")+".db")
	fmt.Fprintf(out, "── part 1: the snapshot (khw etcd snapshot save %s: etcdctl snapshot save through the etcd client, from the leader)\n", path)
	res, err := etcdsnap.Save(ctx, s.Target(), path, false)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  revision %d from %s, %s, sha256 %s\n", res.Revision, res.Member, sizeText(res.Size), res.SHA256)
	fmt.Fprintf(out, "── part 2: changes after the snapshot\n%s\n", steps.Indent(shellLines(ChangeCommand()), "  $ "))
	if err := Change(ctx, cs); err != nil {
		return err
	}
	r, err := New(s.Config, path, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "── part 3: khw etcd restore %s\n", path)
	return r.Run(ctx, s.Config, s.Dir, out)
}

// shellLines is c's shell text without a trailing newline.
func shellLines(c steps.Command) string { return strings.TrimRight(c.Shell, "\n") }

// sizeText is n bytes in MiB, or KiB below one MiB.
func sizeText(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// SaveSnapshot is khw etcd snapshot save of cluster c (state d) into
// path, under the caller's lock: etcdsnap.Save from the leader of the
// cluster's etcd, replacing path only with overwrite.
func SaveSnapshot(ctx context.Context, c *config.Cluster, d state.Dir, path string, overwrite bool) (etcdsnap.Result, error) {
	s, err := cluster.Open(c, d, cluster.ProviderOnly, nil)
	if err != nil {
		return etcdsnap.Result{}, err
	}
	defer s.Close()
	return etcdsnap.Save(ctx, s.Target(), path, overwrite)
}
