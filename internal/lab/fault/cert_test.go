package fault

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
)

// writePKI makes pki/ca.pem, ca-key.pem and a leaf web.pem (SANs web and
// lb) signed by it in a temporary directory.
func writePKI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	caT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Kubernetes"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, SubjectKeyId: []byte{1, 2, 3}}
	caDER, err := x509.CreateCertificate(rand.Reader, caT, caT, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafT := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "web"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		DNSNames: []string{"web", "lb"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafT, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(caKey)
	for name, b := range map[string]*pem.Block{
		"ca.pem": {Type: "CERTIFICATE", Bytes: caDER}, "ca-key.pem": {Type: "EC PRIVATE KEY", Bytes: keyDER}, "web.pem": {Type: "CERTIFICATE", Bytes: leafDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestReissueKeepsKeyAndChangesOneThing(t *testing.T) {
	dir := writePKI(t)
	out, err := Reissue(dir, "web", func(c *x509.Certificate) { c.DNSNames = []string{"web"} })
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(out)
	got, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	orig, _ := readCert(filepath.Join(dir, "web.pem"))
	ca, _ := readCert(filepath.Join(dir, "ca.pem"))
	if err := got.CheckSignatureFrom(ca); err != nil {
		t.Errorf("the faulty twin is not signed by the cluster CA: %v", err)
	}
	if !got.PublicKey.(*ecdsa.PublicKey).Equal(orig.PublicKey) {
		t.Error("the faulty twin has another public key: the node's key file would not pair with it")
	}
	if got.Subject.CommonName != "web" || len(got.DNSNames) != 1 || got.SerialNumber.Cmp(orig.SerialNumber) == 0 {
		t.Errorf("twin: CN %q, SANs %v, serial %v; want CN web, SANs [web], a new serial", got.Subject.CommonName, got.DNSNames, got.SerialNumber)
	}
	if _, err := Reissue(dir, "missing", func(*x509.Certificate) {}); err == nil {
		t.Error("Reissue of a missing certificate: no error")
	}
}

func TestNewCAIsAnotherCA(t *testing.T) {
	dir := writePKI(t)
	out, err := NewCA("Kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(out)
	other, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := readCert(filepath.Join(dir, "web.pem"))
	if !other.IsCA || other.Subject.CommonName != "Kubernetes" {
		t.Errorf("NewCA: IsCA %v, CN %q", other.IsCA, other.Subject.CommonName)
	}
	if err := leaf.CheckSignatureFrom(other); err == nil {
		t.Error("a certificate of the cluster CA verifies against the new CA")
	}
}

func TestValidID(t *testing.T) {
	for id, ok := range map[string]bool{"lb-bind-loopback": true, "etcd-peer-ca": true, "x": false, "Bad-ID": false, "a--b": false, "-a-b": false} {
		if err := ValidID(id); (err == nil) != ok {
			t.Errorf("ValidID(%q) = %v, want ok %v", id, err, ok)
		}
	}
}
