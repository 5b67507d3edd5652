package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDefaultIsValidAndMatchesClusterFacts(t *testing.T) {
	c := Default("khw", ArchARM64, ProviderNspawn)
	warns, err := c.Validate()
	if err != nil {
		t.Fatalf("default cluster invalid: %v", err)
	}
	if len(warns) != 0 {
		t.Fatalf("default cluster has warnings: %v", warns)
	}
	want := map[string]string{"lb": "192.168.122.10", "cp1": "192.168.122.11", "cp2": "192.168.122.12", "cp3": "192.168.122.13",
		"w1": "192.168.122.21", "w2": "192.168.122.22", "w3": "192.168.122.23"}
	if len(c.Nodes) != len(want) {
		t.Fatalf("got %d nodes, want %d", len(c.Nodes), len(want))
	}
	for name, ip := range want {
		n, ok := c.Node(name)
		if !ok || n.IP != ip {
			t.Errorf("node %s: got %+v, want ip %s", name, n, ip)
		}
	}
	if got := c.APIServerServiceIP().String(); got != "10.32.0.1" {
		t.Errorf("kubernetes Service IP = %s, want 10.32.0.1", got)
	}
	if c.Kubernetes.ClusterDNS != "10.32.0.10" || c.Kubernetes.ClusterDomain != "cluster.local" {
		t.Errorf("DNS settings: %+v", c.Kubernetes)
	}
	w3, _ := c.Node("w3")
	if !w3.TLSBootstrap || w3.PodCIDR != "10.200.2.0/24" {
		t.Errorf("w3 = %+v, want TLS bootstrap with 10.200.2.0/24", w3)
	}
	if c.APIServerURL() != "https://lb:6443" || c.LocalAPIServerURL() != "https://127.0.0.1:6443" {
		t.Errorf("URLs: %s %s", c.APIServerURL(), c.LocalAPIServerURL())
	}
	if got := c.FQDN(w3); got != "w3.kubernetes.local" {
		t.Errorf("FQDN = %s", got)
	}
	if len(c.ControlPlanes()) != 3 || len(c.Workers()) != 3 {
		t.Errorf("roles: %d cps, %d workers", len(c.ControlPlanes()), len(c.Workers()))
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	c := Default("lab1", ArchAMD64, ProviderLibvirt)
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, _, err := Parse(data, "roundtrip.yaml")
	if err != nil {
		t.Fatalf("parse of marshaled default: %v\n%s", err, data)
	}
	again, err := back.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(data) {
		t.Fatalf("round trip changed the document:\n%s\n---\n%s", data, again)
	}
	if back.PKI.CertValidity != 365*24*time.Hour || back.LoadBalancer.Interval != time.Second {
		t.Errorf("durations did not survive: %v %v", back.PKI.CertValidity, back.LoadBalancer.Interval)
	}
	if !strings.Contains(string(data), "certValidity: 8760h\n") {
		t.Errorf("durations should be written as 8760h:\n%s", data)
	}
}

func TestMinimalDocumentGetsDefaults(t *testing.T) {
	doc := `
apiVersion: khw.dev/v1alpha1
kind: Cluster
name: small
provider: nspawn
nodes:
  - {name: lb, role: loadbalancer, ip: 192.168.122.10}
  - {name: cp1, role: controlplane, ip: 192.168.122.11}
  - {name: w1, role: worker, ip: 192.168.122.21, podCIDR: 10.200.0.0/24}
`
	c, warns, err := Parse([]byte(doc), "small.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 0 {
		t.Errorf("unexpected warnings %v", warns)
	}
	if c.Arch != ArchARM64 || c.Kubernetes.ServiceCIDR != "10.32.0.0/24" || c.Versions.Kubernetes != DefaultVersions.Kubernetes {
		t.Errorf("defaults not applied: %+v", c)
	}
	if n, _ := c.Node("cp1"); n.MemoryMiB != 2048 {
		t.Errorf("node resources not defaulted: %+v", n)
	}
}

// mutate returns the default cluster changed by f.
func mutate(f func(c *Cluster)) *Cluster {
	c := Default("khw", ArchARM64, ProviderNspawn)
	f(c)
	return c
}

func nodeIdx(c *Cluster, name string) int {
	for i, n := range c.Nodes {
		if n.Name == name {
			return i
		}
	}
	panic("no node " + name)
}

func TestValidationErrors(t *testing.T) {
	cases := []struct {
		name  string
		c     *Cluster
		field string // the error must name this field
		words string // and contain these words
	}{
		{"duplicate node name", mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "w2")].Name = "w1" }), "nodes[5] (w1).name", "duplicates nodes[4]"},
		{"duplicate IP", mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "cp2")].IP = "192.168.122.11" }), "nodes[2] (cp2).ip", "duplicates nodes[1] (cp1)"},
		{"IP outside subnet", mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "w1")].IP = "192.168.1.21" }), "nodes[4] (w1).ip", "outside network.cidr"},
		{"IP is broadcast", mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "w1")].IP = "192.168.122.255" }), "nodes[4] (w1).ip", "broadcast"},
		{"IP is gateway", mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "w1")].IP = "192.168.122.1" }), "nodes[4] (w1).ip", "gateway"},
		{"bad IP", mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "w1")].IP = "192.168.122" }), "nodes[4] (w1).ip", "not an IPv4 address"},
		{"service overlaps pods", mutate(func(c *Cluster) { c.Kubernetes.ServiceCIDR = "10.200.0.0/24" }), "kubernetes.clusterCIDR", "overlaps kubernetes.serviceCIDR"},
		{"node net overlaps pods", mutate(func(c *Cluster) { c.Kubernetes.ClusterCIDR = "192.168.0.0/16" }), "kubernetes.clusterCIDR", "overlaps network.cidr"},
		{"node net overlaps services", mutate(func(c *Cluster) {
			c.Kubernetes.ServiceCIDR = "192.168.122.0/24"
			c.Kubernetes.ClusterDNS = "192.168.122.10"
		}), "kubernetes.serviceCIDR", "overlaps network.cidr"},
		{"worker without podCIDR", mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "w2")].PodCIDR = "" }), "nodes[5] (w2).podCIDR", "is missing"},
		{"two workers same podCIDR", mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "w2")].PodCIDR = "10.200.0.0/24" }), "nodes[5] (w2).podCIDR", "overlaps the podCIDR 10.200.0.0/24 of nodes[4] (w1)"},
		{"podCIDR outside clusterCIDR", mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "w2")].PodCIDR = "10.201.0.0/24" }), "nodes[5] (w2).podCIDR", "not inside kubernetes.clusterCIDR"},
		{"podCIDR on a cp", mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "cp1")].PodCIDR = "10.200.9.0/24" }), "nodes[1] (cp1).podCIDR", "runs no pods"},
		{"service CIDR too small, first IP unusable", mutate(func(c *Cluster) { c.Kubernetes.ServiceCIDR = "10.32.0.0/31"; c.Kubernetes.ClusterDNS = "10.32.0.1" }), "kubernetes.serviceCIDR", "first IP"},
		{"service CIDR with host bits", mutate(func(c *Cluster) { c.Kubernetes.ServiceCIDR = "10.32.0.5/24" }), "kubernetes.serviceCIDR", "host bits set"},
		{"service CIDR loopback", mutate(func(c *Cluster) { c.Kubernetes.ServiceCIDR = "127.0.0.0/24"; c.Kubernetes.ClusterDNS = "127.0.0.10" }), "kubernetes.serviceCIDR", "not usable"},
		{"clusterDNS outside services", mutate(func(c *Cluster) { c.Kubernetes.ClusterDNS = "10.33.0.10" }), "kubernetes.clusterDNS", "not a usable address"},
		{"clusterDNS is kubernetes Service IP", mutate(func(c *Cluster) { c.Kubernetes.ClusterDNS = "10.32.0.1" }), "kubernetes.clusterDNS", "belongs to the kubernetes Service"},
		{"unknown arch", mutate(func(c *Cluster) { c.Arch = "x86_64" }), "arch", "use one of: arm64, amd64"},
		{"unknown provider", mutate(func(c *Cluster) { c.Provider = "virtualbox" }), "provider", "use one of: libvirt, nspawn"},
		{"malformed kubernetes version", mutate(func(c *Cluster) { c.Versions.Kubernetes = "1.37" }), "versions.kubernetes", "vMAJOR.MINOR.PATCH"},
		{"malformed etcd version", mutate(func(c *Cluster) { c.Versions.Etcd = "v3.7" }), "versions.etcd", "not a version"},
		{"kubernetes v2", mutate(func(c *Cluster) { c.Versions.Kubernetes = "v2.0.0" }), "versions.kubernetes", "not a Kubernetes 1.x"},
		{"containerd 1.x", mutate(func(c *Cluster) { c.Versions.Containerd = "v1.7.20" }), "versions.containerd", "containerd 2.x"},
		{"pause with v", mutate(func(c *Cluster) { c.Versions.Pause = "v3.10" }), "versions.pause", "without a v"},
		{"no lb", mutate(func(c *Cluster) { c.Nodes = c.Nodes[1:] }), "nodes", "exactly one node with role loadbalancer"},
		{"two lbs", mutate(func(c *Cluster) {
			c.Nodes = append(c.Nodes, Node{Name: "lb2", Role: RoleLoadBalancer, IP: "192.168.122.9", CPUs: 1, MemoryMiB: 512, DiskGiB: 10})
		}), "nodes", "2 loadbalancer nodes"},
		{"no control plane", mutate(func(c *Cluster) { c.Nodes = append(c.Nodes[:1], c.Nodes[4:]...) }), "nodes", "at least one control plane"},
		{"no worker", mutate(func(c *Cluster) { c.Nodes = c.Nodes[:4] }), "nodes", "at least one worker"},
		{"bootstrap worker with pre-issued cert", mutate(func(c *Cluster) {
			c.Nodes[nodeIdx(c, "w3")].KubeletCert = &CertRef{Cert: "/tmp/w3.pem", Key: "/tmp/w3-key.pem"}
		}), "nodes[6] (w3).kubeletCert", "cannot also have a pre-issued cert"},
		{"tlsBootstrap on cp", mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "cp1")].TLSBootstrap = true }), "nodes[1] (cp1).tlsBootstrap", "only a worker"},
		{"unknown role", mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "w1")].Role = "master" }), "nodes[4] (w1).role", "use one of: loadbalancer, controlplane, worker"},
		{"bad node name", mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "w1")].Name = "W_1" }), "nodes[4] (W_1).name", "not a valid host name"},
		{"bad cluster name", mutate(func(c *Cluster) { c.Name = "My Cluster" }), "name", "not a valid cluster name"},
		{"bad key size", mutate(func(c *Cluster) { c.PKI.KeySize = 1024 }), "pki.keySize", "not an ECDSA curve size"},
		{"rsa small", mutate(func(c *Cluster) { c.PKI.KeyAlgorithm = "rsa"; c.PKI.KeySize = 1024 }), "pki.keySize", "RSA"},
		{"bad key algorithm", mutate(func(c *Cluster) { c.PKI.KeyAlgorithm = "ed25519" }), "pki.keyAlgorithm", "use one of: ecdsa, rsa"},
		{"cert outlives CA", mutate(func(c *Cluster) { c.PKI.CertValidity = 2 * c.PKI.CAValidity }), "pki.certValidity", "cannot outlive its CA"},
		{"renewBefore too long", mutate(func(c *Cluster) { c.PKI.RenewBefore = c.PKI.CertValidity }), "pki.renewBefore", "reissue every cert"},
		{"node port range bad", mutate(func(c *Cluster) { c.Kubernetes.NodePortRange = "32767-30000" }), "kubernetes.nodePortRange", "FIRST <= LAST"},
		{"node port range has apiserver port", mutate(func(c *Cluster) { c.Kubernetes.NodePortRange = "6000-7000" }), "kubernetes.nodePortRange", "apiserver port"},
		{"unknown cni", mutate(func(c *Cluster) { c.Kubernetes.CNI = "calico" }), "kubernetes.cni", "bridge, mybridge"},
		{"unknown health check", mutate(func(c *Cluster) { c.LoadBalancer.HealthCheck = "http" }), "loadBalancer.healthCheck", "https, tcp"},
		{"gateway outside", mutate(func(c *Cluster) { c.Network.Gateway = "10.0.0.1" }), "network.gateway", "not a host address"},
		{"network too small", mutate(func(c *Cluster) { c.Network.CIDR = "192.168.122.0/30" }), "network.cidr", "too small"},
		{"ipv6 network", mutate(func(c *Cluster) { c.Network.CIDR = "fd00::/64" }), "network.cidr", "not IPv4"},
		{"wrong apiVersion", mutate(func(c *Cluster) { c.APIVersion = "v1" }), "apiVersion", "khw.dev/v1alpha1"},
		{"tiny memory", mutate(func(c *Cluster) { c.Nodes[0].MemoryMiB = 64 }), "nodes[0] (lb).memoryMiB", "out of range"},
		{"huge memory", mutate(func(c *Cluster) { c.Nodes[0].MemoryMiB = 1 << 40 }), "nodes[0] (lb).memoryMiB", "out of range"},
		{"node named like a cert", mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "w1")].Name = "admin" }), "nodes[4] (admin).name", "collides"},
		{"node named like a bootstrap kubeconfig", mutate(func(c *Cluster) { c.Nodes[nodeIdx(c, "w1")].Name = "w3-bootstrap" }), "nodes[4] (w3-bootstrap).name", "collides"},
		{"apiserver on the etcd port", mutate(func(c *Cluster) { c.Kubernetes.APIServerPort = 2379 }), "kubernetes.apiServerPort", "etcd client port"},
		{"kubernetes too old", mutate(func(c *Cluster) { c.Versions.Kubernetes = "v1.20.0" }), "versions.kubernetes", "older than v1.31"},
		{"country not two letters", mutate(func(c *Cluster) { c.PKI.Subject.Country = "USA" }), "pki.subject.country", "two-letter"},
		{"newline in OU", mutate(func(c *Cluster) { c.PKI.Subject.OrganizationalUnit = "x\nO=system:masters" }), "pki.subject.organizationalUnit", "control or format characters"},
		{"kubeletCert file missing", mutate(func(c *Cluster) {
			c.Nodes[nodeIdx(c, "w1")].KubeletCert = &CertRef{Cert: "/nonexistent/w1.pem", Key: "/nonexistent/w1-key.pem"}
		}), "nodes[4] (w1).kubeletCert.cert", "not a readable file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.c.Validate()
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want a *ValidationError, got %v", err)
			}
			found := false
			for _, fe := range ve.Errors {
				if fe.Field == tc.field && strings.Contains(fe.Error(), tc.words) {
					found = true
					if fe.Fix == "" {
						t.Errorf("error for %s has no fix: %v", fe.Field, fe)
					}
				}
			}
			if !found {
				t.Fatalf("no error on field %q containing %q; got:\n%v", tc.field, tc.words, err)
			}
		})
	}
}

