package labcheck

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	certsv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/khw-dev/khw/internal/lab/grade"
	tb "github.com/khw-dev/khw/internal/tlsbootstrap"
)

// replaceCert puts a new cert (and its key) at certPath/keyPath on node.
func (f *fixture) replaceCert(t *testing.T, node, certPath, keyPath string, s certSpec) {
	t.Helper()
	c, k := f.issue(t, s)
	f.src.get(t, node, certPath)
	f.src.set(node, certPath, string(c))
	if keyPath != "" {
		f.src.set(node, keyPath, string(k))
	}
}

// secretObj returns the fixture's bootstrap token Secret.
func (f *fixture) secretObj(t *testing.T) *corev1.Secret {
	t.Helper()
	for _, o := range f.objs {
		if s, ok := o.(*corev1.Secret); ok && s.Type == tb.SecretType {
			return s
		}
	}
	t.Fatal("fixture has no bootstrap token Secret")
	return nil
}

func (f *fixture) binding(t *testing.T, name string) *rbacv1.ClusterRoleBinding {
	t.Helper()
	for _, o := range f.objs {
		if b, ok := o.(*rbacv1.ClusterRoleBinding); ok && b.Name == name {
			return b
		}
	}
	t.Fatalf("fixture has no ClusterRoleBinding %s", name)
	return nil
}

func (f *fixture) dropObj(t *testing.T, match func(runtime.Object) bool) {
	t.Helper()
	for i, o := range f.objs {
		if match(o) {
			f.objs = append(f.objs[:i], f.objs[i+1:]...)
			return
		}
	}
	t.Fatal("no object to drop")
}

// servingCSR is a kubelet-serving CSR from node with the given SANs.
func servingCSR(t *testing.T, name, node string, dns []string, ips []string, created time.Time) *certsv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}, DNSNames: dns}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certsv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec: certsv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: tb.ServingSigner, Username: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"},
			Usages: []certsv1.KeyUsage{certsv1.UsageDigitalSignature, certsv1.UsageServerAuth},
		},
	}
}

const encWith = `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
`

// want is one expected mistake: its lab, node and a piece of What.
type want struct{ lab, node, what string }

