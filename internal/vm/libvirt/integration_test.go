package libvirt

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/vm"
)

// Test pool: its own directory, kept between runs so the base image is
// uploaded once (Destroy keeps base volumes by design).
const (
	testPool     = "khw-test"
	testPoolPath = "/var/lib/libvirt/images/khw-test"
)

// oneNodeCluster is a cluster of one control-plane node on subnet cidr
// (x.y.z.0/24, gateway .1, node .11). Provider methods only walk c.Nodes,
// so the other roles are not needed here.
func oneNodeCluster(name, net3 string) *config.Cluster {
	c := config.Default(name, config.ArchAMD64, config.ProviderLibvirt)
	c.Network.CIDR = net3 + ".0/24"
	c.Network.Gateway = net3 + ".1"
	c.Nodes = []config.Node{{Name: "cp1", Role: config.RoleControlPlane, IP: net3 + ".11", CPUs: 1, MemoryMiB: 1024, DiskGiB: 6}}
	return c
}

// TestLibvirtIntegration runs everything against one real libvirtd in a
// test network namespace: the KVM/TCG probe, the aarch64 domain up to its
// UEFI boot manager, a full VM life cycle under TCG from the direct-kernel-
// boot test image (cloud-init, SSH, snapshot/revert, power off/on, destroy)
// and the reuse of an existing libvirt network. khw's default image path (the
// catalog's Ubuntu cloud image through a mirror, booted from its own disk) is
// what make e2e-libvirt boots its four nodes from; its fetch and fallback
// cases need no VM (TestCatalogImageFromMirror and the image tests).
func TestLibvirtIntegration(t *testing.T) {
	requireIntegration(t)
	if d, ok := t.Deadline(); ok && time.Until(d) < 25*time.Minute {
		t.Fatalf("run this test with -timeout 30m or more (make test-libvirt does): a test that times out panics and skips the cleanup that stops libvirtd and the VM")
	}
	img := testImage(t)
	env := startLibvirtd(t)

	t.Run("probe", func(t *testing.T) {
		l, err := Connect("")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Disconnect()
		// TCG must be detected as working: proves the console detection.
		t0 := time.Now()
		if err := ProbeDomainType(context.Background(), l, config.ArchAMD64, DomainQEMU, 30*time.Second); err != nil {
			t.Fatalf("TCG probe failed: %v", err)
		}
		t.Logf("TCG probe saw firmware output in %s", since(t0))
		// KVM: whatever this host does, the verdict must come within the
		// timeout plus a margin, and leave no domain behind.
		t0 = time.Now()
		err = ProbeDomainType(context.Background(), l, config.ArchAMD64, DomainKVM, 10*time.Second)
		t.Logf("KVM probe: %v (after %s)", err, since(t0))
		if time.Since(t0) > 20*time.Second {
			t.Errorf("KVM probe took %s", since(t0))
		}
		if out := virsh(t, "list", "--all", "--name"); strings.Contains(out, "khw-probe") {
			t.Errorf("probe domain left behind: %s", out)
		}
	})

	t.Run("arm64", func(t *testing.T) { testARM64Domain(t) })
	t.Run("vm", func(t *testing.T) { testVMLifecycle(t, env, img) })
	t.Run("reuse-network", func(t *testing.T) { testNetworkReuse(t, env, img) })
}

