// Package labchecktest is the test kit of the labs' detectors: Fixture, a
// whole default cluster built by khw's own code (PKI, kubeconfigs, every
// node's rendered files, kernel settings, routes, API objects) served by a
// fake Source, which a lab folder's tests break one thing at a time
// (RunCase) to expect its detectors to name it. A good cluster has no
// mistake (package lab tests that for every lab).
package labchecktest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io/fs"
	"maps"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/encryption"
	kc "github.com/khw-dev/khw/internal/kubeconfig"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/pki"
	"github.com/khw-dev/khw/internal/render"
	tb "github.com/khw-dev/khw/internal/tlsbootstrap"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
)

// testNow is the clock of every check in the tests.
var Now = time.Now()

// fakeSource serves files and command outputs from maps. Listings
// (lsShell, execsShell) are computed from the files, so a test changes only
// files; `systemctl cat` serves /etc/systemd/system/<unit>.
type fakeSource struct {
	files   map[string][]byte // node + "\x00" + path
	Runs    map[string]string // node + "\x00" + shell
	Noexec  map[string]bool   // node + "\x00" + path of a non-executable file
	Down    string            // a node that cannot be reached
	readLog []string
}

func Key(node, p string) string { return node + "\x00" + p }

func (f *fakeSource) clone() *fakeSource {
	return &fakeSource{files: maps.Clone(f.files), Runs: maps.Clone(f.Runs), Noexec: maps.Clone(f.Noexec), Down: f.Down}
}

func (f *fakeSource) Set(node, p, data string) { f.files[Key(node, p)] = []byte(data) }

func (f *fakeSource) Del(node, p string) { delete(f.files, Key(node, p)) }

func (f *fakeSource) Get(t *testing.T, node, p string) string {
	t.Helper()
	b, ok := f.files[Key(node, p)]
	if !ok {
		t.Fatalf("fixture has no %s on %s", p, node)
	}
	return string(b)
}

// Edit replaces old by new in a file, failing when old is not there (so a
// test cannot silently stop breaking anything).
func (f *fakeSource) Edit(t *testing.T, node, p, old, new string) {
	t.Helper()
	s := f.Get(t, node, p)
	if !strings.Contains(s, old) {
		t.Fatalf("%s on %s does not contain %q", p, node, old)
	}
	f.Set(node, p, strings.Replace(s, old, new, 1))
}

func (f *fakeSource) ReadFile(_ context.Context, node, p string) ([]byte, error) {
	if node == f.Down {
		return nil, fmt.Errorf("dial %s: connection refused", node)
	}
	f.readLog = append(f.readLog, node+":"+p)
	b, ok := f.files[Key(node, p)]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	return b, nil
}

func (f *fakeSource) Run(_ context.Context, node, shell string) (string, error) {
	if node == f.Down {
		return "", fmt.Errorf("dial %s: connection refused", node)
	}
	if out, ok := f.Runs[Key(node, shell)]; ok {
		return out, nil
	}
	if strings.HasPrefix(shell, "systemctl cat -- ") {
		unit := strings.Fields(shell)[3]
		return string(f.files[Key(node, "/etc/systemd/system/"+unit)]), nil
	}
	for k := range f.files {
		n, p, _ := strings.Cut(k, "\x00")
		if n != node {
			continue
		}
		dir, name := filepath.Dir(p), filepath.Base(p)
		switch shell {
		case labcheck.LsShell(dir):
			f.Runs[Key(node, shell)] += name + "\n"
		case labcheck.ExecsShell(dir):
			if !f.Noexec[k] {
				f.Runs[Key(node, shell)] += name + "\n"
			}
		}
	}
	out := f.Runs[Key(node, shell)]
	delete(f.Runs, Key(node, shell)) // listings follow later edits
	return out, nil
}

// Fixture is a whole default cluster built by khw's own code: the PKI,
// kubeconfigs and encryption config of the state directory, every node's
// rendered files and inputs, kernel settings, routes, and the API objects
// of the rendered manifests plus a valid bootstrap token for w3 (which has
// not bootstrapped yet). Check must find no mistake in it.
type Fixture struct {
	Cluster *config.Cluster
	Src     *fakeSource
	Objs    []runtime.Object
	Token   tb.Token
	caKey   *ecdsa.PrivateKey
	ca      *x509.Certificate
}

var (
	fixOnce sync.Once
	fixBase *Fixture
	fixErr  error
)