func TestDetectors(t *testing.T) {
	aKey := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	shortKey := base64.StdEncoding.EncodeToString([]byte("tenbytes!!"))
	cases := []struct {
		name   string
		lab    string
		break_ func(t *testing.T, f *fixture)
		want   []want
	}{
		// 02-pki
		{"admin cert without system:masters", "02-pki", func(t *testing.T, f *fixture) {
			f.replaceCert(t, Jumpbox, "pki/admin.pem", "pki/admin-key.pem", certSpec{cn: "admin", client: true})
		}, []want{{"02-pki", Jumpbox, "want O=system:masters"}}},
		{"node cert CN without system:node: prefix", "02-pki", func(t *testing.T, f *fixture) {
			f.replaceCert(t, Jumpbox, "pki/w1.pem", "pki/w1-key.pem", certSpec{cn: "w1", org: []string{"system:nodes"}, ips: []string{"192.168.122.21"}, server: true, client: true})
		}, []want{{"02-pki", Jumpbox, `want CN="system:node:w1"`}}},
		{"node cert without its IP", "02-pki", func(t *testing.T, f *fixture) {
			f.replaceCert(t, Jumpbox, "pki/w2.pem", "pki/w2-key.pem", certSpec{cn: "system:node:w2", org: []string{"system:nodes"}, dns: []string{"w2"}, server: true, client: true})
		}, []want{{"02-pki", Jumpbox, "lacks the SANs 192.168.122.22"}}},
		{"apiserver cert without service IP and lb", "02-pki", func(t *testing.T, f *fixture) {
			dns, ips := f.kubernetesSANs()
			f.replaceCert(t, Jumpbox, "pki/kubernetes.pem", "pki/kubernetes-key.pem", certSpec{cn: "kubernetes", dns: without(dns, "lb"), ips: without(ips, "10.32.0.1"), server: true, client: true})
		}, []want{{"02-pki", Jumpbox, "lacks the SANs 10.32.0.1"}, {"02-pki", Jumpbox, "; lb ("}}},
		{"controller-manager in system:nodes (the seed's table)", "02-pki", func(t *testing.T, f *fixture) {
			f.replaceCert(t, Jumpbox, "pki/kube-controller-manager.pem", "pki/kube-controller-manager-key.pem", certSpec{cn: "system:kube-controller-manager", org: []string{"system:nodes"}, client: true})
		}, []want{{"02-pki", Jumpbox, "has O=system:nodes"}}},
		{"kube-proxy cert from another CA", "02-pki", func(t *testing.T, f *fixture) {
			f.replaceCert(t, Jumpbox, "pki/kube-proxy.pem", "pki/kube-proxy-key.pem", certSpec{cn: "system:kube-proxy", client: true, selfSigned: true})
		}, []want{{"02-pki", Jumpbox, "is not signed by the cluster CA"}}},
		{"scheduler key of another cert", "02-pki", func(t *testing.T, f *fixture) {
			f.src.set(Jumpbox, "pki/kube-scheduler-key.pem", f.src.get(t, Jumpbox, "pki/kube-proxy-key.pem"))
		}, []want{{"02-pki", Jumpbox, "pki/kube-scheduler-key.pem is not the key of pki/kube-scheduler.pem"}}},
		{"expired admin cert", "02-pki", func(t *testing.T, f *fixture) {
			f.replaceCert(t, Jumpbox, "pki/admin.pem", "pki/admin-key.pem", certSpec{cn: "admin", org: []string{"system:masters"}, client: true, notAfter: testNow.Add(-time.Hour)})
		}, []want{{"02-pki", Jumpbox, "expired"}}},
		{"missing cert", "02-pki", func(t *testing.T, f *fixture) { f.src.del(Jumpbox, "pki/kube-proxy.pem") },
			[]want{{"02-pki", Jumpbox, "pki/kube-proxy.pem is missing"}}},
		{"server-only EKU on the apiserver cert", "02-pki", func(t *testing.T, f *fixture) {
			dns, ips := f.kubernetesSANs()
			f.replaceCert(t, Jumpbox, "pki/kubernetes.pem", "pki/kubernetes-key.pem", certSpec{cn: "kubernetes", dns: dns, ips: ips, server: true})
		}, []want{{"02-pki", Jumpbox, "lacks the extended key usage client auth"}}},

		// 03-kubeconfig
		{"worker kubeconfig pointing at 127.0.0.1", "03-kubeconfig", func(t *testing.T, f *fixture) {
			f.src.edit(t, Jumpbox, "kubeconfigs/w1.kubeconfig", "server: https://lb:6443", "server: https://127.0.0.1:6443")
		}, []want{{"03-kubeconfig", Jumpbox, "no apiserver runs on jumpbox"}}},
		{"kube-proxy kubeconfig bypassing the lb", "03-kubeconfig", func(t *testing.T, f *fixture) {
			f.src.edit(t, Jumpbox, "kubeconfigs/kube-proxy.kubeconfig", "server: https://lb:6443", "server: https://192.168.122.11:6443")
		}, []want{{"03-kubeconfig", Jumpbox, "names the control plane cp1 directly"}}},
		{"w2's kubeconfig holding w1's cert", "03-kubeconfig", func(t *testing.T, f *fixture) {
			f.src.set(Jumpbox, "kubeconfigs/w2.kubeconfig", f.src.get(t, Jumpbox, "kubeconfigs/w1.kubeconfig"))
		}, []want{{"03-kubeconfig", Jumpbox, `has CN="system:node:w1", want CN="system:node:w2"`}}},
		{"wrong port", "03-kubeconfig", func(t *testing.T, f *fixture) {
			f.src.edit(t, Jumpbox, "kubeconfigs/admin.kubeconfig", "server: https://lb:6443", "server: https://lb:443")
		}, []want{{"03-kubeconfig", Jumpbox, "has port 443"}}},
		{"dangling current-context", "03-kubeconfig", func(t *testing.T, f *fixture) {
			f.src.edit(t, Jumpbox, "kubeconfigs/kube-scheduler.kubeconfig", "current-context: default", "current-context: nope")
		}, []want{{"03-kubeconfig", Jumpbox, `current-context "nope" names no context`}}},

		// 04-etcd
		{"etcd name not in initial-cluster", "04-etcd", func(t *testing.T, f *fixture) {
			f.src.edit(t, "cp2", "/etc/systemd/system/etcd.service", "--name=cp2", "--name=etcd-2")
		}, []want{{"04-etcd", "cp2", `--name "etcd-2" is not in --initial-cluster`}}},
		{"initial-cluster with a member the cluster does not have", "04-etcd", func(t *testing.T, f *fixture) {
			f.src.edit(t, "cp1", "/etc/systemd/system/etcd.service", "cp3=https://192.168.122.13:2380", "cp3=https://192.168.122.13:2380,cp4=https://192.168.122.14:2380")
		}, []want{{"04-etcd", "cp1", `lists member "cp4"`}, {"04-etcd", "cp1", "different --initial-cluster"}}},
		{"initial-cluster with a wrong IP", "04-etcd", func(t *testing.T, f *fixture) {
			for _, n := range []string{"cp1", "cp2", "cp3"} {
				f.src.edit(t, n, "/etc/systemd/system/etcd.service", "cp2=https://192.168.122.12:2380", "cp2=https://192.168.122.22:2380")
			}
		}, []want{{"04-etcd", "cp1", "gives member cp2 the address 192.168.122.22"}, {"04-etcd", "cp2", "--initial-advertise-peer-urls differs"}}},
		{"peer cert without the member's IP", "04-etcd", func(t *testing.T, f *fixture) {
			dns, ips := f.kubernetesSANs()
			f.replaceCert(t, "cp3", "/etc/etcd/kubernetes.pem", "/etc/etcd/kubernetes-key.pem", certSpec{cn: "kubernetes", dns: dns, ips: without(ips, "192.168.122.13"), server: true, client: true})
		}, []want{{"02-pki", "cp3", "etcd server and peer cert /etc/etcd/kubernetes.pem lacks the SANs 192.168.122.13"}}},
		{"no client cert auth", "04-etcd", func(t *testing.T, f *fixture) {
			f.src.edit(t, "cp1", "/etc/systemd/system/etcd.service", "  --client-cert-auth \\\n", "")
		}, []want{{"04-etcd", "cp1", "without --client-cert-auth"}}},
		{"etcd trusting every CA cert as a client", "04-etcd", func(t *testing.T, f *fixture) {
			f.src.edit(t, "cp2", "/etc/systemd/system/etcd.service", "  --client-cert-allowed-hostname=kubernetes \\\n", "")
		}, []want{{"04-etcd", "cp2", "etcd trusts every client cert the cluster CA signs (--client-cert-auth only checks the chain): pki/admin.pem (admin), pki/w1.pem (system:node:w1)"}}},
		{"etcd trusting every CA cert as a peer", "04-etcd", func(t *testing.T, f *fixture) {
			f.src.edit(t, "cp3", "/etc/systemd/system/etcd.service", " \\\n  --peer-cert-allowed-cn=kubernetes\n", "\n")
		}, []want{{"04-etcd", "cp3", "etcd trusts every peer cert the cluster CA signs (--peer-client-cert-auth only checks the chain)"}}},
		{"etcd client allowlist admitting a kubelet", "04-etcd", func(t *testing.T, f *fixture) {
			f.src.edit(t, "cp1", "/etc/systemd/system/etcd.service", "--client-cert-allowed-hostname=kubernetes \\", "--client-cert-allowed-hostname=kubernetes,w1 \\")
		}, []want{{"04-etcd", "cp1", "etcd's client allowlist also admits pki/w1.pem (system:node:w1), which can then read and write every key"}}},
		{"etcd peer allowlist admitting the bootstrap kubelet", "04-etcd", func(t *testing.T, f *fixture) {
			f.src.edit(t, "cp1", "/etc/systemd/system/etcd.service", "--peer-cert-allowed-cn=kubernetes\nRestart", "--peer-cert-allowed-cn=kubernetes,system:node:w3\nRestart")
		}, []want{{"04-etcd", "cp1", "etcd's peer allowlist also admits w3's kubelet client cert from its bootstrap token"}}},
		{"etcd allowlist refusing the apiserver", "04-etcd", func(t *testing.T, f *fixture) {
			f.src.edit(t, "cp2", "/etc/systemd/system/etcd.service", "--client-cert-allowed-hostname=kubernetes \\", "--client-cert-allowed-hostname=etcd-client \\")
		}, []want{{"04-etcd", "cp2", "etcd refuses the apiserver's cert (pki/kubernetes.pem) as a client"}}},
		{"etcd with the client CN flag of older etcd", "04-etcd", func(t *testing.T, f *fixture) {
			f.src.edit(t, "cp1", "/etc/systemd/system/etcd.service", "--client-cert-allowed-hostname=kubernetes \\", "--client-cert-allowed-cn=kubernetes \\")
		}, []want{{"04-etcd", "cp1", "etcd 3.7 has no --client-cert-allowed-cn"}, {"04-etcd", "cp1", "etcd trusts every client cert the cluster CA signs"}}},
		{"etcd trusting another CA", "04-etcd", func(t *testing.T, f *fixture) {
			c, _ := f.issue(t, certSpec{cn: "other-ca", selfSigned: true})
			f.src.set("cp2", "/etc/etcd/ca.pem", string(c))
		}, []want{{"04-etcd", "cp2", "/etc/etcd/ca.pem is not the cluster CA"}}},
		{"etcd unit missing", "04-etcd", func(t *testing.T, f *fixture) { f.src.del("cp3", "/etc/systemd/system/etcd.service") },
			[]want{{"04-etcd", "cp3", "etcd.service is not known"}}},

		// 05-control-plane
		{"apiserver cert on cp2 without lb", "05-control-plane", func(t *testing.T, f *fixture) {
			dns, ips := f.kubernetesSANs()
			f.replaceCert(t, "cp2", "/var/lib/kubernetes/kubernetes.pem", "/var/lib/kubernetes/kubernetes-key.pem", certSpec{cn: "kubernetes", dns: without(dns, "lb"), ips: ips, server: true, client: true})
		}, []want{{"02-pki", "cp2", "lacks the SANs lb"}}},
		{"kubelet RBAC bound to another user", "05-control-plane", func(t *testing.T, f *fixture) {
			f.binding(t, "system:kube-apiserver").Subjects[0].Name = "kube-apiserver"
		}, []want{{"05-control-plane", "cp1", `calls kubelets as user "kubernetes"`}}},
		{"kubelet RBAC missing", "05-control-plane", func(t *testing.T, f *fixture) {
			f.dropObj(t, func(o runtime.Object) bool {
				b, ok := o.(*rbacv1.ClusterRoleBinding)
				return ok && b.Name == "system:kube-apiserver"
			})
		}, []want{{"05-control-plane", "cp1", "no ClusterRoleBinding gives that user nodes/proxy"}}},
		{"scheduler with the controller-manager's kubeconfig", "05-control-plane", func(t *testing.T, f *fixture) {
			f.src.set("cp2", "/var/lib/kubernetes/kube-scheduler.kubeconfig", f.src.get(t, "cp2", "/var/lib/kubernetes/kube-controller-manager.kubeconfig"))
		}, []want{{"05-control-plane", "cp2", `the kubeconfig of kube-scheduler logs in as "system:kube-controller-manager"`}}},
		{"controller-manager kubeconfig at an unknown server", "05-control-plane", func(t *testing.T, f *fixture) {
			f.src.edit(t, "cp1", "/var/lib/kubernetes/kube-controller-manager.kubeconfig", "server: https://127.0.0.1:6443", "server: https://10.0.0.1:6443")
		}, []want{{"05-control-plane", "cp1", "names 10.0.0.1, which is neither the load balancer nor a control plane"}}},
		{"identity first", "05-control-plane", func(t *testing.T, f *fixture) {
			f.src.set("cp1", "/var/lib/kubernetes/encryption-config.yaml", encWith+"  - identity: {}\n  - aescbc:\n      keys:\n      - name: key1\n        secret: "+aKey+"\n")
		}, []want{{"05-control-plane", "cp1", "identity is the first provider"}, {"05-control-plane", "", "different encryption configs"}}},
		{"aescbc key of 10 bytes", "05-control-plane", func(t *testing.T, f *fixture) {
			for _, n := range []string{"cp1", "cp2", "cp3"} {
				f.src.set(n, "/var/lib/kubernetes/encryption-config.yaml", encWith+"  - aescbc:\n      keys:\n      - name: key1\n        secret: "+shortKey+"\n  - identity: {}\n")
			}
		}, []want{{"05-control-plane", "cp2", `key "key1" of aescbc is 10 bytes`}}},
		{"legacy kind", "05-control-plane", func(t *testing.T, f *fixture) {
			f.src.set("cp3", "/var/lib/kubernetes/encryption-config.yaml", "kind: EncryptionConfig\napiVersion: v1\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n      - name: key1\n        secret: "+aKey+"\n")
		}, []want{{"05-control-plane", "cp3", "legacy kind EncryptionConfig"}}},
		{"encryption flag missing on one apiserver", "05-control-plane", func(t *testing.T, f *fixture) {
			f.src.edit(t, "cp3", "/etc/systemd/system/kube-apiserver.service", "  --encryption-provider-config=/var/lib/kubernetes/encryption-config.yaml \\\n", "")
		}, []want{{"05-control-plane", "cp3", "does not encrypt Secrets"}}},
		{"no secrets resource", "05-control-plane", func(t *testing.T, f *fixture) {
			for _, n := range []string{"cp1", "cp2", "cp3"} {
				f.src.edit(t, n, "/var/lib/kubernetes/encryption-config.yaml", "  - secrets", "  - configmaps")
			}
		}, []want{{"05-control-plane", "cp1", "does not cover secrets"}}},
		{"ServiceAccount keys of two pairs", "05-control-plane", func(t *testing.T, f *fixture) {
			f.src.set("cp1", "/var/lib/kubernetes/service-account-key.pem", f.src.get(t, "cp1", "/var/lib/kubernetes/kubernetes-key.pem"))
		}, []want{{"05-control-plane", "cp1", "signing key is not the pair of the verification key"}}},

		// 06-lb
		{"http check without check-ssl", "06-lb", func(t *testing.T, f *fixture) {
			f.src.edit(t, "lb", "/etc/haproxy/haproxy.cfg", "default-server check-ssl verify none", "default-server")
		}, []want{{"06-lb", "lb", "of cp1, cp2, cp3 has no check-ssl"}}},
		{"check-ssl verifying without ca-file", "06-lb", func(t *testing.T, f *fixture) {
			f.src.edit(t, "lb", "/etc/haproxy/haproxy.cfg", "check-ssl verify none", "check-ssl")
		}, []want{{"06-lb", "lb", "no ca-file"}}},
		{"check of a path anonymous may not read", "06-lb", func(t *testing.T, f *fixture) {
			f.src.edit(t, "lb", "/etc/haproxy/haproxy.cfg", "option httpchk GET /readyz", "option httpchk GET /api")
		}, []want{{"06-lb", "lb", "asks for /api"}}},
		{"httpchk without a URI (OPTIONS /)", "06-lb", func(t *testing.T, f *fixture) {
			f.src.edit(t, "lb", "/etc/haproxy/haproxy.cfg", "option httpchk GET /readyz", "option httpchk")
		}, []want{{"06-lb", "lb", "sends OPTIONS /"}}},
		{"backend on the wrong port", "06-lb", func(t *testing.T, f *fixture) {
			f.src.edit(t, "lb", "/etc/haproxy/haproxy.cfg", "192.168.122.12:6443", "192.168.122.12:6444")
		}, []want{{"06-lb", "lb", "uses port 6444"}}},
		{"backend at a wrong IP", "06-lb", func(t *testing.T, f *fixture) {
			f.src.edit(t, "lb", "/etc/haproxy/haproxy.cfg", "192.168.122.13:6443", "192.168.122.31:6443")
		}, []want{{"06-lb", "lb", "points at 192.168.122.31"}, {"06-lb", "lb", "cp3 is not a server"}}},
		{"mode http", "06-lb", func(t *testing.T, f *fixture) {
			f.src.edit(t, "lb", "/etc/haproxy/haproxy.cfg", "mode tcp", "mode http")
		}, []want{{"06-lb", "lb", "runs in mode http"}}},
		{"apiserver without anonymous auth", "06-lb", func(t *testing.T, f *fixture) {
			f.src.edit(t, "cp2", "/etc/systemd/system/kube-apiserver.service", "--v=2", "--anonymous-auth=false --v=2")
		}, []want{{"06-lb", "cp2", "--anonymous-auth=false"}}},

		// 07-workers
		{"swap on", "07-workers", func(t *testing.T, f *fixture) {
			f.src.set("w1", "/proc/swaps", "Filename Type Size Used Priority\n/swap.img file 2097148 0 -2\n")
		}, []want{{"07-workers", "w1", "swap is on"}}},
		{"br_netfilter not loaded", "07-workers", func(t *testing.T, f *fixture) {
			f.src.del("w2", "/proc/sys/net/bridge/bridge-nf-call-iptables")
		}, []want{{"07-workers", "w2", "br_netfilter"}}},
		{"bridge-nf-call-iptables 0", "07-workers", func(t *testing.T, f *fixture) {
			f.src.set("w1", "/proc/sys/net/bridge/bridge-nf-call-iptables", "0\n")
		}, []want{{"07-workers", "w1", "bridge-nf-call-iptables is not 1"}}},
		{"ip_forward 0", "07-workers", func(t *testing.T, f *fixture) {
			f.src.set("w1", "/proc/sys/net/ipv4/ip_forward", "0\n")
		}, []want{{"07-workers", "w1", "ip_forward is not 1"}}},
		{"no CNI config", "07-workers", func(t *testing.T, f *fixture) {
			f.src.del("w2", "/etc/cni/net.d/10-bridge.conf")
			f.src.del("w2", "/etc/cni/net.d/99-loopback.conf")
		}, []want{{"07-workers", "w2", "no CNI config in /etc/cni/net.d"}}},
		{"CNI plugin binary missing", "07-workers", func(t *testing.T, f *fixture) {
			f.src.del("w1", "/opt/cni/bin/host-local")
		}, []want{{"07-workers", "w1", `names the CNI plugin "host-local"`}}},
		{"CNI plugin not executable", "07-workers", func(t *testing.T, f *fixture) {
			f.src.noexec[key("w1", "/opt/cni/bin/bridge")] = true
		}, []want{{"07-workers", "w1", `names the CNI plugin "bridge"`}}},
		{"CNI subnet of another worker", "07-workers", func(t *testing.T, f *fixture) {
			f.src.edit(t, "w1", "/etc/cni/net.d/10-bridge.conf", "10.200.0.0/24", "10.200.1.0/24")
		}, []want{{"07-workers", "w1", "gives pods addresses from 10.200.1.0/24"}}},
		{"clusterDNS not the kube-dns IP", "07-workers", func(t *testing.T, f *fixture) {
			f.src.edit(t, "w2", "/var/lib/kubelet/kubelet-config.yaml", "- 10.32.0.10", "- 10.96.0.10")
		}, []want{{"07-workers", "w2", "clusterDNS does not list 10.32.0.10"}}},
		{"kube-dns Service at another IP", "07-workers", func(t *testing.T, f *fixture) {
			for _, o := range f.objs {
				if s, ok := o.(*corev1.Service); ok && s.Name == "kube-dns" {
					s.Spec.ClusterIP = "10.32.0.53"
					return
				}
			}
			t.Fatal("no kube-dns Service")
		}, []want{{"09-coredns", "w1", "has ClusterIP 10.32.0.53"}}},
		{"pods get systemd-resolved's stub", "07-workers", func(t *testing.T, f *fixture) {
			f.src.edit(t, "w1", "/var/lib/kubelet/kubelet-config.yaml", "resolvConf: /run/systemd/resolve/resolv.conf", "resolvConf: /etc/resolv.conf")
			f.src.set("w1", "/etc/resolv.conf", "nameserver 127.0.0.53\noptions edns0 trust-ad\n")
		}, []want{{"07-workers", "w1", "nameserver 127.0.0.53 is a loopback address"}}},
		{"resolvConf missing", "07-workers", func(t *testing.T, f *fixture) {
			f.src.del("w2", "/run/systemd/resolve/resolv.conf")
		}, []want{{"07-workers", "w2", "resolvConf /run/systemd/resolve/resolv.conf does not exist"}}},
		{"CoreDNS scaled to 0", "09-coredns", func(t *testing.T, f *fixture) {
			f.dropObj(t, func(o runtime.Object) bool { _, ok := o.(*discoveryv1.EndpointSlice); return ok })
		}, []want{{"09-coredns", "", "no ready CoreDNS pod stands behind the kube-dns Service"}}},
		{"kube-dns Service missing", "09-coredns", func(t *testing.T, f *fixture) {
			f.dropObj(t, func(o runtime.Object) bool { s, ok := o.(*corev1.Service); return ok && s.Name == "kube-dns" })
		}, []want{{"09-coredns", "", "there is no Service kube-system/kube-dns"}}},
		{"kube-dns at another IP", "09-coredns", func(t *testing.T, f *fixture) {
			for _, o := range f.objs {
				if s, ok := o.(*corev1.Service); ok && s.Name == "kube-dns" {
					s.Spec.ClusterIP = "10.32.0.53"
				}
			}
		}, []want{{"09-coredns", "", "has ClusterIP 10.32.0.53, but the kubelets give pods 10.32.0.10"}}},
		{"Corefile for another domain", "09-coredns", func(t *testing.T, f *fixture) {
			for _, o := range f.objs {
				if c, ok := o.(*corev1.ConfigMap); ok && c.Name == "coredns" {
					if !strings.Contains(c.Data["Corefile"], "kubernetes cluster.local ") {
						t.Fatalf("Corefile: %s", c.Data["Corefile"])
					}
					c.Data["Corefile"] = strings.Replace(c.Data["Corefile"], "kubernetes cluster.local ", "kubernetes k8s.local ", 1)
				}
			}
		}, []want{{"09-coredns", "", "not the cluster domain cluster.local"}}},
		{"node name differs from the cert CN", "07-workers", func(t *testing.T, f *fixture) {
			f.src.edit(t, "w1", "/etc/systemd/system/kubelet.service", "--hostname-override=w1", "--hostname-override=w1.kubernetes.local")
		}, []want{{"07-workers", "w1", `registers as node "w1.kubernetes.local", not "w1": the Node authorizer`}}},
		{"kubelet cert of another node", "07-workers", func(t *testing.T, f *fixture) {
			f.src.set("w1", "/var/lib/kubelet/kubeconfig", f.src.get(t, Jumpbox, "kubeconfigs/w2.kubeconfig"))
		}, []want{{"07-workers", "w1", `logs in as "system:node:w2", but must be "system:node:w1"`}}},
		{"host name used without override", "07-workers", func(t *testing.T, f *fixture) {
			f.src.edit(t, "w2", "/etc/systemd/system/kubelet.service", "--hostname-override=w2 ", "")
			f.src.set("w2", "/proc/sys/kernel/hostname", "worker-2\n")
		}, []want{{"07-workers", "w2", `registers as node "worker-2"`}}},
		{"kubelet kubeconfig with kube-proxy's cert", "07-workers", func(t *testing.T, f *fixture) {
			f.src.set("w2", "/var/lib/kubelet/kubeconfig", f.src.get(t, "w2", "/var/lib/kube-proxy/kubeconfig"))
		}, []want{{"07-workers", "w2", `logs in as "system:kube-proxy"`}, {"02-pki", "w2", "want O=system:nodes"}}},
		{"w2's kubelet cert and key copied onto w1", "07-workers", func(t *testing.T, f *fixture) {
			f.src.set("w1", "/var/lib/kubelet/kubelet.pem", f.src.get(t, "w2", "/var/lib/kubelet/kubelet.pem"))
			f.src.set("w1", "/var/lib/kubelet/kubelet-key.pem", f.src.get(t, "w2", "/var/lib/kubelet/kubelet-key.pem"))
		}, []want{{"07-workers", "w1", "holds w2's identity (CN=system:node:w2), not w1's"}}},
		{"kubelet serving cert without the node IP", "07-workers", func(t *testing.T, f *fixture) {
			f.replaceCert(t, "w1", "/var/lib/kubelet/kubelet.pem", "/var/lib/kubelet/kubelet-key.pem", certSpec{cn: "system:node:w1", org: []string{"system:nodes"}, dns: []string{"w1"}, server: true, client: true})
		}, []want{{"02-pki", "w1", "lacks the SANs 192.168.122.21"}}},

		// 08-pod-network
		{"route missing", "08-pod-network", func(t *testing.T, f *fixture) {
			k := key("w2", routeShell)
			f.src.runs[k] = strings.Replace(f.src.runs[k], "10.200.2.0/24 via 192.168.122.23 dev enp1s0\n", "", 1)
		}, []want{{"08-pod-network", "w2", "no route to w3's pods (10.200.2.0/24)"}}},
		{"route via the wrong worker", "08-pod-network", func(t *testing.T, f *fixture) {
			k := key("w3", routeShell)
			f.src.runs[k] = strings.Replace(f.src.runs[k], "10.200.0.0/24 via 192.168.122.21", "10.200.0.0/24 via 192.168.122.22", 1)
		}, []want{{"08-pod-network", "w3", "via 192.168.122.22, but w1 is at 192.168.122.21"}}},

		// 10-tls-bootstrap
		{"token-id in capitals", "10-tls-bootstrap", func(t *testing.T, f *fixture) {
			f.secretObj(t).Data[tb.KeyTokenID] = []byte("ABCDEF")
		}, []want{{"10-tls-bootstrap", "", `token-id "ABCDEF" must be 6 characters`}}},
		{"token-secret too short", "10-tls-bootstrap", func(t *testing.T, f *fixture) {
			f.secretObj(t).Data[tb.KeyTokenSecret] = []byte("abc")
		}, []want{{"10-tls-bootstrap", "", "token-secret must be 16 characters"}}},
		{"expired token", "10-tls-bootstrap", func(t *testing.T, f *fixture) {
			f.secretObj(t).Data[tb.KeyExpiration] = []byte(testNow.Add(-time.Hour).UTC().Format(time.RFC3339))
		}, []want{{"10-tls-bootstrap", "", "is in the past"}, {"10-tls-bootstrap", "w3", "has no usable Secret"}}},
		{"bad extra group", "10-tls-bootstrap", func(t *testing.T, f *fixture) {
			f.secretObj(t).Data[tb.KeyExtraGroups] = []byte("system:nodes")
		}, []want{{"10-tls-bootstrap", "", `auth-extra-groups entry "system:nodes"`}}},
		{"wrong type and name", "10-tls-bootstrap", func(t *testing.T, f *fixture) {
			s := f.secretObj(t)
			s.Type = corev1.SecretTypeOpaque
		}, []want{{"10-tls-bootstrap", "", "type is \"Opaque\""}}},
		{"authentication usage off", "10-tls-bootstrap", func(t *testing.T, f *fixture) {
			delete(f.secretObj(t).Data, tb.KeyUsageAuth)
		}, []want{{"10-tls-bootstrap", "", "usage-bootstrap-authentication"}}},
		{"whole token pasted into token-id", "10-tls-bootstrap", func(t *testing.T, f *fixture) {
			s := f.secretObj(t)
			s.Data[tb.KeyTokenID] = []byte(f.token.ID + "." + f.token.Secret)
		}, []want{{"10-tls-bootstrap", "", "token-id"}}},
		{"nodeclient auto-approval missing", "10-tls-bootstrap", func(t *testing.T, f *fixture) {
			f.dropObj(t, func(o runtime.Object) bool {
				b, ok := o.(*rbacv1.ClusterRoleBinding)
				return ok && b.RoleRef.Name == "system:certificates.k8s.io:certificatesigningrequests:nodeclient"
			})
		}, []want{{"10-tls-bootstrap", "", "certificatesigningrequests:nodeclient"}}},
		{"node-bootstrapper bound to the wrong group", "10-tls-bootstrap", func(t *testing.T, f *fixture) {
			f.binding(t, "khw:kubelet-bootstrap").Subjects[0].Name = "system:bootstrapers"
		}, []want{{"10-tls-bootstrap", "", "the ClusterRole system:node-bootstrapper"}}},
		{"selfnodeclient missing", "10-tls-bootstrap", func(t *testing.T, f *fixture) {
			f.dropObj(t, func(o runtime.Object) bool {
				b, ok := o.(*rbacv1.ClusterRoleBinding)
				return ok && b.Name == "khw:node-autoapprove-certificate-rotation"
			})
		}, []want{{"10-tls-bootstrap", "", "selfnodeclient"}}},
		{"pending serving CSR", "10-tls-bootstrap", func(t *testing.T, f *fixture) {
			f.objs = append(f.objs, servingCSR(t, "csr-abcde", "w3", []string{"w3"}, []string{"192.168.122.23"}, testNow.Add(-time.Minute)))
		}, []want{{"10-tls-bootstrap", "w3", "kubernetes/kubernetes#73356"}}},
		{"approved CSR never signed", "10-tls-bootstrap", func(t *testing.T, f *fixture) {
			csr := servingCSR(t, "csr-zzz", "w3", []string{"w3"}, []string{"192.168.122.23"}, testNow.Add(-time.Hour))
			csr.Status.Conditions = []certsv1.CertificateSigningRequestCondition{{Type: certsv1.CertificateApproved, Status: corev1.ConditionTrue}}
			f.objs = append(f.objs, csr)
		}, []want{{"10-tls-bootstrap", "", "approved but has no certificate"}}},
		{"bootstrap token auth off", "10-tls-bootstrap", func(t *testing.T, f *fixture) {
			f.src.edit(t, "cp1", "/etc/systemd/system/kube-apiserver.service", "--enable-bootstrap-token-auth=true", "--enable-bootstrap-token-auth=false")
		}, []want{{"05-control-plane", "cp1", "does not accept bootstrap tokens"}}},
		{"no signing cert on the controller-manager", "10-tls-bootstrap", func(t *testing.T, f *fixture) {
			f.src.edit(t, "cp2", "/etc/systemd/system/kube-controller-manager.service", "  --cluster-signing-key-file=/var/lib/kubernetes/ca-key.pem \\\n", "")
		}, []want{{"05-control-plane", "cp2", "no --cluster-signing-key-file"}}},
		{"bootstrap kubeconfig without a token", "10-tls-bootstrap", func(t *testing.T, f *fixture) {
			f.src.edit(t, "w3", "/var/lib/kubelet/bootstrap-kubeconfig", "token: "+f.token.Value(), "token: \"\"")
		}, []want{{"10-tls-bootstrap", "w3", "holds no token"}}},
		{"w3 swap on (07 prepares every worker's host)", "07-workers", func(t *testing.T, f *fixture) {
			f.src.set("w3", "/proc/swaps", "Filename Type Size Used Priority\n/dev/vda3 partition 1048572 0 -2\n")
		}, []want{{"07-workers", "w3", "swap is on"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.break_(t, f)
			ms, err := f.check(t, tc.lab)
			if err != nil {
				t.Fatalf("Check(%s): %v", tc.lab, err)
			}
			for _, w := range tc.want {
				found := false
				for _, m := range ms {
					if m.Lab == w.lab && m.Node == w.node && strings.Contains(m.What, w.what) {
						found = true
						if m.Evidence == "" || m.Fix == "" {
							t.Errorf("mistake without evidence or fix:\n%s", m)
						}
					}
				}
				if !found {
					t.Errorf("no mistake [%s] %s: …%s…; got %d:", w.lab, w.node, w.what, len(ms))
					for _, m := range ms {
						t.Logf("%s", m)
					}
				}
			}
			assertNoSecrets(t, f, ms)
			if len(ms) > len(tc.want) {
				for _, m := range ms {
					t.Logf("found: %s", m)
				}
			}
		})
	}
}

// assertNoSecrets fails when a mistake shows a token secret, an encryption
// key or a private key.
func assertNoSecrets(t *testing.T, f *fixture, ms []Mistake) {
	t.Helper()
	secrets := f.secretsOf()
	for _, m := range ms {
		all := m.What + m.Evidence + m.Fix
		for _, s := range secrets {
			if len(s) >= 8 && strings.Contains(all, s) {
				t.Errorf("mistake shows a secret (%.4s…):\n%s", s, m)
			}
		}
		if strings.Contains(all, "PRIVATE KEY") {
			t.Errorf("mistake shows a private key:\n%s", m)
		}
	}
}

func TestSwapToleratedWithFailSwapOnFalse(t *testing.T) {
	f := newFixture(t)
	f.src.set("w1", "/proc/swaps", "Filename Type Size Used Priority\n/swap.img file 2097148 0 -2\n")
	f.src.edit(t, "w1", "/var/lib/kubelet/kubelet-config.yaml", "registerNode: true", "registerNode: true\nfailSwapOn: false")
	ms, err := f.check(t, "07-workers")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		t.Errorf("swap with failSwapOn: false is allowed, got:\n%s", m)
	}
}

