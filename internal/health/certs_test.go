package health

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testCertPEM(t *testing.T, cn string, notAfter time.Time, ca bool) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: notAfter.Add(-48 * time.Hour), NotAfter: notAfter, IsCA: ca, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	// A file as kubelet-client-current.pem is: the key, then the cert.
	return append(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
}

// The command runs in bash over a tree like a node's: it prints the
// certificates, never a private key, and parseCerts reads them back.
func TestCertsCommandOnATree(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	root := t.TempDir()
	etcd, kube, pki := filepath.Join(root, "etc/etcd"), filepath.Join(root, "var/lib/kubernetes"), filepath.Join(root, "var/lib/kubelet/pki")
	for _, d := range []string{etcd, kube, pki} {
		os.MkdirAll(d, 0o700)
	}
	now := time.Now().UTC().Truncate(time.Second)
	write := func(p string, data []byte) {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(etcd, "ca.pem"), testCertPEM(t, "Kubernetes", now.Add(3650*24*time.Hour), true))
	write(filepath.Join(etcd, "kubernetes-key.pem"), []byte("-----BEGIN EC PRIVATE KEY-----\nc2VjcmV0\n-----END EC PRIVATE KEY-----\n"))
	write(filepath.Join(etcd, "kubernetes.pem"), testCertPEM(t, "kubernetes", now.Add(10*24*time.Hour+time.Hour), false))
	write(filepath.Join(pki, "kubelet-client-2026-12-01-10-00-00.pem"), testCertPEM(t, "old", now.Add(-time.Hour), false))
	current := testCertPEM(t, "system:node:w3", now.Add(-25*time.Hour), false)
	write(filepath.Join(pki, "kubelet-client-2026-12-04-10-00-00.pem"), current)
	os.Symlink("kubelet-client-2026-12-04-10-00-00.pem", filepath.Join(pki, "kubelet-client-current.pem"))
	_, certOnly, _ := strings.Cut(string(testCertPEM(t, "system:kube-scheduler", now.Add(364*24*time.Hour), false)), "-----END EC PRIVATE KEY-----\n")
	write(filepath.Join(kube, "kube-scheduler.kubeconfig"), []byte("users:\n- name: system:kube-scheduler\n  user:\n    client-certificate-data: "+
		base64.StdEncoding.EncodeToString([]byte(certOnly))+"\n    client-key-data: c2VjcmV0\n"))

	out, err := exec.Command("bash", "-c", certsCommand([]string{etcd, kube, pki})).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if strings.Contains(string(out), "PRIVATE KEY") || strings.Contains(string(out), "c2VjcmV0") {
		t.Fatalf("a private key left the node:\n%s", out)
	}
	certs := parseCerts(string(out))
	got := map[string]Cert{}
	for _, c := range certs {
		got[filepath.Base(c.File)] = c
	}
	if len(certs) != 4 {
		t.Fatalf("%d certs, want 4 (ca, kubernetes, kubelet-client-current, the kubeconfig's): %+v", len(certs), certs)
	}
	for file, want := range map[string]struct {
		cn   string
		days int
		ca   bool
	}{
		"ca.pem": {"Kubernetes", 3650, true}, "kubernetes.pem": {"kubernetes", 10, false},
		"kubelet-client-current.pem": {"system:node:w3", -2, false}, "kube-scheduler.kubeconfig": {"system:kube-scheduler", 364, false},
	} {
		c, ok := got[file]
		if !ok || c.Err != "" || c.Subject != "CN="+want.cn || c.CA != want.ca || c.DaysLeft(now) != want.days {
			t.Errorf("%s: %+v (days left %d), want CN=%s, %d days, CA %v", file, c, c.DaysLeft(now), want.cn, want.days, want.ca)
		}
	}
}

func TestParseCertsNamesBadFiles(t *testing.T) {
	certs := parseCerts("==> /var/lib/kubelet/kubeconfig\n%%%not base64\n==> /etc/etcd/x.pem\n-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	if len(certs) != 2 || !strings.Contains(certs[0].Err, "not base64") || certs[1].Err == "" {
		t.Fatalf("%+v", certs)
	}
}
