package cluster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/vm"
)

// StatusTimeout bounds a whole status read; the SSH section gets
// StatusUnitsTimeout of it so that it reports before the end. On slow nodes
// (TCG VMs, vm.Slowdown) both grow, up to 3× (see Status).
const (
	StatusTimeout      = 10 * time.Second
	StatusUnitsTimeout = 8 * time.Second
)

// Status reads every section of the cluster's status (CollectStatus) within
// StatusTimeout grown by the provider's slowdown, opening an SSH pool that
// writes nothing (ReadOnly) only when a node runs. read is false when no
// section could be read at all.
func (s *Session) Status(ctx context.Context) (rep StatusReport, read bool) {
	ctx, cancel := context.WithTimeout(ctx, vm.Scaled(s.Provider, StatusTimeout, 3*StatusTimeout))
	defer cancel()
	return CollectStatus(ctx, s.Config, s.Provider, func() (*remote.Pool, func(), error) {
		rs, err := Open(s.Config, s.Dir, ReadOnly, nil)
		if err != nil {
			return nil, nil, err
		}
		return rs.Pool, func() { rs.Close() }, nil
	}, s.Target(), s.AdminKubeconfig())
}

// NodeRow is one node in `khw status -o json`: cluster.yaml's role and the
// provider's view.
type NodeRow struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	State string `json:"state"`
	IP    string `json:"ip"`
	PID   int    `json:"pid,omitempty"`
}

// StatusReport is the whole `khw status -o json` object. A section that
// was skipped or could not be read is nil and has its message in Errors
// (keys: nodes, cluster, units, etcd, apiservers, leases, kubeNodes,
// certs).
type StatusReport struct {
	Nodes      []NodeRow                `json:"nodes"`
	Units      map[string][]health.Unit `json:"units"`
	Etcd       *health.EtcdReport       `json:"etcd"`
	APIServers []health.Readyz          `json:"apiservers"`
	Leases     []health.Lease           `json:"leases"`
	KubeNodes  []health.KubeNode        `json:"kubeNodes"`
	// Certs are the certificates on each running node, as the files
	// there are (health.Certs).
	Certs  map[string][]health.Cert `json:"certs"`
	Errors map[string]string        `json:"errors"`
}

// NotUp is the message of the "cluster" error when no node runs.
const NotUp = "cluster is not up: no node is running (run khw up)"

// CollectStatus fills every section of the report. openPool opens the SSH
// pool (only called when a node runs). target lacks Dial: the provider's
// Dialer is used, refusing at once the IPs of nodes the provider reports as
// not running. read is false when no section could be read at all.
func CollectStatus(ctx context.Context, c *config.Cluster, p vm.Provider, openPool func() (*remote.Pool, func(), error), target health.Target, adminKubeconfig string) (rep StatusReport, read bool) {
	rep.Errors = map[string]string{}
	running, down, read := rep.nodeRows(ctx, c, p)
	if len(running) == 0 {
		rep.Errors["cluster"] = NotUp
		return rep, read
	}
	provDial := p.Dialer()
	target.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			if why, ok := down[host]; ok {
				return nil, fmt.Errorf("dial %s: node %s (provider state; start it with khw up)", addr, why)
			}
		}
		return provDial(ctx, network, addr)
	}
	rep.sections(ctx, c, p, openPool, target, adminKubeconfig, running)
	answered := rep.anythingRead()
	return rep, read || answered
}

// nodeRows fills the NODES section from the provider: the nodes that run
// (every node of c when the provider cannot tell), and those that do not
// by IP with why. read is whether the provider answered.
func (rep *StatusReport) nodeRows(ctx context.Context, c *config.Cluster, p vm.Provider) (running []string, down map[string]string, read bool) {
	roles := map[string]string{}
	for _, n := range c.Nodes {
		roles[n.Name] = n.Role
	}
	st, err := p.Status(ctx)
	if err != nil {
		rep.Errors["nodes"] = err.Error()
		// The provider could not say which nodes run: ask them all.
		for _, n := range c.Nodes {
			running = append(running, n.Name)
		}
		return running, map[string]string{}, false
	}
	rep.Nodes = make([]NodeRow, 0, len(st))
	down = map[string]string{}
	for _, n := range st {
		rep.Nodes = append(rep.Nodes, NodeRow{Name: n.Name, Role: roles[n.Name], State: string(n.State), IP: n.IP.String(), PID: n.PID})
		if n.State == vm.StateRunning {
			running = append(running, n.Name)
		} else {
			down[n.IP.String()] = n.Name + " is " + string(n.State)
		}
	}
	return running, down, true
}

// sections reads the sections that contact the nodes, all at once: units
// over SSH on the running nodes, etcd, the apiservers, the Leases and the
// Kubernetes Nodes; each one that fails records its error.
func (rep *StatusReport) sections(ctx context.Context, c *config.Cluster, p vm.Provider, openPool func() (*remote.Pool, func(), error), target health.Target, adminKubeconfig string, running []string) {
	var mu sync.Mutex
	set := func(section string, err error, f func()) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			rep.Errors[section] = err.Error()
		}
		f()
	}
	units := func() {
		pool, closePool, err := openPool()
		if err != nil {
			set("units", fmt.Errorf("open SSH: %w", err), func() {})
			return
		}
		defer closePool()
		uctx, cancel := context.WithTimeout(ctx, vm.Scaled(p, StatusUnitsTimeout, 3*StatusUnitsTimeout))
		defer cancel()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			certs, err := health.Certs(uctx, pool, c, running)
			set("certs", err, func() {
				if len(certs) > 0 {
					rep.Certs = certs
				}
			})
		}()
		u, err := health.Units(uctx, pool, c, running)
		set("units", err, func() {
			if len(u) > 0 {
				rep.Units = u
			}
		})
		wg.Wait()
	}
	etcd := func() {
		e, err := health.Etcd(ctx, target)
		set("etcd", err, func() { rep.Etcd = e })
	}
	apiservers := func() {
		r := health.APIServers(ctx, target, adminKubeconfig)
		set("apiservers", nil, func() { rep.APIServers = r })
	}
	leases := func() {
		l, err := health.Leases(ctx, target, adminKubeconfig)
		set("leases", err, func() { rep.Leases = l })
	}
	kubeNodes := func() {
		n, err := health.KubeNodes(ctx, target, adminKubeconfig)
		set("kubeNodes", err, func() { rep.KubeNodes = n })
	}
	var wg sync.WaitGroup
	for _, f := range []func(){units, etcd, apiservers, leases, kubeNodes} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	wg.Wait()
}

// anythingRead reports whether a section that contacts the nodes got an
// answer; it records that no apiserver answered.
func (rep *StatusReport) anythingRead() bool {
	read := len(rep.Units) > 0 || len(rep.Leases) > 0 || rep.KubeNodes != nil
	if rep.Etcd != nil {
		for _, e := range rep.Etcd.Endpoints {
			read = read || e.OK
		}
	}
	answered := false
	for _, r := range rep.APIServers {
		answered = answered || r.HTTPStatus != 0
	}
	if !answered && len(rep.APIServers) > 0 {
		rep.Errors["apiservers"] = "no apiserver answered"
	}
	return read || answered
}

// JoinErrors lists the section errors on one line, sections sorted.
func JoinErrors(errs map[string]string) string {
	var parts []string
	for _, s := range []string{"nodes", "cluster", "units", "etcd", "apiservers", "leases", "kubeNodes", "certs"} {
		if e, ok := errs[s]; ok {
			parts = append(parts, s+": "+strings.Join(strings.Fields(e), " "))
		}
	}
	return strings.Join(parts, "; ")
}
