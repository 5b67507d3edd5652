package machines

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/vm"
	"golang.org/x/crypto/ssh/knownhosts"
)

// fakeProvider records calls and reports fixed states; its Dialer refuses
// every connection, so no node ever answers SSH.
type fakeProvider struct {
	vm.Provider
	c       *config.Cluster
	states  map[string]vm.State
	created int
	started []string
	name    string // "" = nspawn
	// onCreate, when set, runs at the start of Create.
	onCreate  func()
	destroyed int
}

func (f *fakeProvider) Name() string {
	if f.name != "" {
		return f.name
	}
	return "nspawn"
}

func (f *fakeProvider) Status(ctx context.Context) ([]vm.NodeStatus, error) {
	var out []vm.NodeStatus
	for _, n := range f.c.Nodes {
		out = append(out, vm.NodeStatus{Name: n.Name, State: f.states[n.Name], IP: n.Addr()})
	}
	return out, nil
}

func (f *fakeProvider) Create(ctx context.Context) error {
	if f.onCreate != nil {
		f.onCreate()
	}
	f.created++
	return nil
}

func (f *fakeProvider) Destroy(ctx context.Context) error { f.destroyed++; return nil }

func (f *fakeProvider) Start(ctx context.Context, node string) error {
	f.started = append(f.started, node)
	return nil
}

func (f *fakeProvider) Dialer() remote.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nil, errors.New("connection refused (fake)")
	}
}

