package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/lab/smoke"
	"github.com/khw-dev/khw/internal/smoketest"
)

func newSmokeCmd(a *app) *cobra.Command {
	var keep bool
	var output string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:     "smoke",
		Short:   "Smoke-test the cluster (encryption, pods, logs, exec, DNS…)",
		Long:    help("smoke"),
		Example: "  khw smoke\n  khw smoke --keep\n  khw smoke -o json | jq '.checks[] | select(.ok | not)'",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return usagef("-o %q: use text or json", output)
			}
			if wait <= 0 {
				return usagef("--wait %v: use a positive duration such as 2m", wait)
			}
			d, c, unlock, err := a.loadForWrite()
			if err != nil {
				return err
			}
			defer unlock()
			s, err := cluster.Open(c, d, cluster.ProviderOnly, nil)
			if err != nil {
				return err
			}
			cfg, err := s.AdminRESTConfig()
			if err != nil {
				return err
			}
			r, scaled, err := smoke.Runner(c, d, cfg, s.Provider, wait)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("wait") {
				wait = scaled
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts := smoketest.Options{Keep: keep, Wait: wait}
			if output == "text" {
				opts.Progress = func(ch smoketest.Check) { smoketest.WriteCheck(a.out, ch) }
			}
			rep := r.Run(ctx, opts)
			if output == "json" {
				enc := json.NewEncoder(a.out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				smoketest.WriteSummary(a.out, rep)
			}
			if rep.CleanupErr != "" {
				fmt.Fprintf(a.errOut, "Warning: %s\n", rep.CleanupErr)
			}
			if err := ctx.Err(); err != nil {
				// Interrupted: the checks cut short say nothing about the cluster.
				return fmt.Errorf("cluster %s: smoke checks interrupted: %w", c.Name, err)
			}
			return rep.Err(c.Name)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&keep, "keep", false, "leave the namespace "+smoketest.Namespace+" and everything in it")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	f.DurationVar(&wait, "wait", smoketest.DefaultWait, "how long each smoke pod may take to become Ready (unset: this, scaled for slow VMs such as TCG, up to 15m)")
	return cmd
}
