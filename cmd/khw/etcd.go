package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/lab/etcdbackup"
	"github.com/khw-dev/khw/internal/state"
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
			res, err := etcdbackup.SaveSnapshot(cmd.Context(), c, d, path, force)
			if err != nil {
				return err
			}
			return res.Write(a.out, output == "json")
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
// file (a missing one is a usage error, one that is no snapshot khw can
// restore an invalid input), says what it restores (all of it with
// dryRun), then under the lock asks (unless yes) and runs
// etcdbackup.Restore.Run.
func runEtcdRestore(ctx context.Context, a *app, file string, yes, dryRun bool, in io.Reader) error {
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
	r.WritePlan(a.out, c.Name, dryRun)
	if dryRun {
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
	return r.Run(ctx, c, d, a.out)
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
