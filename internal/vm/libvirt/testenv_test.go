package libvirt

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The integration tests run a real libvirtd. It must never run in the root
// network namespace (it would make virbr0 192.168.122.1 there), so the test
// makes a namespace khwlv-test-<random>, starts virtlogd and libvirtd in it
// with nsenter --net=, and removes all of it when the test ends, pass or
// fail: every domain and network is stopped, every process left in the
// namespace (libvirtd, virtlogd, qemu, dnsmasq) is killed, the namespace is
// deleted.

const (
	envIntegration = "KHW_LIBVIRT_TEST"  // =1 runs the integration tests
	envImage       = "KHW_LIBVIRT_IMAGE" // directory from hack/libvirt-test-image.sh
	testLockFile   = "/run/khw-libvirt-test.lock"
	libvirtSocket  = "/var/run/libvirt/libvirt-sock"
)

type lvEnv struct {
	ns, nsPath string
	nsInode    uint64
}

// requireIntegration skips unless KHW_LIBVIRT_TEST=1 and the host has what
// the test needs; the skip message says how to run it.
func requireIntegration(t *testing.T) {
	t.Helper()
	if os.Getenv(envIntegration) != "1" {
		t.Skipf("SKIPPED: libvirt integration test (real libvirtd + TCG VMs, ~5 min); run `make test-libvirt` (or %s=1 %s=<hack/libvirt-test-image.sh output> go test ./internal/vm/libvirt/)", envIntegration, envImage)
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: the libvirt integration test needs root (network namespace, system libvirtd)")
	}
	for _, tool := range []string{"libvirtd", "virtlogd", "nsenter", "ip", "virsh", "qemu-system-x86_64"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("SKIPPED: %s not installed; run `make libvirt-deps` (hack/libvirt-deps.sh)", tool)
		}
	}
}

// pidsNamed returns the pids whose /proc/<pid>/comm is name.
func pidsNamed(name string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) S …": skip zombies, which only wait to be reaped.
		open, close := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || close < open || close+2 >= len(stat) || stat[close+2] == 'Z' {
			continue
		}
		if string(stat[open+1:close]) == name || strings.HasPrefix(name, string(stat[open+1:close])) && close-open-1 == 15 {
			out = append(out, pid)
		}
	}
	return out
}

func netnsInode(path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

// pidsInNetns returns every process whose network namespace has inode ino.
func pidsInNetns(ino uint64) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join("/proc", e.Name(), "ns/net"), &st); err == nil && st.Ino == ino {
			out = append(out, pid)
		}
	}
	return out
}