func testVMLifecycle(tt *testing.T, env *lvEnv, img Image) {
	t := &recapT{T: tt}
	defer t.recap()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	signer, authLine, err := remote.EnsureKey(filepath.Join(dir, "ssh", "id_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	c := oneNodeCluster("lvt", "192.168.150")
	// TCG, as every VM here: /dev/kvm may open on this machine while nested
	// virtualisation hangs guests after their firmware (the probe subtest
	// tests the probe itself).
	p, err := New(c, Options{
		StateDir: dir, AuthorizedKey: authLine, HostKey: testHostKeys(dir), Image: img,
		Pool: testPool, PoolPath: testPoolPath, NetnsPath: env.nsPath, DomainType: DomainQEMU,
		ProbeTimeout: 10 * time.Second, Log: logWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	t.Cleanup(func() { _ = p.Destroy(context.Background()) })

	t0 := time.Now()
	findings := p.Preflight(ctx)
	for _, f := range findings {
		t.Logf("preflight %s", f)
	}
	t.Logf("preflight took %s", since(t0))
	if Blocking(findings) {
		t.Fatalf("preflight blocks")
	}
	byCheck := map[string]Finding{}
	for _, f := range findings {
		byCheck[f.Check] = f
	}
	if !byCheck["libvirtd"].OK || !byCheck["subnet"].OK || !strings.Contains(byCheck["subnet"].Message, "khw makes network khw-lvt") {
		t.Errorf("findings: %+v", findings)
	}
	if _, ok := byCheck["kvm"]; !ok {
		t.Errorf("no kvm finding")
	}

	t0 = time.Now()
	if err := p.Create(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Create took %s", since(t0))
	// Idempotent: a second Create changes nothing and succeeds.
	t1 := time.Now()
	if err := p.Create(ctx); err != nil {
		t.Fatalf("second Create: %v", err)
	}
	t.Logf("second Create took %s", since(t1))
	// A later command (khw status, break, lab) opens a provider without a
	// domain type and without probing: it learns qemu from the domain.
	later, err := New(c, Options{StateDir: dir, Pool: testPool, PoolPath: testPoolPath, NetnsPath: env.nsPath, Log: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	if got := later.Slowdown(); got != 15 || later.domType != DomainQEMU {
		t.Errorf("a new provider for the existing qemu domain: Slowdown %d, domain type %q; want 15 and %q", got, later.domType, DomainQEMU)
	}
	later.Close()

	// Witnesses: libvirt's own view.
	if out := virsh(t, "net-list", "--all", "--name"); !strings.Contains(out, "khw-lvt") {
		t.Errorf("network khw-lvt not defined:\n%s", out)
	}
	domXML := virsh(t, "dumpxml", "--inactive", "khw-lvt-cp1")
	var dx libvirtxml.Domain
	if err := dx.Unmarshal(domXML); err != nil {
		t.Fatalf("dumpxml: %v\n%s", err, domXML)
	}
	if dx.OS.Kernel == "" || dx.Devices.Interfaces[0].Source.Network.Network != "khw-lvt" {
		t.Errorf("defined domain: kernel %q network %+v", dx.OS.Kernel, dx.Devices.Interfaces[0].Source.Network)
	}
	if o, ok := ParseOwner(dx.Metadata.XML); !ok || o.StateDir != dir || o.Node != "cp1" {
		t.Errorf("owner metadata as libvirt keeps it: %q", dx.Metadata.XML)
	}
	t.Logf("domain type: %s", dx.Type)
	vols := virsh(t, "vol-list", testPool)
	for _, v := range []string{"khw-lvt-cp1.qcow2", "khw-lvt-cp1-seed.iso"} {
		if !strings.Contains(vols, v) {
			t.Errorf("volume %s missing:\n%s", v, vols)
		}
	}
	volXML := virsh(t, "vol-dumpxml", "--pool", testPool, "khw-lvt-cp1.qcow2")
	var vx libvirtxml.StorageVolume
	if err := vx.Unmarshal(volXML); err != nil || vx.BackingStore == nil || !strings.Contains(vx.BackingStore.Path, "khw-base-") || vx.Capacity.Value != 6<<30 {
		t.Errorf("overlay volume: %v\n%s", err, volXML)
	}

	st, err := p.Status(ctx)
	if err != nil || len(st) != 1 || st[0].State != vm.StateStopped {
		t.Fatalf("status after Create = %+v, %v", st, err)
	}

	// Boot and reach SSH through the provider's Dialer. A revert or a
	// power cycle kills the node's TCP connections without a FIN, so the
	// pool is replaced after each (as khw lab reset must do).
	var pool *remote.Pool
	newPool := func() {
		if pool != nil {
			pool.Close()
		}
		var err error
		pool, err = remote.NewPool(remote.Config{Signer: signer, KnownHostsFile: filepath.Join(dir, "ssh", "known_hosts"),
			Dial: p.Dialer(), ConnectTimeout: 10 * time.Minute, MaxBackoff: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
	}
	newPool()
	defer func() { pool.Close() }()
	node := remote.Node{Name: "cp1", Addr: "192.168.150.11"}
	hk := pinHostKey(t, pool, p, node) // before the first boot, as 01-machines does
	run := sshRun(ctx, t, func() *remote.Pool { return pool }, node, "khw-lvt-cp1")
	if mode := fileMode(t, filepath.Join(testPoolPath, "khw-lvt-cp1-seed.iso")); mode&0o077 != 0 {
		t.Errorf("seed volume (it holds the node's private host key) has mode %04o, want 0600", mode)
	}

	t0 = time.Now()
	if err := p.Start(ctx, "cp1"); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx, "cp1"); err != nil { // running: no-op
		t.Fatalf("second Start: %v", err)
	}
	run("true", false)
	t.Logf("boot to SSH took %s", since(t0))
	checkHostKey(ctx, t, env, run, node, filepath.Join(dir, "ssh"), hk)

	// Identity from cloud-init.
	if got := run("hostname", false); got != "cp1" {
		t.Errorf("hostname = %q", got)
	}
	if got := run("ip -4 -o addr show dev "+SeedIface, false); !strings.Contains(got, "inet 192.168.150.11/24") {
		t.Errorf("address: %q", got)
	}
	if got := run("ip route show default", false); !strings.Contains(got, "via 192.168.150.1") {
		t.Errorf("default route: %q", got)
	}
	if got := run("cat ~/.ssh/authorized_keys", false); !strings.Contains(got, strings.TrimSpace(authLine)) {
		t.Errorf("authorized_keys lacks khw's key:\n%s", got)
	}
	if got := run("id -u; id -un", false); got != "1000\nubuntu" {
		t.Errorf("user: %q", got)
	}
	if got := run("id -u", true); got != "0" {
		t.Errorf("sudo -n: uid %q", got)
	}
	if got := run("grep cp1 /etc/hosts", false); !strings.Contains(got, "192.168.150.11\tcp1.kubernetes.local cp1") {
		t.Errorf("/etc/hosts: %q", got)
	}
	if got := run("cloud-init query platform", true); got != "nocloud" {
		t.Errorf("cloud-init datasource platform = %q, want nocloud", got)
	}
	st, _ = p.Status(ctx)
	if st[0].State != vm.StateRunning {
		t.Errorf("status while running = %+v", st)
	}

	// Snapshot (running: disk + memory), change a file, revert: gone.
	t0 = time.Now()
	if err := p.Snapshot(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	t.Logf("Snapshot (running, with memory) took %s", since(t0))
	if err := p.Snapshot(ctx, "t1"); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("second Snapshot t1: %v", err)
	}
	run("echo changed > /home/ubuntu/marker && sync", false)
	if got := run("cat /home/ubuntu/marker", false); got != "changed" {
		t.Fatalf("marker = %q", got)
	}
	t0 = time.Now()
	if err := p.Revert(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	t.Logf("Revert took %s", since(t0))
	newPool()
	if got := run("test -e /home/ubuntu/marker && echo present || echo gone", false); got != "gone" {
		t.Errorf("after revert the marker is %s", got)
	}
	t.Logf("SSH after revert: %s", since(t0))
	if err := p.Revert(ctx, "nope"); err == nil || !strings.Contains(err.Error(), `no snapshot "nope"`) {
		t.Errorf("revert to a missing snapshot: %v", err)
	}

	// Graceful power off, power on, forced power off.
	t0 = time.Now()
	sctx, scancel := context.WithTimeout(ctx, 3*time.Minute)
	err = p.Stop(sctx, "cp1", false)
	scancel()
	if err != nil {
		t.Fatalf("graceful Stop: %v", err)
	}
	t.Logf("graceful Stop took %s", since(t0))
	if st, _ := p.Status(ctx); st[0].State != vm.StateStopped {
		t.Errorf("status after Stop = %+v", st)
	}
	if err := p.Stop(ctx, "cp1", false); err != nil {
		t.Errorf("Stop of a stopped node: %v", err)
	}
	t0 = time.Now()
	if err := p.Start(ctx, "cp1"); err != nil {
		t.Fatal(err)
	}
	newPool()
	if got := run("hostname", false); got != "cp1" {
		t.Errorf("hostname after restart = %q", got)
	}
	t.Logf("second boot to SSH took %s", since(t0))
	t0 = time.Now()
	if err := p.Stop(ctx, "cp1", true); err != nil {
		t.Fatal(err)
	}
	t.Logf("forced Stop took %s", since(t0))
	if st, _ := p.Status(ctx); st[0].State != vm.StateStopped {
		t.Errorf("status after forced Stop = %+v", st)
	}
	if err := p.Start(ctx, "nope"); !errors.Is(err, vm.ErrUnknownNode) {
		t.Errorf("Start(nope) = %v", err)
	}

	// Delete the snapshot, then destroy everything.
	if err := p.DeleteSnapshot(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if out := virsh(t, "snapshot-list", "--name", "khw-lvt-cp1"); strings.TrimSpace(out) != "" {
		t.Errorf("snapshots left: %q", out)
	}
	t0 = time.Now()
	if err := p.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Destroy took %s", since(t0))
	checkDestroyed(ctx, t, p, "lvt")
}

// sshRun returns a function that runs cmd on node over SSH through the
// current pool (pool() is called each time: the lifecycle test replaces the
// pool after a revert) and returns its trimmed stdout; any failure ends the
// test, naming the domain's console log.
func sshRun(ctx context.Context, t testing.TB, pool func() *remote.Pool, node remote.Node, domain string) func(cmd string, sudo bool) string {
	return func(cmd string, sudo bool) string {
		t.Helper()
		cl, err := pool().Get(ctx, node)
		if err != nil {
			t.Fatalf("ssh %s: %v (console log: %s)", node.Name, err, ConsoleLogPath(domain))
		}
		out, _, err := cl.Run(ctx, cmd, remote.RunOptions{Sudo: sudo})
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return strings.TrimSpace(string(out))
	}
}

// testHostKeys keeps the nodes' generated host keys in
// <state>/ssh/hostkeys/<node>, as 01-machines does.
func testHostKeys(state string) func(string) (*remote.HostKey, error) {
	return func(node string) (*remote.HostKey, error) {
		return remote.EnsureHostKey(filepath.Join(state, "ssh", "hostkeys", node), node)
	}
}

// pinHostKey pins node's generated host key in pool's known_hosts before
// the node's first boot and returns the key.
func pinHostKey(t testing.TB, pool *remote.Pool, p *Provider, node remote.Node) *remote.HostKey {
	t.Helper()
	hk, err := p.opts.HostKey(node.Name)
	if err != nil {
		t.Fatal(err)
	}
	if others, err := pool.PinHostKey(node, hk.Public); err != nil || others != nil {
		t.Fatalf("pin %s: others %v, %v", node.Name, others, err)
	}
	return hk
}

func fileMode(t testing.TB, p string) os.FileMode {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// checkHostKey: the VM presents exactly the host key khw generated and
// pinned before its first boot. Witnesses besides the pool (which already
// refused anything else): the key files cloud-init left in /etc/ssh,
// ssh-keyscan (every key type sshd offers) and OpenSSH with
// StrictHostKeyChecking yes against the pinned known_hosts, both from the
// test libvirtd's namespace.
func checkHostKey(ctx context.Context, t testing.TB, env *lvEnv, run func(string, bool) string, node remote.Node, sshDir string, hk *remote.HostKey) {
	t.Helper()
	want := strings.Join(strings.Fields(hk.PublicLine())[:2], " ")
	if got := run("ls /etc/ssh | grep ssh_host_ | tr '\\n' ' '", true); got != "ssh_host_ed25519_key ssh_host_ed25519_key.pub" {
		t.Errorf("host key files on %s: %q, want only the ed25519 pair (ssh_deletekeys, ssh_genkeytypes [])", node.Name, got)
	}
	if got := strings.Join(strings.Fields(run("cat /etc/ssh/ssh_host_ed25519_key.pub", true))[:2], " "); got != want {
		t.Errorf("/etc/ssh/ssh_host_ed25519_key.pub on %s = %q, want the generated %q", node.Name, got, want)
	}
	// ssh-keyscan prints nothing when its 20 s run out, which a TCG guest
	// still busy with its first boot can make it do: up to three tries.
	var offered []string
	for try := 1; try <= 3 && len(offered) == 0; try++ {
		var stderr strings.Builder
		cmd := exec.CommandContext(ctx, "nsenter", "--net="+env.nsPath, "ssh-keyscan", "-T", "20", node.Addr)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("ssh-keyscan %s: %v: %s", node.Addr, err, stderr.String())
			break
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(l); len(f) == 3 && !strings.HasPrefix(l, "#") {
				offered = append(offered, f[1]+" "+f[2])
			}
		}
		if len(offered) == 0 {
			t.Logf("ssh-keyscan %s, try %d: no key offered: %s", node.Addr, try, strings.TrimSpace(stderr.String()))
		}
	}
	if len(offered) != 1 || offered[0] != want {
		t.Errorf("%s offers host keys %q, want exactly the generated %q", node.Name, offered, want)
	}
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+env.nsPath, "ssh", "-i", filepath.Join(sshDir, "id_ed25519"),
		"-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile="+filepath.Join(sshDir, "known_hosts"), "-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "HostKeyAlgorithms=ssh-ed25519", "-o", "ConnectTimeout=30", remote.DefaultUser+"@"+node.Addr, "hostname").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != node.Name {
		t.Errorf("OpenSSH (StrictHostKeyChecking yes, the pinned known_hosts) to %s: %v: %s", node.Name, err, out)
	}
}

// checkDestroyed asserts what p.Destroy must have left of cluster name:
// no domain khw-<name>-*, no node volume (base volumes khw-base-* stay, by
// design), no network khw-<name>, every node absent to Status; and a second
// Destroy succeeds.
func checkDestroyed(ctx context.Context, t testing.TB, p *Provider, name string) {
	t.Helper()
	prefix := "khw-" + name
	if out := virsh(t, "list", "--all", "--name"); strings.Contains(out, prefix+"-") {
		t.Errorf("domains left: %s", out)
	}
	if out := virsh(t, "vol-list", testPool); strings.Contains(out, prefix+"-") || !strings.Contains(out, "khw-base-") {
		t.Errorf("volumes after Destroy (node volumes must be gone, the base kept):\n%s", out)
	}
	for _, n := range strings.Fields(virsh(t, "net-list", "--all", "--name")) {
		if n == prefix {
			t.Errorf("network %s left", n)
		}
	}
	st, err := p.Status(ctx)
	if err != nil {
		t.Errorf("status after Destroy: %v", err)
	}
	for _, s := range st {
		if s.State != vm.StateAbsent {
			t.Errorf("status after Destroy = %+v", s)
		}
	}
	if err := p.Destroy(ctx); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
}
