package nspawn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// Snapshots of nspawn nodes are copies of every node's root directory in
// D/nspawn/snapshots/<name>/<node>, made with rsync(1) so that a file that did
// not change since an earlier snapshot (or since the node image it was copied
// from) is a hard link to it, not a second copy: twelve lab snapshots of a
// seven-node cluster cost about what the files the labs change cost.
//
// To be consistent across the cluster (etcd's data files on three nodes, the
// kubelet's state on the workers), every running node is frozen at once with
// the cgroup v1 freezer (freezer.state = FROZEN: its processes stop where they
// are, https://docs.kernel.org/admin-guide/cgroup-v1/freezer-subsystem.html)
// while the copies are made, then thawed. The nodes see a pause of a few
// seconds, like a VM snapshot's.

// runningFile lists, in a snapshot, the nodes that ran when it was taken.
const runningFile = "RUNNING"

// snapshotName is what Snapshot accepts: it becomes a directory name.
var snapshotName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

func (p *Provider) snapshotDir(name string) string {
	return filepath.Join(p.opts.StateDir, "nspawn", "snapshots", name)
}

// Snapshots lists the snapshot names, oldest first.
func (p *Provider) Snapshots() ([]string, error) {
	dir := filepath.Join(p.opts.StateDir, "nspawn", "snapshots")
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	type snap struct {
		name string
		t    time.Time
	}
	var ss []snap
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		ss = append(ss, snap{e.Name(), info.ModTime()})
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].t.Before(ss[j].t) })
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.name
	}
	return out, nil
}

// rsyncNodeFlags copy a node root as it is: hard links, ACLs, xattrs,
// numeric owners; files whose size and mtime match are skipped.
var rsyncNodeFlags = []string{"-aHAX", "--numeric-ids", "--delete", "--modify-window=-1"}

// rsyncRun runs rsync; a variable so that tests can make it report
// vanished files.
var rsyncRun = fsutil.Rsync

func runRsync(ctx context.Context, args ...string) error {
	return rsyncRun(ctx, append(append([]string(nil), rsyncNodeFlags...), args...)...)
}

// freezerDir is the node's cgroup in the v1 freezer hierarchy, "" if none.
func (p *Provider) freezerDir(node string) string {
	for _, d := range p.cgroupDirs(node) {
		if _, err := os.Stat(filepath.Join(d, "freezer.state")); err == nil {
			return d
		}
	}
	return ""
}

// setFrozen writes FROZEN or THAWED to dir/freezer.state and waits (up to
// 10 s) until the kernel reports that state.
func setFrozen(dir string, frozen bool) error {
	want := "THAWED"
	if frozen {
		want = "FROZEN"
	}
	f := filepath.Join(dir, "freezer.state")
	if err := os.WriteFile(f, []byte(want), 0o644); err != nil {
		return fmt.Errorf("%s: %w", f, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(got)) == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s stays %s, want %s", f, strings.TrimSpace(string(got)), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Snapshot copies every node's root directory (made by Create) to
// D/nspawn/snapshots/<name>/, running nodes frozen during the copy. name:
// lower-case letters, digits, '.', '_', '-' (e.g. "before-04-etcd"); an
// existing snapshot of that name is replaced. Errors: a bad name, rsync
// missing (the fix names the package), a node not created, a copy failing
// (the partial snapshot is removed; the nodes are always thawed).
func (p *Provider) Snapshot(ctx context.Context, name string) error {
	if !snapshotName.MatchString(name) {
		return fmt.Errorf("snapshot name %q: use lower-case letters, digits, '.', '_' and '-' (at most 63)", name)
	}
	if err := p.checkOwner(); err != nil {
		return err
	}
	if _, err := fsutil.RsyncPath(); err != nil {
		return fmt.Errorf("nspawn snapshots: %w", err)
	}
	for _, n := range p.c.Nodes {
		if _, err := os.Stat(filepath.Join(p.NodeRoot(n.Name), "usr/bin/systemctl")); err != nil {
			return fmt.Errorf("snapshot %s: node %s has no root directory yet (run khw up --until "+labid.Machines+")", name, n.Name)
		}
	}
	earlier, err := p.Snapshots()
	if err != nil {
		return err
	}
	final := p.snapshotDir(name)
	tmp := filepath.Join(filepath.Dir(final), ".new-"+name)
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}

	// Pass 1 copies while the nodes run (most of the data); pass 2, with
	// every running node frozen at once, copies what changed meanwhile, so
	// the nodes stand still only for rsync's walk and that small delta.
	// Pass 1 meets files that a running node deletes under it (journal
	// files, sshd's host keys being written, temporary files): rsync's exit
	// 24, fsutil.IsRsyncVanished, is fine there, as pass 2 copies the tree
	// as it then is. Pass 2 is authoritative: nothing runs on a frozen or
	// stopped node, so a vanished file there is a real fault; only a running
	// node that could not be frozen (no freezer hierarchy, copied running on
	// a best-effort basis) may still lose files under rsync.
	copyAll := func(vanishedOK func(node string) bool) []error {
		return p.copyRoots(ctx, name, tmp, earlier, vanishedOK)
	}
	if err := errors.Join(copyAll(func(string) bool { return true })...); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("snapshot %s: %w", name, err)
	}
	var frozen []string
	unfrozen := map[string]bool{} // running, but no freezer to stop it
	defer func() {
		for _, d := range frozen {
			_ = setFrozen(d, false)
		}
	}()
	for _, n := range p.c.Nodes {
		if p.nspawnPid(n.Name) == 0 {
			continue
		}
		d := p.freezerDir(n.Name)
		if d == "" {
			unfrozen[n.Name] = true // no freezer hierarchy: copied running (best effort)
			continue
		}
		if err := setFrozen(d, true); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("snapshot %s: freeze node %s: %w", name, n.Name, err)
		}
		frozen = append(frozen, d)
	}
	p.lastFrozen = time.Now()
	errs := copyAll(func(node string) bool { return unfrozen[node] })
	for _, d := range frozen {
		_ = setFrozen(d, false)
	}
	frozen = nil
	p.lastFrozenFor = time.Since(p.lastFrozen)
	if err := errors.Join(errs...); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("snapshot %s: %w", name, err)
	}
	// Which nodes ran: Revert powers exactly those on again.
	var running []string
	for _, n := range p.c.Nodes {
		if p.nspawnPid(n.Name) != 0 {
			running = append(running, n.Name)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, runningFile), []byte(strings.Join(running, "\n")+"\n"), 0o600); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.RemoveAll(final); err != nil {
		return err
	}
	return os.Rename(tmp, final)
}