func virsh(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("virsh", append([]string{"-c", DefaultURI}, args...)...).CombinedOutput()
	if err != nil {
		t.Logf("virsh %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out)
}

// startLibvirtd starts virtlogd and libvirtd inside a new network namespace
// and registers their complete removal with t.Cleanup.
func startLibvirtd(t *testing.T) *lvEnv {
	t.Helper()
	lock, err := os.OpenFile(testLockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		t.Skipf("SKIPPED: another libvirt test holds %s; only one libvirtd can own /var/run/libvirt", testLockFile)
	}
	t.Cleanup(func() { lock.Close() })
	for _, d := range []string{"libvirtd", "virtlogd", "virtqemud"} {
		if pids := pidsNamed(d); len(pids) > 0 {
			t.Skipf("SKIPPED: %s already runs (pids %v); only one libvirtd can own /var/run/libvirt, stop it first", d, pids)
		}
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	env := &lvEnv{ns: "khwlv-test-" + hex.EncodeToString(b)}
	env.nsPath = "/run/netns/" + env.ns
	if out, err := exec.Command("ip", "netns", "add", env.ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", env.ns, err, out)
	}
	env.nsInode = netnsInode(env.nsPath)
	t.Cleanup(func() { env.stop(t) })
	kvmAccessLikeUdev(t)
	if out, err := exec.Command("ip", "-n", env.ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	for _, d := range []string{"virtlogd", "libvirtd"} {
		if out, err := exec.Command("nsenter", "--net="+env.nsPath, d, "-d").CombinedOutput(); err != nil {
			t.Fatalf("start %s in %s: %v: %s", d, env.ns, err, out)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("unix", libvirtSocket, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("libvirtd did not open %s within 30 s: %v", libvirtSocket, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("libvirtd runs in network namespace %s", env.ns)
	return env
}

// kvmAccessLikeUdev gives /dev/kvm group kvm and mode 0660 for the test,
// as Debian's udev rule does on a normal host (this machine has no udev), and
// puts the original owner and mode back afterwards. Without it libvirt's
// QEMU user cannot open /dev/kvm while libvirtd's capability probe (run as
// root) can, and libvirt 9.0 then thinks its capability cache is stale on
// every call and re-probes QEMU each time (~5 s per API call:
// "KVM was enabled when probing …, but it is not available now").
func kvmAccessLikeUdev(t *testing.T) {
	var st syscall.Stat_t
	if err := syscall.Stat("/dev/kvm", &st); err != nil {
		return
	}
	out, err := exec.Command("getent", "group", "kvm").Output()
	if err != nil {
		return
	}
	parts := strings.Split(strings.TrimSpace(string(out)), ":")
	if len(parts) < 3 {
		return
	}
	gid, err := strconv.Atoi(parts[2])
	if err != nil || (int(st.Gid) == gid && st.Mode&0o060 == 0o060) {
		return
	}
	mode, uid, oldGid := st.Mode&0o7777, int(st.Uid), int(st.Gid)
	if err := os.Chown("/dev/kvm", uid, gid); err != nil {
		t.Logf("chgrp kvm /dev/kvm: %v", err)
		return
	}
	_ = os.Chmod("/dev/kvm", 0o660)
	t.Logf("/dev/kvm: group kvm, mode 0660 for the test (was gid %d, mode %o)", oldGid, mode)
	t.Cleanup(func() {
		_ = os.Chown("/dev/kvm", uid, oldGid)
		_ = os.Chmod("/dev/kvm", os.FileMode(mode))
	})
}

// stop tears everything down; it runs even after a failed test.
func (env *lvEnv) stop(t *testing.T) {
	// Stop guests and networks through libvirt first, so QEMU and dnsmasq
	// exit cleanly and libvirt forgets them.
	if l, err := Connect(DefaultURI); err == nil {
		if doms, _, err := l.ConnectListAllDomains(1, 0); err == nil {
			for _, d := range doms {
				_ = l.DomainDestroy(d)
			}
		}
		if nets, _, err := l.ConnectListAllNetworks(1, 0); err == nil {
			for _, n := range nets {
				_ = l.NetworkDestroy(n)
				if strings.HasPrefix(n.Name, "khw-lvt") {
					_ = l.NetworkUndefine(n)
				}
			}
		}
		_ = l.Disconnect()
	}
	// Then end every process left in the namespace: libvirtd, virtlogd, and
	// any qemu or dnsmasq libvirt did not stop.
	for round := 0; round < 50; round++ {
		pids := pidsInNetns(env.nsInode)
		if env.nsInode == 0 || len(pids) == 0 {
			break
		}
		sig := syscall.SIGTERM
		if round >= 20 {
			sig = syscall.SIGKILL
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if left := pidsInNetns(env.nsInode); env.nsInode != 0 && len(left) > 0 {
		t.Errorf("processes %v survive in %s", left, env.ns)
	}
	if out, err := exec.Command("ip", "netns", "delete", env.ns).CombinedOutput(); err != nil {
		t.Errorf("ip netns delete %s: %v: %s", env.ns, err, out)
	}
	for _, d := range []string{"libvirtd", "virtlogd", "qemu-system-x86_64", "qemu-system-aarch64", "dnsmasq"} {
		if pids := pidsNamed(d); len(pids) > 0 {
			t.Errorf("after the test %s still runs: %v", d, pids)
		}
	}
	out, _ := exec.Command("ip", "-br", "link").CombinedOutput()
	if strings.Contains(string(out), "virbr") || strings.Contains(string(out), "khwbr-") {
		t.Errorf("a libvirt bridge is in the root network namespace:\n%s", out)
	}
}

// testImage returns the test image directory or skips.
func testImage(t *testing.T) Image {
	t.Helper()
	dir := os.Getenv(envImage)
	if dir == "" {
		t.Skipf("SKIPPED: %s is not set; build the image with hack/libvirt-test-image.sh (make test-libvirt does)", envImage)
	}
	cmd, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		t.Fatalf("test image %s: %v", dir, err)
	}
	img := Image{Path: filepath.Join(dir, "disk.qcow2"), Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd.img"), Cmdline: strings.TrimSpace(string(cmd))}
	for _, f := range []string{img.Path, img.Kernel, img.Initrd} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("test image: %v", err)
		}
	}
	return img
}

type logWriter struct{ t testing.TB }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func since(t0 time.Time) string { return fmt.Sprintf("%.1fs", time.Since(t0).Seconds()) }

// recapT is a *testing.T that logs every Errorf message once more when the
// test ends (recap): a long VM test's first error is far from the end of
// its output, and a CI log that keeps only the end still shows it.
type recapT struct {
	*testing.T
	errs []string
}

func (r *recapT) Errorf(format string, args ...any) {
	r.T.Helper()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	r.T.Errorf(format, args...)
}

// recap logs the errors so far, in order (nothing when there were none).
func (r *recapT) recap() {
	if len(r.errs) > 0 {
		r.T.Logf("%d error(s) in this test, in order:\n  %s", len(r.errs), strings.Join(r.errs, "\n  "))
	}
}