func TestEvenControlPlanesWarns(t *testing.T) {
	c := mutate(func(c *Cluster) { c.Nodes = append(c.Nodes[:3], c.Nodes[4:]...) }) // drop cp3
	warns, err := c.Validate()
	if err != nil {
		t.Fatalf("2 control planes must be valid (only warned): %v", err)
	}
	if len(warns) != 1 || warns[0].Field != "nodes" || !strings.Contains(warns[0].Message, "odd number") ||
		!strings.Contains(warns[0].Message, "quorum is 2 of 2, so the cluster survives 0 failure(s)") {
		t.Fatalf("want one warning about an odd number of control planes, got %v", warns)
	}
}

func TestValidationCollectsEveryError(t *testing.T) {
	c := mutate(func(c *Cluster) {
		c.Arch = "sparc"
		c.Provider = "docker"
		c.Nodes[nodeIdx(c, "w2")].PodCIDR = ""
	})
	_, err := c.Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) != 3 {
		t.Fatalf("want 3 errors, got %v", err)
	}
	if !strings.Contains(err.Error(), "3 problems") {
		t.Errorf("summary missing: %v", err)
	}
}

func TestParseErrorsNameTheLine(t *testing.T) {
	base, err := Default("khw", ArchARM64, ProviderNspawn).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, doc, words string
	}{
		{"empty", "", "is empty"},
		{"only a comment", "# nothing here\n", "is empty"},
		{"a list", "- a\n- b\n", "must be a mapping"},
		{"unknown top-level field", string(base) + "colour: blue\n", `unknown field "colour" in the top level`},
		{"unknown node field", strings.Replace(string(base), "{name: w1,", "{name: w1, gpu: 1,", 1), `unknown field "gpu" in a nodes entry`},
		{"unknown nested field", strings.Replace(string(base), "  fall: 2\n", "  fall: 2\n  falls: 4\n", 1), `unknown field "falls" in loadBalancer`},
		{"wrong type", strings.Replace(string(base), "  fall: 2\n", "  fall: three\n", 1), `"three" is a YAML str but this field needs an integer`},
		{"bad duration", strings.Replace(string(base), "interval: 1s", "interval: soon", 1), "line"},
		{"syntax", "name: [unclosed\n", "check the YAML syntax"},
		{"two documents", string(base) + "---\nname: other\n", "more than one YAML document"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tc.doc), "c.yaml")
			if err == nil {
				t.Fatalf("want an error")
			}
			if !strings.Contains(err.Error(), tc.words) || !strings.Contains(err.Error(), "c.yaml") {
				t.Fatalf("error %q should contain %q and the file name", err, tc.words)
			}
		})
	}
}

