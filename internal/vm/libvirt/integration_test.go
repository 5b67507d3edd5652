package libvirt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/khw-dev/khw/internal/components"
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
// boot test image (cloud-init, SSH, snapshot/revert, power off/on, destroy),
// the reuse of an existing libvirt network, and (catalog-image) khw's
// default image path: the catalog's Ubuntu cloud image fetched through a
// mirror with its sha256 checked, booted from its own disk, its root grown by
// cloud-init. Offline, the catalog-image subtest stands a disk laid out like
// the Ubuntu image (hack/libvirt-cloud-image.sh, Debian inside) in for the
// download; a real Ubuntu image is not booted here.
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
	t.Run("catalog-image", func(t *testing.T) { testCatalogImage(t, env) })
}

func testVMLifecycle(t *testing.T, env *lvEnv, img Image) {
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
	hk := pinHostKey(t, pool, p, node) // before the first boot, as bringup does
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
func sshRun(ctx context.Context, t *testing.T, pool func() *remote.Pool, node remote.Node, domain string) func(cmd string, sudo bool) string {
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
// <state>/ssh/hostkeys/<node>, as bringup does.
func testHostKeys(state string) func(string) (*remote.HostKey, error) {
	return func(node string) (*remote.HostKey, error) {
		return remote.EnsureHostKey(filepath.Join(state, "ssh", "hostkeys", node), node)
	}
}

// pinHostKey pins node's generated host key in pool's known_hosts before
// the node's first boot and returns the key.
func pinHostKey(t *testing.T, pool *remote.Pool, p *Provider, node remote.Node) *remote.HostKey {
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

func fileMode(t *testing.T, p string) os.FileMode {
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
func checkHostKey(ctx context.Context, t *testing.T, env *lvEnv, run func(string, bool) string, node remote.Node, sshDir string, hk *remote.HostKey) {
	t.Helper()
	want := strings.Join(strings.Fields(hk.PublicLine())[:2], " ")
	if got := run("ls /etc/ssh | grep ssh_host_ | tr '\\n' ' '", true); got != "ssh_host_ed25519_key ssh_host_ed25519_key.pub" {
		t.Errorf("host key files on %s: %q, want only the ed25519 pair (ssh_deletekeys, ssh_genkeytypes [])", node.Name, got)
	}
	if got := strings.Join(strings.Fields(run("cat /etc/ssh/ssh_host_ed25519_key.pub", true))[:2], " "); got != want {
		t.Errorf("/etc/ssh/ssh_host_ed25519_key.pub on %s = %q, want the generated %q", node.Name, got, want)
	}
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+env.nsPath, "ssh-keyscan", "-T", "20", node.Addr).Output()
	if err != nil {
		t.Errorf("ssh-keyscan %s: %v", node.Addr, err)
	}
	var offered []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) == 3 && !strings.HasPrefix(l, "#") {
			offered = append(offered, f[1]+" "+f[2])
		}
	}
	if len(offered) != 1 || offered[0] != want {
		t.Errorf("%s offers host keys %q, want exactly the generated %q", node.Name, offered, want)
	}
	out, err = exec.CommandContext(ctx, "nsenter", "--net="+env.nsPath, "ssh", "-i", filepath.Join(sshDir, "id_ed25519"),
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
func checkDestroyed(ctx context.Context, t *testing.T, p *Provider, name string) {
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

// testNetworkReuse: a cluster on 192.168.122.0/24 joins libvirt's own
// "default" network instead of making one, and Destroy leaves it. A second
// state directory cannot take over the first one's domains.
func testNetworkReuse(t *testing.T, env *lvEnv, img Image) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out := virsh(t, "net-list", "--all", "--name"); !strings.Contains(out, "default") {
		t.Skipf("libvirt has no default network here:\n%s", out)
	}
	dir := t.TempDir()
	_, authLine, err := remote.EnsureKey(filepath.Join(dir, "id_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	before := autostart(virsh(t, "net-info", "default"))
	c := oneNodeCluster("lvtr", "192.168.122")
	p, err := New(c, Options{StateDir: dir, AuthorizedKey: authLine, HostKey: testHostKeys(dir), Image: img, DomainType: DomainQEMU,
		Pool: testPool, PoolPath: testPoolPath, NetnsPath: env.nsPath, Log: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	t.Cleanup(func() { _ = p.Destroy(context.Background()) })
	if err := p.Create(ctx); err != nil {
		t.Fatal(err)
	}
	var dx libvirtxml.Domain
	if err := dx.Unmarshal(virsh(t, "dumpxml", "--inactive", "khw-lvtr-cp1")); err != nil {
		t.Fatal(err)
	}
	if got := dx.Devices.Interfaces[0].Source.Network.Network; got != "default" {
		t.Errorf("node network = %q, want the existing default", got)
	}
	if out := virsh(t, "net-list", "--all", "--name"); strings.Contains(out, "khw-lvtr") {
		t.Errorf("khw made a network although default holds the subnet:\n%s", out)
	}
	if after := autostart(virsh(t, "net-info", "default")); after != before {
		t.Errorf("khw changed the autostart of the reused default network from %q to %q", before, after)
	}

	other, err := New(c, Options{StateDir: t.TempDir(), AuthorizedKey: authLine, HostKey: testHostKeys(t.TempDir()), Image: img, DomainType: DomainQEMU,
		Pool: testPool, PoolPath: testPoolPath})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var foreign *vm.ForeignOwnerError
	if err := other.Create(ctx); !errors.As(err, &foreign) {
		t.Errorf("Create from another state directory = %v, want a ForeignOwnerError", err)
	}
	if err := other.Destroy(ctx); !errors.As(err, &foreign) {
		t.Errorf("Destroy from another state directory = %v, want a ForeignOwnerError", err)
	}
	if out := virsh(t, "list", "--all", "--name"); !strings.Contains(out, "khw-lvtr-cp1") {
		t.Errorf("the other state directory removed the domain")
	}

	if err := p.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if out := virsh(t, "net-list", "--all", "--name"); !strings.Contains(out, "default") {
		t.Errorf("Destroy removed libvirt's default network:\n%s", out)
	}
	if out := virsh(t, "list", "--all", "--name"); strings.Contains(out, "khw-lvtr") {
		t.Errorf("domain left: %s", out)
	}
}

// testARM64Domain proves the aarch64 path is accepted by libvirt: the
// node domain XML (virt machine, UEFI pflash loader from the domain
// capabilities with a per-domain NVRAM, virtio disk/seed/NIC, serial
// console) is defined and started under TCG, and its UEFI firmware runs up
// to the boot manager (there is no arm64 OS image here, so nothing boots
// further). Then an offline snapshot is attempted and the domain removed
// with its NVRAM.
func testARM64Domain(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-aarch64"); err != nil {
		t.Skip("SKIPPED: qemu-system-aarch64 not installed (make libvirt-deps)")
	}
	ctx := context.Background()
	l, err := Connect("")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Disconnect()
	loader, err := FirmwareLoader(l, config.ArchARM64, DomainQEMU)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("aarch64 UEFI loader: %s", loader)

	p, err := New(oneNodeCluster("lvta", "192.168.151"), Options{StateDir: t.TempDir(), DomainType: DomainQEMU, Pool: testPool, PoolPath: testPoolPath})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pool, err := p.ensurePool(l)
	if err != nil {
		t.Fatal(err)
	}
	// Blank volumes stand in for the node disk and seed.
	names := []string{"khw-lvta-arm64-disk.qcow2", "khw-lvta-arm64-seed.iso"}
	for i, n := range names {
		f := []string{"qcow2", "raw"}[i]
		doc, _ := PlainVolumeXML(n, 64<<20, f).Marshal()
		if _, err := l.StorageVolCreateXML(pool, doc, 0); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, n := range names {
			if v, err := l.StorageVolLookupByName(pool, n); err == nil {
				_ = l.StorageVolDelete(v, 0)
			}
		}
	}()
	// A throw-away network with no khw owner.
	nx, _ := NetworkXML(NetworkSpec{Name: "khw-lvta", Bridge: BridgeName("lvta"), Gateway: netip.MustParsePrefix("192.168.151.1/24")})
	ndoc, _ := nx.Marshal()
	nw, err := l.NetworkCreateXML(ndoc)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.NetworkDestroy(nw) }()

	spec := DomainSpec{Name: "khw-lvta-arm64", Arch: config.ArchARM64, Type: DomainQEMU, MemoryMiB: 512, CPUs: 1,
		Pool: testPool, DiskVolume: names[0], SeedVolume: names[1], Network: "khw-lvta", MAC: NodeMAC("lvta", "arm64"),
		Loader: loader, Owner: Owner{Cluster: "lvta", Node: "arm64", StateDir: "/test"}}
	dx, err := DomainXML(spec)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := dx.Marshal()
	d, err := l.DomainDefineXMLFlags(doc, golibvirt.DomainDefineValidate)
	if err != nil {
		t.Fatalf("libvirt refuses the aarch64 domain: %v\n%s", err, doc)
	}
	defer func() {
		_ = l.DomainDestroy(d)
		_ = l.DomainUndefineFlags(d, golibvirt.DomainUndefineNvram|golibvirt.DomainUndefineSnapshotsMetadata)
	}()
	var got libvirtxml.Domain
	live, _ := l.DomainGetXMLDesc(d, 0)
	if err := got.Unmarshal(live); err != nil {
		t.Fatal(err)
	}
	if got.OS.NVRam == nil || got.OS.NVRam.NVRam == "" || got.OS.Loader == nil || got.OS.Loader.Path != loader {
		t.Errorf("libvirt did not complete the UEFI setup: loader %+v nvram %+v", got.OS.Loader, got.OS.NVRam)
	} else {
		t.Logf("NVRAM %s from template %s", got.OS.NVRam.NVRam, got.OS.NVRam.Template)
	}

	t0 := time.Now()
	if _, err := l.DomainCreateWithFlags(d, uint32(golibvirt.DomainStartPaused)); err != nil {
		t.Fatalf("start the aarch64 domain: %v", err)
	}
	w := &markerWriter{marker: ProbeMarker[config.ArchARM64], seen: make(chan struct{})}
	go func() { _ = l.DomainOpenConsole(d, nil, w, 1) }()
	time.Sleep(300 * time.Millisecond)
	if err := l.DomainResume(d); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.seen:
		t.Logf("aarch64 UEFI reached its boot manager under TCG after %s", since(t0))
	case <-time.After(4 * time.Minute):
		t.Errorf("aarch64 UEFI printed no %q within 4 min; last output %q", w.marker, w.tail())
	case <-ctx.Done():
	}
	if err := l.DomainDestroy(d); err != nil {
		t.Fatal(err)
	}
	// Internal snapshots of a pflash UEFI domain: libvirt 9.0 refuses them.
	sx, _ := SnapshotXML("t1", "")
	sdoc, _ := sx.Marshal()
	if s, err := l.DomainSnapshotCreateXML(d, sdoc, 0); err != nil {
		t.Logf("aarch64 pflash: offline internal snapshot refused: %v", err)
	} else {
		t.Logf("aarch64 pflash: offline internal snapshot works")
		_ = l.DomainSnapshotDelete(s, 0)
	}
	_ = l.DomainUndefineFlags(d, golibvirt.DomainUndefineNvram|golibvirt.DomainUndefineSnapshotsMetadata)

	// The same node with UEFI as a ROM (no NVRAM): boots to the boot
	// manager and takes, reverts and deletes an internal snapshot.
	rom := ArmROMFirmware
	if _, err := os.Stat(rom); err != nil {
		t.Skipf("SKIPPED the ROM variant: %s missing", rom)
	}
	spec.Loader, spec.LoaderROM = rom, true
	dx, err = DomainXML(spec)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ = dx.Marshal()
	d, err = l.DomainDefineXMLFlags(doc, golibvirt.DomainDefineValidate)
	if err != nil {
		t.Fatalf("libvirt refuses the aarch64 ROM domain: %v\n%s", err, doc)
	}
	t0 = time.Now()
	if _, err := l.DomainCreateWithFlags(d, uint32(golibvirt.DomainStartPaused)); err != nil {
		t.Fatalf("start the aarch64 ROM domain: %v", err)
	}
	w = &markerWriter{marker: ProbeMarker[config.ArchARM64], seen: make(chan struct{})}
	go func() { _ = l.DomainOpenConsole(d, nil, w, 1) }()
	time.Sleep(300 * time.Millisecond)
	if err := l.DomainResume(d); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.seen:
		t.Logf("aarch64 UEFI (ROM) reached its boot manager under TCG after %s", since(t0))
	case <-time.After(4 * time.Minute):
		t.Errorf("aarch64 UEFI (ROM) printed no %q within 4 min; last output %q", w.marker, w.tail())
	}
	_ = l.DomainDestroy(d)
	s, err := l.DomainSnapshotCreateXML(d, sdoc, 0)
	if err != nil {
		t.Fatalf("aarch64 ROM: internal snapshot: %v", err)
	}
	if err := l.DomainRevertToSnapshot(s, 0); err != nil {
		t.Errorf("aarch64 ROM: revert: %v", err)
	}
	if err := l.DomainSnapshotDelete(s, 0); err != nil {
		t.Errorf("aarch64 ROM: delete snapshot: %v", err)
	}
}

// testCatalogImage runs khw's default image path for real, offline: a
// cluster without libvirt.image gets its base image from CatalogImage (wired
// as bringup.NewProvider does), which reads the catalog's Ubuntu 24.04 cloud
// image URL and its SHA256SUMS from a mirror directory (KHW_MIRROR) into an
// empty artifact cache (KHW_CACHE_DIR), checking the sha256. The image is
// hack/libvirt-cloud-image.sh's disk laid out like the Ubuntu cloud image
// (GPT: BIOS boot, EFI system partition, root ext4 cloudimg-rootfs last).
// The VM boots from that disk's own boot loader (x86_64 q35: SeaBIOS, then
// GRUB from the BIOS boot partition, as khw's domain XML selects no UEFI
// there; aarch64: UEFI, then \EFI\BOOT\BOOTAA64.EFI), cloud-init names it
// and gives it its address, and its growpart and resizefs modules grow the
// root partition and file system to the node's diskGiB. Destroy leaves
// nothing but the shared base volume. The failure cases of the fetch (wrong
// digest, image missing from the mirror) need no VM: TestCatalogImageFromMirror.
func testCatalogImage(t *testing.T, env *lvEnv) {
	dir := os.Getenv(envCloudImage)
	if dir == "" {
		t.Skipf("SKIPPED: %s is not set; build the image with hack/libvirt-cloud-image.sh (make test-libvirt does)", envCloudImage)
	}
	disk := filepath.Join(dir, "disk.qcow2")
	virtual, err := qcow2VirtualSize(disk)
	if err != nil {
		t.Fatalf("cloud image: %v (rebuild it with hack/libvirt-cloud-image.sh)", err)
	}
	const diskGiB = 6
	if virtual >= diskGiB<<30 {
		t.Fatalf("cloud image %s has a virtual size of %d MiB, not less than the node's %d GiB: growpart would have nothing to do", disk, virtual>>20, diskGiB)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	c := oneNodeCluster("lvtc", "192.168.152")
	c.Arch = runtime.GOARCH // the image is built for this host's arch
	c.Nodes[0].DiskGiB = diskGiB
	if c.Libvirt != nil {
		t.Fatalf("the default cluster has a libvirt section %+v; this test needs none (no libvirt.image)", c.Libvirt)
	}
	r := catalogVMImage(t, c)
	t0 := time.Now()
	sum, size, err := fileSHA256(disk)
	if err != nil {
		t.Fatal(err)
	}
	mirror, cache, state := t.TempDir(), t.TempDir(), t.TempDir()
	sums := writeCatalogImageMirror(t, mirror, r, disk, sum, true)
	t.Setenv(components.EnvMirror, mirror)
	t.Setenv(components.EnvCacheDir, cache)
	fb := *r.Fallback
	t.Logf("mirror %s: %s (%d MiB, sha256 %s) and %s, in %s", mirror, mirrorPath(t, mirror, fb.URL), size>>20, sum[:16], sums, since(t0))

	signer, authLine, err := remote.EnsureKey(filepath.Join(state, "ssh", "id_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	// As bringup.NewProvider builds it for libvirt; Pool, PoolPath,
	// NetnsPath and ProbeTimeout as in the other subtests (the test pool,
	// the test libvirtd's namespace). The wrapper only records the fetch.
	var fetchLog strings.Builder
	catalog := CatalogImage(c, components.EnvFetcher(), io.MultiWriter(logWriter{t}, &fetchLog))
	var fetched []Image
	var fetchTook time.Duration
	p, err := New(c, Options{StateDir: state, AuthorizedKey: authLine, HostKey: testHostKeys(state), Log: logWriter{t},
		ResolveImage: func(ctx context.Context) (Image, error) {
			t0 := time.Now()
			img, err := catalog(ctx)
			fetchTook += time.Since(t0)
			fetched = append(fetched, img)
			return img, err
		},
		Pool: testPool, PoolPath: testPoolPath, NetnsPath: env.nsPath, DomainType: DomainQEMU, ProbeTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	t.Cleanup(func() { _ = p.Destroy(context.Background()) })

	t0 = time.Now()
	if err := p.Create(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Create took %s; the catalog fetch (mirror -> empty cache, sha256 checked against the pinned manifest) %s of it", since(t0), fetchTook.Round(100*time.Millisecond))
	if len(fetched) != 1 {
		t.Fatalf("ResolveImage ran %d times, want once", len(fetched))
	}
	if want := filepath.Join(cache, "sha256", sum); fetched[0] != (Image{Path: want, Format: "qcow2"}) {
		t.Errorf("catalog image = %+v, want %s as qcow2 without direct kernel boot", fetched[0], want)
	}
	if e, ok := cacheIndexEntry(t, cache, fb.URL); !ok || e.SHA256 != sum || !strings.Contains(e.VerifiedBy, sums) || e.Trust != components.TrustMirror {
		t.Errorf("artifact cache index for %s = %+v (found %v); want sha256 %s verified by %s", fb.URL, e, ok, sum, sums)
	}
	// The mirror lacks the pinned dated release: the user is told that the
	// current release was used instead, and why.
	if !strings.Contains(fetchLog.String(), "base image: "+fb.URL) || !strings.Contains(fetchLog.String(), "not the pinned "+r.Version) {
		t.Errorf("the fetch log does not say the fallback %s was used:\n%s", fb.URL, fetchLog.String())
	}

	// libvirt's view: the node boots its disk (no kernel); the disk is an
	// overlay of diskGiB on the base volume of this very image.
	var dx libvirtxml.Domain
	if err := dx.Unmarshal(virsh(t, "dumpxml", "--inactive", "khw-lvtc-cp1")); err != nil {
		t.Fatal(err)
	}
	uefi := Arches[c.Arch].UEFI
	if dx.OS.Kernel != "" || len(dx.OS.BootDevices) != 1 || dx.OS.BootDevices[0].Dev != "hd" {
		t.Errorf("domain OS: kernel %q boot %+v; want a boot from hd", dx.OS.Kernel, dx.OS.BootDevices)
	}
	if !uefi && (dx.OS.Loader != nil || dx.OS.Firmware != "") {
		t.Errorf("%s domain: loader %+v firmware %q; khw defines no UEFI there (SeaBIOS)", dx.OS.Type.Arch, dx.OS.Loader, dx.OS.Firmware)
	}
	var vx libvirtxml.StorageVolume
	if err := vx.Unmarshal(virsh(t, "vol-dumpxml", "--pool", testPool, "khw-lvtc-cp1.qcow2")); err != nil {
		t.Fatal(err)
	}
	if vx.BackingStore == nil || !strings.HasSuffix(vx.BackingStore.Path, "/khw-base-"+sum[:16]+".qcow2") || vx.Capacity.Value != diskGiB<<30 {
		t.Errorf("node disk: backing %+v capacity %+v; want a %d GiB overlay of khw-base-%s.qcow2", vx.BackingStore, vx.Capacity, diskGiB, sum[:16])
	}

	pool, err := remote.NewPool(remote.Config{Signer: signer, KnownHostsFile: filepath.Join(state, "ssh", "known_hosts"),
		Dial: p.Dialer(), ConnectTimeout: 10 * time.Minute, MaxBackoff: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cnode := remote.Node{Name: "cp1", Addr: "192.168.152.11"}
	chk := pinHostKey(t, pool, p, cnode)
	run := sshRun(ctx, t, func() *remote.Pool { return pool }, cnode, "khw-lvtc-cp1")
	t0 = time.Now()
	if err := p.Start(ctx, "cp1"); err != nil {
		t.Fatal(err)
	}
	run("true", false)
	t.Logf("boot to SSH took %s", since(t0))
	checkHostKey(ctx, t, env, run, cnode, filepath.Join(state, "ssh"), chk)

	// cloud-init's identity.
	if got := run("hostname", false); got != "cp1" {
		t.Errorf("hostname = %q", got)
	}
	if got := run("ip -4 -o addr show dev "+SeedIface, false); !strings.Contains(got, "inet 192.168.152.11/24") {
		t.Errorf("address: %q", got)
	}
	checkUbuntuLike(t, run, c.Network.Gateway)
	// Booted by the disk's GRUB (it sets BOOT_IMAGE), root found by label,
	// firmware as the domain XML selects it.
	if got := run("cat /proc/cmdline", false); !strings.HasPrefix(got, "BOOT_IMAGE=") || !strings.Contains(got, "root=LABEL=cloudimg-rootfs") {
		t.Errorf("kernel command line %q: want GRUB's BOOT_IMAGE= and root=LABEL=cloudimg-rootfs", got)
	}
	want := map[bool]string{false: "bios", true: "uefi"}[uefi]
	if got := run("test -d /sys/firmware/efi && echo uefi || echo bios", false); got != want {
		t.Errorf("firmware = %s, want %s", got, want)
	}
	if got := run("findmnt -no SOURCE /; findmnt -no SOURCE,FSTYPE /boot/efi", false); got != "/dev/vda1\n/dev/vda15 vfat" {
		t.Errorf("mounts of / and /boot/efi = %q, want /dev/vda1 and the ESP /dev/vda15 (vfat)", got)
	}
	efiBoot := map[string]string{config.ArchAMD64: "BOOTX64.EFI", config.ArchARM64: "BOOTAA64.EFI"}[c.Arch]
	if got := run("test -s /boot/efi/EFI/BOOT/"+efiBoot+" && echo ok", true); got != "ok" {
		t.Errorf("ESP lacks EFI/BOOT/%s", efiBoot)
	}

	// growpart moved the end of partition 1 to the end of the disk (the
	// backup GPT keeps 33 sectors) and resizefs grew ext4 to the partition.
	sectors := func(f string) int64 {
		t.Helper()
		n, err := strconv.ParseInt(run("cat /sys/class/block/"+f, false), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		return n
	}
	diskBytes, start, partBytes := sectors("vda/size")*512, sectors("vda1/start")*512, sectors("vda1/size")*512
	if diskBytes != diskGiB<<30 {
		t.Errorf("/dev/vda has %d bytes, want %d GiB", diskBytes, diskGiB)
	}
	if free := diskBytes - start - partBytes; free < 0 || free >= 1<<20 {
		t.Errorf("/dev/vda1 (start %d, %d bytes) leaves %d bytes of the %d-byte disk unused: growpart did not grow it", start, partBytes, free, diskBytes)
	}
	fsBytes, err := ext4Bytes(run("tune2fs -l /dev/vda1", true))
	if err != nil {
		t.Fatal(err)
	}
	if partBytes-fsBytes < 0 || partBytes-fsBytes >= 4096 {
		t.Errorf("ext4 on /dev/vda1 has %d bytes, the partition %d: resizefs did not grow it", fsBytes, partBytes)
	}
	growLog := run("grep -E \"resized: |Resizing|resize2fs\" /var/log/cloud-init.log || true", true)
	m := growpartRE.FindStringSubmatch(growLog)
	if m == nil {
		t.Errorf("cloud-init.log has no growpart result for /:\n%s", growLog)
	} else {
		before, _ := strconv.ParseInt(m[1], 10, 64)
		after, _ := strconv.ParseInt(m[2], 10, 64)
		if after != partBytes || before >= after || before > virtual {
			t.Errorf("growpart: %s; partition now %d bytes", m[0], partBytes)
		}
		t.Logf("root partition grown by cloud-init from %d MiB (image) to %d MiB; ext4 %d MiB; disk %d GiB", before>>20, after>>20, fsBytes>>20, diskGiB)
	}

	t0 = time.Now()
	if err := p.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Destroy took %s", since(t0))
	checkDestroyed(ctx, t, p, "lvtc")
	if out := virsh(t, "vol-list", testPool); !strings.Contains(out, "khw-base-"+sum[:16]+".qcow2") {
		t.Errorf("the cloud image's base volume is gone (it is shared and kept):\n%s", out)
	}
}

// cloudImageAbsent are packages khw installs itself because an Ubuntu 24.04
// server cloud image lacks them (its published .manifest lists none of
// them); hack/libvirt-cloud-image.sh purges them from its stand-in.
var cloudImageAbsent = []string{"haproxy", "conntrack", "socat", "jq"}

// checkUbuntuLike checks, on a node booted from the cloud image, what an
// Ubuntu 24.04 server cloud image is like at run time where khw depends on
// it: systemd-resolved runs and /etc/resolv.conf is its stub (nameserver
// 127.0.0.53) while /run/systemd/resolve/resolv.conf names the upstream DNS
// server of the node's network-config (gateway), the unified cgroup v2
// hierarchy, AppArmor enabled with apparmor_parser present, the user
// ubuntu with sudo without password, none of cloudImageAbsent installed,
// and empty apt package lists (an apt-get install needs an apt-get update
// first).
func checkUbuntuLike(t *testing.T, run func(cmd string, sudo bool) string, gateway string) {
	t.Helper()
	if got := run("systemctl is-active systemd-resolved.service || true", false); got != "active" {
		t.Errorf("systemd-resolved is %q, want active", got)
	}
	if got := run("readlink /etc/resolv.conf; grep -E '^nameserver' /etc/resolv.conf", false); got != "../run/systemd/resolve/stub-resolv.conf\nnameserver 127.0.0.53" {
		t.Errorf("/etc/resolv.conf: %q, want a link to ../run/systemd/resolve/stub-resolv.conf with nameserver 127.0.0.53", got)
	}
	if got := run("grep -E '^nameserver' /run/systemd/resolve/resolv.conf || true", false); got != "nameserver "+gateway {
		t.Errorf("/run/systemd/resolve/resolv.conf nameservers %q, want nameserver %s (network-config's DNS, handed to resolved)", got, gateway)
	}
	if got := run("stat -fc %T /sys/fs/cgroup", false); got != "cgroup2fs" {
		t.Errorf("/sys/fs/cgroup is %q, want cgroup2fs (the unified hierarchy)", got)
	}
	if got := run("cat /sys/module/apparmor/parameters/enabled; test -x /usr/sbin/apparmor_parser && echo apparmor_parser || true", false); got != "Y\napparmor_parser" {
		t.Errorf("AppArmor: %q, want enabled (Y) with apparmor_parser installed", got)
	}
	if got := run("id -un ubuntu && { sudo -n -l -U ubuntu | grep -c 'NOPASSWD: ALL' || true; }", true); got != "ubuntu\n1" {
		t.Errorf("user ubuntu with sudo NOPASSWD: %q", got)
	}
	probe := "for p in " + strings.Join(cloudImageAbsent, " ") + "; do dpkg-query -W -f='${db:Status-Status} ${Package}\\n' $p 2>/dev/null | grep '^installed' || true; done"
	if got := run(probe, false); got != "" {
		t.Errorf("installed, but absent from an Ubuntu cloud image: %q", got)
	}
	if got := run("find /var/lib/apt/lists -maxdepth 1 -type f ! -name lock | head -5", true); got != "" {
		t.Errorf("/var/lib/apt/lists is not empty: %q", got)
	}
}

// growpartRE matches cloud-init's growpart report for the root file system
// (cloudinit/config/cc_growpart.py: "'/' resized: changed (<disk>, <n>) from
// <bytes> to <bytes>" in cloud-init 22 (Debian 12), "changed (<partition>)
// from …" in later releases).
var growpartRE = regexp.MustCompile(`'/' resized: changed \((?:/dev/vda, 1|/dev/vda1)\) from (\d+) to (\d+)`)

// ext4Bytes returns Block count x Block size from `tune2fs -l` output.
func ext4Bytes(tune2fs string) (int64, error) {
	var count, size int64
	for _, line := range strings.Split(tune2fs, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch strings.TrimSpace(k) {
		case "Block count":
			count = n
		case "Block size":
			size = n
		default:
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("tune2fs -l: %s: %w", line, err)
		}
	}
	if count == 0 || size == 0 {
		return 0, fmt.Errorf("tune2fs -l output has no Block count and Block size:\n%s", tune2fs)
	}
	return count * size, nil
}

// qcow2VirtualSize reads the virtual disk size from a qcow2 header (magic
// "QFI\xfb", then the size as a big-endian uint64 at byte 24; QEMU
// docs/interop/qcow2.txt).
func qcow2VirtualSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var h [32]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return 0, fmt.Errorf("read qcow2 header of %s: %w", path, err)
	}
	if string(h[:4]) != "QFI\xfb" {
		return 0, fmt.Errorf("%s is not a qcow2 image (magic %q)", path, h[:4])
	}
	return int64(binary.BigEndian.Uint64(h[24:32])), nil
}

var autostartRE = regexp.MustCompile(`Autostart:\s+(\S+)`)

// autostart returns the Autostart value of `virsh net-info` output.
func autostart(netInfo string) string {
	m := autostartRE.FindStringSubmatch(netInfo)
	if m == nil {
		return ""
	}
	return m[1]
}
