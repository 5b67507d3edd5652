// Package config is cluster.yaml: the desired state of one khw cluster.
//
// The schema is strict (unknown fields are errors), every value is validated
// with an error that names the field, the bad value and the fix, and the
// defaults reproduce the HA cluster of "Kubernetes the Hard Way" described in
// shared/design/cluster-facts.md: lb, cp1-3, w1-3 on 192.168.122.0/24, service
// CIDR 10.32.0.0/24, pod CIDR 10.200.0.0/16, w3 joining by TLS bootstrap.
package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// APIVersion and Kind identify a cluster.yaml document.
const (
	APIVersion = "khw.dev/v1alpha1"
	Kind       = "Cluster"
)

// Node roles.
const (
	RoleLoadBalancer = "loadbalancer"
	RoleControlPlane = "controlplane"
	RoleWorker       = "worker"
)

// Architectures and providers khw knows.
const (
	ArchARM64 = "arm64"
	ArchAMD64 = "amd64"

	ProviderLibvirt = "libvirt"
	ProviderNspawn  = "nspawn"
)

// CNI plugin choices for the pod network (kubernetes.cni).
const (
	// CNIBridge is the standard bridge + host-local + loopback plugins from
	// github.com/containernetworking/plugins.
	CNIBridge = "bridge"
	// CNIMyBridge is the seed's teaching plugin: a bash `mybridge` with
	// file-based IPAM plus `myloopback`, needing jq and iproute2.
	CNIMyBridge = "mybridge"
)

// Load-balancer health-check types (loadBalancer.healthCheck).
const (
	// HealthCheckHTTPS asks each apiserver for GET /readyz over TLS: a hung
	// apiserver or one that lost etcd fails it, while it still accepts TCP.
	HealthCheckHTTPS = "https"
	// HealthCheckTCP only checks that :6443 accepts a connection.
	HealthCheckTCP = "tcp"
)

// Cluster is one cluster.yaml document.
type Cluster struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	// Name is the cluster's name: a DNS label of at most 20 characters. It names
	// the state directory, the network namespace (khw-<name>) and VMs
	// (khw-<name>-<node>).
	Name string `yaml:"name"`
	// Arch is the CPU architecture of the nodes: arm64 or amd64.
	Arch string `yaml:"arch"`
	// Provider makes the machines: libvirt (VMs) or nspawn (system containers).
	Provider     string       `yaml:"provider"`
	Network      Network      `yaml:"network"`
	Kubernetes   Kubernetes   `yaml:"kubernetes"`
	LoadBalancer LoadBalancer `yaml:"loadBalancer"`
	PKI          PKI          `yaml:"pki"`
	Versions     Versions     `yaml:"versions"`
	Nodes        []Node       `yaml:"nodes"`
	// Libvirt tunes the libvirt provider; every field is optional and the
	// section is ignored by provider nspawn.
	Libvirt *Libvirt `yaml:"libvirt,omitempty"`
}

// Libvirt domain types for libvirt.domainType.
const (
	// DomainTypeKVM: hardware virtualisation through /dev/kvm.
	DomainTypeKVM = "kvm"
	// DomainTypeQEMU: QEMU's TCG emulator (no KVM needed, ~15x slower).
	DomainTypeQEMU = "qemu"
)

// Libvirt is the libvirt provider's section of cluster.yaml.
type Libvirt struct {
	// URI is the libvirt connection URI; default qemu:///system (the local
	// libvirtd over /var/run/libvirt/libvirt-sock).
	URI string `yaml:"uri,omitempty"`
	// Image is an absolute path to a qcow2 or raw base disk image for every
	// node. Default: the Ubuntu 24.04 cloud image for arch from the artifact
	// catalog (downloaded, sha256-verified, cached, mirror-aware).
	Image string `yaml:"image,omitempty"`
	// Kernel, Initrd and Cmdline boot the image's kernel directly (libvirt
	// direct kernel boot) instead of its boot loader: for images without one,
	// such as a debootstrapped file system. Kernel needs Image; Initrd and
	// Cmdline need Kernel.
	Kernel  string `yaml:"kernel,omitempty"`
	Initrd  string `yaml:"initrd,omitempty"`
	Cmdline string `yaml:"cmdline,omitempty"`
	// Network is the name of an existing libvirt network to attach the
	// nodes to. Default: the libvirt network whose subnet is network.cidr
	// (usually "default", 192.168.122.0/24), else khw-<name>, made by khw.
	Network string `yaml:"network,omitempty"`
	// DomainType is kvm or qemu (TCG). Default: kvm when a probe VM boots
	// under KVM, else qemu with a warning.
	DomainType string `yaml:"domainType,omitempty"`
}