func TestSaveWritesNothingWhenInvalid(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, FileName)
	c := mutate(func(c *Cluster) { c.Arch = "mips" })
	if _, err := c.Save(p); err == nil {
		t.Fatal("want an error")
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("invalid cluster was written: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("leftover files: %v", entries)
	}
	good := Default("khw", ArchARM64, ProviderNspawn)
	if _, err := good.Save(p); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("saved file mode: %v %v", st.Mode(), err)
	}
	back, _, err := Load(p)
	if err != nil || back.Name != "khw" {
		t.Fatalf("load back: %v", err)
	}
}

func TestLoadMissingFileSaysRunInit(t *testing.T) {
	_, _, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.Contains(err.Error(), "khw init") {
		t.Fatalf("got %v", err)
	}
}

func TestAddedControlPlaneStaysValid(t *testing.T) {
	c := mutate(func(c *Cluster) {
		c.Nodes = append(c.Nodes, Node{Name: "cp4", Role: RoleControlPlane, IP: "192.168.122.14", CPUs: 2, MemoryMiB: 2048, DiskGiB: 20},
			Node{Name: "cp5", Role: RoleControlPlane, IP: "192.168.122.15", CPUs: 2, MemoryMiB: 2048, DiskGiB: 20})
	})
	if warns, err := c.Validate(); err != nil || len(warns) != 0 {
		t.Fatalf("5 control planes: %v %v", warns, err)
	}
}

