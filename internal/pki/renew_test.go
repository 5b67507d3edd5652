package pki

import (
	"bytes"
	"crypto/x509"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A renewal with keys kept: each named cert gets a new serial and a full
// validity from the renewal's time, for the same key; the others stay byte
// for byte; and every cert, old and new, still verifies against ca.pem.
func TestRenewKeepsKeys(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second)
	reconcile(t, c, dir, now)
	before := map[string][]byte{}
	for _, n := range allNames {
		before[n+"-key.pem"] = readFile(t, filepath.Join(dir, n+"-key.pem"))
		before[n+".pem"] = readFile(t, filepath.Join(dir, n+".pem"))
	}
	oldCA := readCert(t, dir, "ca")

	later := now.Add(10 * 24 * time.Hour)
	renewed := []string{"ca", "kubernetes", "w1", "service-account"}
	r := reconcile(t, c, dir, later, Renew(renewed, false))
	assertOnly(t, r, Resigned, ReasonRequested, renewed...)
	for _, n := range allNames {
		key := readFile(t, filepath.Join(dir, n+"-key.pem"))
		if !bytes.Equal(key, before[n+"-key.pem"]) {
			t.Errorf("%s: key changed, want it kept", n)
		}
		cert := readFile(t, filepath.Join(dir, n+".pem"))
		if changed := !bytes.Equal(cert, before[n+".pem"]); changed != slices.Contains(renewed, n) {
			t.Errorf("%s: cert changed = %v, want %v", n, changed, !changed)
		}
	}
	ca := readCert(t, dir, "ca")
	if ca.SerialNumber.Cmp(oldCA.SerialNumber) == 0 || !ca.NotAfter.Equal(later.Add(c.PKI.CAValidity)) {
		t.Errorf("ca: serial %v NotAfter %v, want a new serial and %v", ca.SerialNumber, ca.NotAfter, later.Add(c.PKI.CAValidity))
	}
	for _, n := range []string{"kubernetes", "w1"} {
		cert := readCert(t, dir, n)
		if want := later.Add(c.PKI.CertValidity); !cert.NotAfter.Equal(want) {
			t.Errorf("%s NotAfter %v, want %v (certValidity from the renewal)", n, cert.NotAfter, want)
		}
	}
	// Old and new CA cert are one CA to a verifier: same key, same subject.
	for _, root := range []*x509.Certificate{oldCA, ca} {
		pool := x509.NewCertPool()
		pool.AddCert(root)
		for _, n := range leafNames {
			if _, err := readCert(t, dir, n).Verify(x509.VerifyOptions{Roots: pool, CurrentTime: later, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				t.Errorf("%s does not verify against the CA cert with serial %v: %v", n, root.SerialNumber, err)
			}
		}
	}
	// The renewal is done: a plain run keeps everything.
	again := reconcile(t, c, dir, later)
	if again.Changed() {
		t.Errorf("a run after the renewal changed %v", again.Written)
	}
}

// With new keys, ordinary leaves get new keys; the CA and the
// service-account cert keep theirs (precious), and say so.
func TestRenewNewKeys(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now()
	reconcile(t, c, dir, now)
	keys := map[string][]byte{}
	for _, n := range allNames {
		keys[n] = readFile(t, filepath.Join(dir, n+"-key.pem"))
	}
	r := reconcile(t, c, dir, now.Add(time.Hour), Renew(allNames, true))
	for _, n := range allNames {
		s := status(t, r, n)
		precious := n == "ca" || n == "service-account"
		want := Reissued
		if precious {
			want = Resigned
		}
		if s.Action != want || !slices.Contains(codes(s.Reasons), ReasonRequested) {
			t.Errorf("%s: %s %v, want %s (requested)", n, s.Action, s.Reasons, want)
		}
		same := bytes.Equal(keys[n], readFile(t, filepath.Join(dir, n+"-key.pem")))
		if same != precious {
			t.Errorf("%s: key kept = %v, want %v", n, same, precious)
		}
		if precious && !strings.Contains(s.Reasons[len(s.Reasons)-1].Detail+s.Reasons[0].Detail, "same key") {
			t.Errorf("%s: reasons %v do not say the key was kept", n, s.Reasons)
		}
	}
}

// A renewal of a cert with another problem mends that too, with a new key.
func TestRenewMendsOtherProblems(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now()
	reconcile(t, c, dir, now)
	c.Nodes = append(c.Nodes, c.Nodes[1])
	c.Nodes[len(c.Nodes)-1].Name, c.Nodes[len(c.Nodes)-1].IP = "cp4", "192.168.122.14"
	key := readFile(t, filepath.Join(dir, "kubernetes-key.pem"))
	r := reconcile(t, c, dir, now, Renew([]string{"kubernetes"}, false))
	s := status(t, r, "kubernetes")
	if s.Action != Reissued || !slices.Equal(codes(s.Reasons), []ReasonCode{ReasonSANs, ReasonRequested}) {
		t.Errorf("kubernetes: %s %v, want reissued (sans, requested)", s.Action, s.Reasons)
	}
	if bytes.Equal(key, readFile(t, filepath.Join(dir, "kubernetes-key.pem"))) {
		t.Error("a cert reissued for its SANs kept its key")
	}
}

// Names khw cannot renew are refused before anything is written.
func TestRenewRefusesWhatKhwDoesNotIssue(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	reconcile(t, c, dir, time.Now())
	before := snapshot(t, dir)
	for _, tc := range []struct {
		name, want string
	}{
		{"nope", "no such certificate"},
		{"w3", "TLS bootstrap"},
		{"../ca", "no such certificate"},
	} {
		_, err := Reconcile(c, dir, time.Now(), Renew([]string{"admin", tc.name}, false))
		var re *RenewError
		if !errors.As(err, &re) || re.Name != tc.name || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Renew(%q): %v, want a RenewError saying %q", tc.name, err, tc.want)
		}
	}
	after := snapshot(t, dir)
	for n, b := range before {
		if a := after[n]; a.data != b.data || !a.mtime.Equal(b.mtime) {
			t.Errorf("%s was written by a refused renewal", n)
		}
	}
}

