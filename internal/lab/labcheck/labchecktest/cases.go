package labchecktest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/lab/labcheck"
	tb "github.com/khw-dev/khw/internal/tlsbootstrap"
	certsv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ReplaceCert puts a new cert (and its key) at certPath/keyPath on node.
func (f *Fixture) ReplaceCert(t *testing.T, node, certPath, keyPath string, s CertSpec) {
	t.Helper()
	c, k := f.Issue(t, s)
	f.Src.Get(t, node, certPath)
	f.Src.Set(node, certPath, string(c))
	if keyPath != "" {
		f.Src.Set(node, keyPath, string(k))
	}
}

// SecretObj returns the fixture's bootstrap token Secret.
func (f *Fixture) SecretObj(t *testing.T) *corev1.Secret {
	t.Helper()
	for _, o := range f.Objs {
		if s, ok := o.(*corev1.Secret); ok && s.Type == tb.SecretType {
			return s
		}
	}
	t.Fatal("fixture has no bootstrap token Secret")
	return nil
}

func (f *Fixture) Binding(t *testing.T, name string) *rbacv1.ClusterRoleBinding {
	t.Helper()
	for _, o := range f.Objs {
		if b, ok := o.(*rbacv1.ClusterRoleBinding); ok && b.Name == name {
			return b
		}
	}
	t.Fatalf("fixture has no ClusterRoleBinding %s", name)
	return nil
}

func (f *Fixture) DropObj(t *testing.T, match func(runtime.Object) bool) {
	t.Helper()
	for i, o := range f.Objs {
		if match(o) {
			f.Objs = append(f.Objs[:i], f.Objs[i+1:]...)
			return
		}
	}
	t.Fatal("no object to drop")
}

// ServingCSR is a kubelet-serving CSR from node with the given SANs.
func ServingCSR(t *testing.T, name, node string, dns []string, ips []string, created time.Time) *certsv1.CertificateSigningRequest {
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

const EncWith = `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
`

// Want is one expected mistake: its lab, node and a piece of What.
// want is a mistake a case must find: its lab, node and a part of its What.
type Want [3]string

// RunCase breaks a fresh good cluster with break_ and expects ds to find
// each of wants, with evidence and a fix, and no secret in any mistake.
func RunCase(t *testing.T, ds []labcheck.Detector, break_ func(t *testing.T, f *Fixture), wants []Want) {
	t.Helper()
	f := NewFixture(t)
	break_(t, f)
	ms, err := f.Check(t, ds)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	for _, w := range wants {
		found := false
		for _, m := range ms {
			if m.Lab == w[0] && m.Node == w[1] && strings.Contains(m.What, w[2]) {
				found = true
				if m.Evidence == "" || m.Fix == "" {
					t.Errorf("mistake without evidence or fix:\n%s", m)
				}
			}
		}
		if !found {
			t.Errorf("no mistake [%s] %s: …%s…; got %d:", w[0], w[1], w[2], len(ms))
			for _, m := range ms {
				t.Logf("%s", m)
			}
		}
	}
	AssertNoSecrets(t, f, ms)
	if len(ms) > len(wants) {
		for _, m := range ms {
			t.Logf("found: %s", m)
		}
	}
}

// AssertNoSecrets fails when a mistake shows a token secret, an encryption
// key or a private key.
func AssertNoSecrets(t *testing.T, f *Fixture, ms []labcheck.Mistake) {
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

// Bootstrapped puts on w3 what its kubelet writes after TLS bootstrap: a
// client cert (cert and key in one file, as kubelet --cert-dir keeps it)
// with the given CN, and a kubeconfig naming it.
func (f *Fixture) Bootstrapped(t *testing.T, cn string) {
	t.Helper()
	c, k := f.Issue(t, CertSpec{CN: cn, Org: []string{"system:nodes"}, Client: true})
	const p = "/var/lib/kubelet/pki/kubelet-client-current.pem"
	f.Src.Set("w3", p, string(c)+string(k))
	sc, sk := f.Issue(t, CertSpec{CN: "system:node:w3", Org: []string{"system:nodes"}, DNS: []string{"w3"}, IPs: []string{"192.168.122.23"}, Server: true})
	f.Src.Set("w3", "/var/lib/kubelet/pki/kubelet-server-current.pem", string(sc)+string(sk))
	ca := base64.StdEncoding.EncodeToString([]byte(f.Src.Get(t, labcheck.Jumpbox, "pki/ca.pem")))
	f.Src.Set("w3", "/var/lib/kubelet/kubeconfig", `apiVersion: v1
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
