package nspawn

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/vm/vmtest"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/vm"
)

type testLog struct{ t *testing.T }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// TestNspawnOneNodeBootSSHPowerOff boots ONE real node (lb) of a fresh
// cluster, reaches its sshd from inside the cluster namespace with
// internal/remote, checks hostname and the static IP, powers it off
// gracefully, boots it again and pulls the plug, destroys the cluster and
// checks that nothing is left on the host.
func TestNspawnOneNodeBootSSHPowerOff(t *testing.T) {
	cache := requireNspawnHost(t)
	if _, err := os.Stat(RootfsPath(cache, runtime.GOARCH)); err != nil {
		t.Logf("no node image at %s: running debootstrap (~3-5 min)", RootfsPath(cache, runtime.GOARCH))
	}

	name := vmtest.RandomCluster(t)
	c := config.Default(name, runtime.GOARCH, config.ProviderNspawn)
	lb, _ := c.LB()
	c.Nodes = []config.Node{lb} // one node keeps the test short
	state := t.TempDir()
	signer, authLine, err := remote.EnsureKey(filepath.Join(state, "ssh", "id_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	addrsBefore, linksBefore := vmtest.RootNSAddrs(t), vmtest.RootNSLinks(t)
	hostPanicB, _ := os.ReadFile("/proc/sys/kernel/panic")
	hostPanic := string(hostPanicB)

	p, err := New(c, Options{StateDir: state, AuthorizedKey: authLine, HostKey: testHostKeys(state), Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Destroy(ctx); err != nil {
			t.Errorf("cleanup Destroy: %v", err)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	if err := p.Create(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Create (image cached or built, root copied, seeded): %v", time.Since(t0).Round(time.Millisecond))
	if err := p.Create(ctx); err != nil {
		t.Fatalf("second Create must be a no-op: %v", err)
	}
	wantState(t, p, vm.StateStopped)

	pool, err := remote.NewPool(remote.Config{
		Signer:         signer,
		KnownHostsFile: filepath.Join(state, "ssh", "known_hosts"),
		Dial:           p.Dialer(),
		ConnectTimeout: time.Minute,
		InitialBackoff: 100 * time.Millisecond,
		MaxBackoff:     500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pinHostKeys(t, p, pool)
	rn := remote.Node{Name: lb.Name, Addr: lb.IP}

	boot := func(round string) *remote.Client {
		t.Helper()
		t1 := time.Now()
		if err := p.Start(ctx, lb.Name); err != nil {
			t.Fatal(err)
		}
		wantState(t, p, vm.StateRunning)
		cl, err := pool.Get(ctx, rn)
		if err != nil {
			log, _ := os.ReadFile(filepath.Join(p.nodeDir(lb.Name), "console.log"))
			t.Errorf("%s: SSH to the node: %v\nconsole:\n%s", round, err, log)
			t.Fatalf("node journal:\n%s", nodeJournal(p, lb.Name))
		}
		t.Logf("%s: Start → SSH session up: %v", round, time.Since(t1).Round(time.Millisecond))
		return cl
	}

	cl := boot("boot 1")
	out, _, err := cl.Run(ctx, "hostname", remote.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != lb.Name {
		t.Errorf("hostname = %q, want %q", got, lb.Name)
	}
	out, _, err = cl.Run(ctx, "ip -4 -o addr show host0", remote.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), " "+lb.IP+"/24 ") {
		t.Errorf("ip -4 addr show host0 = %q, want %s/24", out, lb.IP)
	}
	out, _, err = cl.Run(ctx, "id -u; cat /proc/sys/vm/overcommit_memory; systemctl is-system-running --wait || true", remote.RunOptions{Sudo: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("as root via sudo -n: %q", out)
	// The host keeps its own values (kernel.panic etc. are host-wide); the
	// node sees kubelet's through khw-proc-sys.service.
	if f := strings.Fields(string(out)); len(f) < 3 || f[0] != "0" || f[1] != "1" || f[2] != "running" {
		t.Errorf("sudo id -u / overcommit_memory / is-system-running = %q, want 0, 1, running", out)
	}
	if h, _ := os.ReadFile("/proc/sys/kernel/panic"); strings.TrimSpace(string(h)) == "10" {
		t.Logf("host kernel.panic is already 10; the node check below proves less")
	}
	out, _, err = cl.Run(ctx, "cat /proc/sys/kernel/panic; systemctl is-active khw-host0 khw-cgroup-rw khw-proc-sys ssh; "+
		"mkdir /sys/fs/cgroup/memory/khw-probe && rmdir /sys/fs/cgroup/memory/khw-probe && echo cgroup-rw", remote.RunOptions{Sudo: true})
	if err != nil {
		t.Fatalf("node checks: %v\n%s", err, out)
	}
	if got, want := strings.Fields(string(out)), []string{"10", "active", "active", "active", "active", "cgroup-rw"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("node checks = %q, want %q", got, want)
	}
	if h, _ := os.ReadFile("/proc/sys/kernel/panic"); strings.TrimSpace(string(h)) == "10" && !strings.Contains(hostPanic, "10") {
		t.Errorf("the host's kernel.panic changed to 10")
	}
	// The node runs in its own cgroup in every v1 hierarchy.
	cg, err := os.ReadFile("/proc/" + strconv.Itoa(p.nspawnPid(lb.Name)) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		if !strings.Contains(line, "/khw-"+p.MachineName(lb.Name)) {
			t.Errorf("systemd-nspawn is not in the node cgroup: %s", line)
		}
	}
	// The node network exists only inside the namespace.
	for _, line := range strings.Split(vmtest.RootNSAddrs(t), "\n") {
		if strings.Contains(line, "192.168.") && !strings.Contains(addrsBefore, line) {
			t.Errorf("root namespace gained an address while the node runs: %s", line)
		}
	}

	// Graceful power-off: the node's systemd shuts down and nspawn exits.
	t2 := time.Now()
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	if err := p.Stop(sctx, lb.Name, false); err != nil {
		t.Fatal(err)
	}
	scancel()
	t.Logf("graceful power-off: %v", time.Since(t2).Round(time.Millisecond))
	// An orderly shutdown ends with systemd-nspawn reporting the container
	// exited successfully (a killed one reports a signal / failure).
	console, _ := os.ReadFile(filepath.Join(p.nodeDir(lb.Name), "console.log"))
	if !strings.Contains(string(console), "Container "+p.MachineName(lb.Name)+" has been shut down") ||
		!strings.Contains(string(console), "Reached target shutdown.target") && !strings.Contains(string(console), "System Shutdown") {
		t.Errorf("console log shows no orderly shutdown:\n%s", lastLines(string(console), 15))
	}
	wantState(t, p, vm.StateStopped)

	// Second boot (same host keys, pinned in known_hosts) then pull the plug.
	cl = boot("boot 2")
	if _, _, err := cl.Run(ctx, "true", remote.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	pid := p.nspawnPid(lb.Name)
	dirs := p.cgroupDirs(lb.Name)
	t3 := time.Now()
	if err := p.Stop(ctx, lb.Name, true); err != nil {
		t.Fatal(err)
	}
	t.Logf("forced power-off: %v", time.Since(t3).Round(time.Millisecond))
	wantState(t, p, vm.StateStopped)
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		t.Errorf("systemd-nspawn pid %d still exists after forced stop", pid)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("node cgroup %s left after stop", d)
		}
	}

	leftovers := p.nspawnRunLeftovers(lb.Name)
	if len(leftovers) != 2 {
		t.Errorf("expected the propagate dir and lock file names, got %v", leftovers)
	}
	if err := p.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	wantState(t, p, vm.StateAbsent)
	for _, f := range leftovers {
		if _, err := os.Stat(f); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("systemd-nspawn runtime file %s left after Destroy", f)
		}
	}
	if _, err := os.Stat(vm.NetnsPath(name)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s left after Destroy", vm.NetnsPath(name))
	}
	if _, err := os.Stat(filepath.Join(state, "nspawn")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s left after Destroy", filepath.Join(state, "nspawn"))
	}
	if procs, _ := exec.Command("pgrep", "-f", "-M "+p.MachineName(lb.Name)).Output(); len(procs) > 0 {
		t.Errorf("processes of the node left: %s", procs)
	}
	if got := vmtest.RootNSAddrs(t); got != addrsBefore {
		t.Errorf("root namespace addresses changed:\nbefore:\n%s\nafter:\n%s", addrsBefore, got)
	}
	if got := vmtest.RootNSLinks(t); strings.Count(got, "\n") != strings.Count(linksBefore, "\n") {
		t.Errorf("root namespace links changed:\nbefore:\n%s\nafter:\n%s", linksBefore, got)
	}
}

func wantState(t *testing.T, p *Provider, want vm.State) {
	t.Helper()
	st, err := p.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.State != want {
			t.Errorf("node %s is %s, want %s", s.Name, s.State, want)
		}
		if want == vm.StateRunning && s.PID == 0 {
			t.Errorf("node %s running without a pid", s.Name)
		}
	}
}

// nodeJournal returns the node's journal (failed units first) for failure
// messages, read by entering the namespaces of the node's init.
func nodeJournal(p *Provider, node string) string {
	pid := p.nspawnPid(node)
	kids, _ := exec.Command("pgrep", "-P", strconv.Itoa(pid)).Output()
	f := strings.Fields(string(kids))
	if len(f) == 0 {
		return "(no init process found)"
	}
	out, err := exec.Command("nsenter", "-t", f[0], "-m", "-u", "-i", "-n", "-p",
		"sh", "-c", "systemctl --failed --no-pager; journalctl -b --no-pager -p warning | tail -20; ip -o link; ip -o addr; networkctl --no-pager; journalctl -b --no-pager -u systemd-networkd | tail -20; ls -la /etc/systemd/network").CombinedOutput()
	if err != nil {
		return string(out) + err.Error()
	}
	return string(out)
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// testCluster makes an nspawn provider for a fresh cluster holding only the
// named nodes of config.Default, a Pool dialing through its namespace, and
// a cleanup that destroys it.
func testCluster(t *testing.T, nodes ...string) (*Provider, *remote.Pool) {
	t.Helper()
	requireNspawnHost(t)
	c := config.Default(vmtest.RandomCluster(t), runtime.GOARCH, config.ProviderNspawn)
	var keep []config.Node
	for _, name := range nodes {
		n, ok := c.Node(name)
		if !ok {
			t.Fatalf("no node %s in config.Default", name)
		}
		keep = append(keep, n)
	}
	c.Nodes = keep
	state := t.TempDir()
	signer, authLine, err := remote.EnsureKey(filepath.Join(state, "ssh", "id_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(c, Options{StateDir: state, AuthorizedKey: authLine, HostKey: testHostKeys(state), Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Destroy(ctx); err != nil {
			t.Errorf("cleanup Destroy of %s: %v", c.Name, err)
		}
	})
	pool, err := remote.NewPool(remote.Config{
		Signer: signer, KnownHostsFile: filepath.Join(state, "ssh", "known_hosts"), Dial: p.Dialer(),
		ConnectTimeout: time.Minute, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	pinHostKeys(t, p, pool)
	return p, pool
}

// testHostKeys keeps the nodes' generated host keys in
// <state>/ssh/hostkeys/<node>, as 01-machines does.
func testHostKeys(state string) func(string) (*remote.HostKey, error) {
	return func(node string) (*remote.HostKey, error) {
		return remote.EnsureHostKey(filepath.Join(state, "ssh", "hostkeys", node), node)
	}
}

// pinHostKeys pins every node's generated host key in the pool's
// known_hosts, as 01-machines does before the first boot.
func pinHostKeys(t *testing.T, p *Provider, pool *remote.Pool) {
	t.Helper()
	for _, n := range p.c.Nodes {
		hk, err := p.opts.HostKey(n.Name)
		if err != nil {
			t.Fatal(err)
		}
		if others, err := pool.PinHostKey(remote.Node{Name: n.Name, Addr: n.IP}, hk.Public); err != nil || others != nil {
			t.Fatalf("pin %s: others %v, %v", n.Name, others, err)
		}
	}
}

func run(t *testing.T, ctx context.Context, pool *remote.Pool, p *Provider, node, cmd string) string {
	t.Helper()
	n, _ := p.c.Node(node)
	out, _, err := pool.Run(ctx, remote.Node{Name: node, Addr: n.IP}, cmd, remote.RunOptions{})
	if err != nil {
		t.Fatalf("%s/%s: %s: %v\njournal:\n%s", p.c.Name, node, cmd, err, nodeJournal(p, node))
	}
	return strings.TrimSpace(string(out))
}

// TestNspawnTwoClustersSameAddresses runs cluster A (lb, cp1) and cluster B
// (lb) at once. Both lbs have 192.168.122.10, each in its own namespace:
// each Dialer must reach its own cluster's node, nodes of A reach each other
// by name, and every node has its own cgroup.
func TestNspawnTwoClustersSameAddresses(t *testing.T) {
	a, poolA := testCluster(t, "lb", "cp1")
	b, poolB := testCluster(t, "lb")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, p := range []*Provider{a, b} {
		if err := p.Create(ctx); err != nil {
			t.Fatal(err)
		}
		for _, n := range p.c.Nodes {
			if err := p.Start(ctx, n.Name); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		p    *Provider
		pool *remote.Pool
	}{{a, poolA}, {b, poolB}} {
		want, err := os.ReadFile(filepath.Join(tc.p.NodeRoot("lb"), "etc/machine-id"))
		if err != nil {
			t.Fatal(err)
		}
		if got := run(t, ctx, tc.pool, tc.p, "lb", "cat /etc/machine-id"); got != strings.TrimSpace(string(want)) {
			t.Errorf("cluster %s: lb answered with machine-id %s, its own is %s: the dialer reached another cluster's lb",
				tc.p.c.Name, got, want)
		}
	}
	idA := run(t, ctx, poolA, a, "lb", "cat /etc/machine-id")
	idA1 := run(t, ctx, poolA, a, "cp1", "cat /etc/machine-id")
	if idA == idA1 {
		t.Errorf("lb and cp1 share machine-id %s", idA)
	}
	if got := run(t, ctx, poolA, a, "lb", "getent hosts cp1.kubernetes.local | cut -d' ' -f1"); got != "192.168.122.11" {
		t.Errorf("lb resolves cp1.kubernetes.local to %q, want 192.168.122.11", got)
	}
	if got := run(t, ctx, poolA, a, "lb", "timeout 5 bash -c '</dev/tcp/cp1/22' && echo open"); got != "open" {
		t.Errorf("lb cannot reach cp1:22 over the bridge: %q", got)
	}
	seen := map[string]string{}
	for _, p := range []*Provider{a, b} {
		for _, n := range p.c.Nodes {
			cg, err := os.ReadFile("/proc/" + strconv.Itoa(p.nspawnPid(n.Name)) + "/cgroup")
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
				if other, dup := seen[line]; dup {
					t.Errorf("%s/%s shares cgroup %s with %s", p.c.Name, n.Name, line, other)
				}
				seen[line] = p.c.Name + "/" + n.Name
			}
		}
	}
	// Forced stop of one node leaves the other cluster's lb running.
	if err := a.Stop(ctx, "lb", true); err != nil {
		t.Fatal(err)
	}
	if got := run(t, ctx, poolB, b, "lb", "hostname"); got != "lb" {
		t.Errorf("cluster B lb hostname %q after stopping A's lb", got)
	}
}

// requireNspawnHost skips unless this host can run nspawn nodes (CheckHost)
// and either holds the node image or can build it with debootstrap; it
// returns the cache directory.
func requireNspawnHost(t *testing.T) string {
	t.Helper()
	vmtest.RequireRoot(t)
	if err := CheckHost(); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	cache, err := CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(RootfsPath(cache, runtime.GOARCH)); err != nil {
		if _, err := exec.LookPath("debootstrap"); err != nil {
			t.Skip("SKIP: no node image in the cache and debootstrap is not installed (apt-get install debootstrap)")
		}
	}
	return cache
}
