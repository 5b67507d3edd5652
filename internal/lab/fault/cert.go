package fault

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// Reissue returns a faulty twin of the state directory's certificate
// pki/<name>.pem, PEM-encoded: the same public key (so the node's key file
// still pairs with it), subject, SANs, usages and validity, changed by
// change, and signed by the cluster CA (pki/ca.pem, pki/ca-key.pem) with a
// new serial number. It is how people make the certificate mistakes of
// lab 02 with cfssl or openssl: a real certificate of the right CA that
// says the wrong thing. Errors: a file that cannot be read or parsed.
func Reissue(pkiDir, name string, change func(*x509.Certificate)) ([]byte, error) {
	cert, err := readCert(filepath.Join(pkiDir, name+".pem"))
	if err != nil {
		return nil, err
	}
	ca, err := readCert(filepath.Join(pkiDir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	caKey, err := readKey(filepath.Join(pkiDir, "ca-key.pem"))
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        cert.Subject,
		NotBefore:      cert.NotBefore,
		NotAfter:       cert.NotAfter,
		KeyUsage:       cert.KeyUsage,
		ExtKeyUsage:    cert.ExtKeyUsage,
		DNSNames:       cert.DNSNames,
		IPAddresses:    cert.IPAddresses,
		AuthorityKeyId: ca.SubjectKeyId,
	}
	change(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, cert.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign the faulty %s: %w", name, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func readCert(p string) (*x509.Certificate, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", p)
	}
	return x509.ParseCertificate(b.Bytes)
}

func readKey(p string) (crypto.Signer, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, fmt.Errorf("%s: no PEM key", p)
	}
	var k any
	switch b.Type {
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(b.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
	default:
		k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: not a signing key", p)
	}
	return s, nil
}

// NewCA returns a self-signed CA certificate, PEM-encoded, that is not the
// cluster's: what a student gets by running cfssl gencert -initca again.
// Its key is thrown away.
func NewCA(commonName string) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(now.UnixNano()),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"Kubernetes"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
