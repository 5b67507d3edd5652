package vm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/fsutil"
)

// TestNspawnSnapshotRevert boots two real nodes, writes a file on one,
// snapshots (nodes frozen and thawed), changes and deletes things, reverts,
// and checks the nodes came back running with exactly the snapshot's files;
// a second snapshot shares unchanged files with the first (hard links), and
// DeleteSnapshot removes it.
func TestNspawnSnapshotRevert(t *testing.T) {
	p, pool := testCluster(t, "lb", "cp1")
	if _, err := fsutil.RsyncPath(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if err := p.Create(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"lb", "cp1"} {
		if err := p.Start(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	run(t, ctx, pool, p, "cp1", "echo before | sudo tee /etc/khw-lab >/dev/null")

	if err := p.Snapshot(ctx, "Bad Name"); err == nil || !strings.Contains(err.Error(), "lower-case") {
		t.Errorf("bad name: %v", err)
	}
	t0 := time.Now()
	if err := p.Snapshot(ctx, "before-04-etcd"); err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot of 2 running nodes: %v, frozen %v", time.Since(t0).Round(time.Millisecond), p.LastFreeze().Round(time.Millisecond))
	// Thawed: the node answers again.
	if got := run(t, ctx, pool, p, "cp1", "cat /etc/khw-lab"); got != "before" {
		t.Fatalf("after snapshot: %q", got)
	}
	if d := p.freezerDir("cp1"); d != "" {
		st, _ := os.ReadFile(filepath.Join(d, "freezer.state"))
		if strings.TrimSpace(string(st)) != "THAWED" {
			t.Errorf("cp1 freezer.state = %q after Snapshot", st)
		}
	}

	run(t, ctx, pool, p, "cp1", "echo after | sudo tee /etc/khw-lab >/dev/null; echo new | sudo tee /etc/khw-new >/dev/null; sudo rm /etc/hostname")
	t0 = time.Now()
	if err := p.Revert(ctx, "before-04-etcd"); err != nil {
		log, _ := os.ReadFile(filepath.Join(p.nodeDir("cp1"), "console.log"))
		t.Fatalf("%v\nconsole.log:\n%s", err, string(log[max(0, len(log)-3000):]))
	}
	t.Logf("revert of 2 nodes: %v", time.Since(t0).Round(time.Millisecond))
	wantState(t, p, StateRunning)
	// The pool redials: the old connections died with the nodes.
	if got := run(t, ctx, pool, p, "cp1", "cat /etc/khw-lab; test -e /etc/khw-new && echo NEW-STILL-THERE; cat /etc/hostname"); got != "before\ncp1" {
		t.Errorf("after revert: %q, want the snapshot's files (before, no khw-new, hostname cp1)", got)
	}

	// A second snapshot hard-links what did not change.
	if err := p.Snapshot(ctx, "before-05-control-plane"); err != nil {
		t.Fatal(err)
	}
	a, err := os.Stat(filepath.Join(p.snapshotDir("before-04-etcd"), "cp1", "usr/bin/systemctl"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Stat(filepath.Join(p.snapshotDir("before-05-control-plane"), "cp1", "usr/bin/systemctl"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Sys().(*syscall.Stat_t).Ino != b.Sys().(*syscall.Stat_t).Ino {
		t.Error("an unchanged file is copied again instead of hard-linked to the earlier snapshot")
	}
	names, _ := p.Snapshots()
	if strings.Join(names, ",") != "before-04-etcd,before-05-control-plane" {
		t.Errorf("Snapshots = %v", names)
	}
	if err := p.Revert(ctx, "nosuch"); err == nil || !strings.Contains(err.Error(), "have: before-04-etcd, before-05-control-plane") {
		t.Errorf("revert to a missing snapshot: %v", err)
	}
	if err := p.DeleteSnapshot(ctx, "before-05-control-plane"); err != nil {
		t.Fatal(err)
	}
	if names, _ := p.Snapshots(); strings.Join(names, ",") != "before-04-etcd" {
		t.Errorf("after delete: %v", names)
	}
}
