// Package bringup holds the steps of `khw up`, in lab order (01-machines …
// 11-smoke), and what they share: the open cluster (cluster.Session) and
// what they learn about the nodes during one run.
package bringup

import (
	"sync"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/steps"
)

// Machines is what every step of `khw up` works through: the open
// cluster (its provider and SSH pool) and what the steps learn about the
// nodes during one run.
type Machines struct {
	*cluster.Session

	art        artifacts
	factsMu    sync.Mutex
	factsCache map[string]render.NodeFacts

	// Node packages (debs.go), per run: the mirror's archive indexes by
	// URL and arch, the offline install plan and whether apt-get update
	// ran, by node.
	debMu      sync.Mutex
	debIdx     map[string]*components.DebIndex
	debPlans   map[string]*debPlan
	aptUpdated map[string]bool
}

// remoteRunNoSudo runs a command as the login user.
var remoteRunNoSudo = remote.RunOptions{}

// New returns the Machines of an open cluster session; the steps keep
// their per-run caches in it. Closing s closes them.
func New(s *cluster.Session) *Machines { return &Machines{Session: s} }

// Steps returns the steps of `khw up` for cluster c in order: 01-machines,
// 02-pki, 03-kubeconfig, 04-etcd, 05-control-plane, 06-lb, 07-workers,
// 08-pod-network, 09-coredns, 10-tls-bootstrap, 11-smoke.
func Steps(m *Machines, c *config.Cluster) []steps.Step {
	return []steps.Step{
		NewMachinesStep(m),
		NewPKIStep(m),
		NewKubeconfigStep(m),
		NewEtcdStep(m),
		NewControlPlaneStep(m),
		NewLBStep(m),
		NewWorkersStep(m, c),
		NewPodNetworkStep(m, c),
		NewCoreDNSStep(m),
		NewTLSBootstrapStep(m, c),
		NewSmokeStep(m),
	}
}
