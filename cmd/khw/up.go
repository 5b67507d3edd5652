package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/lab/challenge"
	"github.com/khw-dev/khw/internal/lab/upgrade"
	"github.com/khw-dev/khw/internal/steps"
)

func newUpCmd(a *app) *cobra.Command {
	var opts steps.Options
	var force bool
	cmd := &cobra.Command{
		Use:     "up",
		Short:   "Create the machines and build the cluster, step by step",
		Long:    help("up"),
		Example: help("up.example"),
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			// A dry-run changes nothing, so it takes no lock either (and
			// makes no lock file).
			d, c, err := a.load()
			if err != nil {
				return err
			}
			if opts.DryRun {
				if err := challenge.StoreOf(d).Peek("khw up --dry-run", a.errOut); err != nil {
					return err
				}
			} else {
				unlock, err := a.lock(d)
				if err != nil {
					return err
				}
				defer unlock()
				if err := upgrade.RefuseDuring(d); err != nil {
					return err
				}
				if err := challenge.StoreOf(d).RefuseDuring("khw up", force, a.errOut, time.Now()); err != nil {
					return err
				}
			}
			// Step names are checked before anything is touched (the
			// constructors do not use the machines).
			if _, err := steps.Select(lab.Steps(nil, c), opts.From, opts.Until); err != nil {
				for _, arg := range []string{opts.From, opts.Until} {
					if l, lerr := lab.Lookup(arg); lerr == nil && l.Kind == lab.Drill {
						return usagef("%v (%s is a lab but not a step of khw up: khw lab %d runs it)", err, l.ID, l.Number())
					}
				}
				return usagef("%v", err)
			}
			return lab.RunUp(cmd.Context(), c, d, opts, a.out, a.errOut, a.verbosity)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.DryRun, "dry-run", false, "check only: print what would change and the shell commands, change nothing")
	f.BoolVar(&force, "force", false, "run even while a challenge is under way (it ends as not solved)")
	f.StringVar(&opts.From, "from", "", "first step to run (ID, number or name, e.g. "+lab.IDs()[0]+")")
	f.StringVar(&opts.Until, "until", "", "last step to run (ID, number or name)")
	f.BoolVar(&opts.Recheck, "smoke", false, helpVars.Replace("run the smoke tests ({smoke}) even when nothing changed since they last passed"))
	for _, flag := range []string{"from", "until"} {
		cmd.RegisterFlagCompletionFunc(flag, func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			return lab.Complete(toComplete, true), cobra.ShellCompDirectiveNoFileComp
		})
	}
	return cmd
}

func newDownCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "down",
		Short:   "Destroy the machines and network (the state dir stays)",
		Long:    help("down"),
		Example: "  khw down\n  khw status",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, c, unlock, err := a.loadForWrite()
			if err != nil {
				return err
			}
			defer unlock()
			s, err := cluster.Open(c, d, cluster.ProviderOnly, nil)
			if err != nil {
				return err
			}
			removed, err := lab.Down(cmd.Context(), s.Provider, d, c.Name)
			for _, r := range removed {
				fmt.Fprintf(a.out, "removed %s\n", r)
			}
			if err != nil {
				return fmt.Errorf("cluster %s: down: %w (run khw down again to retry)", c.Name, err)
			}
			if len(removed) == 0 {
				fmt.Fprintf(a.out, "cluster %s: nothing to remove\n", c.Name)
			}
			// An upgrade under way ends with its nodes.
			return upgrade.EndWithNodes(d, c, a.out)
		},
	}
}