func newFake(t *testing.T) (*Step, *fakeProvider, *steps.Env) {
	t.Helper()
	c := config.Default("fk", config.ArchAMD64, config.ProviderNspawn)
	d := state.New(t.TempDir(), "fk")
	f := &fakeProvider{c: c, states: map[string]vm.State{}}
	for _, n := range c.Nodes {
		f.states[n.Name] = vm.StateRunning
	}
	f.states["cp2"] = vm.StateAbsent
	f.states["w1"] = vm.StateStopped
	signer, _, err := remote.EnsureKey(filepath.Join(d.Root, "ssh", "id_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := remote.NewPool(remote.Config{Signer: signer, KnownHostsFile: cluster.KnownHostsPath(d), Dial: f.Dialer(),
		InitialBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	s := &Step{M: nodeplan.New(&cluster.Session{Dir: d, Config: c, Provider: f, Pool: pool}), ProbeTimeout: 200 * time.Millisecond, BootTimeout: 200 * time.Millisecond}
	env := steps.NewEnv(c, d)
	t.Cleanup(func() { env.Close() })
	return s, f, env
}

func TestMachinesCheckDiffs(t *testing.T) {
	s, _, env := newFake(t)
	diffs, err := s.Check(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]steps.Diff{}
	var order []string
	for _, d := range diffs {
		got[d.Node] = d
		order = append(order, d.Node)
	}
	if strings.Join(order, ",") != "lb,cp1,cp2,cp3,w1,w2,w3" {
		t.Errorf("diffs not one per node in cluster.yaml order: %v", order)
	}
	cases := []struct{ node, what, fix string }{
		{"cp2", "machine is not running (absent)", "create and boot it"},
		{"w1", "machine is not running (stopped)", "boot it"},
		{"lb", "SSH does not answer", "wait for it to boot"},
		{"w3", "SSH does not answer", "wait for it to boot"},
	}
	for _, tc := range cases {
		d := got[tc.node]
		if !strings.HasPrefix(d.What, tc.what) || d.Fix != tc.fix {
			t.Errorf("%s: diff %+v, want %q / fix %q", tc.node, d, tc.what, tc.fix)
		}
	}
}

func TestMachinesApplyCreatesStartsAndReportsSSH(t *testing.T) {
	s, f, env := newFake(t)
	diffs, err := s.Check(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Apply(context.Background(), env, diffs)
	if f.created != 1 {
		t.Errorf("Create called %d times, want 1", f.created)
	}
	if strings.Join(f.started, ",") != "cp2,w1" {
		t.Errorf("started %v, want only the nodes not running: cp2,w1", f.started)
	}
	if err == nil || !strings.Contains(err.Error(), "SSH did not answer within 200ms") {
		t.Errorf("Apply with unreachable nodes: %v", err)
	}

	// SSH-only diffs: no Create, no Start.
	f.created, f.started = 0, nil
	_ = s.Apply(context.Background(), env, []steps.Diff{{Node: "lb", What: whatNoSSH + ": x", Fix: fixWait}})
	if f.created != 0 {
		t.Errorf("Create called for an SSH-only diff")
	}
}

// TestMachinesApplySaysWhatItWaitsFor: VMs take minutes to answer SSH, so
// 01-machines says what it waits for (nspawn nodes answer in seconds: no
// line).
func TestMachinesApplySaysWhatItWaitsFor(t *testing.T) {
	for _, prov := range []string{"libvirt", "nspawn"} {
		s, f, env := newFake(t)
		f.name = prov
		f.states["cp2"], f.states["w1"] = vm.StateRunning, vm.StateRunning
		_ = s.Apply(context.Background(), env, []steps.Diff{{Node: "cp2", What: whatNoSSH + ": x", Fix: fixWait}, {Node: "w1", What: whatNoSSH + ": x", Fix: fixWait}})
		env.Close()
		log, _ := os.ReadFile(env.NodeLogPath(""))
		const want = "waiting for SSH on cp2, w1 (boot and cloud-init; at most 200ms)"
		if got := strings.Contains(string(log), want); got != (prov == "libvirt") {
			t.Errorf("%s: cluster log has %q: %v; log:\n%s", prov, want, got, log)
		}
	}
}

// TestMachinesApplyPinsHostKeysBeforeCreate: every node's generated host
// key is pinned in known_hosts before Create installs it (and so before any
// boot or connection); Check writes nothing; a second Apply changes
// nothing; an address an older khw pinned keeps its pin.
func TestMachinesApplyPinsHostKeysBeforeCreate(t *testing.T) {
	s, f, env := newFake(t)
	kh := cluster.KnownHostsPath(env.State)
	// An older khw pinned lb on first contact.
	legacy, err := remote.EnsureHostKey(filepath.Join(t.TempDir(), "old"), "lb")
	if err != nil {
		t.Fatal(err)
	}
	legacyLine := knownhosts.Line([]string{"192.168.122.10"}, legacy.Public) + "\n"
	diffs, err := s.Check(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(kh); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Check wrote %s: %v", kh, err)
	}
	if _, err := os.Stat(cluster.HostKeysDir(env.State)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Check made %s: %v", cluster.HostKeysDir(env.State), err)
	}
	if err := os.WriteFile(kh, []byte(legacyLine), 0o600); err != nil {
		t.Fatal(err)
	}
	var atCreate string
	f.onCreate = func() {
		b, _ := os.ReadFile(kh)
		atCreate = string(b)
	}
	_ = s.Apply(context.Background(), env, diffs) // the fake nodes never answer SSH
	if f.created != 1 {
		t.Fatalf("Create called %d times", f.created)
	}
	want := legacyLine
	for _, n := range env.Cluster.Nodes {
		hk, err := cluster.EnsureHostKey(env.State, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(hk.PrivatePath()); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: host key %s: %v", n.Name, hk.PrivatePath(), err)
		}
		if hk.PrivatePath() != filepath.Join(env.State.Root, "ssh", "hostkeys", n.Name, "ssh_host_ed25519_key") {
			t.Errorf("%s: host key at %s", n.Name, hk.PrivatePath())
		}
		if n.Name != "lb" {
			want += knownhosts.Line([]string{n.IP}, hk.Public) + "\n"
		}
	}
	if atCreate != want {
		t.Errorf("known_hosts when Create ran:\n%s\nwant (lb's old pin kept, every other node's generated key):\n%s", atCreate, want)
	}
	_ = s.Apply(context.Background(), env, diffs)
	if now, _ := os.ReadFile(kh); string(now) != want {
		t.Errorf("second Apply changed known_hosts:\n%s", now)
	}
}

// TestDownRemovesPinsAndHostKeys: the destroyed nodes' pins and generated
// host keys go with them; khw's own key stays.
func TestDownRemovesPinsAndHostKeys(t *testing.T) {
	s, f, env := newFake(t)
	_ = s.Apply(context.Background(), env, nil)
	removed, err := nodeplan.Down(context.Background(), f, env.State, env.Cluster.Name)
	if err != nil || f.destroyed != 1 {
		t.Fatalf("Down = %v, %v (Destroy called %d times)", removed, err, f.destroyed)
	}
	all := strings.Join(removed, "\n")
	for _, p := range []string{cluster.KnownHostsPath(env.State), cluster.HostKeysDir(env.State)} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left after down: %v", p, err)
		}
		if !strings.Contains(all, p) {
			t.Errorf("Down's report lacks %s:\n%s", p, all)
		}
	}
	if _, err := os.Stat(cluster.KeyPath(env.State)); err != nil {
		t.Errorf("khw's own SSH key went: %v", err)
	}
}

func TestMachinesCommands(t *testing.T) {
	s, _, env := newFake(t)
	all := joinCmds(s.Commands(env, nil))
	for _, want := range []string{"ip netns add khw-fk", "-M fk-w3", "ubuntu@192.168.122.23 true",
		"ssh-keygen -q -t ed25519 -N '' -C root@w3 -f " + filepath.Join(cluster.HostKeysDir(env.State), "w3", "ssh_host_ed25519_key"),
		"192.168.122.23 $(cut", "StrictHostKeyChecking=yes -o HostKeyAlgorithms=ssh-ed25519 ubuntu@192.168.122.23 true",
		"install -m 0600 -o root -g root " + filepath.Join(cluster.HostKeysDir(env.State), "w3", "ssh_host_ed25519_key")} {
		if !strings.Contains(all, want) {
			t.Errorf("full commands lack %q", want)
		}
	}
	some := joinCmds(s.Commands(env, []steps.Diff{{Kind: steps.DiffMachineStopped, Node: "w1", What: whatNotRunning + " (stopped)", Fix: fixBoot}}))
	if strings.Contains(some, "ip netns add") || strings.Contains(some, "cp -a") || !strings.Contains(some, "-M fk-w1") || strings.Contains(some, "fk-lb") {
		t.Errorf("commands for a stopped w1 should only boot and probe w1:\n%s", some)
	}
	env.Cluster.Provider = config.ProviderLibvirt
	got := joinCmds(s.Commands(env, nil))
	if strings.Contains(got, "nspawn") {
		t.Errorf("libvirt commands mention nspawn: %s", got)
	}
	files := filepath.Join(env.State.Root, "libvirt", "w3")
	for _, want := range []string{
		"virsh -c qemu:///system net-list --all",
		"virsh -c qemu:///system vol-create khw " + files + "/disk-volume.xml",
		"cloud-localds --network-config=" + files + "/network-config /var/lib/libvirt/images/khw/khw-fk-w3-seed.iso " + files + "/user-data " + files + "/meta-data",
		"virsh -c qemu:///system define " + files + "/domain.xml",
		"virsh -c qemu:///system start khw-fk-w3",
		"ubuntu@192.168.122.23 test -e /var/lib/cloud/instance/boot-finished",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("libvirt commands lack %q:\n%s", want, got)
		}
	}
	// A stopped node is only started and probed.
	some = joinCmds(s.Commands(env, []steps.Diff{{Kind: steps.DiffMachineStopped, Node: "w1", What: whatNotRunning + " (stopped)", Fix: fixBoot}}))
	if strings.Contains(some, "define") || strings.Contains(some, "net-list") || !strings.Contains(some, "start khw-fk-w1") || strings.Contains(some, "khw-fk-lb") {
		t.Errorf("libvirt commands for a stopped w1 should only start and probe w1:\n%s", some)
	}
}

