package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/etcdsnap"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/etcdbackup"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// snapshotDir is the state directory's folder for snapshots.
const snapshotDir = etcdbackup.SnapshotsDirName

func newEtcdCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "etcd", Short: "Operate the cluster's etcd: snapshots and restores", Args: exactArgs(0)}
	snap := &cobra.Command{Use: "snapshot", Short: "Save etcd snapshots", Args: exactArgs(0)}
	var force bool
	var output string
	save := &cobra.Command{
		Use:     "save [FILE]",
		Short:   "Save a snapshot of etcd from its leader, with its revision and SHA-256",
		Long:    help("etcd-snapshot-save"),
		Example: "  khw etcd snapshot save\n  khw etcd snapshot save /backup/before-upgrade.db\n  khw etcd snapshot save -o json | jq .revision",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("khw etcd snapshot save takes at most one FILE, got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return usagef("-o %q: use text or json", output)
			}
			d, c, unlock, err := a.loadForWrite()
			if err != nil {
				return err
			}
			defer unlock()
			path, err := snapshotPath(d, args, time.Now())
			if err != nil {
				return err
			}
			s, err := cluster.Open(c, d, cluster.ProviderOnly, nil)
			if err != nil {
				return err
			}
			defer s.Close()
			res, err := etcdsnap.Save(cmd.Context(), s.Target(), path, force)
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(a.out)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			fmt.Fprintf(a.out, "Snapshot of etcd from %s, the leader (%s): revision %d, %d key revisions, %.1f MiB in %s\n",
				res.Member, res.Endpoint, res.Revision, res.Keys, float64(res.Size)/(1<<20), res.Took.Round(100*time.Millisecond))
			fmt.Fprintf(a.out, "  file:   %s (mode 0600)\n  sha256: %s\n", res.Path, res.SHA256)
			fmt.Fprintln(a.out, "It holds every object of the cluster (Secrets encrypted with encryption-config.yaml's key, which it does not hold): keep it like a key.")
			return nil
		},
	}
	save.Flags().BoolVar(&force, "force", false, "replace FILE if it exists")
	save.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	snap.AddCommand(save)
	cmd.AddCommand(snap, newEtcdRestoreCmd(a))
	return cmd
}

func newEtcdRestoreCmd(a *app) *cobra.Command {
	var yes, dryRun bool
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Restore every etcd member from a snapshot, with the apiservers stopped",
		Long:  help("etcd-restore"),
		Example: "  khw etcd restore ~/.local/state/khw/khw/etcd-snapshots/snapshot-20261204-101500.db\n" +
			"  khw etcd restore before-upgrade.db --dry-run   # the commands, nothing done\n" +
			"  khw etcd restore before-upgrade.db --yes       # no question",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runEtcdRestore(cmd.Context(), a, args[0], yes, dryRun, cmd.InOrStdin())
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the phases and their commands, change nothing")
	return cmd
}

// runEtcdRestore restores the cluster's etcd from file: it checks the
// file and the nodes, asks (unless yes), then runs each phase of
// etcdbackup.Restore while a read-only prober watches what the cluster's
// clients see, and writes the operation's report.
func runEtcdRestore(parent context.Context, a *app, file string, yes, dryRun bool, in io.Reader) error {
	d, c, err := a.load()
	if err != nil {
		return err
	}
	if fi, err := os.Stat(file); err != nil {
		return usagef("FILE %s: %v (give a snapshot made by khw etcd snapshot save or etcdctl snapshot save)", file, err)
	} else if !fi.Mode().IsRegular() {
		return usagef("FILE %s is not a regular file", file)
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return err
	}
	r, err := etcdbackup.New(c, abs, time.Now())
	if err != nil {
		// The file is there but is no snapshot khw can restore: an
		// invalid input file (exit 3), nothing changed.
		return invalidInputError{err}
	}
	phases := r.Phases()
	fmt.Fprintf(a.out, "Restore etcd of cluster %s from %s\n  revision %d, %s, sha256 %s\n", c.Name, abs, r.Revision, sizeText(r.Size), r.SHA256)
	if dryRun {
		for i, p := range phases {
			fmt.Fprintf(a.out, "\n[%d/%d] %s\n", i+1, len(phases), p.Name)
			for _, cmd := range p.Commands {
				fmt.Fprintln(a.out, steps.Indent(cmd.String(), "  "))
			}
		}
		fmt.Fprintf(a.out, "\n(--dry-run: nothing was done. Each run makes a new --initial-cluster-token (%s here): to restore by hand, take every member's command from this one output.)\n", r.Token)
		return nil
	}
	unlock, err := lockWithoutDrill(a, d)
	if err != nil {
		return err
	}
	defer unlock()
	if !yes {
		ok, err := goOn(a, in, fmt.Sprintf("Everything written to the cluster after revision %d is lost, and its API is down until the restore ends.", r.Revision), "restore")
		if !ok || err != nil {
			return err
		}
	}
	return restoreEtcd(parent, a, d, c, r)
}

