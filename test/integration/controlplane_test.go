// Package integration runs khw's generated PKI, kubeconfigs, encryption
// config and unit flag sets against the real Kubernetes control plane: a
// 3-member etcd, kube-apiserver, kube-controller-manager and kube-scheduler
// as local processes on loopback addresses 127.0.1.x.
//
// Binaries come from a mirror ($KHW_MIRROR, fetched with khw's fetcher) or
// $KHW_TEST_BINDIR; `make test` builds the mirror from Go modules first
// (hack/build-mirror.sh). Without either the test skips loudly.
package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	authnv1 "k8s.io/api/authentication/v1"
	certsv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/khw-dev/khw/internal/encryption"
	"github.com/khw-dev/khw/internal/kube"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/tlsbootstrap"
)

func TestControlPlane(t *testing.T) {
	cp := startControlPlane(t)
	c, d, etcd, ca, pool, server, adminCfg, admin := cp.c, cp.d, cp.etcd, cp.ca, cp.pool, cp.server, cp.adminCfg, cp.admin
	ctx := context.Background()

	t.Run("admin is cluster-admin", func(t *testing.T) {
		ns, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, n := range ns.Items {
			names[n.Name] = true
		}
		if !names["default"] || !names["kube-system"] {
			t.Fatalf("namespaces: %v", names)
		}
	})

	t.Run("w1 cert is system:node:w1 and limited to its node", func(t *testing.T) {
		cfg, err := kube.RESTConfig(filepath.Join(d.KubeconfigDir(), "w1.kubeconfig"), server)
		if err != nil {
			t.Fatal(err)
		}
		w1 := kubernetes.NewForConfigOrDie(cfg)
		r, err := w1.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ui := r.Status.UserInfo
		if ui.Username != "system:node:w1" || !contains(ui.Groups, "system:nodes") {
			t.Fatalf("w1 is %q %v", ui.Username, ui.Groups)
		}
		if _, err := admin.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "not-for-w1"},
			StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err = w1.CoreV1().Secrets("default").Get(ctx, "not-for-w1", metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("w1 reading a secret no pod of its node uses: want Forbidden, got %v", err)
		}
	})

	t.Run("secrets are encrypted in etcd", func(t *testing.T) {
		if _, err := admin.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes-the-hard-way"},
			StringData: map[string]string{"mykey": "mydata"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want, err := encryption.EtcdPrefix(d.EncryptionConfigPath())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := etcd.Get(ctx, "/registry/secrets/default/kubernetes-the-hard-way")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("etcd get: %v %v", resp, err)
		}
		raw := resp.Kvs[0].Value
		if !strings.HasPrefix(string(raw), want) || want != "k8s:enc:aescbc:v1:key1:" {
			t.Fatalf("raw value starts %q, want %q", raw[:min(len(raw), 30)], want)
		}
		if strings.Contains(string(raw), "mydata") {
			t.Fatal("plain text in etcd")
		}
	})

	t.Run("etcd answers only the apiserver's cert", func(t *testing.T) {
		// etcd runs with the flags of khw's rendered etcd.service
		// (startControlPlane): --client-cert-allowed-hostname=kubernetes
		// and --peer-cert-allowed-cn=kubernetes, which the members already
		// pass by forming the cluster.
		for _, n := range cp.cps {
			body, err := etcdVersion(pool, d.PKIDir(), "kubernetes", n.IP, nil)
			if err != nil || !strings.Contains(body, `"etcdserver":"3.`) {
				t.Errorf("%s with the kubernetes cert: %q %v", n.Name, body, err)
			}
			before := strings.Count(readFile(cp.etcdProcs[n.Name].log), refused)
			who := []string{"w1", "w2", "kube-proxy", "admin", "kube-controller-manager"}
			for _, c := range who {
				if body, err := etcdVersion(pool, d.PKIDir(), c, n.IP, nil); err == nil {
					t.Errorf("%s answered %s.pem: %q", n.Name, c, body)
				}
			}
			// The reason, from etcd itself (whether the client reads the TLS
			// alert before the connection closes is a race).
			waitFor(t, n.Name+" logs each refusal", 5*time.Second, func() error {
				if got := strings.Count(readFile(cp.etcdProcs[n.Name].log), refused) - before; got < len(who) {
					return fmt.Errorf("%q logged %d times for %d refused certs", refused, got, len(who))
				}
				return nil
			})
		}
		// And through etcd's own client, with a read the apiserver makes.
		pair, err := tls.LoadX509KeyPair(filepath.Join(d.PKIDir(), "w1.pem"), filepath.Join(d.PKIDir(), "w1-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		w1, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + cp.cps[0].IP + ":2379"}, DialTimeout: 3 * time.Second,
			TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}})
		if err != nil {
			t.Fatal(err)
		}
		defer w1.Close()
		gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if resp, err := w1.Get(gctx, "/registry/secrets/", clientv3.WithPrefix(), clientv3.WithKeysOnly()); err == nil {
			t.Errorf("w1's kubelet cert listed %d Secrets in etcd", len(resp.Kvs))
		}
		if resp, err := etcd.Get(ctx, "/registry/namespaces/default"); err != nil || len(resp.Kvs) != 1 {
			t.Errorf("the kubernetes cert cannot read etcd: %v %v", resp, err)
		}
	})

	t.Run("controller-manager and scheduler hold their Leases", func(t *testing.T) {
		for _, l := range []string{"kube-controller-manager", "kube-scheduler"} {
			waitFor(t, "Lease kube-system/"+l, 90*time.Second, func() error {
				lease, err := admin.CoordinationV1().Leases("kube-system").Get(ctx, l, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
					return fmt.Errorf("no holder")
				}
				return nil
			})
		}
	})

	t.Run("TLS bootstrap: token, client CSR auto-approved, serving CSR checked by khw", func(t *testing.T) {
		manifests, err := render.Manifests(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range manifests {
			if strings.Contains(m.Path, "rbac") {
				if _, err := kube.Apply(ctx, adminCfg, m.Data); err != nil {
					t.Fatalf("apply %s: %v", m.Path, err)
				}
			}
		}
		tok, err := tlsbootstrap.NewToken(nil)
		if err != nil {
			t.Fatal(err)
		}
		sec, err := tok.SecretObject(time.Now().Add(time.Hour), "integration test", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CoreV1().Secrets("kube-system").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		bootCfg := &rest.Config{Host: server, BearerToken: tok.Value(), TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
		boot := kubernetes.NewForConfigOrDie(bootCfg)
		// The token authenticator reads the Secret from an informer's
		// cache, which sees a new Secret a moment after it is created:
		// until then the token is Unauthorized.
		var r *authnv1.SelfSubjectReview
		waitFor(t, "the bootstrap token to authenticate", 30*time.Second, func() error {
			r, err = boot.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
			return err
		})
		if r.Status.UserInfo.Username != tok.User() || !contains(r.Status.UserInfo.Groups, "system:bootstrappers") {
			t.Fatalf("bootstrap token is %q %v", r.Status.UserInfo.Username, r.Status.UserInfo.Groups)
		}

		// The client CSR a bootstrapping kubelet sends: approved by the
		// controller-manager (csrapproving, nodeclient binding) and signed
		// with the cluster CA (csrsigning).
		clientCSR, clientKey := newCSRKey(t, "w3-client", "system:node:w3", nil, nil, tlsbootstrap.ClientSigner,
			certsv1.UsageDigitalSignature, certsv1.UsageClientAuth)
		if _, err := boot.CertificatesV1().CertificateSigningRequests().Create(ctx, clientCSR, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		issued := waitIssued(t, admin, "w3-client")
		if issued.Subject.CommonName != "system:node:w3" || !contains(issued.Subject.Organization, "system:nodes") {
			t.Fatalf("issued client cert subject %v", issued.Subject)
		}
		if _, err := issued.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("issued cert does not chain to the cluster CA: %v", err)
		}
		// Signed by the CA etcd trusts, yet no etcd client.
		w3Pair := &tls.Certificate{Certificate: [][]byte{issued.Raw}, PrivateKey: clientKey}
		before := strings.Count(readFile(cp.etcdProcs[cp.cps[0].Name].log), refused)
		if body, err := etcdVersion(pool, d.PKIDir(), "", cp.cps[0].IP, w3Pair); err == nil {
			t.Errorf("etcd answered w3's bootstrap-issued client cert: %q", body)
		}
		waitFor(t, "etcd logs the refusal of w3's cert", 5*time.Second, func() error {
			if strings.Count(readFile(cp.etcdProcs[cp.cps[0].Name].log), refused) == before {
				return fmt.Errorf("no %q", refused)
			}
			return nil
		})

		// The hole one CA leaves (lab 04): the kube-apiserver-client signer
		// copies a CSR's SANs, so a CSR with the DNS SAN kubernetes that an
		// admin approves is an etcd client. Only a CA for etcd alone closes
		// it; this pins what lab 04 says.
		sanCSR, sanKey := newCSRKey(t, "etcd-by-san", "someone", []string{"kubernetes"}, nil, certsv1.KubeAPIServerClientSignerName,
			certsv1.UsageDigitalSignature, certsv1.UsageClientAuth)
		sanCSR, err = admin.CertificatesV1().CertificateSigningRequests().Create(ctx, sanCSR, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sanCSR.Status.Conditions = append(sanCSR.Status.Conditions, certsv1.CertificateSigningRequestCondition{
			Type: certsv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test", Message: "approved by an admin"})
		if _, err := admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, sanCSR.Name, sanCSR, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		sanCert := waitIssued(t, admin, "etcd-by-san")
		if body, err := etcdVersion(pool, d.PKIDir(), "", cp.cps[0].IP, &tls.Certificate{Certificate: [][]byte{sanCert.Raw}, PrivateKey: sanKey}); err != nil {
			t.Errorf("an approved kube-apiserver-client cert with the SAN kubernetes: lab 04 says etcd accepts it, got %q %v", body, err)
		}

		// Serving CSRs: never auto-approved upstream; khw approves only the
		// node's own request for exactly its name and IP.
		w1Cfg, _ := kube.RESTConfig(filepath.Join(d.KubeconfigDir(), "w1.kubeconfig"), server)
		w1 := kubernetes.NewForConfigOrDie(w1Cfg)
		w1Node, _ := c.Node("w1")
		expect := tlsbootstrap.ServingExpect{Node: "w1", DNSNames: []string{"w1"}, IPs: []string{w1Node.IP}}
		good := newCSR(t, "w1-serving", "system:node:w1", []string{"w1"}, []string{w1Node.IP}, tlsbootstrap.ServingSigner,
			certsv1.UsageDigitalSignature, certsv1.UsageServerAuth)
		extra := newCSR(t, "w1-serving-extra", "system:node:w1", []string{"w1", "evil.example.com"}, []string{w1Node.IP}, tlsbootstrap.ServingSigner,
			certsv1.UsageDigitalSignature, certsv1.UsageServerAuth)
		byAdmin := newCSR(t, "w1-serving-by-admin", "system:node:w1", []string{"w1"}, []string{w1Node.IP}, tlsbootstrap.ServingSigner,
			certsv1.UsageDigitalSignature, certsv1.UsageServerAuth)
		for _, x := range []struct {
			cs  *kubernetes.Clientset
			csr *certsv1.CertificateSigningRequest
		}{{w1, good}, {w1, extra}, {admin, byAdmin}} {
			if _, err := x.cs.CertificatesV1().CertificateSigningRequests().Create(ctx, x.csr, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create %s: %v", x.csr.Name, err)
			}
		}
		// By now the controller-manager has approved the client CSR above, so
		// it is running; give it several more sync rounds to (wrongly) act.
		time.Sleep(5 * time.Second)
		got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "w1-serving", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := tlsbootstrap.State(got); st != "Pending" {
			t.Fatalf("a kubelet-serving CSR was %s without khw", st)
		}
		if err := tlsbootstrap.Approve(ctx, admin, got, expect); err != nil {
			t.Fatalf("khw refused a correct serving CSR: %v", err)
		}
		cert := waitIssued(t, admin, "w1-serving")
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "w1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Fatalf("serving cert: %v", err)
		}
		for name, words := range map[string]string{"w1-serving-extra": "not allowed: evil.example.com", "w1-serving-by-admin": `requested by "admin"`} {
			csr, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			err = tlsbootstrap.Approve(ctx, admin, csr, expect)
			if err == nil || !strings.Contains(err.Error(), words) {
				t.Fatalf("%s: want refusal mentioning %q, got %v", name, words, err)
			}
			csr, _ = admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			if st, _ := tlsbootstrap.State(csr); st != "Pending" {
				t.Fatalf("%s is %s after a refusal", name, st)
			}
		}
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// newCSR makes a CertificateSigningRequest with a fresh P-256 key.
func newCSR(t *testing.T, name, cn string, dns, ips []string, signer string, usages ...certsv1.KeyUsage) *certsv1.CertificateSigningRequest {
	t.Helper()
	csr, _ := newCSRKey(t, name, cn, dns, ips, signer, usages...)
	return csr
}

// refused is what etcd logs for a client cert outside its allowlist
// (client/pkg/v3 transport/listener.go, VerifyPeerCertificate).
const refused = "client certificate authentication failed"

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// etcdVersion GETs https://<ip>:2379/version presenting <pkiDir>/<who>.pem,
// or pair when given, and returns the body. A cert etcd refuses fails the
// TLS handshake (etcd logs refused).
func etcdVersion(pool *x509.CertPool, pkiDir, who, ip string, pair *tls.Certificate) (string, error) {
	if pair == nil {
		p, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, who+".pem"), filepath.Join(pkiDir, who+"-key.pem"))
		if err != nil {
			return "", err
		}
		pair = &p
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{*pair}}}}
	resp, err := hc.Get("https://" + ip + ":2379/version")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// newCSRKey is newCSR that also returns the key.
func newCSRKey(t *testing.T, name, cn string, dns, ips []string, signer string, usages ...certsv1.KeyUsage) (*certsv1.CertificateSigningRequest, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}}, DNSNames: dns}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certsv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certsv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: signer,
			Usages:     usages,
		},
	}, key
}

func waitIssued(t *testing.T, cs *kubernetes.Clientset, name string) *x509.Certificate {
	t.Helper()
	var cert *x509.Certificate
	waitFor(t, "CSR "+name+" issued", 60*time.Second, func() error {
		csr, err := cs.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st, ok := tlsbootstrap.State(csr)
		if !ok {
			return fmt.Errorf("state %s, no certificate yet", st)
		}
		b, _ := pem.Decode(csr.Status.Certificate)
		if b == nil {
			return fmt.Errorf("certificate is not PEM")
		}
		cert, err = x509.ParseCertificate(b.Bytes)
		return err
	})
	return cert
}