// A libvirt cluster.yaml without a libvirt section shows the section's
// fields commented out, and loads back the same.
func TestMarshalLibvirtExample(t *testing.T) {
	c := Default("khw", ArchARM64, ProviderLibvirt)
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "#libvirt:\n#  uri: qemu:///system") {
		t.Fatalf("no commented libvirt section:\n%s", data)
	}
	back, _, err := Parse(data, "cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if back.Libvirt != nil {
		t.Fatalf("the commented section was read: %+v", back.Libvirt)
	}
	if n, _ := Default("khw", ArchARM64, ProviderNspawn).Marshal(); strings.Contains(string(n), "#libvirt:") {
		t.Fatal("an nspawn cluster.yaml shows the libvirt section")
	}
}

func TestPickNodes(t *testing.T) {
	c := Default("lab", ArchAMD64, ProviderNspawn)
	got, err := c.PickNodes([]string{"cp2", "w1", "cp2"})
	if err != nil || strings.Join(got, ",") != "cp2,w1" {
		t.Errorf("PickNodes(cp2 w1 cp2) = %v, %v; want cp2,w1", got, err)
	}
	_, err = c.PickNodes([]string{"cp9", "w1", "x"})
	if err == nil || !strings.Contains(err.Error(), `no nodes "cp9", "x"; its nodes are: lb, cp1, cp2, cp3, w1, w2, w3`) {
		t.Errorf("PickNodes(cp9 w1 x) error = %v", err)
	}
}