// copyRoots rsyncs every node's root into tmp/<node> (two at a time),
// hard-linking unchanged files to the newest earlier snapshots (rsync takes
// up to 20), else to the node image the root was copied from. A file that
// vanished under rsync is an error unless vanishedOK(node).
func (p *Provider) copyRoots(ctx context.Context, name, tmp string, earlier []string, vanishedOK func(node string) bool) []error {
	sem := make(chan struct{}, 2)
	errs := make([]error, len(p.c.Nodes))
	var wg sync.WaitGroup
	for i, n := range p.c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			args := []string{}
			// Hard-link unchanged files to the newest earlier snapshots
			// (rsync takes up to 20), else to the node image the root
			// was copied from.
			for j := len(earlier) - 1; j >= 0 && len(args) < 19; j-- {
				if earlier[j] == name {
					continue
				}
				if dir := filepath.Join(p.snapshotDir(earlier[j]), n.Name); isDir(dir) {
					args = append(args, "--link-dest="+dir)
				}
			}
			if img := RootfsPath(p.opts.CacheDir, p.c.Arch); isDir(img) {
				args = append(args, "--link-dest="+img)
			}
			args = append(args, p.NodeRoot(n.Name)+"/", filepath.Join(tmp, n.Name)+"/")
			if err := runRsync(ctx, args...); err != nil && !(fsutil.IsRsyncVanished(err) && vanishedOK(n.Name)) {
				errs[i] = fmt.Errorf("node %s: %w", n.Name, err)
			}
		}()
	}
	wg.Wait()
	return errs
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// Revert puts every node's root directory back to snapshot name: the nodes
// are powered off (at once, like pulling the plug: their state is being
// replaced anyway), each root is made equal to the snapshot with rsync
// (changed files copied back, files made since removed), and the nodes that
// were running when the snapshot was taken are started again. Errors: no such snapshot (the message
// lists the ones there are), rsync failing (the node stays off; run Revert
// again).
func (p *Provider) Revert(ctx context.Context, name string) error {
	if err := p.checkOwner(); err != nil {
		return err
	}
	dir := p.snapshotDir(name)
	if !isDir(dir) {
		have, _ := p.Snapshots()
		return fmt.Errorf("no nspawn snapshot %q (have: %s)", name, strings.Join(have, ", "))
	}
	var running []string
	for _, n := range p.c.Nodes {
		if !isDir(filepath.Join(dir, n.Name)) {
			return fmt.Errorf("snapshot %s has no copy of node %s", name, n.Name)
		}
		if p.nspawnPid(n.Name) != 0 {
			running = append(running, n.Name)
			if err := p.Stop(ctx, n.Name, true); err != nil {
				return err
			}
		}
	}
	for _, n := range p.c.Nodes {
		if err := runRsync(ctx, filepath.Join(dir, n.Name)+"/", p.NodeRoot(n.Name)+"/"); err != nil {
			return fmt.Errorf("revert node %s to %s: %w", n.Name, name, err)
		}
	}
	if data, err := os.ReadFile(filepath.Join(dir, runningFile)); err == nil {
		running = strings.Fields(string(data))
	}
	for _, n := range running {
		if err := p.Start(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// DeleteSnapshot removes snapshot name (no error if it does not exist).
func (p *Provider) DeleteSnapshot(ctx context.Context, name string) error {
	if !snapshotName.MatchString(name) {
		return fmt.Errorf("snapshot name %q is not valid", name)
	}
	if err := p.checkOwner(); err != nil {
		return err
	}
	return os.RemoveAll(p.snapshotDir(name))
}

// LastFreeze returns how long the nodes stood frozen during the last
// Snapshot of this provider value (0 before any).
func (p *Provider) LastFreeze() time.Duration { return p.lastFrozenFor }