func joinCmds(cmds []steps.Command) string {
	var b strings.Builder
	for _, c := range cmds {
		b.WriteString(c.String() + "\n")
	}
	return b.String()
}

// hintProvider is a fakeProvider that explains boot failures (as libvirt's
// does when its probe chose KVM).
type hintProvider struct {
	*fakeProvider
	hint string
}

func (h hintProvider) BootHint() string { return h.hint }

// TestMachinesApplyGivesTheProvidersBootHint: when nodes do not answer SSH,
// the provider's explanation is printed under the step; none when it has
// nothing to say.
func TestMachinesApplyGivesTheProvidersBootHint(t *testing.T) {
	for _, hint := range []string{"set libvirt.domainType: qemu", ""} {
		s, f, env := newFake(t)
		f.name = "libvirt"
		s.M.Provider = hintProvider{f, hint}
		f.states["cp2"], f.states["w1"] = vm.StateRunning, vm.StateRunning
		err := s.Apply(context.Background(), env, []steps.Diff{{Node: "cp2", What: whatNoSSH + ": x", Fix: fixWait}})
		env.Close()
		if err == nil {
			t.Fatal("Apply passed with a node that never answers SSH")
		}
		log, _ := os.ReadFile(env.NodeLogPath(""))
		if hint != "" && !strings.Contains(string(log), hint) {
			t.Errorf("the boot hint is not printed; log:\n%s", log)
		}
		if hint == "" && strings.Contains(string(log), "domainType") {
			t.Errorf("a hint without one from the provider; log:\n%s", log)
		}
	}
}

// imageProvider is a fakeProvider that says which base image Create used.
type imageProvider struct{ *fakeProvider }

func (imageProvider) BaseImage() string {
	return "https://example.test/x.img (the current noble release)"
}

// TestMachinesApplySaysWhichBaseImage: after Create, the step prints the
// provider's account of the base image (the catalog may have fallen back).
func TestMachinesApplySaysWhichBaseImage(t *testing.T) {
	s, f, env := newFake(t)
	f.name = "libvirt"
	s.M.Provider = imageProvider{f}
	diffs, err := s.Check(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Apply(context.Background(), env, diffs) // the fake nodes never answer SSH
	env.Close()
	log, _ := os.ReadFile(env.NodeLogPath(""))
	if !strings.Contains(string(log), "base image: https://example.test/x.img (the current noble release)") {
		t.Errorf("no base image line after Create; log:\n%s", log)
	}
}
