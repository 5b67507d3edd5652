package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/state"
)

// TestLabAndBreakUsage checks the command-line errors of khw lab and khw
// break: each exits 2 with a message naming the fix, before any node or
// network is touched (the cluster here has no machines at all).
func TestLabAndBreakUsage(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	if _, errOut, code := run(t, base, "init", "--name", "lab", "--arch", "amd64", "--provider", "nspawn"); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lab", "check", "99-nosuch"}, "01-machines"},
		{[]string{"lab", "reset", "nosuch"}, "12-failover"},
		{[]string{"lab", "run"}, "khw lab run takes one lab, e.g. `khw lab run 04-etcd`"},
		{[]string{"lab", "check"}, "khw lab list shows them"},
		{[]string{"lab", "list", "-o", "yaml"}, "use text or json"},
		{[]string{"lab", "quiz", "04", "--lang", "fr"}, `--lang="fr": the labs are written in en and ko`},
		{[]string{"lab", "run", "04", "--lang", "kr"}, `--lang="kr"`},
		{[]string{"lab", "quiz", "nosuch"}, "12-failover"},
		{[]string{"lab", "04", "--by-hand", "--yes"}, "--yes does nothing with --by-hand"},
		{[]string{"lab", "hint", "nosuch"}, "12-failover"},
		{[]string{"break", "disk"}, "unknown drill"},
		{[]string{"break", "etcd", "--count", "3"}, "add --force"},
		{[]string{"break", "etcd", "--count", "4", "--force"}, "give 1..3"},
		{[]string{"break", "kubelet", "cp1"}, "takes a worker"},
		{[]string{"break", "node"}, "exactly one node"},
		{[]string{"break", "node", "cp2", "--nodes", "cp1"}, "not both"},
		{[]string{"break", "lb", "--for", "-5s"}, "positive duration"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, errOut, code := run(t, base, tc.args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d (usage): %s", code, exitUsage, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q lacks %q", errOut, tc.want)
			}
		})
	}
	// khw heal with no drill is a no-op that says so.
	out, errOut, code := run(t, base, "heal")
	if code != 0 || !strings.Contains(out, "no drill is active") {
		t.Errorf("heal without a drill: exit %d, %q %q", code, out, errOut)
	}
}

// TestSnapshotPath: the default snapshot file is under the state
// directory's etcd-snapshots/; a FILE elsewhere in the state directory
// (where a key could be replaced) is a usage error; one outside is taken.
func TestSnapshotPath(t *testing.T) {
	d := state.New(t.TempDir(), "c")
	now := time.Date(2026, 12, 4, 21, 5, 0, 0, time.UTC)
	if p, err := snapshotPath(d, nil, now); err != nil || p != filepath.Join(d.Root, "etcd-snapshots", "snapshot-20261204-210500.db") {
		t.Errorf("default: %q, %v", p, err)
	}
	for _, bad := range []string{filepath.Join(d.Root, "pki", "ca-key.pem"), d.Root, filepath.Join(d.Root, "etcd-snapshots")} {
		if _, err := snapshotPath(d, []string{bad}, now); err == nil || !strings.Contains(err.Error(), "inside the state directory") {
			t.Errorf("%s: %v, want a usage error", bad, err)
		}
	}
	for _, good := range []string{filepath.Join(d.Root, "etcd-snapshots", "mine.db"), filepath.Join(t.TempDir(), "b.db"), filepath.Join(d.Root+"x", "b.db")} {
		if p, err := snapshotPath(d, []string{good}, now); err != nil || p != good {
			t.Errorf("%s: %q, %v", good, p, err)
		}
	}
}
