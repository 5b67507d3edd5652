package certrenew

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
)

// Lab 14's by-hand renewal makes each CSR with `openssl req -subj`: run
// by openssl itself, those lines give each CSR exactly one O, the cert's
// own group, and the state as written, even when the state holds a "+"
// with an O after it (which config.Validate refuses in cluster.yaml; the
// text holds without that). Before, '/ST=Oregon+O=system:masters/…' made
// w1's kubelet a member of system:masters.
func TestByHandSubjectKeepsOneO(t *testing.T) {
	for _, tool := range []string{"bash", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: %v", tool, err)
		}
	}
	c := config.Default("khw", config.ArchARM64, config.ProviderNspawn)
	c.PKI.Subject.State = "Oregon+O=system:masters"
	var part2 string
	for _, cmd := range ByHandCommands(c, state.Dir{Root: t.TempDir()}) {
		if strings.HasPrefix(cmd.Why, "part 2: renew ") {
			part2 = cmd.Shell
		}
	}
	wantO := map[string]string{"kubernetes": "Kubernetes", "w1": "system:nodes", "w2": "system:nodes"}
	dir := t.TempDir()
	ran := 0
	for _, line := range strings.Split(part2, "\n") {
		if !strings.HasPrefix(line, "openssl req ") {
			continue
		}
		f := strings.Fields(line)
		name := strings.TrimSuffix(f[slices.Index(f, "-key")+1], "-key.pem")
		if out, err := exec.Command("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
			"-out", filepath.Join(dir, name+"-key.pem")).CombinedOutput(); err != nil {
			t.Fatalf("openssl genpkey: %v\n%s", err, out)
		}
		sh := exec.Command("bash", "-c", line)
		sh.Dir = dir
		if out, err := sh.CombinedOutput(); err != nil || len(out) > 0 {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		data, err := os.ReadFile(filepath.Join(dir, name+".csr"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(data)
		if b == nil {
			t.Fatalf("%s.csr is not PEM", name)
		}
		req, err := x509.ParseCertificateRequest(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(req.Subject.Organization, []string{wantO[name]}) || !slices.Equal(req.Subject.Province, []string{c.PKI.Subject.State}) {
			t.Errorf("%s: openssl made O=%q ST=%q from\n  %s\nwant O=[%s] ST=[%s]", name, req.Subject.Organization, req.Subject.Province, line, wantO[name], c.PKI.Subject.State)
		}
		ran++
	}
	if ran != len(wantO) {
		t.Fatalf("part 2 has %d openssl req lines, want %d:\n%s", ran, len(wantO), part2)
	}
}
