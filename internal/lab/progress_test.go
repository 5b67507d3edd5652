package lab

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// fakeStep is a step whose Check returns fixed diffs (or an error) and
// counts its calls.
type fakeStep struct {
	id     string
	diffs  []steps.Diff
	err    error
	checks int
}

func (f *fakeStep) ID() string    { return f.id }
func (f *fakeStep) Title() string { return "title of " + f.id }
func (f *fakeStep) Check(context.Context, *steps.Env) ([]steps.Diff, error) {
	f.checks++
	return f.diffs, f.err
}
func (f *fakeStep) Apply(context.Context, *steps.Env, []steps.Diff) error { return nil }
func (f *fakeStep) Commands(*steps.Env, []steps.Diff) []steps.Command     { return nil }

func TestList(t *testing.T) {
	d := state.New(t.TempDir(), "lab")
	if err := os.MkdirAll(d.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	diff := []steps.Diff{{Node: "cp1", What: "etcd.service is not active", Fix: "start it"}}
	s1 := &fakeStep{id: "01-machines"}
	s2 := &fakeStep{id: "02-pki", diffs: diff}           // recorded done: drifted
	s3 := &fakeStep{id: "03-kubeconfig", diffs: diff}    // never done: not done
	s4 := &fakeStep{id: "04-etcd", diffs: diff}          // after a not-done lab: not checked
	s5 := &fakeStep{id: "05-control-plane", diffs: diff} // after it, but recorded: still checked (drift)
	s6 := &fakeStep{id: "06-lb", err: errors.New("node lb unreachable")}
	smoke := &fakeStep{id: labid.Smoke}
	p := Progress{}
	for _, id := range []string{"02-pki", "05-control-plane", labid.Smoke} {
		p[id] = p["x"]
	}
	if err := p.Save(d); err != nil {
		t.Fatal(err)
	}
	rows, err := List(context.Background(), []steps.Step{s1, s2, s3, s4, s5, s6, smoke}, steps.NewEnv(config.Default("lab", "amd64", "nspawn"), d), d)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id     string
		status Status
		detail string
	}{
		{"01-machines", Done, ""},
		{"02-pki", Drifted, "cp1: etcd.service is not active (fix: start it)"},
		{"03-kubeconfig", NotDone, "cp1: etcd.service is not active"},
		{"04-etcd", NotDone, "not checked: needs 03-kubeconfig first"},
		{"05-control-plane", Drifted, "etcd.service is not active"},
		{"06-lb", NotDone, "not checked: needs 03-kubeconfig first"},
		{labid.Smoke, NotDone, "not checked: needs 03-kubeconfig first"},
		{labid.Failover, NotDone, "run khw lab 12"},
		{labid.EtcdBackup, NotDone, "run khw lab 13 (or khw lab 13 --by-hand"},
		{labid.CertRenewal, NotDone, "run khw lab 14 (or khw lab 14 --by-hand"},
		{labid.Upgrade, NotDone, "run khw lab 15 (or khw lab 15 --by-hand"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i, w := range want {
		if rows[i].ID != w.id || rows[i].Status != w.status || !strings.Contains(rows[i].Detail, w.detail) {
			t.Errorf("row %d = %+v, want %s %s %q", i, rows[i], w.id, w.status, w.detail)
		}
	}
	if s4.checks != 0 || s6.checks != 0 || smoke.checks != 0 {
		t.Errorf("steps after a not-done lab were checked: 04 %d, 06 %d, smoke %d", s4.checks, s6.checks, smoke.checks)
	}
	if s5.checks != 1 {
		t.Errorf("a recorded lab after a not-done one must be checked (drift), got %d checks", s5.checks)
	}

	// A Check that fails is "unknown", with the error.
	s3.diffs, s4.diffs = nil, nil
	rows, _ = List(context.Background(), []steps.Step{s1, s2, s3, s4, s5, s6}, steps.NewEnv(config.Default("lab", "amd64", "nspawn"), d), d)
	if rows[3].Status != Done || rows[5].Status != Unknown || !strings.Contains(rows[5].Detail, "unreachable") {
		t.Errorf("rows after fixing 03: %+v", rows)
	}
	// 12-failover is done once recorded (a drill passed since the last reset).
	if err := MarkDone(d, labid.Failover); err != nil {
		t.Fatal(err)
	}
	rows, _ = List(context.Background(), []steps.Step{s1}, steps.NewEnv(config.Default("lab", "amd64", "nspawn"), d), d)
	if fo := rows[len(rows)-4]; fo.ID != labid.Failover || fo.Status != Done {
		t.Errorf("12-failover after MarkDone: %+v", fo)
	}
	// 13-etcd-backup too (its check passed since the last reset).
	if err := MarkDone(d, labid.EtcdBackup); err != nil {
		t.Fatal(err)
	}
	rows, _ = List(context.Background(), []steps.Step{s1}, steps.NewEnv(config.Default("lab", "amd64", "nspawn"), d), d)
	if last := rows[len(rows)-3]; last.ID != labid.EtcdBackup || last.Status != Done || !strings.Contains(last.Detail, "passed its check") {
		t.Errorf("13-etcd-backup after MarkDone: %+v", last)
	}
}

func TestStateSnapshotRestore(t *testing.T) {
	if _, err := exec.LookPath("rsync"); err != nil {
		t.Skip("rsync not installed (make deps installs it)")
	}
	d := state.New(t.TempDir(), "lab")
	write := func(rel, data string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(d.Root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("pki/ca-key.pem", "key v1", 0o600)
	write("cluster.yaml", "name: lab\n", 0o644)
	write("nspawn/cp1/root/etc/hostname", "cp1", 0o644)
	ctx := context.Background()
	if err := SnapshotState(ctx, d, "04-etcd"); err != nil {
		t.Fatal(err)
	}
	// The lab changes things; the provider's node roots change too.
	write("pki/ca-key.pem", "key v2", 0o600)
	write("pki/new.pem", "made by the lab", 0o644)
	write("nspawn/cp1/root/etc/hostname", "changed", 0o644)
	if err := RestoreState(ctx, d, "04-etcd"); err != nil {
		t.Fatal(err)
	}
	read := func(rel string) string {
		b, _ := os.ReadFile(filepath.Join(d.Root, rel))
		return string(b)
	}
	if got := read("pki/ca-key.pem"); got != "key v1" {
		t.Errorf("ca-key.pem = %q after restore", got)
	}
	if _, err := os.Stat(filepath.Join(d.Root, "pki/new.pem")); !os.IsNotExist(err) {
		t.Errorf("a file made after the snapshot survived the restore: %v", err)
	}
	if fi, _ := os.Stat(filepath.Join(d.Root, "pki/ca-key.pem")); fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v after restore", fi.Mode().Perm())
	}
	if got := read("nspawn/cp1/root/etc/hostname"); got != "changed" {
		t.Errorf("the provider's directory must be left to the provider, got %q", got)
	}
	if got := StateSnapshots(d); len(got) != 1 || got[0] != "04-etcd" {
		t.Errorf("StateSnapshots = %v", got)
	}
	if err := RestoreState(ctx, d, "05-control-plane"); err == nil || !strings.Contains(err.Error(), "was the lab run with khw lab") {
		t.Errorf("restore without a snapshot: %v", err)
	}
	// A second snapshot cut short (half copied, then an error) leaves the
	// whole first one in place, and no partial copy that StateSnapshots
	// lists.
	copyState = func(ctx context.Context, src, dst string) error {
		if err := rsync(ctx, src, dst); err != nil {
			return err
		}
		os.Remove(filepath.Join(dst, "pki/ca-key.pem"))
		return errors.New("interrupted")
	}
	defer func() { copyState = rsync }()
	if err := SnapshotState(ctx, d, "04-etcd"); err == nil {
		t.Fatal("a snapshot whose copy failed succeeded")
	}
	if got := read(filepath.Join("labs/snapshots/before-04-etcd/pki/ca-key.pem")); got != "key v1" {
		t.Errorf("the first snapshot's ca-key.pem = %q after a second one was cut short", got)
	}
	if got := StateSnapshots(d); len(got) != 1 || got[0] != "04-etcd" {
		t.Errorf("StateSnapshots after a cut-short snapshot = %v", got)
	}
	if ents, _ := os.ReadDir(filepath.Join(d.Root, "labs/snapshots")); len(ents) != 1 {
		t.Errorf("labs/snapshots holds %d entries, want only before-04-etcd", len(ents))
	}
}

// TestRestoreKeepsTheLock: khw lab reset restores the state directory while
// it holds the cluster lock; the restore must leave the lock file (its
// inode) alone, or another khw could lock the cluster in the middle of it.
func TestRestoreKeepsTheLock(t *testing.T) {
	if _, err := exec.LookPath("rsync"); err != nil {
		t.Skip("rsync not installed (make deps installs it)")
	}
	d := state.New(t.TempDir(), "lab")
	ctx := context.Background()
	unlock, err := d.Lock() // khw lab run takes the snapshot under the lock
	if err != nil {
		t.Fatal(err)
	}
	if err := SnapshotState(ctx, d, "04-etcd"); err != nil {
		t.Fatal(err)
	}
	unlock()
	if _, err := os.Stat(filepath.Join(stateSnapshotDir(d, "04-etcd"), state.LockFile)); !os.IsNotExist(err) {
		t.Errorf("the snapshot holds the lock file: %v", err)
	}
	// The reset, later: another pid (another mtime) in the lock file.
	lock := filepath.Join(d.Root, state.LockFile)
	os.WriteFile(lock, []byte("1\n"), 0o600)
	unlock, err = d.Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	// An older snapshot that still holds a lock file must not bring it back.
	os.WriteFile(filepath.Join(stateSnapshotDir(d, "04-etcd"), state.LockFile), []byte("99\n"), 0o600)
	if err := RestoreState(ctx, d, "04-etcd"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Lock(); !errors.Is(err, state.ErrLocked) {
		t.Fatalf("after the restore another khw could lock the cluster (the lock file was replaced): %v", err)
	}
}

func TestSourceJumpboxStaysInState(t *testing.T) {
	d := state.New(t.TempDir(), "lab")
	if err := os.MkdirAll(filepath.Join(d.Root, "pki"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Root, "pki", "ca.pem"), []byte("CA"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := Source{State: d}
	got, err := src.ReadFile(context.Background(), "jumpbox", "pki/ca.pem")
	if err != nil || string(got) != "CA" {
		t.Fatalf("ReadFile = %q, %v", got, err)
	}
	// "../" cannot leave the state directory.
	if _, err := src.ReadFile(context.Background(), "jumpbox", "../../../../etc/hostname"); err == nil {
		t.Error("a path with ../ read a file outside the state directory")
	}
	if _, err := src.ReadFile(context.Background(), "cp9", "/etc/hostname"); err == nil || !strings.Contains(err.Error(), "not a node") {
		t.Errorf("unknown node: %v", err)
	}
}

// TestKeptSnapshot: a lab run before and not done keeps the snapshot of
// its first try (a second khw lab --by-hand must not take a new one of the
// half-done state); a done lab, or one without a snapshot, gets a new one.
func TestKeptSnapshot(t *testing.T) {
	if _, err := exec.LookPath("rsync"); err != nil {
		t.Skip("rsync not installed (make deps installs it)")
	}
	d := state.New(t.TempDir(), "lab")
	if err := os.MkdirAll(d.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	c := &Course{S: &cluster.Session{Dir: d}}
	l := byID("02-pki")
	if c.keptSnapshot(l) {
		t.Error("no snapshot yet, but one is kept")
	}
	if err := SnapshotState(context.Background(), d, l.ID); err != nil {
		t.Fatal(err)
	}
	if !c.keptSnapshot(l) {
		t.Error("a lab tried and not done does not keep its snapshot")
	}
	if err := MarkDone(d, l.ID); err != nil {
		t.Fatal(err)
	}
	if c.keptSnapshot(l) {
		t.Error("a done lab keeps its old snapshot: running it again must take a new one")
	}
}

// TestProgressRefusesNull: a progress file holding JSON null is an error
// naming it and the fix, not a nil map that recording a lab panics on.
func TestProgressRefusesNull(t *testing.T) {
	d := state.Dir{Root: t.TempDir(), Name: "t"}
	p := progressPath(d)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("null\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := MarkDone(d, labid.ControlPlane); err == nil || !strings.Contains(err.Error(), p+" holds null") || !strings.Contains(err.Error(), "delete it to start the progress over") {
		t.Fatalf("MarkDone over a null progress file: %v", err)
	}
	if data, _ := os.ReadFile(p); string(data) != "null\n" {
		t.Errorf("the file changed to %s", data)
	}
}
