package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/render"
)

func newRenderCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "render",
		Short: "Render the node files and manifests from templates",
		Long: `Render, from the templates embedded in khw (templates/ in the source), every
file a node needs, at its path on that node, under <state>/nodes/<node>/:

  all nodes       /etc/hosts
  control planes  etcd, kube-apiserver (+ audit policy), kube-controller-manager
                  and kube-scheduler units and configs
  lb              /etc/haproxy/haproxy.cfg (health checks from loadBalancer.*)
  workers         modules-load and sysctl files, containerd config + unit,
                  kubelet and kube-proxy configs + units, CNI configs (and the
                  mybridge/myloopback scripts when kubernetes.cni: mybridge)

and the cluster-wide manifests under <state>/manifests/ (apiserver→kubelet
RBAC, TLS bootstrap RBAC, CoreDNS). Settings that depend on the machine
(cgroup v1 or v2, a systemd-resolved stub, running as a container) use the
provider's defaults here; the bring-up measures each node and renders again.
Files that are no longer rendered (e.g. after switching CNI) are removed from
<state>/nodes and listed.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, c, unlock, err := a.loadForWrite()
			if err != nil {
				return err
			}
			defer unlock()
			rep, err := render.All(c, nil, d.Root)
			if err != nil {
				return err
			}
			for _, p := range rep.Written {
				a.logf(2, "  wrote %s", p)
			}
			for _, p := range rep.Removed {
				fmt.Fprintf(a.out, "  removed %s (no longer rendered)\n", p)
			}
			fmt.Fprintf(a.out, "Rendered into %s: %d files written, %d unchanged, %d removed\n",
				d.Root, len(rep.Written), len(rep.Unchanged), len(rep.Removed))
			return nil
		},
	}
}
