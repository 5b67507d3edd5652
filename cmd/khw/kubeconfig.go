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
		Long: `Write the kubeconfigs of the hard way with client-go's clientcmd, each with the
CA, client certificate and key embedded (mode 0600):

  admin.kubeconfig                    admin → https://lb:6443        (the jumpbox)
  admin-cp.kubeconfig                 admin → https://127.0.0.1:6443 (/etc/kubernetes on cps)
  w1.kubeconfig, w2.kubeconfig        system:node:wN → the LB       (/var/lib/kubelet/kubeconfig)
  kube-proxy.kubeconfig               system:kube-proxy → the LB    (/var/lib/kube-proxy/kubeconfig)
  kube-controller-manager.kubeconfig  → https://127.0.0.1:6443       (cps)
  kube-scheduler.kubeconfig           → https://127.0.0.1:6443       (cps)
  w3-bootstrap.kubeconfig             kubelet-bootstrap (token) → the LB

Workers go through the load balancer so losing a control plane is invisible to
them; control-plane components talk to their local apiserver. The bootstrap
kubeconfig holds a placeholder token until the bring-up creates a real
bootstrap token. Re-running rewrites only files whose certificate, server or
CA changed. Needs ` + "`khw pki`" + ` first.`,
		Args: exactArgs(0),
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
