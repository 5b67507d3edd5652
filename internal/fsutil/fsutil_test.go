package fsutil

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// TestMkdirAllPrivateKeepsExistingModes: a shared 1777 directory given as
// the state directory keeps its sticky and world bits; what khw creates
// below it is 0700 whatever the umask.
func TestMkdirAllPrivateKeepsExistingModes(t *testing.T) {
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	deep := filepath.Join(shared, "a", "b")
	// EnsureDir tightens only its own leaf, never an existing parent.
	for _, f := range []func(string) error{MkdirAllPrivate, EnsureDir} {
		if err := f(deep); err != nil {
			t.Fatal(err)
		}
	}
	if err := MkdirAllPrivate(shared); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(shared)
	if st.Mode()&os.ModePerm != 0o777 || st.Mode()&os.ModeSticky == 0 {
		t.Fatalf("existing directory changed to %v, want drwxrwxrwt", st.Mode())
	}
	for _, p := range []string{filepath.Join(shared, "a"), deep} {
		if st, _ := os.Stat(p); st.Mode().Perm() != DirMode {
			t.Errorf("%s: created with %v, want %v", p, st.Mode().Perm(), DirMode)
		}
	}
	// WriteFileAtomic creates its parents the same way.
	if err := WriteFileAtomic(filepath.Join(shared, "c", "f"), []byte("x"), SecretMode); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(shared, "c")); st.Mode().Perm() != DirMode {
		t.Errorf("parent made by WriteFileAtomic: %v", st.Mode().Perm())
	}
	if st, _ := os.Stat(shared); st.Mode()&os.ModePerm != 0o777 || st.Mode()&os.ModeSticky == 0 {
		t.Fatalf("WriteFileAtomic changed the existing directory to %v", st.Mode())
	}
	// A file in the way is named.
	f := filepath.Join(shared, "file")
	os.WriteFile(f, nil, 0o600)
	if err := MkdirAllPrivate(filepath.Join(f, "sub")); err == nil || !strings.Contains(err.Error(), f+" exists and is not a directory") {
		t.Errorf("file in the way: %v", err)
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