// A hand-made variant that works must pass: one cert per control plane with
// only that node's IP, a TCP health check, a conflist CNI config.
func TestValidVariantsPass(t *testing.T) {
	f := newFixture(t)
	dns, _ := f.kubernetesSANs()
	for i, n := range []string{"cp1", "cp2", "cp3"} {
		ip := "192.168.122.1" + string(rune('1'+i))
		c, k := f.issue(t, certSpec{cn: "kubernetes", dns: dns, ips: []string{"10.32.0.1", "127.0.0.1", "192.168.122.10", ip}, server: true, client: true})
		for _, p := range []string{"/var/lib/kubernetes/kubernetes", "/etc/etcd/kubernetes"} {
			f.src.set(n, p+".pem", string(c))
			f.src.set(n, p+"-key.pem", string(k))
		}
	}
	f.src.edit(t, "lb", "/etc/haproxy/haproxy.cfg", "option httpchk GET /readyz", "option tcp-check")
	f.src.edit(t, "lb", "/etc/haproxy/haproxy.cfg", "http-check expect status 200", "")
	f.src.del("w1", "/etc/cni/net.d/10-bridge.conf")
	f.src.set("w1", "/etc/cni/net.d/10-pods.conflist", `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge","bridge":"cni0","ipam":{"type":"host-local","ranges":[[{"subnet":"10.200.0.0/24"}]]}},{"type":"portmap","capabilities":{"portMappings":true}}]}`)
	for _, lab := range []string{"04-etcd", "05-control-plane", "06-lb", "07-workers"} {
		ms, err := f.check(t, lab)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			t.Errorf("%s: valid variant flagged:\n%s", lab, m)
		}
	}
}

