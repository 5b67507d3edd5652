// Package nodeplan is what the labs' steps share: Machines (the open
// cluster and what the steps learn about the nodes during one run), the
// component step (ComponentSpec: the files, units, packages and extras a
// step wants on its nodes, checked and applied node by node or rolling),
// the node probe (one SSH round trip per node: file digests, unit states,
// packages), node packages from the mirror, binaries and images from the
// artifact catalog, and khw down.
//
// A lab's own knowledge (which components, which health check, what its
// Check compares) lives in its folder (internal/lab/<name>); this package
// holds no lab's rules.
package nodeplan

import (
	"sync"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/render"
)

// Machines is what every step of `khw up` works through: the open
// cluster (its provider and SSH pool) and what the steps learn about the
// nodes during one run.
type Machines struct {
	*cluster.Session

	Art        artifacts
	factsMu    sync.Mutex
	factsCache map[string]render.NodeFacts

	// Node packages (debs.go), per run: the mirror's archive indexes by
	// URL and arch, the offline install plan and whether apt-get update
	// ran, by node.
	debMu      sync.Mutex
	debIdx     map[string]*components.DebIndex
	DebPlans   map[string]*DebPlan
	aptUpdated map[string]bool
}

// remoteRunNoSudo runs a command as the login user.
var remoteRunNoSudo = remote.RunOptions{}

// New returns the Machines of an open cluster session; the steps keep
// their per-run caches in it. Closing s closes them.
func New(s *cluster.Session) *Machines { return &Machines{Session: s} }
