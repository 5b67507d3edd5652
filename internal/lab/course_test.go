package lab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/vm"
)

// recProvider records the snapshot calls a course makes; the other
// methods of vm.Provider are not used by these tests (nil: they would
// panic).
type recProvider struct {
	vm.Provider
	calls     []string
	noSupport bool
}

func (p *recProvider) Name() string { return config.ProviderNspawn }
func (p *recProvider) Snapshot(_ context.Context, name string) error {
	if p.noSupport {
		return vm.ErrNotSupported
	}
	p.calls = append(p.calls, "snapshot "+name)
	return nil
}
func (p *recProvider) Revert(_ context.Context, name string) error {
	p.calls = append(p.calls, "revert "+name)
	return nil
}
func (p *recProvider) DeleteSnapshot(_ context.Context, name string) error {
	p.calls = append(p.calls, "delete "+name)
	return nil
}
func (p *recProvider) Destroy(context.Context) error {
	p.calls = append(p.calls, "destroy")
	return nil
}

func testCourse(t *testing.T, all ...steps.Step) (*Course, *recProvider) {
	t.Helper()
	d := state.New(t.TempDir(), "lab")
	if err := os.MkdirAll(d.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	c := config.Default("lab", config.ArchAMD64, config.ProviderNspawn)
	p := &recProvider{}
	env := steps.NewEnv(c, d)
	t.Cleanup(func() { env.Close() })
	return &Course{S: &cluster.Session{Dir: d, Config: c, Provider: p}, Env: env, Steps: all}, p
}

func mustLab(t *testing.T, id string) Lab {
	t.Helper()
	l, err := Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestSnapshotAndReset(t *testing.T) {
	if _, err := exec.LookPath("rsync"); err != nil {
		t.Skip("rsync not installed (make deps installs it)")
	}
	co, p := testCourse(t)
	d := co.S.Dir
	ctx := context.Background()
	cfg := filepath.Join(d.Root, "cluster.yaml")
	if _, err := co.S.Config.Save(cfg); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(cfg)
	releaseBefore := co.S.Config.Versions.Kubernetes

	// 01 makes the nodes: only the state directory is copied.
	snap, err := co.TakeSnapshot(ctx, mustLab(t, labid.Machines))
	if err != nil || snap.Nodes || len(p.calls) != 0 || snap.Name != "before-"+labid.Machines {
		t.Fatalf("snapshot before 01: %+v %v, provider calls %v", snap, err, p.calls)
	}
	snap, err = co.TakeSnapshot(ctx, mustLab(t, labid.Etcd))
	if err != nil || !snap.Nodes || !slices.Equal(p.calls, []string{"snapshot before-" + labid.Etcd}) {
		t.Fatalf("snapshot before 04: %+v %v, provider calls %v", snap, err, p.calls)
	}
	for _, id := range []string{labid.Machines, labid.PKI, labid.Etcd, labid.CoreDNS} {
		if err := MarkDone(d, id); err != nil {
			t.Fatal(err)
		}
	}
	after := *co.S.Config
	after.Versions.Kubernetes = "v1.99.0" // as lab 15 would leave it
	if _, err := after.Save(cfg); err != nil {
		t.Fatal(err)
	}
	co.S.Config.Versions.Kubernetes = after.Versions.Kubernetes

	p.calls = nil
	var said []string
	warn, err := co.Reset(ctx, mustLab(t, labid.Etcd), func(f string, a ...any) { said = append(said, f) })
	if err != nil || warn != nil {
		t.Fatalf("reset to 04: %v, warning %v", err, warn)
	}
	if p.calls[0] != "revert before-"+labid.Etcd || len(p.calls) != 1+len(From(labid.Etcd))-1 || !slices.Contains(p.calls, "delete before-"+labid.Failover) {
		t.Errorf("reset to 04: provider calls %v; want the revert, then every later lab's snapshot deleted", p.calls)
	}
	if data, _ := os.ReadFile(cfg); string(data) != string(before) {
		t.Errorf("reset to 04: cluster.yaml %q, want the copy from before the lab", data)
	}
	if co.S.Config.Versions.Kubernetes != releaseBefore {
		t.Errorf("reset to 04: the course still reads versions.kubernetes %s, not the restored cluster.yaml's %s", co.S.Config.Versions.Kubernetes, releaseBefore)
	}
	prog, _ := LoadProgress(d)
	if _, ok := prog[labid.PKI]; !ok || len(prog) != 2 {
		t.Errorf("reset to 04: progress %v, want 01 and 02 only", prog)
	}

	// A drill lab changes nothing on the nodes; resetting to before 01
	// removes them.
	p.calls = nil
	if _, err := co.Reset(ctx, mustLab(t, labid.Failover), nil); err != nil || strings.Join(p.calls, ",") != "delete before-"+labid.EtcdBackup+",delete before-"+labid.CertRenewal+",delete before-"+labid.Upgrade {
		t.Errorf("reset to 12: %v, provider calls %v", err, p.calls)
	}
	p.calls = nil
	if _, err := co.Reset(ctx, mustLab(t, labid.Machines), nil); err != nil || p.calls[0] != "destroy" {
		t.Errorf("reset to 01: %v, provider calls %v", err, p.calls)
	}
	if prog, _ := LoadProgress(d); len(prog) != 0 {
		t.Errorf("reset to 01: progress %v, want none", prog)
	}

	p.noSupport = true
	if snap, err := co.TakeSnapshot(ctx, mustLab(t, labid.Workers)); err != nil || snap.Nodes || !snap.NoNodeSupport {
		t.Errorf("snapshot on a provider without snapshots: %+v %v", snap, err)
	}
}

// Grading: a unit that is not running is a mistake whatever the files say;
// a file that differs is information when the lab has detectors, and the
// problem itself when it has none.
func TestGradeKindsOfDifference(t *testing.T) {
	unit := steps.Diff{Kind: steps.DiffUnit, Subject: "haproxy.service", Node: "lb", What: "haproxy.service is not running (failed/failed)", Fix: "systemctl restart haproxy.service"}
	file := steps.Diff{Subject: "/etc/haproxy/haproxy.cfg", Node: "lb", What: "/etc/haproxy/haproxy.cfg differs from the reference"}
	g := &Grade{Detectors: 1}
	g.addStepDiffs(mustLab(t, labid.LB), []steps.Diff{file, unit})
	if len(g.Mistakes) != 1 || g.Mistakes[0].Node != "lb" || g.Mistakes[0].Lab != labid.LB || !strings.Contains(g.Mistakes[0].Fix, "journalctl -u haproxy.service") {
		t.Errorf("mistakes %+v, want the unit that is not running", g.Mistakes)
	}
	if len(g.Differences) != 1 || g.Differences[0].Subject != file.Subject {
		t.Errorf("differences %+v, want the file", g.Differences)
	}
	if g.Pass() {
		t.Error("a lab with a unit not running passes")
	}
	info := &Grade{Detectors: 1}
	info.addStepDiffs(mustLab(t, labid.LB), []steps.Diff{file})
	if !info.Pass() {
		t.Error("a differing file alone fails a lab whose detectors found nothing")
	}
	none := &Grade{}
	none.addStepDiffs(mustLab(t, labid.Machines), []steps.Diff{file})
	if none.Pass() {
		t.Error("a difference passes a lab without detectors")
	}
	absent := &Grade{}
	absent.addStepDiffs(mustLab(t, labid.Machines), []steps.Diff{{Kind: steps.DiffMachineAbsent, Node: "cp2", What: "machine is not running (absent)", Fix: "create and boot it"}})
	if len(absent.Mistakes) != 1 || strings.Contains(absent.Mistakes[0].Fix, "journalctl") || !strings.Contains(absent.Mistakes[0].Evidence, "khw status") {
		t.Errorf("an absent machine: %+v; want a mistake whose evidence is the provider's state, no journal", absent.Mistakes)
	}
	if unknown := (&Grade{Detectors: 1, Status: LabStatus{Status: Unknown}}); unknown.Pass() {
		t.Error("a lab whose step check failed passes")
	}
}

// Earlier labs: the first not done stops the walk unless all are wanted; a
// Test lab counts by its progress record alone.
func TestEarlierNotDone(t *testing.T) {
	diff := []steps.Diff{{Node: "cp1", What: "x"}}
	s2 := &fakeStep{id: labid.PKI, diffs: diff}
	s3 := &fakeStep{id: labid.Kubeconfig, diffs: diff}
	smoke := &fakeStep{id: labid.Smoke}
	co, _ := testCourse(t, &fakeStep{id: labid.Machines}, s2, s3, smoke)
	ctx := context.Background()
	got, err := co.EarlierNotDone(ctx, mustLab(t, labid.Failover), false)
	if err != nil || !slices.Equal(got, []string{labid.PKI}) || s3.checks != 0 {
		t.Errorf("first only: %v %v (03 checked %d times)", got, err, s3.checks)
	}
	got, _ = co.EarlierNotDone(ctx, mustLab(t, labid.Failover), true)
	if !slices.Equal(got, []string{labid.PKI, labid.Kubeconfig, labid.Smoke}) || smoke.checks != 0 {
		t.Errorf("all: %v (smoke checked %d times)", got, smoke.checks)
	}
	if got, _ := co.EarlierNotDone(ctx, mustLab(t, labid.PKI), true); len(got) != 0 {
		t.Errorf("before 02: %v", got)
	}
}

// Grading refuses at once, naming the way out, when nodes do not run:
// every detector would otherwise wait minutes for SSH on each node.
func TestGradeNeedsRunningNodes(t *testing.T) {
	co, _ := testCourse(t, &fakeStep{id: labid.Etcd})
	co.S.Provider = &statusProvider{recProvider: &recProvider{}, state: map[string]vm.State{"cp2": vm.StateAbsent, "w1": vm.StateStopped}}
	_, err := co.Grade(context.Background(), mustLab(t, labid.Etcd))
	if err == nil || !strings.Contains(err.Error(), "cp2 is absent") || !strings.Contains(err.Error(), "w1 is stopped") || !strings.Contains(err.Error(), "khw lab "+labid.Machines) {
		t.Fatalf("grade with nodes down: %v; want an error naming them and khw lab 01", err)
	}
	co.S.Provider = &statusProvider{recProvider: &recProvider{}, state: map[string]vm.State{"w1": vm.StateStopped}}
	if _, err := co.Grade(context.Background(), mustLab(t, labid.Etcd)); err == nil || !strings.Contains(err.Error(), "khw power on") {
		t.Fatalf("grade with a node stopped: %v; want khw power on", err)
	}
}

// statusProvider reports every node of the default cluster running but
// those in state.
type statusProvider struct {
	*recProvider
	state map[string]vm.State
}

func (p *statusProvider) Status(context.Context) ([]vm.NodeStatus, error) {
	var out []vm.NodeStatus
	for _, n := range config.Default("lab", config.ArchAMD64, config.ProviderNspawn).Nodes {
		st := vm.StateRunning
		if s, ok := p.state[n.Name]; ok {
			st = s
		}
		out = append(out, vm.NodeStatus{Name: n.Name, State: st, IP: n.Addr()})
	}
	return out, nil
}

// skipStep is a clean step that khw up may skip when nothing changed.
type skipStep struct{ *fakeStep }

func (skipStep) SkipWhenUnchanged() {}

// A smoke lab that checks clean in khw lab counts as a pass for the next
// khw up, which then does not run it again.
func TestStatusRecordsAPass(t *testing.T) {
	first := &fakeStep{id: labid.Machines}
	smoke := skipStep{&fakeStep{id: labid.Smoke}}
	co, _ := testCourse(t, first, smoke)
	if st, _, err := co.Status(context.Background(), mustLab(t, labid.Smoke)); err != nil || st.Status != Done {
		t.Fatalf("status: %+v %v", st, err)
	}
	rep, err := steps.NewRunner(co.Env, nil).Run(context.Background(), co.Steps, steps.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if smoke.checks != 1 || rep.Steps[1].Skipped == "" {
		t.Errorf("khw up after the lab's check: smoke checked %d times, result %+v; want it skipped", smoke.checks, rep.Steps[1])
	}
}

// bootingStep is a lab whose check finds a diff for its first n checks:
// a node that boots again after a reset.
type bootingStep struct {
	fakeStep
	n int
}

func (b *bootingStep) Check(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
	b.checks++
	if b.checks <= b.n {
		return []steps.Diff{{Node: "w1", What: "SSH does not answer"}}, nil
	}
	return nil, nil
}

func TestSettleWaitsForTheEarlierLabs(t *testing.T) {
	s1 := &bootingStep{fakeStep: fakeStep{id: labid.Machines}, n: 2}
	s2 := &fakeStep{id: labid.PKI}
	s3 := &fakeStep{id: labid.Kubeconfig, diffs: []steps.Diff{{What: "not made yet"}}}
	co, _ := testCourse(t, s1, s2, s3)
	for _, id := range []string{labid.Machines, labid.PKI} {
		if err := MarkDone(co.S.Dir, id); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	// Lab 03 is the one reset: 01 boots after two checks, 02 is done, 03
	// itself is not waited for.
	if pending := co.settle(ctx, labid.Kubeconfig, 5*time.Second, time.Millisecond); len(pending) != 0 || s1.checks != 3 {
		t.Fatalf("pending %v after %d checks of 01, want none after 3", pending, s1.checks)
	}
	// A lab that stays drifted is named when the limit is reached.
	s1.checks, s1.n = 0, 1000
	pending := co.settle(ctx, labid.Kubeconfig, 30*time.Millisecond, time.Millisecond)
	if len(pending) != 1 || !strings.HasPrefix(pending[0], labid.Machines+" (") || !strings.Contains(pending[0], "SSH does not answer") {
		t.Fatalf("pending %v, want 01 with its detail", pending)
	}
	// Resetting lab 13 does not wait for 12-failover, a drill that was
	// never run: its status is a record no booting node changes.
	s1.checks, s1.n = 0, 0
	s3.diffs = nil
	if err := MarkDone(co.S.Dir, labid.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	if pending := co.settle(ctx, labid.EtcdBackup, 30*time.Millisecond, time.Millisecond); len(pending) != 0 {
		t.Fatalf("reset 13: pending %v, want none (12 is a drill, not done)", pending)
	}
}
