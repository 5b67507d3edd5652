package nodeplan

import (
	"context"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/components/debtest"
	"github.com/khw-dev/khw/internal/vm/nspawn"
)

// TestOfflineAptChroot runs the install command khw runs on a node, in a
// copy-on-write copy of the node image (overlayfs) with empty package
// lists and no network (a new network namespace), on the .debs khw picks
// from a pinned mirror for it: haproxy and liblua5.3-0, both removed
// first. A lighter witness of the same outcome as TestOfflinePackagesNspawn
// (no node boots).
// aptChroot makes a copy-on-write copy of the nspawn node image
// (overlayfs) and returns its root, a pinned mirror of its archive and a
// function running a shell command chrooted into it with no network and
// /proc mounted (the lock probe reads /proc/locks). It skips without root
// or without the node image.
func aptChroot(t *testing.T) (root, mirror, pin string, inNode func(string) (string, error)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP (needs root): overlay mount, chroot, network namespace")
	}
	for _, tool := range []string{"unshare", "chroot", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("SKIP: no %s", tool)
		}
	}
	cache, err := nspawn.CacheDir()
	if err != nil {
		t.Skipf("SKIP: %v", err)
	}
	arch := runtime.GOARCH
	rootfs := nspawn.RootfsPath(cache, arch)
	if _, err := os.Stat(filepath.Join(rootfs, "usr/bin/apt-get")); err != nil {
		t.Skipf("SKIP: no node image at %s (go test ./internal/vm/nspawn -run Nspawn builds it)", rootfs)
	}
	mirror = t.TempDir()
	pin = debtest.RootfsArchive(t, rootfs, mirror, arch)

	tmp := t.TempDir()
	up, work := filepath.Join(tmp, "up"), filepath.Join(tmp, "work")
	root = filepath.Join(tmp, "root")
	for _, d := range []string{up, work, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", "lowerdir="+rootfs+",upperdir="+up+",workdir="+work, root).CombinedOutput(); err != nil {
		t.Skipf("SKIP: overlay mount: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", root).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", root, err, out)
		}
	})
	inNode = func(cmd string) (string, error) {
		// A mount namespace of its own: /proc is mounted in it and
		// vanishes with it.
		out, err := exec.Command("unshare", "--net", "--mount", "--propagation", "private", "sh", "-c",
			`mount -t proc proc "$0/proc" && exec chroot "$0" sh -c "$1"`, root, cmd).CombinedOutput()
		return string(out), err
	}
	if out, err := inNode("DEBIAN_FRONTEND=noninteractive dpkg --purge haproxy liblua5.3-0 && rm -rf /var/lib/apt/lists/* && mkdir -p /var/lib/apt/lists/partial"); err != nil {
		t.Fatalf("prepare: %v\n%s", err, out)
	}
	return root, mirror, pin, inNode
}

func TestOfflineAptChroot(t *testing.T) {
	root, mirror, pin, inNode := aptChroot(t)
	cmd := offlineDebsInChroot(t, root, mirror, pin, inNode)
	if out, err := inNode(cmd + " </dev/null"); err != nil {
		t.Fatalf("offline install: %v\n%s", err, out)
	}
	out, _ := inNode("dpkg-query -W -f='${db:Status-Abbrev}${Package}\\n' haproxy liblua5.3-0; /usr/sbin/haproxy -v | head -1; ls /var/lib/apt/lists")
	for _, want := range []string{"ii haproxy", "ii liblua5.3-0", "HAProxy version"} {
		if !strings.Contains(out, want) {
			t.Errorf("after the install:\n%s\nwant %q", out, want)
		}
	}
	if strings.Contains(out, "Packages") {
		t.Errorf("the install fetched package lists:\n%s", out)
	}
}

// offlineDebsInChroot does what khw does on a node before an offline install
// of haproxy: its OS and packages, the archive, the closure, the verified
// .debs written into NodeDebDir. It returns khw's install command for them.
func offlineDebsInChroot(t *testing.T, root, mirror, pin string, inNode func(string) (string, error)) string {
	t.Helper()
	// What khw does on the node: its OS and packages, the archive, the
	// closure, the verified .debs.
	osOut, err := inNode(nodeOSProbe)
	if err != nil {
		t.Fatalf("node OS probe: %v\n%s", err, osOut)
	}
	id, code, darch, installed, err := parseNodeOS([]byte(osOut))
	if err != nil {
		t.Fatal(err)
	}
	a, err := components.FindDebArchive(id, code, darch)
	if err != nil {
		t.Fatal(err)
	}
	f := components.Fetcher{Mirror: mirror, MirrorDigest: pin}
	ix, err := f.DebIndex(context.Background(), a, darch)
	if err != nil {
		t.Fatal(err)
	}
	debs, err := ix.Closure([]string{"haproxy"}, installed)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(debNames(debs), " "); !strings.Contains(got, "haproxy=") || !strings.Contains(got, "liblua5.3-0=") || len(debs) != 2 {
		t.Fatalf("closure = %s, want haproxy and liblua5.3-0 only", got)
	}
	files, err := ix.FetchDebs(context.Background(), debs)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, df := range files {
		p := path.Join(NodeDebDir, df.Package.FileName())
		if err := os.MkdirAll(filepath.Join(root, NodeDebDir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), df.Data, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, quote(p))
	}
	return offlineInstallCommand(paths)
}

