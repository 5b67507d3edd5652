package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/lab/upgrade"
)

func newStatusCmd(a *app) *cobra.Command {
	var output string
	var certs bool
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show nodes, units, etcd quorum, apiserver readiness, Leases",
		Long:    help("status"),
		Example: "  khw status\n  khw status --certs   # every certificate on every node, with its days left\n  khw status -o json\n  khw status -o json | jq .etcd.leader",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" && output != "text" && output != "json" {
				return usagef("-o %q: use text or json", output)
			}
			d, c, err := a.load()
			if err != nil {
				return err
			}
			s, err := cluster.Open(c, d, cluster.ProviderOnly, nil)
			if err != nil {
				return err
			}
			rep, read := s.Status(cmd.Context())
			if output == "json" {
				enc := json.NewEncoder(a.out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				if err := cluster.WriteStatusTextWith(a.out, c, rep, time.Now(), cluster.StatusOptions{AllCerts: certs}); err != nil {
					return err
				}
				upgrade.WriteStatus(a.out, d)
			}
			if !read {
				return fmt.Errorf("cluster %s: nothing could be read (%s)", c.Name, cluster.JoinErrors(rep.Errors))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.Flags().BoolVar(&certs, "certs", false, "list every certificate on every node (default: each node's soonest to expire, and those within 30 days)")
	return cmd
}
