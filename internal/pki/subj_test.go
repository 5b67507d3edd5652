package pki

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// attrNames are the short names of the subject attributes khw writes.
var attrNames = map[string]string{"2.5.4.6": "C", "2.5.4.8": "ST", "2.5.4.7": "L", "2.5.4.10": "O", "2.5.4.11": "OU", "2.5.4.3": "CN"}

// rdns reads a DER subject: its RDNs in order, each the "TYPE=value" of
// its attributes (more than one in a multi-valued RDN).
func rdns(t *testing.T, raw []byte) [][]string {
	t.Helper()
	var seq pkix.RDNSequence
	if rest, err := asn1.Unmarshal(raw, &seq); err != nil || len(rest) > 0 {
		t.Fatalf("subject does not parse: %v", err)
	}
	var out [][]string
	for _, set := range seq {
		var attrs []string
		for _, a := range set {
			attrs = append(attrs, fmt.Sprintf("%s=%v", attrNames[a.Type.String()], a.Value))
		}
		out = append(out, attrs)
	}
	return out
}

// runOpenSSLReq runs the first line of a renewal recipe (the `openssl req`
// that makes the CSR from the key) with bash in a fresh directory that
// holds <name>-key.pem, and returns the CSR, openssl's own reading of
// its subject (RFC 2253) and what openssl said on stderr.
func runOpenSSLReq(t *testing.T, name, recipe string) (csr *x509.CertificateRequest, asOpenSSL, stderr string) {
	t.Helper()
	for _, tool := range []string{"bash", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: %v", tool, err)
		}
	}
	line, _, _ := strings.Cut(recipe, "\n")
	if !strings.HasPrefix(line, "openssl req ") {
		t.Fatalf("the recipe does not start with openssl req:\n%s", recipe)
	}
	dir := t.TempDir()
	if out, err := exec.Command("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
		"-out", filepath.Join(dir, name+"-key.pem")).CombinedOutput(); err != nil {
		t.Fatalf("openssl genpkey: %v\n%s", err, out)
	}
	cmd := exec.Command("bash", "-c", line)
	cmd.Dir = dir
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("%s: %v\n%s%s", line, err, out, errOut.String())
	}
	csrPEM, err := os.ReadFile(filepath.Join(dir, name+".csr"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(csrPEM)
	if b == nil {
		t.Fatalf("%s.csr is not PEM", name)
	}
	req, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := exec.Command("openssl", "req", "-in", filepath.Join(dir, name+".csr"), "-noout", "-subject", "-nameopt", "RFC2253,-esc_msb").CombinedOutput()
	return req, strings.TrimSpace(string(o)), errOut.String()
}

// The renewal recipe's `openssl req -subj` gives the CSR exactly the
// Spec's subject, one attribute per RDN, whatever its values hold: a "+"
// does not add an attribute (Oregon+O=system:masters once made w1's
// kubelet a member of system:masters) nor swallow the next one (Oregon +
// Washington once lost L), and "/", "\" and text outside ASCII are kept as
// they are. openssl itself makes the CSR; the subject is read back from
// its DER. These values are refused in cluster.yaml (config.Validate):
// the recipe holds without that.
func TestRenewRecipeSubjectThroughOpenSSL(t *testing.T) {
	c := defaultCluster(t)
	for _, tc := range []struct {
		name string
		set  func(*Spec)
	}{
		{"O smuggled in through ST", func(s *Spec) { s.ST = "Oregon+O=system:masters" }},
		{"plus in ST", func(s *Spec) { s.ST = "Oregon + Washington" }},
		{"slash and backslash in L", func(s *Spec) { s.L = `Port/land\x` }},
		{"RDN separator and equals in OU", func(s *Spec) { s.OU = "a/CN=admin" }},
		{"UTF-8 in L and OU", func(s *Spec) { s.L, s.OU = "Zürich", "서울" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := specByName(t, c, "w1")
			tc.set(&s)
			req, asOpenSSL, stderr := runOpenSSLReq(t, s.Name, s.RenewRecipe(false))
			got := rdns(t, req.RawSubject)
			want := [][]string{{"C=" + s.C}, {"ST=" + s.ST}, {"L=" + s.L}, {"O=" + s.O}, {"OU=" + s.OU}, {"CN=" + s.CN}}
			if !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("the CSR's subject is\n  %q\nwant\n  %q\nopenssl reads it as %s\nrecipe: %s", got, want, asOpenSSL, s.RenewRecipe(false))
			}
			// The groups the apiserver would give the cert's user.
			if !slices.Equal(req.Subject.Organization, []string{groupNodes}) {
				t.Errorf("the CSR's O is %q, want only %s", req.Subject.Organization, groupNodes)
			}
			if stderr != "" {
				t.Errorf("openssl req warned:\n%s", stderr)
			}
		})
	}
}

func TestOpenSSLSubj(t *testing.T) {
	for _, tc := range []struct {
		attrs []Attr
		want  string
	}{
		{[]Attr{{"C", "US"}, {"O", "system:nodes"}, {"CN", "system:node:w1"}}, "/C=US/O=system:nodes/CN=system:node:w1"},
		{[]Attr{{"ST", "Oregon+O=system:masters"}, {"CN", "x"}}, `/ST=Oregon\+O=system:masters/CN=x`},
		{[]Attr{{"L", `a/b\c`}, {"OU", ""}, {"CN", "x"}}, `/L=a\/b\\c/CN=x`},
		{[]Attr{{"OU", ` a, b; <c> "d" #e `}}, `/OU= a, b; <c> "d" #e `},
		{nil, ""},
	} {
		if got := OpenSSLSubj(tc.attrs); got != tc.want {
			t.Errorf("OpenSSLSubj(%v) = %q, want %q", tc.attrs, got, tc.want)
		}
	}
}
