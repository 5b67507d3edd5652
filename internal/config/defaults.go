package config

import "time"

// DefaultName is the cluster name when none is given.
const DefaultName = "khw"

// DefaultVersions is the component set khw installs unless cluster.yaml says
// otherwise. The artifact catalog (internal/components) documents where each
// version comes from and which Kubernetes release it is tested with.
//
// The set is the one Kubernetes v1.37 is released and tested with, each
// line at the newest patch the Go module proxy served on 2026-12-07 (the
// mirror builds from those modules): etcd 3.7.4 (Kubernetes pins 3.7.0 in
// build/dependencies.yaml and kubeadm's DefaultEtcdVersion of
// k8s.io/kubernetes v1.37.2; 3.7.1 and later carry security fixes,
// GHSA-xg4h-6gfc-h4m8 among them); CoreDNS v1.14.7, the newest patch of the
// v1.14 line that kubeadm's CoreDNSVersion pins (v1.14.6), and pause 3.10.2
// (kubeadm's PauseVersion, cmd/kubeadm/app/constants); CNI plugins v1.9.1
// (build/dependencies.yaml; v1.10.0 is a new minor, not a patch); crictl
// matching the Kubernetes minor (cri-tools README); containerd 2.3 LTS
// (containerd RELEASES.md: Kubernetes 1.37 needs 2.3.0+ or 2.4.0+); runc
// v1.5.3, the newest patch of the 1.5 line that containerd v2.3.7 tests
// (v1.5.2). docs/catalog.md gives each line's source and the date checked.
var DefaultVersions = Versions{
	Kubernetes: "v1.37.2",
	Etcd:       "v3.7.4",
	Containerd: "v2.3.7",
	Runc:       "v1.5.3",
	CNIPlugins: "v1.9.1",
	Crictl:     "v1.37.0",
	CoreDNS:    "v1.14.7",
	Pause:      "3.10.2",
}

// PreviousKubernetes is the newest patch of the minor before
// DefaultVersions.Kubernetes (the newest 1.36 patch of k8s.io/kubernetes that
// the Go module proxy served on 2026-12-07), which khw is tested with: make e2e-day2 builds
// a cluster at it and upgrades that to DefaultVersions.Kubernetes, and lab
// 15-upgrade starts from a cluster at it (khw init --kubernetes-version).
const PreviousKubernetes = "v1.36.5"

// Default returns the cluster of shared/design/cluster-facts.md: lb
// 192.168.122.10, cp1-3 .11-.13, w1-3 .21-.23 with podCIDRs 10.200.{0,1,2}.0/24,
// w3 joining by TLS bootstrap, service CIDR 10.32.0.0/24, DNS 10.32.0.10.
// name, arch and provider are taken as given (Validate checks them).
func Default(name, arch, provider string) *Cluster {
	c := &Cluster{
		APIVersion: APIVersion,
		Kind:       Kind,
		Name:       name,
		Arch:       arch,
		Provider:   provider,
		Nodes: []Node{
			{Name: "lb", Role: RoleLoadBalancer, IP: "192.168.122.10"},
			{Name: "cp1", Role: RoleControlPlane, IP: "192.168.122.11"},
			{Name: "cp2", Role: RoleControlPlane, IP: "192.168.122.12"},
			{Name: "cp3", Role: RoleControlPlane, IP: "192.168.122.13"},
			{Name: "w1", Role: RoleWorker, IP: "192.168.122.21", PodCIDR: "10.200.0.0/24"},
			{Name: "w2", Role: RoleWorker, IP: "192.168.122.22", PodCIDR: "10.200.1.0/24"},
			{Name: "w3", Role: RoleWorker, IP: "192.168.122.23", PodCIDR: "10.200.2.0/24", TLSBootstrap: true},
		},
	}
	c.SetDefaults()
	return c
}

// SetDefaults fills every unset field with its default (a number written as 0
// counts as unset and takes the default too), so a short
// cluster.yaml that names only the nodes is complete. It never adds, removes
// or renames nodes and never overrides a value that is set.
func (c *Cluster) SetDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defInt := func(i *int, v int) {
		if *i == 0 {
			*i = v
		}
	}
	defDur := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.APIVersion, APIVersion)
	def(&c.Kind, Kind)
	def(&c.Name, DefaultName)
	def(&c.Arch, ArchARM64)
	def(&c.Provider, ProviderLibvirt)

	def(&c.Network.CIDR, "192.168.122.0/24")
	def(&c.Network.Gateway, "192.168.122.1")
	def(&c.Network.Domain, "kubernetes.local")

	k := &c.Kubernetes
	def(&k.ClusterName, "kubernetes-the-hard-way")
	def(&k.ServiceCIDR, "10.32.0.0/24")
	def(&k.ClusterCIDR, "10.200.0.0/16")
	def(&k.ClusterDNS, "10.32.0.10")
	def(&k.ClusterDomain, "cluster.local")
	def(&k.NodePortRange, "30000-32767")
	defInt(&k.APIServerPort, 6443)
	def(&k.CNI, CNIBridge)

	lb := &c.LoadBalancer
	def(&lb.HealthCheck, HealthCheckHTTPS)
	defDur(&lb.Interval, time.Second)
	defInt(&lb.Fall, 2)
	defInt(&lb.Rise, 2)

	p := &c.PKI
	def(&p.KeyAlgorithm, "ecdsa")
	if p.KeySize == 0 {
		if p.KeyAlgorithm == "rsa" {
			p.KeySize = 2048
		} else {
			p.KeySize = 256
		}
	}
	defDur(&p.CAValidity, 10*365*24*time.Hour)
	defDur(&p.CertValidity, 365*24*time.Hour)
	defDur(&p.RenewBefore, 30*24*time.Hour)
	def(&p.Subject.Country, "US")
	def(&p.Subject.State, "Oregon")
	def(&p.Subject.Locality, "Portland")
	def(&p.Subject.OrganizationalUnit, "Kubernetes The Hard Way")

	v := &c.Versions
	def(&v.Kubernetes, DefaultVersions.Kubernetes)
	def(&v.Etcd, DefaultVersions.Etcd)
	def(&v.Containerd, DefaultVersions.Containerd)
	def(&v.Runc, DefaultVersions.Runc)
	def(&v.CNIPlugins, DefaultVersions.CNIPlugins)
	def(&v.Crictl, DefaultVersions.Crictl)
	def(&v.CoreDNS, DefaultVersions.CoreDNS)
	def(&v.Pause, DefaultVersions.Pause)

	for i := range c.Nodes {
		n := &c.Nodes[i]
		switch n.Role {
		case RoleLoadBalancer:
			defInt(&n.CPUs, 1)
			defInt(&n.MemoryMiB, 512)
			defInt(&n.DiskGiB, 10)
		case RoleControlPlane:
			defInt(&n.CPUs, 2)
			defInt(&n.MemoryMiB, 2048)
			defInt(&n.DiskGiB, 20)
		default:
			defInt(&n.CPUs, 2)
			defInt(&n.MemoryMiB, 2048)
			defInt(&n.DiskGiB, 20)
		}
	}
}
