package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/lab/upgrade"
	"github.com/khw-dev/khw/internal/state"
)

// TestUpgradeUnderWay: while <state>/upgrade.json records an upgrade, khw
// up refuses to run (naming the upgrade and how to finish it) and khw
// upgrade refuses another version; both before any node is contacted.
func TestUpgradeUnderWay(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	if _, e, code := run(t, base, "init", "--name", "lab", "--arch", "amd64", "--provider", "nspawn"); code != 0 {
		t.Fatalf("init: %s", e)
	}
	if _, e, code := run(t, base, "upgrade"); code != 2 || !strings.Contains(e, "give the version to upgrade to with --to") {
		t.Errorf("upgrade without --to: exit %d, %q", code, e)
	}
	d := state.Dir{Root: filepath.Join(base, "lab")}
	if err := upgrade.SaveRecord(d, upgrade.Record{From: "v1.36.3", To: "v1.37.2", StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	_, e, code := run(t, base, "up")
	if code != 1 || !strings.Contains(e, "an upgrade from v1.36.3 to v1.37.2 is under way") || !strings.Contains(e, "khw upgrade --to v1.37.2") {
		t.Errorf("up during an upgrade: exit %d, %q", code, e)
	}
	for _, args := range [][]string{{"lab", "run", "05", "--yes"}, {"lab", "reset", "10", "--yes"}, {"pki", "renew", "admin", "--yes"}} {
		if _, e, code := run(t, base, args...); code != 1 || !strings.Contains(e, "is under way") {
			t.Errorf("khw %s during an upgrade: exit %d, %q", strings.Join(args, " "), code, e)
		}
	}
	if _, e, code := run(t, base, "up", "--dry-run"); strings.Contains(e, "under way") {
		t.Errorf("up --dry-run during an upgrade was refused (exit %d): a dry run changes nothing", code)
	}
	_, e, code = run(t, base, "upgrade", "--to", "v1.38.0")
	if code != 2 || !strings.Contains(e, "finish it first with khw upgrade --to v1.37.2") {
		t.Errorf("upgrade to another version during an upgrade: exit %d, %q", code, e)
	}
}
