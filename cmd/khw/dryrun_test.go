package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/vm/nspawn"
)

// TestUpDryRunChangesNothing: khw up --dry-run on a fresh state directory
// (cluster.yaml only, as written by hand: no lock file yet) leaves every
// byte, mode and mtime of it as it was: no SSH key, no log, no lock file.
func TestUpDryRunChangesNothing(t *testing.T) {
	if err := nspawn.CheckHost(); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	base := filepath.Join(t.TempDir(), "state")
	_, d := randomCluster(t, base, "dr")
	if err := os.Remove(filepath.Join(d.Root, state.LockFile)); err != nil {
		t.Fatal(err)
	}
	c, _, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	c.Arch = runtime.GOARCH
	data, _ := c.Marshal()
	os.WriteFile(d.ConfigPath(), data, 0o600)
	before := treeDigest(t, filepath.Dir(d.Root))
	out, e, code := run(t, base, "up", "--dry-run")
	if code != 0 || !strings.Contains(out, "01-machines would change; nothing was changed") {
		t.Fatalf("up --dry-run: exit %d\n%s\n%s", code, out, e)
	}
	if diff := diffTrees(before, treeDigest(t, filepath.Dir(d.Root))); len(diff) > 0 {
		t.Errorf("up --dry-run said nothing was changed, but: %v", diff)
	}
}
