package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/etcdsnap/etcdsnaptest"
)

func TestEtcdRestoreRefusesBadInputAndDryRunChangesNothing(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	if _, errOut, code := run(t, base, "init", "--name", "lab", "--arch", "amd64", "--provider", "nspawn"); code != 0 {
		t.Fatalf("init: %d %s", code, errOut)
	}
	dir := t.TempDir()

	_, errOut, code := run(t, base, "etcd", "restore", filepath.Join(dir, "missing.db"), "--yes")
	if code != 2 || !strings.Contains(errOut, "missing.db") || !strings.Contains(errOut, "khw etcd snapshot save") {
		t.Fatalf("missing file: exit %d, %s", code, errOut)
	}
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte("hello"), 0o600)
	_, errOut, code = run(t, base, "etcd", "restore", text, "--yes")
	if code != 3 || !strings.Contains(errOut, "not an etcd database") {
		t.Fatalf("a text file: exit %d, %s", code, errOut)
	}
	empty := filepath.Join(dir, "empty.db")
	os.WriteFile(empty, nil, 0o600)
	if _, errOut, code = run(t, base, "etcd", "restore", empty, "--dry-run"); code != 3 || !strings.Contains(errOut, "is empty (0 bytes)") {
		t.Fatalf("an empty file: exit %d, %s", code, errOut)
	}
	// A file bbolt panics on is refused before any node is touched.
	damaged := filepath.Join(dir, "damaged.db")
	etcdsnaptest.WriteDamaged(t, damaged, etcdsnaptest.PageIDChanged)
	_, errOut, code = run(t, base, "etcd", "restore", damaged, "--yes")
	if code != 3 || !strings.Contains(errOut, damaged+" is not a valid etcd snapshot: its database is damaged") {
		t.Fatalf("a damaged snapshot: exit %d, %s", code, errOut)
	}

	snap := filepath.Join(dir, "snap.db")
	etcdsnaptest.Write(t, snap, 4242)
	out, errOut, code := run(t, base, "etcd", "restore", snap, "--dry-run")
	if code != 0 {
		t.Fatalf("dry run: exit %d, %s", code, errOut)
	}
	for _, want := range []string{"revision 4242", "[1/10] copy the snapshot to every control plane", "sudo etcdutl snapshot restore /var/lib/khw/restore/snapshot.db",
		"--name cp2", "[10/10] remove the snapshot's copies", "(--dry-run: nothing was done. Each run makes a new --initial-cluster-token"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
	// Nothing was recorded: no operation, no lock left.
	if _, err := os.Stat(filepath.Join(base, "lab", "operations")); !os.IsNotExist(err) {
		t.Errorf("dry run made %s: %v", filepath.Join(base, "lab", "operations"), err)
	}

	// Without --yes and without input, no answer is a usage error.
	_, errOut, code = run(t, base, "etcd", "restore", snap)
	if code != 2 || !strings.Contains(errOut, "rerun with --yes") {
		t.Fatalf("no answer: exit %d, %s", code, errOut)
	}
}
