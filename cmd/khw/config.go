package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newConfigCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check or show cluster.yaml",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "validate",
		Short: "Check cluster.yaml and list every problem with its fix",
		Long: `Check cluster.yaml strictly: unknown fields, bad addresses, overlapping node,
pod and service networks, duplicate names/IPs/podCIDRs, the number of load
balancers and control planes, versions, PKI settings. Every problem names the
field, the bad value and the fix. Exit code 3 when the file is invalid.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, c, err := a.load()
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "%s is valid: %d nodes (%d control planes, %d workers), provider %s, arch %s\n",
				d.ConfigPath(), len(c.Nodes), len(c.ControlPlanes()), len(c.Workers()), c.Provider, c.Arch)
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "show",
		Short: "Print cluster.yaml with every default filled in",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, c, err := a.load()
			if err != nil {
				return err
			}
			data, err := c.Marshal()
			if err != nil {
				return err
			}
			_, err = a.out.Write(data)
			return err
		},
	})
	return cmd
}
