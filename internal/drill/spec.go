// Package drill runs failover drills on a khw cluster: it breaks something
// real (stops etcd or kube-apiserver on some control planes, powers a node
// off, stops HAProxy or a kubelet), watches the cluster from the jumpbox
// while it is broken and after it is healed, and reports what happened
// against what Kubernetes and etcd promise.
//
// A drill has four parts:
//
//   - a Spec (what to break) that Plan turns into concrete Actions on named
//     nodes, using the live cluster (e.g. `etcd --count 1` stops the current
//     etcd leader, to show an election);
//   - an Actuator that performs and reverses the Actions (systemctl over SSH,
//     the provider's power off / on);
//   - a Prober that samples several signals twice a second (every 2 s on
//     slow nodes, Prober.Every): an API
//     read and an API write through the load balancer, etcd member status,
//     the controller-manager and scheduler Leases, HAProxy's backend states,
//     a workload answering on every worker, and node readiness;
//   - Analyze, which turns the samples into a Report: detection times,
//     windows of unavailability, elections, Lease moves, recovery time, and a
//     verdict per expectation.
//
// The drill's state (what was broken, when, the samples so far) is kept
// under <state>/drills/ so that `khw heal` from another shell, later, can
// restore the cluster and finish the report.
//
// Expected behaviour comes from upstream: etcd's failure tolerance
// (https://etcd.io/docs/v3.7/faq/#what-is-failure-tolerance), leader
// election with Leases (https://kubernetes.io/docs/concepts/architecture/leases/),
// HAProxy's health checks (https://docs.haproxy.org/2.8/configuration.html#5.2-inter),
// and the node lifecycle controller's grace period
// (https://kubernetes.io/docs/concepts/architecture/nodes/#node-controller).
package drill

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
)

// Kind is what a drill breaks.
type Kind string

const (
	// KindEtcd stops the etcd unit on Count control planes.
	KindEtcd Kind = "etcd"
	// KindAPIServer stops the kube-apiserver unit on Count control planes.
	KindAPIServer Kind = "apiserver"
	// KindNode powers one node off through the provider (pulling the plug:
	// no graceful shutdown).
	KindNode Kind = "node"
	// KindLB stops HAProxy on the load balancer node.
	KindLB Kind = "lb"
	// KindKubelet stops the kubelet unit on one worker.
	KindKubelet Kind = "kubelet"
)

// Kinds lists every Kind in the order `khw break --help` shows them.
var Kinds = []Kind{KindEtcd, KindAPIServer, KindNode, KindLB, KindKubelet}

// Spec is what the user asked to break (the command line of `khw break`).
type Spec struct {
	Kind Kind `json:"kind"`
	// Count is how many control planes to break (etcd, apiserver); 0 means 1.
	Count int `json:"count,omitempty"`
	// Nodes names the nodes to break. For etcd and apiserver it is optional
	// (Plan picks, see there) and, when given, must hold Count control
	// planes; for node and kubelet it is the one node (required); for lb it
	// must be empty or the load balancer.
	Nodes []string `json:"nodes,omitempty"`
	// For heals automatically after this long; 0 leaves the cluster broken
	// until `khw heal`.
	For time.Duration `json:"for,omitempty"`
	// Force allows breaking every etcd member or apiserver, and starting on a
	// cluster that is not healthy.
	Force bool `json:"force,omitempty"`
}

// Action is one thing a drill does to one node. Break performs it, Heal
// reverses it.
type Action struct {
	// Node is the node name from cluster.yaml.
	Node string `json:"node"`
	// Unit is the systemd unit stopped on Node (etcd.service …); "" when
	// the action is a power-off.
	Unit string `json:"unit,omitempty"`
	// PowerOff is true when the provider powers Node off (and on to heal).
	PowerOff bool `json:"powerOff,omitempty"`
}

// String is the action as a shell user would do it.
func (a Action) String() string {
	if a.PowerOff {
		return "power off " + a.Node
	}
	return fmt.Sprintf("systemctl stop %s on %s", a.Unit, a.Node)
}

// HealString is the reverse of String.
func (a Action) HealString() string {
	if a.PowerOff {
		return "power on " + a.Node
	}
	return fmt.Sprintf("systemctl start %s on %s", a.Unit, a.Node)
}

// Live is what Plan needs to know about the running cluster to pick nodes.
type Live struct {
	// EtcdLeader is the node name of the current etcd leader ("" unknown).
	EtcdLeader string
	// LeaseHolders are the node names holding the kube-controller-manager
	// and kube-scheduler Leases, in that order ("" unknown).
	LeaseHolders []string
}

// units of the kinds that stop a unit.
var kindUnit = map[Kind]string{
	KindEtcd:      "etcd.service",
	KindAPIServer: "kube-apiserver.service",
	KindLB:        "haproxy.service",
	KindKubelet:   "kubelet.service",
}

