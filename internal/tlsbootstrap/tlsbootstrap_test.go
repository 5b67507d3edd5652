package tlsbootstrap

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	certsv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestNewTokenFormatAndSecrecy(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		tok, err := NewToken(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !TokenIDRE.MatchString(tok.ID) || !TokenSecretRE.MatchString(tok.Secret) {
			t.Fatalf("bad token %q", tok.Value())
		}
		if strings.Contains(tok.String(), tok.Secret) || !strings.Contains(tok.String(), tok.ID) {
			t.Fatalf("String() = %q leaks or hides the wrong part", tok.String())
		}
		if seen[tok.Value()] {
			t.Fatal("duplicate token")
		}
		seen[tok.Value()] = true
	}
	if _, err := NewToken(strings.NewReader("short")); err == nil {
		t.Fatal("a short random source must fail")
	}
}

func TestSecretObjectPassesCheck(t *testing.T) {
	tok := Token{ID: "abc123", Secret: "0123456789abcdef"}
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	s, err := tok.SecretObject(now.Add(time.Hour), "w3 join", []string{"system:bootstrappers:khw"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "bootstrap-token-abc123" || s.Namespace != "kube-system" || s.Type != SecretType {
		t.Fatalf("secret meta %+v", s.ObjectMeta)
	}
	if p := CheckSecret(s, now); len(p) != 0 {
		t.Fatalf("valid secret flagged: %v", p)
	}
	if tok.User() != "system:bootstrap:abc123" {
		t.Fatal(tok.User())
	}
	if _, err := tok.SecretObject(now, "", []string{"system:nodes"}); err == nil {
		t.Fatal("extra group outside system:bootstrappers: accepted")
	}
	if _, err := (Token{ID: "ABC123", Secret: "x"}).SecretObject(now, "", nil); err == nil {
		t.Fatal("bad token accepted")
	}
}

func TestCheckSecretFindsMistakes(t *testing.T) {
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	good := func() *corev1.Secret {
		s, _ := Token{ID: "abc123", Secret: "0123456789abcdef"}.SecretObject(now.Add(time.Hour), "", nil)
		return s
	}
	cases := []struct {
		name  string
		mut   func(s *corev1.Secret)
		words string
	}{
		{"past expiration", func(s *corev1.Secret) { s.StringData[KeyExpiration] = "2020-01-01T00:00:00Z" }, "in the past"},
		{"bad expiration", func(s *corev1.Secret) { s.StringData[KeyExpiration] = "tomorrow" }, "not RFC3339"},
		{"uppercase id", func(s *corev1.Secret) { s.StringData[KeyTokenID] = "ABC123" }, "token-id"},
		{"short secret", func(s *corev1.Secret) { s.StringData[KeyTokenSecret] = "abc" }, "token-secret"},
		{"wrong name", func(s *corev1.Secret) { s.Name = "bootstrap-token-zzz999" }, "must be bootstrap-token-abc123"},
		{"wrong namespace", func(s *corev1.Secret) { s.Namespace = "default" }, "kube-system"},
		{"wrong type", func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque }, "type"},
		{"auth usage off", func(s *corev1.Secret) { delete(s.StringData, KeyUsageAuth) }, "usage-bootstrap-authentication"},
		{"bad extra group", func(s *corev1.Secret) { s.StringData[KeyExtraGroups] = "system:bootstrappers:ok,system:masters" }, `"system:masters"`},
	}
	for _, tc := range cases {
		s := good()
		tc.mut(s)
		p := CheckSecret(s, now)
		if len(p) == 0 || !strings.Contains(strings.Join(p, "\n"), tc.words) {
			t.Errorf("%s: problems %v should mention %q", tc.name, p, tc.words)
		}
	}
	// Data (as read back from the API) is checked like StringData.
	s := good()
	s.Data = map[string][]byte{}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
	if p := CheckSecret(s, now); len(p) != 0 {
		t.Fatalf("Data form flagged: %v", p)
	}
}

func csrFor(t *testing.T, cn string, org []string, dns []string, ips []string) []byte {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: org}, DNSNames: dns}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestCheckServingCSR(t *testing.T) {
	e := ServingExpect{Node: "w3", DNSNames: []string{"w3"}, IPs: []string{"192.168.122.23"}}
	mk := func(user string, req []byte, usages ...certsv1.KeyUsage) *certsv1.CertificateSigningRequest {
		if usages == nil {
			usages = []certsv1.KeyUsage{certsv1.UsageDigitalSignature, certsv1.UsageServerAuth}
		}
		return &certsv1.CertificateSigningRequest{Spec: certsv1.CertificateSigningRequestSpec{
			SignerName: ServingSigner, Username: user, Groups: []string{"system:nodes", "system:authenticated"},
			Request: req, Usages: usages}}
	}
	good := csrFor(t, "system:node:w3", []string{"system:nodes"}, []string{"w3"}, []string{"192.168.122.23"})
	if why := CheckServingCSR(mk("system:node:w3", good), e); len(why) != 0 {
		t.Fatalf("good CSR refused: %v", why)
	}
	cases := []struct {
		name  string
		csr   *certsv1.CertificateSigningRequest
		words string
	}{
		{"other node asks", mk("system:node:w1", good), `requested by "system:node:w1"`},
		{"bootstrap token asks", mk("system:bootstrap:abc123", good), "only the node itself"},
		{"extra DNS SAN", mk("system:node:w3", csrFor(t, "system:node:w3", []string{"system:nodes"}, []string{"w3", "evil.example.com"}, []string{"192.168.122.23"})), "not allowed: evil.example.com"},
		{"extra IP SAN", mk("system:node:w3", csrFor(t, "system:node:w3", []string{"system:nodes"}, []string{"w3"}, []string{"192.168.122.23", "10.0.0.1"})), "IP SANs not allowed: 10.0.0.1"},
		{"missing IP", mk("system:node:w3", csrFor(t, "system:node:w3", []string{"system:nodes"}, []string{"w3"}, nil)), "missing: 192.168.122.23"},
		{"wrong CN", mk("system:node:w3", csrFor(t, "system:node:w1", []string{"system:nodes"}, []string{"w3"}, []string{"192.168.122.23"})), "subject CN"},
		{"wrong O", mk("system:node:w3", csrFor(t, "system:node:w3", []string{"system:masters"}, []string{"w3"}, []string{"192.168.122.23"})), "subject O"},
		{"client usage", mk("system:node:w3", good, certsv1.UsageDigitalSignature, certsv1.UsageClientAuth), "client auth"},
	}
	for _, tc := range cases {
		why := CheckServingCSR(tc.csr, e)
		if len(why) == 0 || !strings.Contains(strings.Join(why, "; "), tc.words) {
			t.Errorf("%s: reasons %v should contain %q", tc.name, why, tc.words)
		}
	}
	c := mk("system:node:w3", good)
	c.Spec.SignerName = ClientSigner
	if why := CheckServingCSR(c, e); len(why) == 0 {
		t.Error("client signer accepted as serving")
	}
}