// Network is the node network (the libvirt network or the nspawn bridge).
type Network struct {
	// CIDR is the IPv4 node subnet, e.g. 192.168.122.0/24.
	CIDR string `yaml:"cidr"`
	// Gateway is the host's address on that subnet (the jumpbox), e.g.
	// 192.168.122.1.
	Gateway string `yaml:"gateway"`
	// Domain is the DNS suffix written into every /etc/hosts next to the short
	// name, e.g. kubernetes.local → cp1.kubernetes.local.
	Domain string `yaml:"domain"`
}

// Kubernetes holds the cluster-wide Kubernetes settings.
type Kubernetes struct {
	// ClusterName is the cluster entry name inside every kubeconfig.
	ClusterName string `yaml:"clusterName"`
	// ServiceCIDR is --service-cluster-ip-range; its first address is the
	// `kubernetes` Service IP and must be usable.
	ServiceCIDR string `yaml:"serviceCIDR"`
	// ClusterCIDR is the pod address space (--cluster-cidr of the
	// controller-manager and kube-proxy); every worker's podCIDR lies inside.
	ClusterCIDR string `yaml:"clusterCIDR"`
	// ClusterDNS is the kube-dns Service IP (kubelet clusterDNS), inside
	// ServiceCIDR.
	ClusterDNS string `yaml:"clusterDNS"`
	// ClusterDomain is the DNS domain of Services, e.g. cluster.local.
	ClusterDomain string `yaml:"clusterDomain"`
	// NodePortRange is --service-node-port-range, "FIRST-LAST".
	NodePortRange string `yaml:"nodePortRange"`
	// APIServerPort is the port of every apiserver and of the load balancer.
	APIServerPort int `yaml:"apiServerPort"`
	// CNI picks the pod network plugin: bridge or mybridge.
	CNI string `yaml:"cni"`
}

// LoadBalancer tunes HAProxy's health checks of the apiservers.
type LoadBalancer struct {
	// HealthCheck is https (GET /readyz) or tcp (connect only).
	HealthCheck string `yaml:"healthCheck"`
	// Interval between two checks of one backend (HAProxy `inter`).
	Interval time.Duration `yaml:"interval"`
	// Fall is how many failed checks in a row mark a backend down.
	Fall int `yaml:"fall"`
	// Rise is how many passed checks in a row mark it up again.
	Rise int `yaml:"rise"`
}

// PKI sets how certificates are made.
type PKI struct {
	// KeyAlgorithm is ecdsa or rsa.
	KeyAlgorithm string `yaml:"keyAlgorithm"`
	// KeySize is 256/384/521 for ecdsa (curve size) or 2048/3072/4096 for rsa.
	KeySize int `yaml:"keySize"`
	// CAValidity is how long the CA is valid, e.g. 87600h (10 years).
	CAValidity time.Duration `yaml:"caValidity"`
	// CertValidity is how long each component cert is valid, e.g. 8760h.
	CertValidity time.Duration `yaml:"certValidity"`
	// RenewBefore: a cert that expires within this window is reissued.
	RenewBefore time.Duration `yaml:"renewBefore"`
	// Subject holds the informational subject fields (C, ST, L, OU) written
	// into every CSR; Kubernetes ignores them, only CN and O carry identity.
	Subject Subject `yaml:"subject"`
}

// Subject holds the X.509 name fields that carry no Kubernetes identity.
// Each is plain text of at most 64 characters: no control characters,
// none of / + = , ; < > " \ # (they have a meaning in a distinguished
// name), no space at either end; Country is two capital letters (ISO 3166
// alpha-2).
type Subject struct {
	Country            string `yaml:"country"`
	State              string `yaml:"state"`
	Locality           string `yaml:"locality"`
	OrganizationalUnit string `yaml:"organizationalUnit"`
}

// Versions are the component versions to install. Each is a semantic version
// with a leading "v" (v1.37.2); the artifact catalog maps them to downloads.
type Versions struct {
	Kubernetes string `yaml:"kubernetes"`
	Etcd       string `yaml:"etcd"`
	Containerd string `yaml:"containerd"`
	Runc       string `yaml:"runc"`
	CNIPlugins string `yaml:"cniPlugins"`
	Crictl     string `yaml:"crictl"`
	CoreDNS    string `yaml:"coredns"`
	Pause      string `yaml:"pause"`
}

