package pki

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudflare/cfssl/csr"
	"github.com/cloudflare/cfssl/initca"
)

// The not-signed-by-ca reason says why, in the three ways a cert can fail
// to chain: the CA key changed (same issuer name), another CA issued it,
// the CA subject changed (covered in TestSubjectChange).
func TestNotSignedByReasonSaysWhy(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	for _, tc := range []struct {
		name    string
		replace func(t *testing.T, dir string) (certPEM, keyPEM []byte)
		want    string
	}{
		{"same subject, new key", func(t *testing.T, dir string) ([]byte, []byte) {
			// A student's `cfssl gencert -initca ca-csr.json` over the old CA.
			var req csr.CertificateRequest
			if err := json.Unmarshal(readFile(t, filepath.Join(dir, "ca-csr.json")), &req); err != nil {
				t.Fatal(err)
			}
			cert, _, key, err := initca.New(&req)
			if err != nil {
				t.Fatal(err)
			}
			return cert, key
		}, "signature does not verify with the current ca.pem (the CA key changed)"},
		{"another CA", func(t *testing.T, dir string) ([]byte, []byte) { return otherCA(t) },
			`issued by "CN=Kubernetes,OU=CA,O=Kubernetes,L=Portland,ST=Oregon,C=US", another CA than the current ca.pem ("CN=Someone Else's CA")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultCluster(t)
			dir := t.TempDir()
			reconcile(t, c, dir, now)
			cert, key := tc.replace(t, dir)
			writePair(t, dir, "ca", cert, key)
			r := reconcile(t, c, dir, now)
			ca := readCert(t, dir, "ca")
			for _, n := range leafNames {
				s := status(t, r, n)
				// The service-account detail goes on to say it was re-signed for its key.
				if !slices.Equal(codes(s.Reasons), []ReasonCode{ReasonNotSignedBy}) || !strings.HasPrefix(s.Reasons[0].Detail, tc.want) ||
					(n != "service-account" && s.Reasons[0].Detail != tc.want) {
					t.Errorf("%s: %v, want not-signed-by-ca: %s", n, s.Reasons, tc.want)
				}
				if !signedBy(readCert(t, dir, n), ca) {
					t.Errorf("%s not reissued by the current CA", n)
				}
			}
		})
	}
}

// Damaged leaf files are explained in words naming the file, never with
// cfssl's JSON errors.
func TestUnreadableReasonsArePlain(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now()
	reconcile(t, c, dir, now)
	writeFile(t, filepath.Join(dir, "admin.pem"), "garbage\n")
	copyFile(t, filepath.Join(dir, "ca.pem"), filepath.Join(dir, "kube-proxy-key.pem"))
	writeFile(t, filepath.Join(dir, "kube-scheduler.pem"), "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	copyFile(t, filepath.Join(dir, "kubernetes-key.pem"), filepath.Join(dir, "kubernetes.pem"))
	r := reconcile(t, c, dir, now)
	for name, want := range map[string]string{
		"admin":          "admin.pem holds no PEM block",
		"kube-proxy":     "kube-proxy-key.pem holds a certificate, not a private key",
		"kube-scheduler": "kube-scheduler.pem holds a CERTIFICATE block that does not parse: x509:",
		"kubernetes":     "kubernetes.pem holds a private key (EC PRIVATE KEY), not a certificate",
	} {
		s := status(t, r, name)
		if s.Action != Reissued || s.Reasons[0].Code != ReasonUnreadable || !strings.HasPrefix(s.Reasons[0].Detail, want) {
			t.Errorf("%s: %s %v, want reissued (unreadable: %s…)", name, s.Action, s.Reasons, want)
		}
		if strings.Contains(s.Reasons[0].Detail, `{"code"`) {
			t.Errorf("%s: raw cfssl error %q", name, s.Reasons[0].Detail)
		}
	}
	checkCerts(t, c, dir, now, now)
}

func TestPlainErr(t *testing.T) {
	_, err := parseCertPEM([]byte("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"))
	if err == nil || err.Error() != "holds a private key (RSA PRIVATE KEY), not a certificate" {
		t.Errorf("parseCertPEM(key) = %v", err)
	}
	_, err = parseKeyPEM([]byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"))
	if err == nil || strings.Contains(err.Error(), `{"code"`) || !strings.Contains(err.Error(), "holds a PEM block of type EC PRIVATE KEY that is not a valid private key (failed to parse private key)") {
		t.Errorf("parseKeyPEM(bad key) = %v", err)
	}
	_, err = parseKeyPEM([]byte("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n"))
	if err == nil || !strings.Contains(err.Error(), "encrypted private key") {
		t.Errorf("parseKeyPEM(encrypted) = %v", err)
	}
	_, err = loadPolicy([]byte(`{"signing": {"profiles": {"x": {"usages": ["nonsense"], "expiry": "1h"}}}}`))
	if err == nil || strings.Contains(err.Error(), `{"code"`) || !strings.Contains(err.Error(), CAConfigFile) {
		t.Errorf("loadPolicy(bad) = %v", err)
	}
}

// A file with the right content but the wrong mode is chmod'ed back and
// listed in ModeFixed, not in Written.
func TestModeFixedIsReported(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now()
	reconcile(t, c, dir, now)
	for f, m := range map[string]os.FileMode{"admin-key.pem": 0o644, "w1.pem": 0o600, "kubernetes-csr.json": 0o666, "ca-config.json": 0o600} {
		if err := os.Chmod(filepath.Join(dir, f), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	want := []ModeFix{
		{".", "0755", "0700"},
		{"ca-config.json", "0600", "0644"},
		{"admin-key.pem", "0644", "0600"},
		{"w1.pem", "0600", "0644"},
		{"kubernetes-csr.json", "0666", "0644"},
	}
	dry := reconcile(t, c, dir, now, DryRun())
	if !slices.Equal(dry.ModeFixed, want) || len(dry.Written) != 0 || !dry.Changed() {
		t.Errorf("dry run: ModeFixed %v Written %v, want %v and nothing written", dry.ModeFixed, dry.Written, want)
	}
	if st, _ := os.Stat(filepath.Join(dir, "admin-key.pem")); st.Mode().Perm() != 0o644 {
		t.Error("the dry run changed a mode")
	}
	var log strings.Builder
	r := reconcile(t, c, dir, now, WithLog(&log))
	if !slices.Equal(r.ModeFixed, want) || len(r.Written) != 0 || !r.Changed() {
		t.Errorf("ModeFixed %v Written %v, want %v and nothing written", r.ModeFixed, r.Written, want)
	}
	if !strings.Contains(log.String(), "pki: mode admin-key.pem: mode 0644 set to 0600\n") {
		t.Errorf("log:\n%s", log.String())
	}
	for _, m := range want {
		if st, _ := os.Stat(filepath.Join(dir, m.File)); octal(st.Mode()) != m.Now {
			t.Errorf("%s mode %s, want %s", m.File, octal(st.Mode()), m.Now)
		}
	}
	if again := reconcile(t, c, dir, now); again.Changed() {
		t.Errorf("third run: %v %v", again.Written, again.ModeFixed)
	}
}

// Written lists every file written, in plan order, and only those.
func TestWrittenIsExact(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now()
	r := reconcile(t, c, dir, now)
	want := []string{"ca-config.json"}
	for _, n := range allNames {
		want = append(want, n+"-csr.json", n+"-key.pem", n+".pem")
	}
	if !slices.Equal(r.Written, want) {
		t.Errorf("fresh run wrote %v, want %v", r.Written, want)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(want) {
		t.Errorf("%d files in dir, %d in Written", len(entries), len(want))
	}

	// A re-signed CA rewrites ca.pem only (the key is kept, the CSR JSON is
	// the same); a reissued leaf its key and cert.
	before := snapshot(t, dir)
	os.Remove(filepath.Join(dir, "ca.pem"))
	os.Remove(filepath.Join(dir, "admin.pem"))
	time.Sleep(20 * time.Millisecond)
	r = reconcile(t, c, dir, now)
	if want := []string{"ca.pem", "admin-key.pem", "admin.pem"}; !slices.Equal(r.Written, want) {
		t.Errorf("wrote %v, want %v", r.Written, want)
	}
	after := snapshot(t, dir)
	for name, b := range before {
		a := after[name]
		if changed := a.data != b.data || !a.mtime.Equal(b.mtime); changed != slices.Contains(r.Written, name) {
			t.Errorf("%s: changed=%v, but Written=%v", name, changed, r.Written)
		}
	}
}