func TestErrors(t *testing.T) {
	f := newFixture(t)
	f.src.down = "cp2"
	if _, err := f.check(t, "04-etcd"); err == nil || !strings.Contains(err.Error(), "cp2") {
		t.Errorf("node down: err = %v, want one naming cp2", err)
	}
	f.src.down = ""
	// Without the API the file detectors still run and report.
	f.src.edit(t, "cp3", "/etc/systemd/system/kube-apiserver.service", "  --encryption-provider-config=/var/lib/kubernetes/encryption-config.yaml \\\n", "")
	ms, err := Check(context.Background(), "05-control-plane", f.c, f.src, nil)
	if !errors.Is(err, errNoAPI) || !strings.Contains(err.Error(), "apiserver-kubelet-rbac") {
		t.Errorf("no API: err = %v, want errNoAPI naming apiserver-kubelet-rbac", err)
	}
	if len(ms) != 1 || ms[0].Node != "cp3" {
		t.Errorf("no API: mistakes = %v, want the missing flag on cp3", ms)
	}
}

func TestDetectorsList(t *testing.T) {
	all := Detectors("")
	if len(all) != len(registry) {
		t.Fatalf("Detectors(\"\") = %d, want %d", len(all), len(registry))
	}
	seen := map[string]bool{}
	last := -1
	for _, d := range all {
		i := indexOf(testLabs, d.Lab)
		if i < 0 || i < last {
			t.Errorf("detector %s: lab %s unknown or out of order", d.Name, d.Lab)
		}
		last = i
		if seen[d.Name] || d.Doc == "" || d.run == nil {
			t.Errorf("detector %s: duplicate name, no doc or no run", d.Name)
		}
		seen[d.Name] = true
	}
	var got []string
	for _, d := range Detectors("04-etcd") {
		got = append(got, d.Name)
	}
	if strings.Join(got, ",") != "etcd-initial-cluster,etcd-certs" {
		t.Errorf("Detectors(04-etcd) = %v", got)
	}
	if len(Detectors("11-smoke")) != 0 {
		t.Errorf("11-smoke has no detectors")
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func TestParseExecStart(t *testing.T) {
	unit := `# /etc/systemd/system/kubelet.service
[Unit]
ExecStart=/bin/false
[Service]
ExecStart=/usr/local/bin/kubelet \
  --config=/a.yaml \
  --kubeconfig /k
# /etc/systemd/system/kubelet.service.d/10-override.conf
[Service]
ExecStart=
ExecStart=-/usr/local/bin/kubelet --config=/b.yaml --hostname-override "w 1" --v
`
	u := unitCmd{unit: "kubelet.service", argv: grade.ExecStart(unit)}
	for _, c := range []struct{ flag, want string }{{"config", "/b.yaml"}, {"hostname-override", "w 1"}, {"v", "true"}} {
		if v, ok := u.flag(c.flag); !ok || v != c.want {
			t.Errorf("--%s = %q %v, want %q", c.flag, v, ok, c.want)
		}
	}
	if _, ok := u.flag("kubeconfig"); ok {
		t.Errorf("--kubeconfig of the reset ExecStart must be gone")
	}
	if u.argv[0] != "/usr/local/bin/kubelet" {
		t.Errorf("argv[0] = %q", u.argv[0])
	}
}

// bootstrapped puts on w3 what its kubelet writes after TLS bootstrap: a
// client cert (cert and key in one file, as kubelet --cert-dir keeps it)
// with the given CN, and a kubeconfig naming it.
func (f *fixture) bootstrapped(t *testing.T, cn string) {
	t.Helper()
	c, k := f.issue(t, certSpec{cn: cn, org: []string{"system:nodes"}, client: true})
	const p = "/var/lib/kubelet/pki/kubelet-client-current.pem"
	f.src.set("w3", p, string(c)+string(k))
	ca := base64.StdEncoding.EncodeToString([]byte(f.src.get(t, Jumpbox, "pki/ca.pem")))
	f.src.set("w3", "/var/lib/kubelet/kubeconfig", `apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: `+ca+`
    server: https://lb:6443
  name: default-cluster
contexts:
- context:
    cluster: default-cluster
    namespace: default
    user: default-auth
  name: default-context
current-context: default-context
users:
- name: default-auth
  user:
    client-certificate: `+p+`
    client-key: `+p+`
`)
}

func TestBootstrappedWorker(t *testing.T) {
	f := newFixture(t)
	f.bootstrapped(t, "system:node:w3")
	ms, err := f.check(t, "10-tls-bootstrap")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		t.Errorf("a bootstrapped w3 is fine, got:\n%s", m)
	}
	f.bootstrapped(t, "system:node:w1")
	ms, err = f.check(t, "10-tls-bootstrap")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Node != "w3" || !strings.Contains(ms[0].What, `logs in as "system:node:w1", but must be "system:node:w3"`) {
		t.Errorf("w3 with w1's identity: got %v", ms)
	}
	assertNoSecrets(t, f, ms)
}

func TestServingCSRWithWrongSANsIsNotToBeApproved(t *testing.T) {
	f := newFixture(t)
	f.objs = append(f.objs, servingCSR(t, "csr-evil", "w3", []string{"w3", "lb"}, []string{"192.168.122.23", "192.168.122.10"}, testNow))
	ms, err := f.check(t, "10-tls-bootstrap")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || !strings.Contains(ms[0].Fix, "do not approve") || !strings.Contains(ms[0].Fix, "not allowed: lb") || !strings.Contains(ms[0].Evidence, "SANs [w3, lb, 192.168.122.23, 192.168.122.10]") {
		t.Errorf("got %v", ms)
	}
}

// etcd started from a config file (--config-file) is read like flags.
func TestEtcdConfigFile(t *testing.T) {
	f := newFixture(t)
	conf := `name: cp1
data-dir: /var/lib/etcd
initial-cluster: cp1=https://192.168.122.11:2380,cp2=https://192.168.122.12:2380,cp3=https://192.168.122.13:2380
initial-cluster-state: new
initial-advertise-peer-urls: https://192.168.122.11:2380
listen-peer-urls: https://192.168.122.11:2380
listen-client-urls: https://192.168.122.11:2379,https://127.0.0.1:2379
advertise-client-urls: https://192.168.122.11:2379
client-transport-security:
  cert-file: /etc/etcd/kubernetes.pem
  key-file: /etc/etcd/kubernetes-key.pem
  trusted-ca-file: /etc/etcd/ca.pem
  allowed-hostname: [kubernetes]
  client-cert-auth: true
peer-transport-security:
  cert-file: /etc/etcd/kubernetes.pem
  key-file: /etc/etcd/kubernetes-key.pem
  trusted-ca-file: /etc/etcd/ca.pem
  allowed-cn: [kubernetes]
  client-cert-auth: true
`
	f.src.set("cp1", "/etc/systemd/system/etcd.service", "[Service]\nType=notify\nExecStart=/usr/local/bin/etcd --config-file=/etc/etcd/etcd.yaml\n")
	f.src.set("cp1", "/etc/etcd/etcd.yaml", conf)
	ms, err := f.check(t, "04-etcd")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		t.Errorf("etcd from a right config file flagged:\n%s", m)
	}
	f.src.set("cp1", "/etc/etcd/etcd.yaml", strings.Replace(strings.Replace(conf, "name: cp1", "name: one", 1), "  client-cert-auth: true\npeer", "  client-cert-auth: false\npeer", 1))
	ms, err = f.check(t, "04-etcd")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.What+" | "+m.Evidence)
	}
	all := strings.Join(got, "\n")
	for _, w := range []string{`--name "one" is not in --initial-cluster`, "without --client-cert-auth", "client-transport-security.client-cert-auth=false"} {
		if !strings.Contains(all, w) {
			t.Errorf("want %q in:\n%s", w, all)
		}
	}

	// The allowlists of a config file: lists under the transport sections.
	f.src.set("cp1", "/etc/etcd/etcd.yaml", strings.Replace(strings.Replace(conf, "  allowed-hostname: [kubernetes]\n", "", 1), "allowed-cn: [kubernetes]", "allowed-cn: [kubernetes, system:kube-proxy]", 1))
	ms, err = f.check(t, "04-etcd")
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, m := range ms {
		got = append(got, m.What+" | "+m.Evidence+" | "+m.Fix)
	}
	all = strings.Join(got, "\n")
	for _, w := range []string{"etcd trusts every client cert the cluster CA signs", "/etc/etcd/etcd.yaml: no client-transport-security.allowed-hostname",
		"add client-transport-security.allowed-hostname: [kubernetes] in /etc/etcd/etcd.yaml", "etcd's peer allowlist also admits pki/kube-proxy.pem (system:kube-proxy)",
		"/etc/etcd/etcd.yaml: peer-transport-security.allowed-cn=kubernetes,system:kube-proxy"} {
		if !strings.Contains(all, w) {
			t.Errorf("want %q in:\n%s", w, all)
		}
	}
	if len(ms) != 2 {
		t.Errorf("want 2 mistakes, got:\n%s", all)
	}
}

func TestServiceAccountSigningKeyRequired(t *testing.T) {
	f := newFixture(t)
	f.src.edit(t, "cp2", "/etc/systemd/system/kube-apiserver.service", "--service-account-signing-key-file=", "--x-service-account-signing-key-file=")
	ms, err := f.check(t, "05-control-plane")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Node != "cp2" || !strings.Contains(ms[0].What, "no --service-account-signing-key-file") {
		t.Errorf("got %v", ms)
	}
}