// Plan checks spec against cluster c and returns the actions of the drill.
//
// Choice of nodes when spec.Nodes is empty: for etcd, the current leader
// first (stopping a follower shows nothing), then the other control planes
// in cluster.yaml order; for apiserver, the holder of the
// kube-controller-manager Lease first (so its Lease has to move), then the
// others. For lb, the load balancer node.
//
// Errors (each names the flag and the fix): unknown kind; Count < 0, or
// more than there are control planes; Count equal to all members without
// Force (etcd: no quorum at all; apiserver: no API at all); --nodes naming a
// node that is not in cluster.yaml or has the wrong role for the kind;
// a node/kubelet drill without exactly one node.
func Plan(c *config.Cluster, spec Spec, live Live) ([]Action, error) {
	role := func(name string) string {
		if n, ok := c.Node(name); ok {
			return n.Role
		}
		return ""
	}
	for _, n := range spec.Nodes {
		if role(n) == "" {
			return nil, fmt.Errorf("%q is not a node of cluster %s (nodes: %s); khw never touches the machine it runs on", n, c.Name, strings.Join(nodeNames(c.Nodes), ", "))
		}
	}
	if spec.For < 0 {
		return nil, fmt.Errorf("--for %s: give a positive duration such as 30s, or leave it out and run khw heal later", spec.For)
	}
	switch spec.Kind {
	case KindEtcd, KindAPIServer:
		cps := nodeNames(c.ControlPlanes())
		count := spec.Count
		if count == 0 {
			count = max(1, len(spec.Nodes))
		}
		if count < 0 || count > len(cps) {
			return nil, fmt.Errorf("--count %d: cluster %s has %d control planes; give 1..%d", spec.Count, c.Name, len(cps), len(cps))
		}
		if len(spec.Nodes) > 0 && len(spec.Nodes) != count {
			return nil, fmt.Errorf("--nodes names %d nodes but --count is %d: give as many nodes as the count (or leave --nodes out)", len(spec.Nodes), count)
		}
		for _, n := range spec.Nodes {
			if role(n) != config.RoleControlPlane {
				return nil, fmt.Errorf("--nodes: %s is a %s, but %s runs on the control planes (%s)", n, role(n), spec.Kind, strings.Join(cps, ", "))
			}
		}
		if count == len(cps) && !spec.Force {
			what := "etcd loses every member: no reads, no writes, and the data lives only on the members' disks"
			if spec.Kind == KindAPIServer {
				what = "no apiserver is left: the whole Kubernetes API is down"
			}
			return nil, fmt.Errorf("--count %d breaks all %d control planes (%s); add --force if that is the drill you want", count, len(cps), what)
		}
		picked := spec.Nodes
		if len(picked) == 0 {
			first := live.EtcdLeader
			if spec.Kind == KindAPIServer && len(live.LeaseHolders) > 0 {
				first = live.LeaseHolders[0]
			}
			picked = pickFirst(cps, first, count)
		}
		var out []Action
		for _, n := range picked {
			out = append(out, Action{Node: n, Unit: kindUnit[spec.Kind]})
		}
		return out, nil
	case KindNode:
		if len(spec.Nodes) != 1 {
			return nil, fmt.Errorf("khw break node needs exactly one node name (e.g. khw break node cp2); got %d", len(spec.Nodes))
		}
		if spec.Count > 1 {
			return nil, fmt.Errorf("--count %d: khw break node powers off one node; run one drill per node", spec.Count)
		}
		return []Action{{Node: spec.Nodes[0], PowerOff: true}}, nil
	case KindLB:
		lb, ok := c.LB()
		if !ok {
			return nil, fmt.Errorf("cluster %s has no node with role %s: nothing to break", c.Name, config.RoleLoadBalancer)
		}
		if len(spec.Nodes) > 1 || (len(spec.Nodes) == 1 && spec.Nodes[0] != lb.Name) {
			return nil, fmt.Errorf("khw break lb stops HAProxy on %s; leave out the node name (to power %s off, use khw break node %s)", lb.Name, lb.Name, lb.Name)
		}
		return []Action{{Node: lb.Name, Unit: kindUnit[KindLB]}}, nil
	case KindKubelet:
		if len(spec.Nodes) != 1 {
			return nil, fmt.Errorf("khw break kubelet needs exactly one worker name (e.g. khw break kubelet w2); got %d", len(spec.Nodes))
		}
		if role(spec.Nodes[0]) != config.RoleWorker {
			return nil, fmt.Errorf("khw break kubelet %s: %s is a %s; the kubelet drill takes a worker (%s)", spec.Nodes[0], spec.Nodes[0], role(spec.Nodes[0]), strings.Join(nodeNames(c.Workers()), ", "))
		}
		return []Action{{Node: spec.Nodes[0], Unit: kindUnit[KindKubelet]}}, nil
	default:
		return nil, fmt.Errorf("unknown drill %q: use one of %s", spec.Kind, kindList())
	}
}

// pickFirst returns count names of all, starting with first when it is one
// of them, then the rest in order.
func pickFirst(all []string, first string, count int) []string {
	var out []string
	if slices.Contains(all, first) {
		out = append(out, first)
	}
	for _, n := range all {
		if len(out) == count {
			break
		}
		if n != first {
			out = append(out, n)
		}
	}
	return out[:count]
}

func nodeNames(ns []config.Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name
	}
	return out
}

func kindList() string {
	s := make([]string, len(Kinds))
	for i, k := range Kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// ParseKind maps a command-line word to a Kind.
func ParseKind(s string) (Kind, error) {
	for _, k := range Kinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown drill %q: use one of %s", s, kindList())
}