// NewFixture returns a fresh copy of the good cluster.
func NewFixture(t *testing.T) *Fixture {
	t.Helper()
	fixOnce.Do(func() { fixBase, fixErr = buildFixture() })
	if fixErr != nil {
		t.Fatal(fixErr)
	}
	f := *fixBase
	f.Src = fixBase.Src.clone()
	f.Objs = nil
	for _, o := range fixBase.Objs {
		f.Objs = append(f.Objs, o.DeepCopyObject())
	}
	return &f
}

// Env is the detectors' view of the fixture (no live cluster).
func (f *Fixture) Env() *labcheck.Env {
	return labcheck.NewEnv(context.Background(), f.Cluster, f.Src, fake.NewSimpleClientset(f.Objs...), nil, Now)
}

func (f *Fixture) Check(t *testing.T, ds []labcheck.Detector) ([]labcheck.Mistake, error) {
	t.Helper()
	return labcheck.CheckAt(context.Background(), ds, f.Cluster, f.Src, fake.NewSimpleClientset(f.Objs...), Now)
}

func buildFixture() (*Fixture, error) {
	c := config.Default("khw", config.ArchAMD64, config.ProviderLibvirt)
	if _, err := c.Validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "labcheck-fixture-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	pkiDir, kcDir := filepath.Join(dir, "pki"), filepath.Join(dir, "kubeconfigs")
	if _, err := pki.Reconcile(c, pkiDir, Now.Add(-time.Hour)); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	if _, err := kc.Reconcile(c, pkiDir, kcDir); err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	tok, err := tb.NewToken(nil)
	if err != nil {
		return nil, err
	}
	if _, err := kc.WriteBootstrap(c, pkiDir, kcDir, "w3", tok.ID, tok.Secret); err != nil {
		return nil, err
	}
	if _, err := encryption.Reconcile(filepath.Join(dir, "encryption-config.yaml"), nil); err != nil {
		return nil, err
	}
	src := &fakeSource{files: map[string][]byte{}, Runs: map[string]string{}, Noexec: map[string]bool{}}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		src.files[Key(labcheck.Jumpbox, filepath.ToSlash(rel))] = b
		return err
	})
	if err != nil {
		return nil, err
	}
	facts, err := render.DefaultFactsFor(c)
	if err != nil {
		return nil, err
	}
	if err := addNodes(c, dir, facts, src); err != nil {
		return nil, err
	}
	objs, err := apiObjects(c, tok)
	if err != nil {
		return nil, err
	}
	caPEM := src.files[Key(labcheck.Jumpbox, "pki/ca.pem")]
	ca, err := labcheck.FirstCert(caPEM)
	if err != nil {
		return nil, err
	}
	k, err := labcheck.ParseKey(src.files[Key(labcheck.Jumpbox, "pki/ca-key.pem")])
	if err != nil {
		return nil, err
	}
	caKey, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the fixture CA key is %T, want ECDSA", k)
	}
	return &Fixture{Cluster: c, Src: src, Objs: objs, Token: tok, ca: ca, caKey: caKey}, nil
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// CertSpec is a test cert.
type CertSpec struct {
	CN       string
	Org      []string
	DNS      []string
	IPs      []string
	Server   bool
	Client   bool
	NotAfter time.Time
	// signer signs it (nil: the fixture CA; selfSigned: itself).
	SelfSigned bool
}

