package nspawn

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/vm/vmtest"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/vm"
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
	wantState(t, p, vm.StateRunning)
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

// TestSnapshotVanishedFiles runs Snapshot on node roots that are plain
// directories (no root, no nspawn needed) with rsync wrapped so that chosen
// runs copy for real and then report exit 24 (fsutil.TestRsyncVanished
// shows a real rsync doing so), as when a booting node's sshd replaces its
// host key under the first pass. The unfrozen first pass must accept it; the
// authoritative second pass must refuse it for a node that does not run (or
// is frozen), and accept it only for a running node that could not be
// frozen.
func TestSnapshotVanishedFiles(t *testing.T) {
	if _, err := fsutil.RsyncPath(); err != nil {
		t.Skip(err)
	}
	c := config.Default(vmtest.RandomCluster(t), runtime.GOARCH, config.ProviderNspawn)
	c.Nodes = c.Nodes[:2]
	state := t.TempDir()
	p := &Provider{c: c, opts: Options{StateDir: state, CacheDir: t.TempDir()}, procs: map[string]*exec.Cmd{}}
	for _, n := range c.Nodes {
		for f, data := range map[string]string{"usr/bin/systemctl": "bin", "etc/ssh/ssh_host_ed25519_key": "key " + n.Name} {
			path := filepath.Join(p.NodeRoot(n.Name), f)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	// vanishOn(pass, node) says which runs report vanished files; a run's
	// pass is 1 for the first run into a destination, 2 for the second.
	withVanished := func(t *testing.T, vanishOn func(pass int, node string) bool) {
		var mu sync.Mutex
		runs := map[string]int{}
		rsyncRun = func(ctx context.Context, args ...string) error {
			if err := fsutil.Rsync(ctx, args...); err != nil {
				return err
			}
			dst := strings.TrimSuffix(args[len(args)-1], "/")
			mu.Lock()
			runs[dst]++
			pass := runs[dst]
			mu.Unlock()
			if vanishOn(pass, filepath.Base(dst)) {
				return &fsutil.RsyncError{Args: args, ExitCode: fsutil.RsyncExitVanished, Err: errors.New("exit status 24"),
					Stderr: "file has vanished: \"" + args[len(args)-2] + "etc/ssh/ssh_host_rsa_key.XXXXXX\""}
			}
			return nil
		}
		t.Cleanup(func() { rsyncRun = fsutil.Rsync })
	}
	w := c.Nodes[1].Name

	t.Run("first pass", func(t *testing.T) {
		withVanished(t, func(pass int, _ string) bool { return pass == 1 })
		if err := p.Snapshot(context.Background(), "s1"); err != nil {
			t.Fatalf("files vanishing under the unfrozen first pass fail the snapshot: %v", err)
		}
		for _, n := range c.Nodes {
			got, err := os.ReadFile(filepath.Join(p.snapshotDir("s1"), n.Name, "etc/ssh/ssh_host_ed25519_key"))
			if err != nil || string(got) != "key "+n.Name {
				t.Errorf("node %s in the snapshot: %q %v", n.Name, got, err)
			}
		}
	})
	t.Run("second pass, node not running", func(t *testing.T) {
		withVanished(t, func(pass int, node string) bool { return pass == 2 && node == w })
		err := p.Snapshot(context.Background(), "s2")
		if err == nil || !strings.Contains(err.Error(), "node "+w+": rsync") || !strings.Contains(err.Error(), "vanished") {
			t.Fatalf("a file vanishing under the authoritative pass: %v, want an error naming node %s", err, w)
		}
		if names, _ := p.Snapshots(); strings.Join(names, ",") != "s1" {
			t.Errorf("snapshots after the failure: %v, want only s1", names)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(p.snapshotDir("s2")), ".new-s2")); !os.IsNotExist(err) {
			t.Errorf("the partial snapshot stays: %v", err)
		}
	})
	t.Run("second pass, running and not frozen", func(t *testing.T) {
		// A process nspawnPid takes for the node's systemd-nspawn; with no
		// cgroups file the node has no freezer and is copied running.
		cmd := exec.Command("sh", "-c", "sleep 60; :", "systemd-nspawn", "-M", p.MachineName(w))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		if err := os.WriteFile(filepath.Join(p.nodeDir(w), "pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(filepath.Join(p.nodeDir(w), "pid"))
		// Start returns once execve released the parent, which can be
		// before the kernel set the new command line: wait for it.
		for deadline := time.Now().Add(5 * time.Second); p.nspawnPid(w) == 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if p.nspawnPid(w) == 0 || p.freezerDir(w) != "" {
			t.Fatalf("stand-in node: pid %d, freezer %q", p.nspawnPid(w), p.freezerDir(w))
		}
		withVanished(t, func(_ int, node string) bool { return node == w })
		if err := p.Snapshot(context.Background(), "s3"); err != nil {
			t.Fatalf("a running node without a freezer: %v", err)
		}
		if got, _ := os.ReadFile(filepath.Join(p.snapshotDir("s3"), runningFile)); string(got) != w+"\n" {
			t.Errorf("RUNNING = %q, want %s", got, w)
		}
	})
}
