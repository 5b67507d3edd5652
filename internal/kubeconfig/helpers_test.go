package kubeconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
)

// A throwaway PKI written with the names khw pki uses.

type testCA struct {
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	pem  []byte
}

var serial int64 = 100

func nextSerial() *big.Int { serial++; return big.NewInt(serial) }

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: "Kubernetes"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{key: key, cert: cert, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a client cert (PEM) and its EC key (PEM, "EC PRIVATE KEY" as
// cfssl writes it) for cn/org, signed by ca.
func (ca *testCA) issue(t *testing.T, cn, org string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{org}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// identities are the client certs of the default cluster (cluster-facts.md).
var identities = []struct{ name, cn, org string }{
	{"admin", "admin", "system:masters"},
	{"w1", "system:node:w1", "system:nodes"},
	{"w2", "system:node:w2", "system:nodes"},
	{"kube-proxy", "system:kube-proxy", "system:node-proxier"},
	{"kube-controller-manager", "system:kube-controller-manager", "system:kube-controller-manager"},
	{"kube-scheduler", "system:kube-scheduler", "system:kube-scheduler"},
}

func writeFile(t *testing.T, path string, data []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, perm); err != nil {
		t.Fatal(err)
	}
}

func writePair(t *testing.T, pkiDir string, ca *testCA, name, cn, org string) {
	t.Helper()
	c, k := ca.issue(t, cn, org)
	writeFile(t, filepath.Join(pkiDir, name+".pem"), c, 0o644)
	writeFile(t, filepath.Join(pkiDir, name+"-key.pem"), k, 0o600)
}

// newPKI writes ca.pem and every client pair into a temp pkiDir.
func newPKI(t *testing.T) (string, *testCA) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ca := newCA(t)
	writeFile(t, filepath.Join(dir, "ca.pem"), ca.pem, 0o644)
	for _, id := range identities {
		writePair(t, dir, ca, id.name, id.cn, id.org)
	}
	return dir, ca
}

func defaultCluster() *config.Cluster {
	return config.Default("test", config.ArchARM64, config.ProviderNspawn)
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