// The renewal's shell equivalents, run with the real cfssl and cfssljson
// (Debian's golang-cfssl, which make deps installs) in the pki directory,
// renew as Renew does: the same keys, new certs that khw then keeps.
func TestRenewRecipeWithCfssl(t *testing.T) {
	for _, tool := range []string{"bash", "cfssl", "cfssljson"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (make deps installs golang-cfssl): %v", tool, err)
		}
	}
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now()
	reconcile(t, c, dir, now.Add(-48*time.Hour))
	names := []string{"ca", "kubernetes", "w1", "service-account", "admin"}
	keys, serials := map[string][]byte{}, map[string]string{}
	script := "set -euo pipefail\n"
	for _, s := range Specs(c) {
		if slices.Contains(names, s.Name) {
			keys[s.Name] = readFile(t, filepath.Join(dir, s.Name+"-key.pem"))
			serials[s.Name] = readCert(t, dir, s.Name).SerialNumber.String()
			script += s.RenewRecipe(false) + "\n"
		}
	}
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s\n%v\n%s", script, err, out)
	}
	for _, n := range names {
		if !bytes.Equal(keys[n], readFile(t, filepath.Join(dir, n+"-key.pem"))) {
			t.Errorf("%s: the recipe changed the key", n)
		}
		cert := readCert(t, dir, n)
		if cert.SerialNumber.String() == serials[n] || cert.NotBefore.Before(now.Add(-time.Hour)) {
			t.Errorf("%s: serial %v NotBefore %v: not renewed", n, cert.SerialNumber, cert.NotBefore)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "kubernetes.csr")); err == nil {
		t.Error("kubernetes.csr left behind")
	}
	// khw's own check finds the renewed certs right (SANs, subject,
	// usages, signed by ca.pem) and keeps them.
	r := reconcile(t, c, dir, now)
	for _, n := range names {
		if s := status(t, r, n); s.Action != Kept {
			t.Errorf("%s after the recipe: %s %v, want kept", n, s.Action, s.Reasons)
		}
	}
}
