package main

import (
	"context"
	"errors"
	"strings"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/lab/labid"
)

func newBreakCmd(a *app) *cobra.Command {
	var spec drill.Spec
	var nodes string
	var html bool
	cmd := &cobra.Command{
		Use:       "break etcd|apiserver|node|lb|kubelet [NODE]",
		Short:     "Run a failover drill (etcd, apiserver, node, LB, kubelet)",
		Long:      help("break"),
		Example:   help("break.example"),
		Args:      cobra.RangeArgs(1, 2),
		ValidArgs: []string{"etcd", "apiserver", "node", "lb", "kubelet"},
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, err := drill.ParseKind(args[0])
			if err != nil {
				return usageError{err}
			}
			spec.Kind = kind
			if nodes != "" {
				spec.Nodes = strings.Split(nodes, ",")
			}
			if len(args) == 2 {
				if nodes != "" {
					return usagef("give the node either as an argument or with --nodes, not both")
				}
				spec.Nodes = []string{args[1]}
			}
			if spec.For < 0 {
				return usagef("--for %s: give a positive duration such as 30s", spec.For)
			}
			return runBreak(cmd.Context(), a, spec, html)
		},
	}
	f := cmd.Flags()
	f.IntVar(&spec.Count, "count", 0, "etcd/apiserver: how many control planes to break (default 1)")
	f.StringVar(&nodes, "nodes", "", "etcd/apiserver: which control planes, comma-separated (default: the leader first)")
	f.DurationVar(&spec.For, "for", 0, "heal automatically after this long (e.g. 30s); without it, run khw heal")
	f.BoolVar(&spec.Force, "force", false, "allow breaking every member, and drilling an unhealthy cluster")
	f.BoolVar(&html, "html", false, "end with the path of the report's page (report.html) alone on the last line")
	return cmd
}

func newHealCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "heal",
		Short:   "Heal what khw break broke and write the drill report",
		Long:    help("heal"),
		Example: "  khw heal",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, c, err := a.load()
			if err != nil {
				return err
			}
			lock := func() (func(), error) { return a.lock(d) }
			return drill.Heal(cmd.Context(), c, d, a.out, lock, func(format string, args ...any) { a.logf(1, format, args...) })
		},
	}
}

// runBreak runs a drill under the cluster lock, held until the drill ends
// (so no khw up or lab reset changes the cluster while it is measured). A
// khw heal from another shell may still heal it: heal recognises this
// process as the drill's watcher (see drill.Heal).
func runBreak(parent context.Context, a *app, spec drill.Spec, html bool) error {
	d, c, unlock, err := a.loadForWrite()
	if err != nil {
		return err
	}
	defer unlock()
	// Plan once without the live cluster so that a bad command line fails
	// before anything is contacted.
	if _, err := drill.Plan(c, spec, drill.Live{}); err != nil {
		return usageError{err}
	}
	err = drill.Run(parent, c, d, spec, html, a.out, a.errOut)
	var pe *drill.PlanError
	if errors.As(err, &pe) {
		return usageError{pe.Err}
	}
	if err == nil {
		// A passed drill completes lab 12-failover.
		if merr := lab.MarkDone(d, labid.Failover); merr != nil {
			a.logf(1, "lab progress: %v", merr)
		}
	}
	return err
}
