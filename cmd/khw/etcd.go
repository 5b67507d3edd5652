package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/etcdsnap"
	"github.com/khw-dev/khw/internal/state"
)

// snapshotDir is where khw etcd snapshot save writes by default, and the
// only place inside the state directory it writes to.
const snapshotDir = "etcd-snapshots"

func newEtcdCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "etcd", Short: "Operate the cluster's etcd: snapshots", Args: exactArgs(0)}
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
	cmd.AddCommand(snap)
	return cmd
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
