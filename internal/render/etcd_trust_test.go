package render

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.uber.org/zap"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/pki"
)

// TestEtcdTrustsOnlyTheAPIServerCert issues khw's real PKI, reads the
// allowlist flags of the rendered etcd unit and puts them into etcd's own
// TLS code (go.etcd.io/etcd/client/pkg/v3/transport, TLSInfo.ServerConfig,
// filled as etcdmain/config.go fills it from the flags), then presents
// every client cert of the cluster to it: only the apiserver's `kubernetes`
// cert may pass, on the client and on the peer port. Besides khw's own certs
// it tries the two kinds the controller-manager signs with the same CA for
// a TLS-bootstrap kubelet (shaped as ValidateKubeletClientCSR and
// ValidateKubeletServingCSR in k8s.io/kubernetes pkg/apis/certificates
// allow them) and a cert with the SAN `kubernetes` but only the server auth
// EKU.
func TestEtcdTrustsOnlyTheAPIServerCert(t *testing.T) {
	c := config.Default("khw", config.ArchAMD64, config.ProviderNspawn)
	if _, err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := pki.Reconcile(c, dir, time.Time{}); err != nil {
		t.Fatal(err)
	}
	u := parseUnit(t, mustFile(t, nodeFiles(t, c, "cp1", nspawnFacts()), "/etc/systemd/system/etcd.service"))
	if _, ok := u.flags["--client-cert-auth"]; !ok {
		t.Fatal("etcd runs without --client-cert-auth")
	}
	list := func(flag string) []string {
		if vs, ok := u.flags[flag]; ok && vs[0] != "" {
			return strings.Split(vs[0], ",")
		}
		return nil
	}
	clientInfo := transport.TLSInfo{
		CertFile: filepath.Join(dir, "kubernetes.pem"), KeyFile: filepath.Join(dir, "kubernetes-key.pem"),
		TrustedCAFile: filepath.Join(dir, "ca.pem"), ClientCertAuth: true,
		AllowedHostnames: list("--client-cert-allowed-hostname"), Logger: zap.NewNop(),
	}
	peerInfo := clientInfo
	peerInfo.AllowedHostnames = list("--peer-cert-allowed-hostname")
	peerInfo.AllowedCNs = list("--peer-cert-allowed-cn")

	certs := map[string]tls.Certificate{}
	for _, s := range pki.Specs(c) {
		if s.Profile == pki.ProfileKubernetes || s.Profile == pki.ProfileClient {
			pair, err := tls.LoadX509KeyPair(filepath.Join(dir, s.Name+".pem"), filepath.Join(dir, s.Name+"-key.pem"))
			if err != nil {
				t.Fatal(err)
			}
			certs[s.Name] = pair
		}
	}
	ca, err := tls.LoadX509KeyPair(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	w3 := net.ParseIP("192.168.122.23")
	certs["w3 client (bootstrap)"] = signed(t, ca, &x509.Certificate{Subject: pkix.Name{CommonName: "system:node:w3", Organization: []string{"system:nodes"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	certs["w3 serving (bootstrap)"] = signed(t, ca, &x509.Certificate{Subject: pkix.Name{CommonName: "system:node:w3", Organization: []string{"system:nodes"}},
		DNSNames: []string{"w3"}, IPAddresses: []net.IP{w3}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	certs["server-only with SAN kubernetes"] = signed(t, ca, &x509.Certificate{Subject: pkix.Name{CommonName: "kubernetes"},
		DNSNames: []string{"kubernetes"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})

	risk := map[string]string{"client": "it would get read/write on every key", "peer": "it would be trusted as a member"}
	for port, info := range map[string]transport.TLSInfo{"client": clientInfo, "peer": peerInfo} {
		srv, err := info.ServerConfig()
		if err != nil {
			t.Fatalf("%s: etcd's ServerConfig: %v", port, err)
		}
		pool := x509.NewCertPool()
		caPEM, _ := os.ReadFile(info.TrustedCAFile)
		pool.AppendCertsFromPEM(caPEM)
		for name, cert := range certs {
			err := handshake(t, srv, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert}})
			if want := name == "kubernetes"; (err == nil) != want {
				if want {
					t.Errorf("etcd's %s port refuses the apiserver's cert: %v", port, err)
				} else {
					t.Errorf("etcd's %s port accepts the %s cert: %s", port, name, risk[port])
				}
			}
		}
	}
}

// signed returns a cert for a new P-256 key made from tmpl and signed by ca.
func signed(t *testing.T, ca tls.Certificate, tmpl *x509.Certificate) tls.Certificate {
	t.Helper()
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey.(crypto.Signer))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pemKey(t, key))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func pemKey(t *testing.T, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// handshake runs one TLS handshake over an in-memory pipe and returns the
// server's verdict on the client's cert (nil: accepted).
func handshake(t *testing.T, srv, cli *tls.Config) error {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		c := tls.Client(b, cli)
		err := c.Handshake()
		if err == nil {
			// TLS 1.3: the server judges the client cert after the client's
			// handshake is done; reading makes the client see its verdict.
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = c.Read(make([]byte, 1))
		}
		b.Close()
		done <- err
	}()
	s := tls.Server(a, srv)
	s.SetDeadline(time.Now().Add(5 * time.Second))
	err := s.Handshake()
	if err == nil {
		s.Write([]byte{0})
	}
	a.Close()
	if cerr := <-done; err == nil && cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		t.Logf("client side: %v", cerr)
	}
	return err
}
