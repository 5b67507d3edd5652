package pki

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudflare/cfssl/csr"

	"github.com/khw-dev/khw/internal/config"
)

// csrNames reads <name>-csr.json as cfssl does and returns its one names
// entry.
func csrNames(t *testing.T, dir, name string) csr.Name {
	t.Helper()
	var req csr.CertificateRequest
	if err := json.Unmarshal(readFile(t, filepath.Join(dir, name+"-csr.json")), &req); err != nil {
		t.Fatal(err)
	}
	if len(req.Names) != 1 {
		t.Fatalf("%s-csr.json has %d names entries", name, len(req.Names))
	}
	return req.Names[0]
}

// assertCSRDescribesCert checks that every <name>-csr.json names the subject
// of the <name>.pem next to it.
func assertCSRDescribesCert(t *testing.T, dir string) {
	t.Helper()
	for _, n := range allNames {
		got, cert := csrNames(t, dir, n), readCert(t, dir, n)
		have := csr.Name{C: first(cert.Subject.Country), ST: first(cert.Subject.Province), L: first(cert.Subject.Locality),
			O: first(cert.Subject.Organization), OU: first(cert.Subject.OrganizationalUnit)}
		if got.C != have.C || got.ST != have.ST || got.L != have.L || got.O != have.O || got.OU != have.OU {
			t.Errorf("%s-csr.json names %+v, but %s.pem has %s", n, got, n, cert.Subject)
		}
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// Changing pki.subject reissues every leaf (its subject and CSR JSON
// change together), keeps the CA with its old subject and a warning (a new
// CA subject is a new CA), and with AllowNewCA re-signs the CA from the same
// key with the new subject.
func TestSubjectChange(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second)
	reconcile(t, c, dir, now)
	caPEM, caKey, caCSR := readFile(t, filepath.Join(dir, "ca.pem")), readFile(t, filepath.Join(dir, "ca-key.pem")), readFile(t, filepath.Join(dir, "ca-csr.json"))

	c.PKI.Subject.Locality = "Berlin"
	r := reconcile(t, c, dir, now)
	for _, n := range leafNames {
		want := Reissued
		if n == "service-account" {
			want = Resigned
		}
		s := status(t, r, n)
		if s.Action != want || len(s.Reasons) != 1 || s.Reasons[0].Code != ReasonSubject ||
			!strings.HasPrefix(s.Reasons[0].Detail, "subject differs: L=Portland, want L=Berlin") {
			t.Errorf("%s: %s %v, want %s (subject differs: L=Portland, want L=Berlin)", n, s.Action, s.Reasons, want)
		}
		if l := readCert(t, dir, n).Subject.Locality; !slices.Equal(l, []string{"Berlin"}) {
			t.Errorf("%s.pem has L=%v after the change", n, l)
		}
	}
	ca := status(t, r, "ca")
	if ca.Action != Kept || len(ca.Reasons) != 1 || ca.Reasons[0].Code != ReasonSubject ||
		!strings.Contains(ca.Reasons[0].Detail, "subject differs: L=Portland, want L=Berlin; the CA keeps its subject") ||
		!strings.Contains(ca.Reasons[0].Detail, "--new-ca") {
		t.Errorf("ca: %s %v, want kept with a subject warning", ca.Action, ca.Reasons)
	}
	if !bytes.Equal(caPEM, readFile(t, filepath.Join(dir, "ca.pem"))) || !bytes.Equal(caCSR, readFile(t, filepath.Join(dir, "ca-csr.json"))) {
		t.Error("ca.pem or ca-csr.json changed, though the CA was kept")
	}
	if csrNames(t, dir, "ca").L != "Portland" || csrNames(t, dir, "admin").L != "Berlin" {
		t.Error("CSR JSON does not follow the certs")
	}
	assertCSRDescribesCert(t, dir)
	checkCerts(t, c, dir, now, now)
	if again := reconcile(t, c, dir, now); again.Changed() || status(t, again, "admin").Action != Kept {
		t.Errorf("second run: wrote %v, admin %v", again.Written, status(t, again, "admin"))
	}

	// Asked for: the CA is re-signed from the same key with L=Berlin, and the
	// leaves, whose issuer names L=Portland, follow.
	r = reconcile(t, c, dir, now, AllowNewCA())
	if s := status(t, r, "ca"); s.Action != Resigned || !slices.Equal(codes(s.Reasons), []ReasonCode{ReasonSubject}) {
		t.Errorf("ca with AllowNewCA: %s %v, want re-signed (subject)", s.Action, s.Reasons)
	}
	if !bytes.Equal(caKey, readFile(t, filepath.Join(dir, "ca-key.pem"))) {
		t.Error("a subject change made a new CA key")
	}
	for _, n := range leafNames {
		s := status(t, r, n)
		if !slices.Equal(codes(s.Reasons), []ReasonCode{ReasonNotSignedBy}) || !strings.Contains(s.Reasons[0].Detail, "re-made with another subject") {
			t.Errorf("%s: %s %v, want not-signed-by-ca (another subject)", n, s.Action, s.Reasons)
		}
	}
	if l := readCert(t, dir, "ca").Subject.Locality; !slices.Equal(l, []string{"Berlin"}) {
		t.Errorf("ca.pem L=%v", l)
	}
	assertCSRDescribesCert(t, dir)
	verifyAll(t, dir, now)
}

// Before this rule a CSR JSON could say Berlin next to a cert that says
// Portland; a stale CSR JSON next to a kept cert is repaired to describe it.
func TestCSRJSONDescribesKeptCert(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second)
	reconcile(t, c, dir, now)
	berlin := defaultCluster(t)
	berlin.PKI.Subject.Locality = "Berlin"
	for _, n := range allNames {
		writeFile(t, filepath.Join(dir, n+"-csr.json"), string(csrJSON(berlin, specByName(t, berlin, n))))
	}
	r := reconcile(t, c, dir, now)
	for _, n := range allNames {
		if s := status(t, r, n); s.Action != Kept {
			t.Errorf("%s: %s %v, want kept", n, s.Action, s.Reasons)
		}
		if !slices.Contains(r.Written, n+"-csr.json") {
			t.Errorf("stale %s-csr.json not rewritten: %v", n, r.Written)
		}
	}
	assertCSRDescribesCert(t, dir)
}

