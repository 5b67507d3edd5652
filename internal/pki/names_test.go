package pki

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
)

// The writer replaces a file holding a private key only with a private key,
// whatever the plan says: a worker's cert over ca-key.pem (a worker named
// ca-key), a CSR JSON over a key, in a real run and in a dry run.
func TestWriterNeverReplacesAKeyWithAnotherFile(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now()
	reconcile(t, c, dir, now)
	w1 := readFile(t, filepath.Join(dir, "w1.pem"))
	csrJSON := readFile(t, filepath.Join(dir, "w1-csr.json"))
	for _, dry := range []bool{false, true} {
		r := &reconciler{c: c, dir: dir, now: now, opts: options{dryRun: dry}}
		r.snapshotKeys()
		for _, key := range []string{"ca-key.pem", "kubernetes-key.pem", "service-account-key.pem", "w2-key.pem"} {
			for _, data := range [][]byte{w1, csrJSON} {
				before := snapshot(t, dir)
				var o outcome
				err := r.put(&o, file{key, data, 0o644})
				if err == nil || !strings.Contains(err.Error(), "refusing to replace "+filepath.Join(dir, key)+", which holds a private key") {
					t.Errorf("dry run %v: put over %s: %v, want a refusal", dry, key, err)
				}
				if len(o.written) != 0 {
					t.Errorf("dry run %v: %s reported as written: %v", dry, key, o.written)
				}
				assertUnchanged(t, dir, before)
			}
		}
	}
	// A key may replace a key (a reissue), and a cert a cert.
	r := &reconciler{c: c, dir: dir, now: now}
	r.snapshotKeys()
	var o outcome
	if err := r.put(&o, file{"w2-key.pem", readFile(t, filepath.Join(dir, "w1-key.pem")), 0o600}); err != nil {
		t.Errorf("key over key: %v", err)
	}
	if err := r.put(&o, file{"w2.pem", w1, 0o644}); err != nil {
		t.Errorf("cert over cert: %v", err)
	}
}

// Through Reconcile: a cert file that holds a private key of which no key
// file has a copy is not reissued over; the error names it and the key
// stays. (A copy of a key file next to it is repaired:
// TestUnreadableReasonsArePlain.)
func TestReconcileKeepsAStrayKey(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now()
	reconcile(t, c, dir, now)
	_, stray := otherCA(t)
	writeFile(t, filepath.Join(dir, "kubernetes.pem"), string(stray))
	_, err := Reconcile(c, dir, now)
	if err == nil || !strings.Contains(err.Error(), "refusing to replace "+filepath.Join(dir, "kubernetes.pem")+", which holds a private key") {
		t.Fatalf("Reconcile over a stray key: %v", err)
	}
	if got := readFile(t, filepath.Join(dir, "kubernetes.pem")); string(got) != string(stray) {
		t.Error("the stray key in kubernetes.pem was replaced")
	}
}

// checkNames, Reconcile's own guard behind config.Validate, refuses any
// worker whose files would be another cert's files, the keys included.
func TestCheckNamesRefusesEveryFileCollision(t *testing.T) {
	for _, tc := range []struct{ name, file, owner string }{
		{"ca-key", "ca-key.pem", "ca"},
		{"kubernetes-key", "kubernetes-key.pem", "kubernetes"},
		{"service-account-key", "service-account-key.pem", "service-account"},
		{"w2-key", "w2-key.pem", "w2"},
		{"admin", "admin-csr.json", "admin"},
	} {
		c := defaultCluster(t)
		c.Nodes[4].Name = tc.name // w1
		var fe *config.FieldError
		err := checkNames(c, Specs(c))
		if !errors.As(err, &fe) || fe.Field != "nodes[4].name" || fe.Value != tc.name ||
			!strings.Contains(fe.Problem, "would write "+tc.file+", which is also one of the files of the "+tc.owner+" cert") {
			t.Errorf("worker %q: checkNames = %v", tc.name, err)
		}
	}
	if err := checkNames(defaultCluster(t), Specs(defaultCluster(t))); err != nil {
		t.Errorf("default cluster: %v", err)
	}
}

// Every file Reconcile writes, read as the file of a worker named N (N.pem,
// N-key.pem, N-csr.json), gives an N that config.Validate refuses, unless N
// is that node: the reserved names cannot drift from what pki writes.
func TestConfigRefusesEveryNameOfAPKIFile(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	reconcile(t, c, dir, time.Now())
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, e := range entries {
		for _, suffix := range []string{".pem", "-key.pem", "-csr.json", ".json"} {
			n, ok := strings.CutSuffix(e.Name(), suffix)
			if _, isNode := c.Node(n); !ok || isNode {
				continue
			}
			bad := defaultCluster(t)
			bad.Nodes[5].Name = n // w2
			_, err := bad.Validate()
			if err == nil || !strings.Contains(err.Error(), "nodes[5] ("+n+").name") || !strings.Contains(err.Error(), "collides") {
				t.Errorf("pki writes %s, but a worker named %q is accepted: %v", e.Name(), n, err)
			}
			checked++
		}
	}
	if checked < 30 {
		t.Errorf("only %d names checked", checked)
	}
}
