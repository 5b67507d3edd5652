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
		Long:  help("config-validate"),
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, c, err := a.load()
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "%s is valid: %s (%s, %s), provider %s, arch %s\n",
				d.ConfigPath(), plural(len(c.Nodes), "node"), plural(len(c.ControlPlanes()), "control plane"), plural(len(c.Workers()), "worker"), c.Provider, c.Arch)
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

// plural writes "1 worker" or "3 workers".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
