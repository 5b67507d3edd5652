package pki

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
)

// setKubeletCert points node name's kubeletCert at cert/key files written in
// a directory of their own (as a student's hand-made files would be).
func setKubeletCert(t *testing.T, c *config.Cluster, name string, cert, key []byte) (certPath string) {
	t.Helper()
	hand := t.TempDir()
	certPath, keyPath := filepath.Join(hand, name+".pem"), filepath.Join(hand, name+"-key.pem")
	writePair(t, hand, name, cert, key)
	for i := range c.Nodes {
		if c.Nodes[i].Name == name {
			c.Nodes[i].KubeletCert = &config.CertRef{Cert: certPath, Key: keyPath}
		}
	}
	if _, err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return certPath
}

func TestImportKubeletCertAccepted(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second)
	reconcile(t, c, dir, now)
	// Hand-made: name and IP only, no FQDN — enough for the apiserver.
	cert, key := handIssue(t, dir, "system:node:w1", "system:nodes", []string{"w1", "192.168.122.21"}, "kubernetes", now.Add(-time.Minute), now.Add(90*24*time.Hour))
	src := setKubeletCert(t, c, "w1", cert, key)

	r := reconcile(t, c, dir, now)
	s := status(t, r, "w1")
	if s.Action != Imported || s.Source != src || len(s.Reasons) != 0 {
		t.Fatalf("w1: %+v, want imported from %s", s, src)
	}
	if !bytes.Equal(readFile(t, filepath.Join(dir, "w1.pem")), cert) || !bytes.Equal(readFile(t, filepath.Join(dir, "w1-key.pem")), key) {
		t.Error("imported cert/key not copied byte for byte")
	}
	if st, _ := os.Stat(filepath.Join(dir, "w1-key.pem")); st.Mode().Perm() != 0o600 {
		t.Errorf("imported key mode %v", st.Mode().Perm())
	}
	for _, n := range allNames {
		if n != "w1" && status(t, r, n).Action != Kept {
			t.Errorf("%s: %s", n, status(t, r, n).Action)
		}
	}
	again := reconcile(t, c, dir, now)
	if again.Changed() || status(t, again, "w1").Action != Imported {
		t.Errorf("second run: %v %v", again.Written, status(t, again, "w1"))
	}
	// Within renewBefore: still imported, with a warning to replace it.
	soon := reconcile(t, c, dir, now.Add(80*24*time.Hour))
	if s := status(t, soon, "w1"); s.Action != Imported || len(s.Reasons) != 1 || s.Reasons[0].Code != ReasonRenew ||
		!strings.Contains(s.Reasons[0].Detail, "replace "+src) {
		t.Errorf("expiring import: %+v", s)
	}
}

func TestImportKubeletCertRejected(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second)
	reconcile(t, c, dir, now)
	goodHosts := []string{"w1", "w1.kubernetes.local", "192.168.122.21"}
	nb, na := now.Add(-time.Minute), now.Add(c.PKI.CertValidity)

	// Another CA in a directory laid out like ours.
	otherDir := t.TempDir()
	oc, ok := otherCA(t)
	writePair(t, otherDir, "ca", oc, ok)
	if err := os.WriteFile(filepath.Join(otherDir, "ca-config.json"), readFile(t, filepath.Join(dir, "ca-config.json")), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name      string
		make      func() (cert, key []byte)
		field     string
		problem   string
		fixSubstr string
	}{
		{"other CA", func() ([]byte, []byte) {
			return handIssue(t, otherDir, "system:node:w1", "system:nodes", goodHosts, "kubernetes", nb, na)
		}, "cert", "is not signed by the cluster CA", "cfssl gencert -ca=ca.pem"},
		{"wrong CN", func() ([]byte, []byte) {
			return handIssue(t, dir, "system:node:w2", "system:nodes", goodHosts, "kubernetes", nb, na)
		}, "cert", `has CN="system:node:w2"`, `"CN": "system:node:w1"`},
		{"wrong O", func() ([]byte, []byte) {
			return handIssue(t, dir, "system:node:w1", "system:masters", goodHosts, "kubernetes", nb, na)
		}, "cert", `has O="system:masters"`, `"O": "system:nodes"`},
		{"missing IP SAN", func() ([]byte, []byte) {
			return handIssue(t, dir, "system:node:w1", "system:nodes", []string{"w1"}, "kubernetes", nb, na)
		}, "cert", "lacks the SANs 192.168.122.21", "-hostname=w1,w1.kubernetes.local,192.168.122.21"},
		{"client profile", func() ([]byte, []byte) {
			return handIssue(t, dir, "system:node:w1", "system:nodes", goodHosts, "client", nb, na)
		}, "cert", "has no server auth EKU", "-profile=kubernetes"},
		{"expired", func() ([]byte, []byte) {
			return handIssue(t, dir, "system:node:w1", "system:nodes", goodHosts, "kubernetes", now.Add(-48*time.Hour), now.Add(-time.Hour))
		}, "cert", "is not valid now", "cfssl gencert"},
		{"key of another cert", func() ([]byte, []byte) {
			cert, _ := handIssue(t, dir, "system:node:w1", "system:nodes", goodHosts, "kubernetes", nb, na)
			_, key := handIssue(t, dir, "system:node:w1", "system:nodes", goodHosts, "kubernetes", nb, na)
			return cert, key
		}, "key", "is not the private key of", "generated together"},
		{"key given as cert", func() ([]byte, []byte) {
			_, key := handIssue(t, dir, "system:node:w1", "system:nodes", goodHosts, "kubernetes", nb, na)
			return key, key
		}, "cert", "is not one PEM certificate", "not the -key.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultCluster(t)
			cert, key := tc.make()
			setKubeletCert(t, c, "w1", cert, key)
			before := readFile(t, filepath.Join(dir, "w1.pem"))
			_, err := Reconcile(c, dir, now)
			if err == nil {
				t.Fatal("accepted")
			}
			var fe *config.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %T is not a *config.FieldError: %v", err, err)
			}
			want := "nodes[4] (w1).kubeletCert." + tc.field
			found := false
			for _, e := range unjoin(err) {
				if errors.As(e, &fe) && fe.Field == want && strings.Contains(fe.Problem, tc.problem) && strings.Contains(fe.Fix, tc.fixSubstr) {
					found = true
				}
			}
			if !found {
				t.Errorf("error does not name %s with %q and fix %q:\n%v", want, tc.problem, tc.fixSubstr, err)
			}
			if !bytes.Equal(before, readFile(t, filepath.Join(dir, "w1.pem"))) {
				t.Error("a rejected cert was copied")
			}
		})
	}
}

// unjoin flattens errors.Join trees.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}
