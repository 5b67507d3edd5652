package pki

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// openssl is an independent witness: it parses and verifies the files
// without Go's crypto/x509 or cfssl.
func openssl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("openssl", args...).CombinedOutput()
	return string(out), err
}

func TestOpenSSLWitness(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed")
	}
	c := defaultCluster(t)
	dir := t.TempDir()
	reconcile(t, c, dir, time.Now()) // openssl verifies at the real time
	p := func(n string) string { return filepath.Join(dir, n) }

	for name, wants := range map[string][]string{
		"ca.pem": {"CA:TRUE, pathlen:0", "Certificate Sign, CRL Sign", "Subject: C = US, ST = Oregon, L = Portland, O = Kubernetes, OU = CA, CN = Kubernetes", "NIST CURVE: P-256"},
		"kubernetes.pem": append([]string{"CA:FALSE", "Digital Signature\n", "TLS Web Server Authentication, TLS Web Client Authentication",
			"O = Kubernetes, OU = Kubernetes The Hard Way, CN = kubernetes", "Issuer: C = US, ST = Oregon, L = Portland, O = Kubernetes, OU = CA, CN = Kubernetes"},
			sanStrings(kubernetesSANs)...),
		"admin.pem":           {"CA:FALSE", "Digital Signature\n", "TLS Web Client Authentication\n", "O = system:masters, OU = Kubernetes The Hard Way, CN = admin"},
		"w1.pem":              {"TLS Web Server Authentication, TLS Web Client Authentication", "O = system:nodes", "CN = system:node:w1", "DNS:w1, DNS:w1.kubernetes.local, IP Address:192.168.122.21"},
		"kube-scheduler.pem":  {"O = system:kube-scheduler, OU = Kubernetes The Hard Way, CN = system:kube-scheduler"},
		"service-account.pem": {"Digital Signature\n", "CN = service-accounts"},
	} {
		out, err := openssl(t, "x509", "-in", p(name), "-text", "-noout")
		if err != nil {
			t.Fatalf("openssl x509 %s: %v\n%s", name, err, out)
		}
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s: openssl output lacks %q:\n%s", name, w, out)
			}
		}
		if strings.Contains(out, "Key Encipherment") {
			t.Errorf("%s: an ECDSA cert has Key Encipherment", name)
		}
		if name == "service-account.pem" && strings.Contains(out, "TLS Web") {
			t.Errorf("service-account.pem has a TLS EKU:\n%s", out)
		}
	}

	// Every cert chains to the CA.
	args := []string{"verify", "-CAfile", p("ca.pem")}
	for _, n := range leafNames {
		args = append(args, p(n+".pem"))
	}
	out, err := openssl(t, args...)
	if err != nil {
		t.Fatalf("openssl verify: %v\n%s", err, out)
	}
	for _, n := range leafNames {
		if !strings.Contains(out, p(n+".pem")+": OK") {
			t.Errorf("openssl verify did not pass %s:\n%s", n, out)
		}
	}
	// EKU as openssl sees it: the serving certs pass as TLS servers, the
	// client-only ones do not.
	for n, server := range map[string]bool{"kubernetes": true, "w2": true, "admin": false, "kube-proxy": false} {
		out, err := openssl(t, "verify", "-CAfile", p("ca.pem"), "-purpose", "sslserver", p(n+".pem"))
		if ok := err == nil && strings.Contains(out, ": OK"); ok != server {
			t.Errorf("%s as TLS server: openssl says ok=%v, want %v:\n%s", n, ok, server, out)
		}
	}
	// Each key is its cert's key.
	for _, n := range allNames {
		pub1, err1 := openssl(t, "pkey", "-in", p(n+"-key.pem"), "-pubout")
		pub2, err2 := openssl(t, "x509", "-in", p(n+".pem"), "-pubkey", "-noout")
		if err1 != nil || err2 != nil || pub1 != pub2 || !bytes.HasPrefix([]byte(pub1), []byte("-----BEGIN PUBLIC KEY-----")) {
			t.Errorf("%s: key and cert public keys differ (%v %v)", n, err1, err2)
		}
	}
}

func sanStrings(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		if strings.ContainsAny(h, "abcdefghijklmnopqrstuvwxyz") {
			out = append(out, "DNS:"+h)
		} else {
			out = append(out, "IP Address:"+h)
		}
	}
	return out
}