// Issue makes a cert and key (PEM) signed by the fixture CA unless
// s.selfSigned.
func (f *Fixture) Issue(t *testing.T, s CertSpec) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if s.NotAfter.IsZero() {
		s.NotAfter = Now.Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: s.CN, Organization: s.Org},
		NotBefore:    Now.Add(-48 * time.Hour),
		NotAfter:     s.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     s.DNS,
	}
	for _, ip := range s.IPs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	if s.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if s.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	parent, signer := f.ca, any(f.caKey)
	if s.SelfSigned {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		parent, signer = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// KubernetesSANs are the SANs of the good apiserver cert.
func (f *Fixture) KubernetesSANs() (dns, ips []string) {
	for _, s := range pki.APIServerSANs(f.Cluster) {
		if net.ParseIP(s) != nil {
			ips = append(ips, s)
		} else {
			dns = append(dns, s)
		}
	}
	return dns, ips
}

// Without returns list without the items of drop.
func Without(list []string, drop ...string) []string {
	var out []string
	for _, s := range list {
		keep := true
		for _, d := range drop {
			if s == d {
				keep = false
			}
		}
		if keep {
			out = append(out, s)
		}
	}
	return out
}

// secretsOf returns every secret value in the fixture that must never
// appear in a Mistake: the token secret, the encryption key, every private
// key's PEM body.
func (f *Fixture) secretsOf() []string {
	out := []string{f.Token.Secret}
	for k, v := range f.Src.files {
		if bytes.Contains(v, []byte("PRIVATE KEY")) {
			b, _ := pem.Decode(v[bytes.Index(v, []byte("-----BEGIN")):])
			if b != nil && strings.Contains(b.Type, "PRIVATE KEY") {
				body := string(pem.EncodeToMemory(b))
				lines := strings.Split(body, "\n")
				if len(lines) > 2 {
					out = append(out, lines[1])
				}
			}
		}
		for _, l := range strings.Split(string(v), "\n") {
			t := strings.TrimSpace(l)
			for _, field := range []string{"client-key-data:", "token:"} {
				if strings.HasPrefix(t, field) {
					out = append(out, strings.TrimSpace(strings.TrimPrefix(t, field)))
				}
			}
		}
		if strings.HasSuffix(k, "encryption-config.yaml") {
			for _, l := range strings.Split(string(v), "\n") {
				if t := strings.TrimSpace(l); strings.HasPrefix(t, "secret:") {
					out = append(out, strings.TrimSpace(strings.TrimPrefix(t, "secret:")))
				}
			}
		}
	}
	return out
}

// addNodes puts into src what every node holds in a good cluster: its
// rendered files and inputs (read from the state directory dir), its host
// name, and on workers the kernel settings, CNI plugins and pod routes.
func addNodes(c *config.Cluster, dir string, facts map[string]render.NodeFacts, src *fakeSource) error {
	for _, n := range c.Nodes {
		files, err := render.Node(c, n.Name, facts[n.Name])
		if err != nil {
			return err
		}
		for _, f := range files {
			src.files[Key(n.Name, f.Path)] = f.Data
		}
		ins, err := render.Inputs(c, n.Name)
		if err != nil {
			return err
		}
		for _, in := range ins {
			b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(in.Source)))
			if err != nil {
				return err
			}
			src.files[Key(n.Name, in.Path)] = b
		}
		src.Set(n.Name, "/proc/sys/kernel/hostname", n.Name+"\n")
		if n.Role != config.RoleWorker {
			continue
		}
		src.Set(n.Name, facts[n.Name].ResolvConf, "nameserver 192.168.122.1\n")
		src.Set(n.Name, "/proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n")
		src.Set(n.Name, "/proc/sys/net/bridge/bridge-nf-call-iptables", "1\n")
		src.Set(n.Name, "/proc/sys/net/ipv4/ip_forward", "1\n")
		for _, b := range []string{"bridge", "host-local", "loopback", "portmap"} {
			src.Set(n.Name, "/opt/cni/bin/"+b, "\x7fELF")
		}
		routes := "default via 192.168.122.1 dev enp1s0 proto static\n192.168.122.0/24 dev enp1s0 proto kernel scope link src " + n.IP + "\n" +
			n.PodCIDR + " dev cni0 proto kernel scope link src " + strings.TrimSuffix(n.PodCIDR, "0/24") + "1\n"
		for _, r := range render.PodRoutes(c, n.Name) {
			routes += r.Dest + " via " + r.Via + " dev enp1s0\n"
		}
		src.Runs[Key(n.Name, labcheck.RouteShell)] = routes
	}
	return nil
}

// apiObjects are the API objects of a good cluster: those of the rendered
// manifests, w3's bootstrap token Secret and the EndpointSlice of two ready
// CoreDNS pods.
func apiObjects(c *config.Cluster, tok tb.Token) ([]runtime.Object, error) {
	var objs []runtime.Object
	ms, err := render.Manifests(c)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		for _, doc := range strings.Split(string(m.Data), "\n---") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			o, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.Path, err)
			}
			objs = append(objs, o)
		}
	}
	sec, err := tok.SecretObject(Now.Add(time.Hour), "khw: TLS bootstrap of w3", nil)
	if err != nil {
		return nil, err
	}
	sec.Data = map[string][]byte{}
	for k, v := range sec.StringData {
		sec.Data[k] = []byte(v)
	}
	sec.StringData = nil
	objs = append(objs, sec)
	// What the EndpointSlice controller makes for two ready CoreDNS pods.
	ready := true
	objs = append(objs, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kube-dns-abcde", Namespace: "kube-system", Labels: map[string]string{"kubernetes.io/service-name": "kube-dns"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.200.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
			{Addresses: []string{"10.200.1.7"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
		},
	})
	return objs, nil
}