// lockWithoutDrill takes the cluster's lock for a day-2 operation and
// refuses while a drill is active (its prober and breaks would mix with
// the operation's). Errors: the lock is held, or the drill's ID and heal.
func lockWithoutDrill(a *app, d state.Dir) (unlock func(), err error) {
	unlock, err = a.lock(d)
	if err != nil {
		return nil, err
	}
	if active, err := drill.StoreOf(d).Active(); err == nil {
		unlock()
		return nil, fmt.Errorf("drill %s (khw break %s) is active: run khw heal first", active.ID, active.Spec.CommandLine())
	}
	return unlock, nil
}

// goOn asks what (a sentence) and "Go on? [y/N]" on in; true for y or
// yes. Any other answer prints "Nothing done."; a closed stdin without an
// answer is a usage error naming --yes, the flag that does verb without
// asking.
func goOn(a *app, in io.Reader, what, verb string) (bool, error) {
	fmt.Fprintf(a.out, "%s Go on? [y/N]: ", what)
	line, rerr := bufio.NewReader(in).ReadString('\n')
	switch ans := strings.ToLower(strings.TrimSpace(line)); {
	case ans == "y" || ans == "yes":
		return true, nil
	case rerr != nil && ans == "":
		return false, usagef("no answer (stdin closed): rerun with --yes to %s without asking", verb)
	}
	fmt.Fprintln(a.out, "Nothing done.")
	return false, nil
}

// restoreEtcd runs each phase of r under the caller's lock while a
// read-only prober watches what the cluster's clients see, writes the
// operation's report and prints its summary and the restored cluster's
// facts. Ctrl-C and SIGTERM stop it between phases.
func restoreEtcd(parent context.Context, a *app, d state.Dir, c *config.Cluster, r *etcdbackup.Restore) error {
	abs, phases := r.File, r.Phases()
	env, err := drill.OpenCluster(c, d)
	if err != nil {
		return err
	}
	defer env.S.Close()
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	t := env.S.Target()
	rn := &etcdbackup.Runner{Pool: env.S.Pool, Target: t, AdminKubeconfig: env.S.AdminKubeconfig(), Timeout: t.Scaled(5*time.Minute, 30*time.Minute)}
	fmt.Fprintln(a.out, "Checking every control plane…")
	if err := rn.Preflight(ctx, r); err != nil {
		return err
	}
	// Read-only: the probe's ConfigMap could be one of the objects the
	// restore takes back.
	env.Prober.ReadOnly = true
	w, err := drill.StartWatch(drill.OperationsOf(d), env.Prober, a.out, c.Name, "etcd restore", "khw etcd restore "+abs)
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
		fmt.Fprintf(a.out, "\n[%d/%d] %s\n", i+1, len(phases), p.Name)
		for _, cmd := range p.Commands {
			fmt.Fprintln(a.out, steps.Indent(cmd.String(), "  "))
		}
		start := time.Now()
		if err := w.Step(p.Name, func() error { return rn.RunPhase(ctx, r, p) }); err != nil {
			opErr = fmt.Errorf("phase %d (%s): %w", i+1, p.Name, err)
			if i < etcdbackup.FirstReplacingPhase {
				opErr = fmt.Errorf("%w; nothing was replaced yet (every member's data is still in %s): khw up starts etcd and the control plane again", opErr, etcdbackup.DataDir)
			}
			fmt.Fprintf(a.out, "  ✗ failed after %s\n", time.Since(start).Round(100*time.Millisecond))
			break
		}
		fmt.Fprintf(a.out, "  ✓ done in %s\n", time.Since(start).Round(100*time.Millisecond))
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
	rep, err := w.End(ctx, a.out, opErr)
	if err != nil {
		return err
	}
	for _, f := range rep.Facts[before:] {
		fmt.Fprintf(a.out, "  %s: %s\n", f.Name, f.Value)
	}
	fmt.Fprintf(a.out, "Each member's data from before the restore is in %s on its control plane: remove it once the cluster works (it holds every object as it was).\n", etcdbackup.OldDataDir)
	return nil
}

// sizeText is n bytes in MiB, or KiB below one MiB.
func sizeText(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// snapshotPath is the snapshot file: args[0] made absolute, or
// <state>/etcd-snapshots/snapshot-<UTC time>.db. A path inside the state
// directory but outside etcd-snapshots/ is a usage error: it could replace
// one of khw's own files (a key, a certificate, a kubeconfig).
func snapshotPath(d state.Dir, args []string, now time.Time) (string, error) {
	if len(args) == 0 {
		return filepath.Join(d.Root, snapshotDir, "snapshot-"+now.UTC().Format("20060102-150405")+".db"), nil
	}
	p, err := filepath.Abs(args[0])
	if err != nil {
		return "", usagef("FILE %q: %v", args[0], err)
	}
	root, _ := filepath.Abs(d.Root)
	if rel, err := filepath.Rel(root, p); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) &&
		!strings.HasPrefix(rel, snapshotDir+string(filepath.Separator)) {
		return "", usagef("FILE %s is inside the state directory %s, where khw keeps its keys and certificates: give a path outside it, one under %s/, or none", p, root, filepath.Join(root, snapshotDir))
	}
	return p, nil
}
