package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
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
	if _, _, code := run(t, base, "upgrade", "--abandon", "--to", "v1.37.2"); code != 2 {
		t.Errorf("--abandon with --to: exit %d", code)
	}
	// --abandon: cluster.yaml names the old version again, the record goes,
	// khw up no longer refuses for it.
	if err := config.SetVersion(d.ConfigPath(), "kubernetes", "v1.37.2"); err != nil {
		t.Fatal(err)
	}
	out, e, code := run(t, base, "upgrade", "--abandon")
	if code != 0 || !strings.Contains(out, "cluster.yaml says versions.kubernetes: v1.36.3 again") {
		t.Fatalf("--abandon: exit %d, %q %q", code, out, e)
	}
	if c, _, err := config.Load(d.ConfigPath()); err != nil || c.Versions.Kubernetes != "v1.36.3" {
		t.Errorf("after --abandon cluster.yaml: %v, %v", c, err)
	}
	if rec, err := upgrade.LoadRecord(d); rec != nil || err != nil {
		t.Errorf("after --abandon the record is %+v, %v", rec, err)
	}
	// khw up may go back to the older release until it has (khw down ends it too).
	if ab, err := upgrade.LoadAbandoned(d); err != nil || ab == nil || ab.From != "v1.36.3" || ab.To != "v1.37.2" {
		t.Errorf("after --abandon the abandoned record is %+v, %v", ab, err)
	}
	if out, _, code := run(t, base, "upgrade", "--abandon"); code != 0 || !strings.Contains(out, "No upgrade is under way") {
		t.Errorf("--abandon again: exit %d, %q", code, out)
	}
}

// TestUpgradeDryRunChangesNothing: khw upgrade --to … --dry-run on a fresh
// state directory (cluster.yaml only, no lock file) leaves every byte,
// mode and mtime of it as it was, whatever it then says about the
// cluster: no SSH key, no log, no lock file.
func TestUpgradeDryRunChangesNothing(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	if _, e, code := run(t, base, "init", "--name", "lab", "--arch", "amd64", "--provider", "nspawn"); code != 0 {
		t.Fatalf("init: %s", e)
	}
	d := state.Dir{Root: filepath.Join(base, "lab")}
	if err := os.Remove(filepath.Join(d.Root, state.LockFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	dryRun := func(when string) {
		t.Helper()
		before := treeDigest(t, base)
		out, e, code := run(t, base, "upgrade", "--to", "v1.37.2", "--dry-run")
		if diff := diffTrees(before, treeDigest(t, base)); len(diff) > 0 {
			t.Errorf("upgrade --dry-run %s (exit %d) changed the state directory: %v\n%s%s", when, code, diff, out, e)
		}
	}
	dryRun("on a fresh state directory")
	// With the PKI and the kubeconfigs it gets as far as asking the
	// (absent) cluster for its versions.
	for _, cmd := range []string{"pki", "kubeconfig"} {
		if _, e, code := run(t, base, cmd); code != 0 {
			t.Fatalf("%s: %s", cmd, e)
		}
	}
	if err := os.Remove(filepath.Join(d.Root, state.LockFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	dryRun("with the PKI made")
}

// TestUpgradeRefusesABadTargetFirst: a --to that is not a release version
// is a usage error (exit 2) naming the flag, said before the cluster is
// opened or contacted: here no cluster exists, and the answer is still
// about the version (not a missing CA or an unreachable node), with the
// state directory unchanged.
func TestUpgradeRefusesABadTargetFirst(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	if _, e, code := run(t, base, "init", "--name", "lab", "--arch", "amd64", "--provider", "nspawn"); code != 0 {
		t.Fatalf("init: %s", e)
	}
	before := treeDigest(t, base)
	for _, args := range [][]string{
		{"upgrade", "--to", "v1.37.2;id", "--dry-run"},
		{"upgrade", "--to", "v1.37.2;id", "--yes"},
		{"upgrade", "--to", "1.37.2", "--dry-run"},
		{"upgrade", "--to", "v1.37.2-rc.0", "--dry-run"},
	} {
		_, e, code := run(t, base, args...)
		to := args[2]
		if code != 2 || !strings.Contains(e, fmt.Sprintf("--to %q", to)) || !strings.Contains(e, "give a Kubernetes release such as v") {
			t.Errorf("khw %s: exit %d, want 2 and the version refused:\n%s", strings.Join(args, " "), code, e)
		}
		for _, not := range []string{"CA", "pki", "ssh", "connect", "dial"} {
			if strings.Contains(e, not) {
				t.Errorf("khw %s: the answer mentions %q, as if the cluster had been opened:\n%s", strings.Join(args, " "), not, e)
			}
		}
	}
	if diff := diffTrees(before, treeDigest(t, base)); len(diff) > 0 {
		t.Errorf("a refused --to changed the state directory: %v", diff)
	}
}