func specByName(t *testing.T, c *config.Cluster, name string) Spec {
	t.Helper()
	for _, s := range Specs(c) {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no spec %s", name)
	return Spec{}
}

func TestSubjectDiff(t *testing.T) {
	c := defaultCluster(t)
	s := specByName(t, c, "kube-scheduler")
	dir := t.TempDir()
	now := time.Now()
	reconcile(t, c, dir, now)
	for _, tc := range []struct {
		req  csr.Name
		cn   string
		want string
	}{
		{csr.Name{C: "US", ST: "Oregon", L: "Portland", O: "system:kube-scheduler", OU: "Kubernetes The Hard Way"}, "system:kube-scheduler", ""},
		{csr.Name{C: "US", ST: "Oregon", L: "Berlin", O: "system:kube-scheduler", OU: "Kubernetes The Hard Way"}, "system:kube-scheduler",
			"subject differs: L=Berlin, want L=Portland"},
		{csr.Name{C: "US", O: "system:node-proxier"}, "system:kube-scheduler",
			"subject differs: O=system:node-proxier OU=(none) L=(none) ST=(none), want O=system:kube-scheduler OU=Kubernetes The Hard Way L=Portland ST=Oregon"},
		{csr.Name{C: "DE", ST: "Oregon", L: "Portland", O: "system:kube-scheduler", OU: "Kubernetes The Hard Way"}, "scheduler",
			"subject differs: CN=scheduler C=DE, want CN=system:kube-scheduler C=US"},
	} {
		certPEM, _ := handIssueReq(t, dir, &csr.CertificateRequest{CN: tc.cn, Names: []csr.Name{tc.req}}, "client", now.Add(-time.Minute), now.Add(time.Hour))
		cert, err := parseCertPEM(certPEM)
		if err != nil {
			t.Fatal(err)
		}
		if got := subjectDiff(cert.Subject, s); got != tc.want {
			t.Errorf("subjectDiff(%s) = %q, want %q", cert.Subject, got, tc.want)
		}
	}
}
