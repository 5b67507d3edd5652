package fsutil

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRsyncVanished makes rsync meet a file that vanishes between its file
// list and the transfer, deterministically: the destination lies inside the
// source, and --delete-before (run once the whole list is built, before any
// file is sent) deletes src/sub/x as extraneous in the destination src/sub/,
// so when the sender comes to src/sub/x it is gone: rsync exits 24 and
// IsRsyncVanished says so. Any other failure is not "vanished".
func TestRsyncVanished(t *testing.T) {
	if _, err := RsyncPath(); err != nil {
		t.Skip(err)
	}
	src := filepath.Join(t.TempDir(), "src")
	for _, f := range []string{"a", "sub/x"} {
		p := filepath.Join(src, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	err := Rsync(context.Background(), "-a", "--delete-before", src+"/", filepath.Join(src, "sub")+"/")
	var re *RsyncError
	if !errors.As(err, &re) || re.ExitCode != RsyncExitVanished || !strings.Contains(re.Stderr, "vanished") {
		t.Fatalf("want rsync exit 24 (file has vanished), got %#v", err)
	}
	if !IsRsyncVanished(err) || !IsRsyncVanished(errors.Join(errors.New("node x"), err)) {
		t.Errorf("IsRsyncVanished(%v) = false", err)
	}
	if !strings.Contains(err.Error(), "rsync -a --delete-before "+src+"/") || !strings.Contains(err.Error(), "exit status 24") {
		t.Errorf("error text: %v", err)
	}

	// A missing source argument is exit 23 (partial transfer due to error):
	// not tolerable.
	err = Rsync(context.Background(), "-a", filepath.Join(src, "missing"), t.TempDir())
	if !errors.As(err, &re) || re.ExitCode != 23 || IsRsyncVanished(err) {
		t.Errorf("missing source: %#v, want exit 23 and not vanished", err)
	}
	// A cancelled run is not "vanished" either, whatever rsync printed.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Rsync(ctx, "-a", src+"/", t.TempDir()+"/"); err == nil || IsRsyncVanished(err) {
		t.Errorf("cancelled: %v", err)
	}
	if IsRsyncVanished(nil) || IsRsyncVanished(errors.New("exit status 24")) {
		t.Error("IsRsyncVanished is true for an error that is no RsyncError")
	}
}
