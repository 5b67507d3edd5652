package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/remote"
)

// TestReadKeyWritesNothing: the read-only open (khw up --dry-run, status,
// lab list) uses khw's key when it exists and an in-memory one otherwise,
// and never writes <state>/ssh.
func TestReadKeyWritesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ssh", "id_ed25519")
	_, line, err := readKey(path)
	if err != nil || !strings.HasPrefix(line, "ssh-ed25519 ") || !strings.HasSuffix(line, " "+remote.KeyComment) {
		t.Fatalf("no key yet: %q %v", line, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ssh")); !os.IsNotExist(err) {
		t.Fatalf("readKey created %s: %v", filepath.Join(dir, "ssh"), err)
	}
	_, want, err := remote.EnsureKey(path)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o644)
	_, got, err := readKey(path)
	if err != nil || got != want {
		t.Fatalf("existing key: %q, want %q (%v)", got, want, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
		t.Errorf("readKey changed the key's mode to %v", st.Mode().Perm())
	}
	os.WriteFile(path, []byte("not a key"), 0o600)
	if _, _, err := readKey(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("bad key: %v", err)
	}
}
