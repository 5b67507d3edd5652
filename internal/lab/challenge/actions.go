package challenge

import (
	"context"
	"fmt"
	"io/fs"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/state"
)

// nodeActions are fault.Actions on an open cluster: SSH to its nodes only
// (as root through sudo), the admin clientset through the load balancer.
type nodeActions struct{ s *cluster.Session }

func (a nodeActions) Cluster() *config.Cluster { return a.s.Config }
func (a nodeActions) State() state.Dir         { return a.s.Dir }

func (a nodeActions) client(ctx context.Context, node string) (*remote.Client, error) {
	n, ok := a.s.Config.Node(node)
	if !ok {
		return nil, fmt.Errorf("%q is not a node of cluster %s: a challenge only changes cluster nodes", node, a.s.Config.Name)
	}
	return a.s.Pool.Get(ctx, remote.Node{Name: n.Name, Addr: n.IP})
}

// Run sends script on stdin to `sh -e` as root: no quoting is needed, and
// the first failing command stops it.
func (a nodeActions) Run(ctx context.Context, node, script string) (string, error) {
	cl, err := a.client(ctx, node)
	if err != nil {
		return "", err
	}
	out, errOut, err := cl.Run(ctx, "sh -e", remote.RunOptions{Sudo: true, Stdin: []byte(script)})
	both := strings.TrimSpace(string(out) + string(errOut))
	if err != nil {
		return both, fmt.Errorf("on %s: %w: %s", node, err, both)
	}
	return both, nil
}

func (a nodeActions) Push(ctx context.Context, node, path string, data []byte, mode fs.FileMode) error {
	cl, err := a.client(ctx, node)
	if err != nil {
		return err
	}
	_, err = cl.Install(ctx, remote.File{Path: path, Data: data, Mode: mode})
	return err
}

func (a nodeActions) Kube() (kubernetes.Interface, error) { return a.s.Clientset() }
