package drill

import (
	"context"
	"fmt"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/vm"
)

// NodeActuator breaks and heals through the cluster's own means: systemctl
// over SSH (user ubuntu, sudo) for units, the provider for power. It never
// touches a machine that is not a node of Cluster (the jumpbox is not one).
type NodeActuator struct {
	Cluster  *config.Cluster
	Pool     *remote.Pool
	Provider vm.Provider
}

func (n NodeActuator) node(name string) (config.Node, error) {
	nd, ok := n.Cluster.Node(name)
	if !ok {
		return config.Node{}, fmt.Errorf("%q is not a node of cluster %s: khw only breaks cluster nodes", name, n.Cluster.Name)
	}
	return nd, nil
}

func (n NodeActuator) systemctl(ctx context.Context, node, args string) error {
	nd, err := n.node(node)
	if err != nil {
		return err
	}
	cl, err := n.Pool.Get(ctx, remote.Node{Name: nd.Name, Addr: nd.IP})
	if err != nil {
		return err
	}
	_, _, err = cl.Run(ctx, "systemctl "+args, remote.RunOptions{Sudo: true})
	return err
}

// Break stops a.Unit (systemctl stop waits until the unit's processes are
// gone; etcd hands leadership over on a graceful stop) or powers a.Node off
// without a shutdown (vm.Provider.Stop with force).
func (n NodeActuator) Break(ctx context.Context, a Action) error {
	if a.PowerOff {
		if _, err := n.node(a.Node); err != nil {
			return err
		}
		return n.Provider.Stop(ctx, a.Node, true)
	}
	return n.systemctl(ctx, a.Node, "stop "+a.Unit)
}

// Heal starts a.Unit without waiting for it to report ready (systemctl
// start --no-block: an etcd member that needs its peers to start would
// otherwise block), or powers a.Node on; its units start at boot.
func (n NodeActuator) Heal(ctx context.Context, a Action) error {
	if a.PowerOff {
		if _, err := n.node(a.Node); err != nil {
			return err
		}
		return n.Provider.Start(ctx, a.Node)
	}
	return n.systemctl(ctx, a.Node, "start --no-block "+a.Unit)
}