// TestAptWaitsForDpkgLockChroot holds /var/lib/dpkg/lock-frontend and
// /var/lib/dpkg/lock of a copy of the node image the way unattended-upgrades
// does (fcntl write locks, as apt takes them), then: the probe khw runs
// names this process as the holder; apt-get without DPkg::Lock::Timeout (the
// install command khw ran before) fails at once with "Could not get lock";
// khw's install command waits, and installs haproxy once the locks are
// released, seconds later.
func TestAptWaitsForDpkgLockChroot(t *testing.T) {
	root, mirror, pin, inNode := aptChroot(t)
	cmd := offlineDebsInChroot(t, root, mirror, pin, inNode)

	// The dpkg directory on a plain filesystem, as on a real node: through
	// overlayfs, stat names the overlay's device while /proc/locks names
	// the upper layer's, so the probe could not match the lock.
	plain := filepath.Join(t.TempDir(), "dpkg")
	dpkgDir := filepath.Join(root, "var/lib/dpkg")
	if out, err := exec.Command("cp", "-a", dpkgDir, plain).CombinedOutput(); err != nil {
		t.Fatalf("copy %s: %v: %s", dpkgDir, err, out)
	}
	if out, err := exec.Command("mount", "--bind", plain, dpkgDir).CombinedOutput(); err != nil {
		t.Fatalf("bind %s: %v: %s", dpkgDir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dpkgDir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dpkgDir, err, out)
		}
	})

	var held []*os.File
	for _, f := range []string{"/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock"} {
		fh, err := os.OpenFile(filepath.Join(root, f), os.O_RDWR|os.O_CREATE, 0o640)
		if err != nil {
			t.Fatal(err)
		}
		lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0}
		if err := syscall.FcntlFlock(fh.Fd(), syscall.F_SETLK, &lk); err != nil {
			t.Fatalf("lock %s: %v", f, err)
		}
		held = append(held, fh)
	}
	release := func() {
		for _, fh := range held {
			fh.Close() // closing drops the process's fcntl locks on the file
		}
		held = nil
	}
	t.Cleanup(release)

	out, err := inNode(aptBusyProbe)
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	b := parseAptBusy([]byte(out))
	if len(b.Holders) == 0 || b.Holders[0].File != "/var/lib/dpkg/lock-frontend" || b.Holders[0].PID != os.Getpid() {
		t.Fatalf("probe output:\n%s\nparsed %+v: want /var/lib/dpkg/lock-frontend held by this test (pid %d)", out, b.Holders, os.Getpid())
	}

	old := strings.Replace(cmd, aptLockOpt+" ", "", 1)
	if old == cmd {
		t.Fatalf("the install command has no %s:\n%s", aptLockOpt, cmd)
	}
	start := time.Now()
	out, err = inNode(old + " </dev/null")
	if err == nil || !strings.Contains(out, "Could not get lock") {
		t.Fatalf("apt-get without the lock timeout, lock held: err %v, want a failure naming the lock:\n%s", err, out)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("apt-get without the lock timeout took %v to fail, want at once", d)
	}

	const hold = 4 * time.Second
	timer := time.AfterFunc(hold, release)
	defer timer.Stop()
	start = time.Now()
	out, err = inNode(cmd + " </dev/null")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("khw's install command with the lock held for %v: %v\n%s", hold, err, out)
	}
	if took < hold {
		t.Errorf("the install finished after %v, before the lock was released (%v): it did not wait", took, hold)
	}
	if !strings.Contains(out, "Waiting for cache lock") {
		t.Errorf("apt's output does not show it waiting for the lock:\n%s", out)
	}
	if got, _ := inNode("dpkg-query -W -f='${db:Status-Abbrev}${Package}\\n' haproxy"); !strings.Contains(got, "ii haproxy") {
		t.Errorf("after the install: %s, want haproxy installed", got)
	}
}
