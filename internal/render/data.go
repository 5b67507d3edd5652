package render

import (
	"strconv"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
)

// hostLine is one /etc/hosts entry.
type hostLine struct{ IP, Names string }

// nodeData is what node templates see.
type nodeData struct {
	Source  string
	Cluster *config.Cluster
	Node    config.Node
	Facts   NodeFacts
	// Hosts is every node in cluster.yaml order.
	Hosts []hostLine
	// ControlPlanes in cluster.yaml order.
	ControlPlanes []config.Node
	// EtcdInitialCluster is cp1=https://IP:2380,... over all control planes.
	EtcdInitialCluster string
	// EtcdServers is https://IP:2379,... over all control planes.
	EtcdServers string
	// EtcdToken is --initial-cluster-token.
	EtcdToken string
	// ServiceAccountIssuer is the apiserver URL through the load balancer.
	ServiceAccountIssuer string
	KubeletClientUser    string
	// LBInterval is loadBalancer.interval in HAProxy's time syntax (2s, 500ms).
	LBInterval string
	// LBFastInterval is HAProxy's fastinter: a quarter of the interval, at
	// least 100ms; checks run this often while a backend is changing state.
	LBFastInterval string
	PauseImage     string
	// PodRoutes are the other workers' podCIDRs, each via that worker's IP
	// (workers only): the routes of the pod network without an overlay.
	PodRoutes []PodRoute
	// LeaderElection is the leader-election timing of kube-controller-manager
	// and kube-scheduler; nil means the upstream defaults (no flags).
	LeaderElection *LeaderElection
	// SigningDuration is kube-controller-manager's --cluster-signing-duration,
	// pki.certValidity in Go duration syntax ("8760h"): the kubelet certs it
	// signs for TLS-bootstrap workers live as long as the certs khw issues.
	SigningDuration string
	// EtcdCheckTimeout is kube-apiserver's --etcd-healthcheck-timeout and
	// --etcd-readycheck-timeout; "" means the upstream default (2s, no flag).
	EtcdCheckTimeout string
}

// LeaderElection is the leader-election timing of kube-controller-manager and
// kube-scheduler, in Go duration syntax (--leader-elect-lease-duration,
// --leader-elect-renew-deadline, --leader-elect-retry-period; the scheduler's
// leaderElection.leaseDuration, renewDeadline, retryPeriod). Upstream's
// defaults are 15s, 10s and 2s
// (https://kubernetes.io/docs/reference/command-line-tools-reference/kube-controller-manager/).
type LeaderElection struct{ LeaseDuration, RenewDeadline, RetryPeriod string }

// LeaderElectionFor returns the leader-election timing c's control planes
// get: &EmulatedLeaderElection when cluster.yaml says libvirt.domainType:
// qemu, else nil (upstream defaults). It is read from cluster.yaml, not
// measured, so every run renders the same files.
func LeaderElectionFor(c *config.Cluster) *LeaderElection {
	if c.Provider == config.ProviderLibvirt && c.Libvirt != nil && c.Libvirt.DomainType == config.DomainTypeQEMU {
		le := EmulatedLeaderElection
		return &le
	}
	return nil
}

// EtcdCheckTimeoutFor returns EmulatedEtcdCheckTimeout when cluster.yaml
// says libvirt.domainType: qemu, else "" (the upstream default), like
// LeaderElectionFor.
func EtcdCheckTimeoutFor(c *config.Cluster) string {
	if LeaderElectionFor(c) != nil {
		return EmulatedEtcdCheckTimeout
	}
	return ""
}

// PodRoute is one route of the pod network: Dest (a worker's podCIDR) via
// Via (that worker's IP), on every other worker.
type PodRoute struct{ Worker, Dest, Via string }

// PodRoutes returns the pod-network routes worker node needs: every other
// worker's podCIDR via that worker's IP, in cluster.yaml order. Nil for a
// node that is not a worker.
func PodRoutes(c *config.Cluster, node string) []PodRoute {
	n, ok := c.Node(node)
	if !ok || n.Role != config.RoleWorker {
		return nil
	}
	var out []PodRoute
	for _, w := range c.Workers() {
		if w.Name != n.Name {
			out = append(out, PodRoute{Worker: w.Name, Dest: w.PodCIDR, Via: w.IP})
		}
	}
	return out
}

// manifestData is what manifest templates see.
type manifestData struct {
	Source            string
	Cluster           *config.Cluster
	KubeletClientUser string
	// CoreDNSReplicas is 2, or 1 when there is a single worker.
	CoreDNSReplicas int
	CoreDNSImage    string
}

// haproxyDuration writes d in HAProxy's time format: whole seconds as "2s",
// anything else in milliseconds ("1500ms").
func haproxyDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(int64(d.Round(time.Millisecond)/time.Millisecond), 10) + "ms"
}

// goHours writes d as whole hours ("8760h") when it is, else as Go
// prints it ("1h30m0s"); both parse with time.ParseDuration.
func goHours(d time.Duration) string {
	if d%time.Hour == 0 {
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	}
	return d.String()
}

func newNodeData(c *config.Cluster, n config.Node, f NodeFacts) *nodeData {
	d := &nodeData{
		Cluster:              c,
		Node:                 n,
		Facts:                f,
		ControlPlanes:        c.ControlPlanes(),
		EtcdToken:            "etcd-" + c.Name,
		ServiceAccountIssuer: c.APIServerURL(),
		KubeletClientUser:    KubeletClientUser,
		LBInterval:           haproxyDuration(c.LoadBalancer.Interval),
		LBFastInterval:       haproxyDuration(max(100*time.Millisecond, c.LoadBalancer.Interval/4)),
		PauseImage:           PauseImage(c),
		PodRoutes:            PodRoutes(c, n.Name),
		LeaderElection:       LeaderElectionFor(c),
		EtcdCheckTimeout:     EtcdCheckTimeoutFor(c),
		SigningDuration:      goHours(c.PKI.CertValidity),
	}
	for _, h := range c.Nodes {
		names := h.Name
		if fq := c.FQDN(h); fq != h.Name {
			names = fq + " " + h.Name
		}
		d.Hosts = append(d.Hosts, hostLine{IP: h.IP, Names: names})
	}
	var servers []string
	for _, cp := range d.ControlPlanes {
		servers = append(servers, "https://"+cp.IP+":2379")
	}
	d.EtcdInitialCluster = EtcdInitialCluster(d.ControlPlanes)
	d.EtcdServers = strings.Join(servers, ",")
	return d
}

// EtcdInitialCluster is etcd's --initial-cluster for the members on
// control planes cps: name=https://IP:2380, comma-separated, in order.
// etcd.service, the etcd lab's grading and khw etcd restore use it, so
// they cannot disagree.
func EtcdInitialCluster(cps []config.Node) string {
	parts := make([]string, 0, len(cps))
	for _, n := range cps {
		parts = append(parts, n.Name+"=https://"+n.IP+":2380")
	}
	return strings.Join(parts, ",")
}
