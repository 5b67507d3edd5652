package nodeplan

import (
	"context"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

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
func TestOfflineAptChroot(t *testing.T) {
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
	mirror := t.TempDir()
	pin := debtest.RootfsArchive(t, rootfs, mirror, arch)

	tmp := t.TempDir()
	up, work, root := filepath.Join(tmp, "up"), filepath.Join(tmp, "work"), filepath.Join(tmp, "root")
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
	inNode := func(cmd string) (string, error) {
		out, err := exec.Command("unshare", "--net", "chroot", root, "sh", "-c", cmd).CombinedOutput()
		return string(out), err
	}
	if out, err := inNode("DEBIAN_FRONTEND=noninteractive dpkg --purge haproxy liblua5.3-0 && rm -rf /var/lib/apt/lists/* && mkdir -p /var/lib/apt/lists/partial"); err != nil {
		t.Fatalf("prepare: %v\n%s", err, out)
	}

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
	if out, err := inNode(offlineInstallCommand(paths) + " </dev/null"); err != nil {
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
