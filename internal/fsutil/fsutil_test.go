package fsutil

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteFileAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	p := filepath.Join(dir, "key.pem")
	if err := WriteFileAtomic(p, []byte("one"), SecretMode); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != SecretMode {
		t.Fatalf("mode %v err %v", st.Mode(), err)
	}
	dst, _ := os.Stat(dir)
	if dst.Mode().Perm() != DirMode {
		t.Fatalf("created parent has mode %v, want %v", dst.Mode().Perm(), DirMode)
	}
	if err := WriteFileAtomic(p, []byte("two"), PublicMode); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "two" {
		t.Fatalf("content %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temp files left behind: %v", entries)
	}
	// Writing over a directory fails and leaves nothing behind.
	if err := WriteFileAtomic(dir, []byte("x"), PublicMode); err == nil {
		t.Fatal("want an error writing over a directory")
	}
	entries, _ = os.ReadDir(filepath.Dir(dir))
	if len(entries) != 1 {
		t.Fatalf("failed write left files: %v", entries)
	}
}

func TestWriteIfChanged(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	changed, err := WriteIfChanged(p, []byte("a"), PublicMode)
	if err != nil || !changed {
		t.Fatalf("first write: %v %v", changed, err)
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(p, old, old)
	changed, err = WriteIfChanged(p, []byte("a"), PublicMode)
	if err != nil || changed {
		t.Fatalf("same content must not be written: %v %v", changed, err)
	}
	if st, _ := os.Stat(p); !st.ModTime().Equal(old) {
		t.Fatal("mtime changed on a no-op")
	}
	changed, err = WriteIfChanged(p, []byte("a"), SecretMode)
	if err != nil || !changed {
		t.Fatalf("mode change must count: %v %v", changed, err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != SecretMode {
		t.Fatalf("mode not fixed: %v", st.Mode())
	}
	changed, err = WriteIfChanged(p, []byte("b"), SecretMode)
	if b, _ := os.ReadFile(p); err != nil || !changed || string(b) != "b" {
		t.Fatalf("content change: %v %v %q", changed, err, b)
	}
}

func TestEnsureDirTightens(t *testing.T) {
	d := filepath.Join(t.TempDir(), "state")
	os.MkdirAll(d, 0o755)
	if err := EnsureDir(d); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(d); st.Mode().Perm() != DirMode {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	if !Exists(d) || Exists(filepath.Join(d, "nope")) {
		t.Fatal("Exists is wrong")
	}
}

func TestRsync(t *testing.T) {
	if _, err := RsyncPath(); err != nil {
		t.Skipf("SKIPPED: %v", err)
	}
	src, dst := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "a"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "stale"), []byte("y"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Rsync(context.Background(), "-a", "--delete", src+"/", dst+"/"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a")); err != nil || string(b) != "x" {
		t.Errorf("copied file: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dst, "stale")); !os.IsNotExist(err) {
		t.Errorf("--delete kept the stale file: %v", err)
	}
	err := Rsync(context.Background(), "-a", filepath.Join(src, "missing"), dst)
	if err == nil || !strings.Contains(err.Error(), "rsync -a "+filepath.Join(src, "missing")) || !strings.Contains(err.Error(), "No such file") {
		t.Errorf("missing source: %v", err)
	}
}
