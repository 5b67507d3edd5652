package main

import (
	"context"
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/lab/upgrade"
)

type upgradeOptions struct {
	to                   string
	yes, dryRun, abandon bool
	// locked: the caller holds the cluster's lock (khw lab 15).
	locked bool
}

func newUpgradeCmd(a *app) *cobra.Command {
	var o upgradeOptions
	cmd := &cobra.Command{
		Use:   "upgrade --to vX.Y.Z",
		Short: "Upgrade Kubernetes to the next patch or minor release, one component and one node at a time",
		Long:  help("upgrade"),
		Example: `  khw upgrade --to v1.37.2 --dry-run   # the versions running, the order, the commands
  khw upgrade --to v1.37.2             # asks, then upgrades while a prober watches
  khw report open                      # the upgrade's report, drawn`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.abandon {
				if o.to != "" || o.dryRun {
					return usagef("--abandon takes no --to or --dry-run")
				}
				return abandonUpgrade(a)
			}
			if o.to == "" {
				return usagef("give the version to upgrade to with --to, e.g. --to v1.37.2")
			}
			// Before the cluster is opened: a bad --to needs no node to be
			// refused, and it is written into commands and cluster.yaml.
			if _, err := upgrade.ParseTarget(o.to); err != nil {
				return usageError{err}
			}
			return runUpgrade(cmd.Context(), a, o, cmd.InOrStdin())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.to, "to", "", "the Kubernetes release to upgrade to (vX.Y.Z: a patch of the running minor, or the next minor)")
	f.BoolVarP(&o.yes, "yes", "y", false, "do not ask for confirmation")
	f.BoolVar(&o.dryRun, "dry-run", false, "say what runs now, what would change and in which order, change nothing")
	f.BoolVar(&o.abandon, "abandon", false, "give up an upgrade that cannot finish: cluster.yaml names the version it came from again, and khw up puts that version back on the nodes that got the new one")
	return cmd
}

// runUpgrade is khw upgrade --to: it refuses a second upgrade while one
// to another release is under way (a usage error, before the cluster is
// opened), then runs upgrade.Run, asking first unless o.yes and taking the
// lock unless o.locked. The version-skew policy's refusals and a bad --to
// are usage errors.
func runUpgrade(ctx context.Context, a *app, o upgradeOptions, in io.Reader) error {
	d, c, err := a.load()
	if err != nil {
		return err
	}
	rec, err := upgrade.LoadRecord(d)
	if err != nil {
		return err
	}
	if rec != nil && rec.To != o.to {
		return usagef("an upgrade from %s to %s is under way: finish it first with khw upgrade --to %s", rec.From, rec.To, rec.To)
	}
	uo := upgrade.Options{To: o.to, DryRun: o.dryRun, Record: rec, Out: a.out, Verbosity: a.verbosity, Up: lab.Up()}
	if !o.locked {
		uo.Lock = func() (func(), error) { return lockWithoutDrill(a, d) }
	}
	if !o.yes {
		uo.Confirm = func(what string) (bool, error) { return goOn(a, in, what, "upgrade") }
	}
	err = upgrade.Run(ctx, c, d, uo)
	if errors.As(err, new(*upgrade.SkewError)) || errors.As(err, new(*upgrade.TargetError)) {
		return usageError{err}
	}
	return err
}

// abandonUpgrade is khw upgrade --abandon: upgrade.Abandon under the lock.
func abandonUpgrade(a *app) error {
	d, _, unlock, err := a.loadForWrite()
	if err != nil {
		return err
	}
	defer unlock()
	return upgrade.Abandon(d, a.out)
}