// Node is one machine of the cluster.
type Node struct {
	// Name is the host name, a DNS label (lb, cp1, w3 …).
	Name string `yaml:"name"`
	// Role is loadbalancer, controlplane or worker.
	Role string `yaml:"role"`
	// IP is the node's static IPv4 address inside network.cidr.
	IP string `yaml:"ip"`
	// PodCIDR is the worker's pod subnet inside kubernetes.clusterCIDR
	// (workers only, required there).
	PodCIDR string `yaml:"podCIDR,omitempty"`
	// TLSBootstrap makes the worker join with a bootstrap token: its kubelet
	// asks the cluster for its client cert through a CSR instead of receiving
	// one from khw (workers only).
	TLSBootstrap bool `yaml:"tlsBootstrap,omitempty"`
	// KubeletCert points at a pre-issued kubelet cert and key (made by hand)
	// to install instead of one khw issues. Not allowed with TLSBootstrap.
	KubeletCert *CertRef `yaml:"kubeletCert,omitempty"`
	// CPUs, MemoryMiB and DiskGiB size the machine (libvirt; nspawn nodes share
	// the host).
	CPUs      int `yaml:"cpus"`
	MemoryMiB int `yaml:"memoryMiB"`
	DiskGiB   int `yaml:"diskGiB"`
}

// CertRef names a PEM certificate and its private key on the jumpbox.
type CertRef struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Addr returns the node IP. It is the zero Addr when IP does not parse, which
// Validate reports; callers use it only on a validated Cluster.
func (n Node) Addr() netip.Addr {
	a, _ := netip.ParseAddr(n.IP)
	return a
}

// FQDN returns <name>.<network.domain>, e.g. cp1.kubernetes.local.
func (c *Cluster) FQDN(n Node) string {
	if c.Network.Domain == "" {
		return n.Name
	}
	return n.Name + "." + c.Network.Domain
}

// NodesWithRole returns the nodes of one role in file order.
func (c *Cluster) NodesWithRole(role string) []Node {
	var out []Node
	for _, n := range c.Nodes {
		if n.Role == role {
			out = append(out, n)
		}
	}
	return out
}

// ControlPlanes returns the control-plane nodes in file order.
func (c *Cluster) ControlPlanes() []Node { return c.NodesWithRole(RoleControlPlane) }

// Workers returns the worker nodes in file order.
func (c *Cluster) Workers() []Node { return c.NodesWithRole(RoleWorker) }

// LB returns the load-balancer node; ok is false when there is none.
func (c *Cluster) LB() (Node, bool) {
	lbs := c.NodesWithRole(RoleLoadBalancer)
	if len(lbs) == 0 {
		return Node{}, false
	}
	return lbs[0], true
}

// Node returns the node called name.
func (c *Cluster) Node(name string) (Node, bool) {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// ServicePrefix returns kubernetes.serviceCIDR parsed (zero if invalid).
func (c *Cluster) ServicePrefix() netip.Prefix {
	p, _ := netip.ParsePrefix(c.Kubernetes.ServiceCIDR)
	return p
}

// APIServerServiceIP is the first address of the service CIDR: the ClusterIP
// of the `kubernetes` Service in `default`, which must be a SAN of the
// apiserver cert (kube-apiserver allocates it; see
// pkg/controlplane/services.go ServiceIPRange in k8s.io/kubernetes).
func (c *Cluster) APIServerServiceIP() netip.Addr {
	p := c.ServicePrefix()
	if !p.IsValid() {
		return netip.Addr{}
	}
	return p.Masked().Addr().Next()
}

// APIServerURL is the apiserver URL through the load balancer, by name
// (https://lb:6443), as workers and the jumpbox use it.
func (c *Cluster) APIServerURL() string {
	lb, _ := c.LB()
	return "https://" + lb.Name + ":" + strconv.Itoa(c.Kubernetes.APIServerPort)
}

// LocalAPIServerURL is https://127.0.0.1:<port>, as control-plane components
// on a cp use it.
func (c *Cluster) LocalAPIServerURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(c.Kubernetes.APIServerPort)
}

// PickNodes returns names without duplicates, in the order given. Errors:
// a name that is no node of c; the message names the unknown ones and
// lists c's nodes.
func (c *Cluster) PickNodes(names []string) ([]string, error) {
	var out, unknown []string
	for _, n := range names {
		if _, ok := c.Node(n); !ok {
			unknown = append(unknown, fmt.Sprintf("%q", n))
			continue
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(unknown) == 0 {
		return out, nil
	}
	valid := make([]string, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		valid = append(valid, n.Name)
	}
	noun := "node"
	if len(unknown) > 1 {
		noun = "nodes"
	}
	return nil, fmt.Errorf("cluster %s has no %s %s; its nodes are: %s", c.Name, noun, strings.Join(unknown, ", "), strings.Join(valid, ", "))
}
