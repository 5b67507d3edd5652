package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/kubeconfig"
)

func newKubeconfigCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "kubeconfig",
		Short: "Write every component's kubeconfig with embedded certificates",
		Long:  help("kubeconfig"),
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, c, unlock, err := a.loadForWrite()
			if err != nil {
				return err
			}
			defer unlock()
			rep, err := kubeconfig.Reconcile(c, d.PKIDir(), d.KubeconfigDir())
			if err != nil {
				return err
			}
			fmt.Fprintln(a.out, rep.String())
			return nil
		},
	}
}
