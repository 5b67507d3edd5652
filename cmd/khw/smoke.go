package main

import (
	"time"

	"github.com/spf13/cobra"

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
			return smoke.Run(cmd.Context(), c, d, smoke.RunOptions{Keep: keep, Wait: wait, WaitSet: cmd.Flags().Changed("wait"), JSON: output == "json", Out: a.out, ErrOut: a.errOut})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&keep, "keep", false, "leave the namespace "+smoketest.Namespace+" and everything in it")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	f.DurationVar(&wait, "wait", smoketest.DefaultWait, "how long each smoke pod may take to become Ready (unset: this, scaled for slow VMs such as TCG, up to 15m)")
	return cmd
}
