package pki

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	cfconfig "github.com/cloudflare/cfssl/config"
	"github.com/cloudflare/cfssl/csr"
	"github.com/cloudflare/cfssl/helpers"
	"github.com/cloudflare/cfssl/initca"
	"github.com/cloudflare/cfssl/signer"
	"github.com/cloudflare/cfssl/signer/local"

	"github.com/khw-dev/khw/internal/config"
)

// defaultCluster is the cluster of cluster-facts.md, validated.
func defaultCluster(t testing.TB) *config.Cluster {
	t.Helper()
	c := config.Default("khw", config.ArchARM64, config.ProviderLibvirt)
	if _, err := c.Validate(); err != nil {
		t.Fatalf("default cluster does not validate: %v", err)
	}
	return c
}

// reconcile runs Reconcile and fails the test on error.
func reconcile(t testing.TB, c *config.Cluster, dir string, now time.Time, opts ...Option) *Report {
	t.Helper()
	r, err := Reconcile(c, dir, now, opts...)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return r
}

func readCert(t testing.TB, dir, name string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name+".pem"))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := helpers.ParseCertificatePEM(b)
	if err != nil {
		t.Fatalf("%s.pem: %v", name, err)
	}
	return cert
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// status returns the report entry for name or fails.
func status(t testing.TB, r *Report, name string) CertStatus {
	t.Helper()
	s, ok := r.Cert(name)
	if !ok {
		t.Fatalf("report has no entry for %s:\n%s", name, r)
	}
	return s
}

func codes(rs []Reason) []ReasonCode {
	var out []ReasonCode
	for _, r := range rs {
		out = append(out, r.Code)
	}
	return out
}

// leafNames are the non-CA certs of the default cluster.
var leafNames = []string{"admin", "w1", "w2", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubernetes", "service-account"}

// allNames are all certs of the default cluster.
var allNames = append([]string{"ca"}, leafNames...)

// assertOnly checks that exactly the names in changed have action act with
// reason code rc, and that every other cert of the default cluster is kept.
func assertOnly(t *testing.T, r *Report, act Action, rc ReasonCode, changed ...string) {
	t.Helper()
	for _, n := range allNames {
		s := status(t, r, n)
		if slices.Contains(changed, n) {
			if s.Action != act || !slices.Contains(codes(s.Reasons), rc) {
				t.Errorf("%s: got %s %v, want %s with reason %s", n, s.Action, s.Reasons, act, rc)
			}
		} else if s.Action != Kept {
			t.Errorf("%s: got %s %v, want kept", n, s.Action, s.Reasons)
		}
	}
}

// handIssue signs a cert the way a student does with `cfssl gencert` against
// the pki directory's own ca.pem, ca-key.pem and ca-config.json, but with
// any CN, O, hosts, profile and validity; the informational subject fields
// are the default pki.subject (C=US, ST=Oregon, L=Portland, OU=Kubernetes The
// Hard Way), as the CSR JSON files have them. It does not use khw's issuing
// code.
func handIssue(t testing.TB, dir, cn, o string, hosts []string, profile string, nb, na time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	return handIssueReq(t, dir, &csr.CertificateRequest{CN: cn, Hosts: hosts,
		Names: []csr.Name{{C: "US", ST: "Oregon", L: "Portland", O: o, OU: "Kubernetes The Hard Way"}}}, profile, nb, na)
}

// handIssueReq is handIssue for a whole CSR JSON request (an ECDSA P-256 key
// unless req asks otherwise).
func handIssueReq(t testing.TB, dir string, req *csr.CertificateRequest, profile string, nb, na time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	cfg, err := cfconfig.LoadFile(filepath.Join(dir, "ca-config.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := local.NewSignerFromFile(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"), cfg.Signing)
	if err != nil {
		t.Fatal(err)
	}
	if req.KeyRequest == nil {
		req.KeyRequest = &csr.KeyRequest{A: "ecdsa", S: 256}
	}
	hosts := req.Hosts
	csrPEM, keyPEM, err := csr.ParseRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err = s.Sign(signer.SignRequest{Hosts: hosts, Request: string(csrPEM), Profile: profile, NotBefore: nb, NotAfter: na})
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

// snapshot records content and mtime of every file in dir.
type fileState struct {
	data  string
	mtime time.Time
	mode  os.FileMode
}

func snapshot(t testing.TB, dir string) map[string]fileState {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]fileState{}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fileState{data: string(readFile(t, p)), mtime: st.ModTime(), mode: st.Mode().Perm()}
	}
	return out
}

// assertUnchanged checks that dir holds exactly the files of before, with the
// same content, mtime and mode: nothing was written.
func assertUnchanged(t *testing.T, dir string, before map[string]fileState) {
	t.Helper()
	after := snapshot(t, dir)
	if len(after) != len(before) {
		t.Errorf("file count %d → %d", len(before), len(after))
	}
	for name, b := range before {
		a, ok := after[name]
		if !ok || a.data != b.data || !a.mtime.Equal(b.mtime) || a.mode != b.mode {
			t.Errorf("%s was changed (present %v, mode %v → %v)", name, ok, b.mode, a.mode)
		}
	}
}

// A second CA made with cfssl's initca, for the "not our CA" case.
func otherCA(t testing.TB) (certPEM, keyPEM []byte) {
	t.Helper()
	cert, _, key, err := initca.New(&csr.CertificateRequest{CN: "Someone Else's CA", KeyRequest: csr.NewKeyRequest()})
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
