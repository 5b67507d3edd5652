package bringup

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/vm/nspawn"
)

// rootfsArchive lays out, in mirror, Debian's bookworm archive as the node
// image knows it: the Release and main Packages files apt downloaded when
// the image was built (in its /var/lib/apt/lists) and every .deb of its
// /var/cache/apt/archives that the Packages file lists with that digest,
// except those named in leave. It returns the mirror's pin.
func rootfsArchive(t *testing.T, rootfs, mirror, arch string, leave ...string) string {
	t.Helper()
	a, err := components.FindDebArchive("debian", "bookworm", arch)
	if err != nil {
		t.Fatal(err)
	}
	lists := filepath.Join(rootfs, "var/lib/apt/lists")
	release, err := os.ReadFile(filepath.Join(lists, "deb.debian.org_debian_dists_bookworm_Release"))
	if err != nil {
		t.Skipf("SKIP: the node image has no apt lists to build a test archive from: %v", err)
	}
	pkgsData, err := os.ReadFile(filepath.Join(lists, "deb.debian.org_debian_dists_bookworm_main_binary-"+arch+"_Packages"))
	if err != nil {
		t.Skipf("SKIP: the node image has no Packages list: %v", err)
	}
	pkgs, err := components.ParsePackages(bytes.NewReader(pkgsData))
	if err != nil {
		t.Fatal(err)
	}
	bySum := map[string]components.DebPackage{}
	for _, p := range pkgs {
		bySum[p.SHA256] = p
	}
	var es []components.MirrorEntry
	put := func(u string, data []byte, name string) {
		rel := strings.TrimPrefix(u, "https://")
		dst := filepath.Join(mirror, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(data)
		es = append(es, components.MirrorEntry{Path: rel, Name: name, Arch: arch, URL: u, SHA256: hex.EncodeToString(h[:]), Size: int64(len(data))})
	}
	put(a.ReleaseURL("bookworm"), release, "Release")
	put(a.DistURL("bookworm", components.IndexPath("main", arch)), pkgsData, "Packages")
	debs, _ := filepath.Glob(filepath.Join(rootfs, "var/cache/apt/archives/*.deb"))
	n := 0
	for _, f := range debs {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(data)
		p, ok := bySum[hex.EncodeToString(h[:])]
		if !ok || contains(leave, p.Name) {
			continue
		}
		u, err := a.PoolURL(p.Filename)
		if err != nil {
			t.Fatal(err)
		}
		put(u, data, p.Name)
		n++
	}
	if n == 0 {
		t.Skip("SKIP: no .deb of the node image matches its Packages list")
	}
	_, pin, err := components.WriteMirrorManifest(mirror, es)
	if err != nil {
		t.Fatal(err)
	}
	return pin
}

// TestOfflinePackagesNspawn installs haproxy on a real node that has no
// package lists and no network, from the mirror's verified .debs: haproxy
// and liblua5.3-0 (removed from the node before, so the closure must bring
// it back) and nothing the node already has. A mirror without liblua5.3-0
// is refused first, naming it.
func TestOfflinePackagesNspawn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP (needs root): nspawn nodes need network namespaces and cgroups")
	}
	if err := nspawn.CheckHost(); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	cache, err := nspawn.CacheDir()
	if err != nil {
		t.Skipf("SKIP: %v", err)
	}
	arch := runtime.GOARCH
	rootfs := nspawn.RootfsPath(cache, arch)
	if _, err := os.Stat(rootfs); err != nil {
		t.Skipf("SKIP: no node image at %s (go test ./internal/vm/nspawn -run Nspawn builds it)", rootfs)
	}
	good, bad := t.TempDir(), t.TempDir()
	goodPin := rootfsArchive(t, rootfs, good, arch)
	badPin := rootfsArchive(t, rootfs, bad, arch, "liblua5.3-0")

	b := make([]byte, 3)
	rand.Read(b)
	name := "d" + hex.EncodeToString(b)
	c := config.Default(name, arch, config.ProviderNspawn)
	var lb config.Node
	for _, n := range c.Nodes {
		if n.Role == config.RoleLoadBalancer {
			lb = n
		}
	}
	// Only the load balancer: not a cluster config.Validate accepts (so it
	// is not saved), but all that 01-machines and an install need.
	c.Nodes = []config.Node{lb}
	d := state.New(t.TempDir(), name)
	if err := fsutil.EnsureDir(d.Root); err != nil {
		t.Fatal(err)
	}
	env := nspawnEnv(t, c, d)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	m := openMachines(t, c, d, env)
	defer m.Close()
	var out bytes.Buffer
	if _, err := steps.NewRunner(env, &out).Run(ctx, []steps.Step{NewMachinesStep(m)}, steps.Options{}); err != nil {
		t.Fatalf("01-machines: %v\n%s", err, out.String())
	}
	cl, err := m.Pool.Get(ctx, remoteNode(lb))
	if err != nil {
		t.Fatal(err)
	}
	run := func(cmd string) string {
		t.Helper()
		o, _, err := cl.Run(ctx, cmd, remote.RunOptions{Sudo: true})
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, o)
		}
		return string(o)
	}
	// The node as a fresh cloud image without haproxy: no lists, no haproxy,
	// no liblua5.3-0 (only haproxy needs it).
	run("DEBIAN_FRONTEND=noninteractive dpkg --purge haproxy liblua5.3-0 >/dev/null && rm -rf /var/lib/apt/lists/* && mkdir -p /var/lib/apt/lists/partial")
	if o := run("ls /var/lib/apt/lists; dpkg-query -W -f='${db:Status-Abbrev}\\n' haproxy 2>/dev/null || true"); strings.Contains(o, "Packages") || strings.HasPrefix(o, "ii") {
		t.Fatalf("the node still has lists or haproxy:\n%s", o)
	}
	w := &nodeWant{Node: lb, Packages: []wantPackage{{Name: "haproxy", Path: "/usr/sbin/haproxy"}}, offlineDebs: true}

	// A mirror without liblua5.3-0: refused, naming it, before any change.
	m.art.Fetcher = &components.Fetcher{Mirror: bad, MirrorDigest: badPin}
	_, err = applyNode(ctx, env, m, "06-lb", w)
	if err == nil || !strings.Contains(err.Error(), "liblua5.3-0") || !strings.Contains(err.Error(), "debian bookworm "+arch) {
		t.Fatalf("mirror without liblua5.3-0: err = %v, want one naming it and the node OS/arch", err)
	}

	m = openMachines(t, c, d, env) // a new run: no cached index or plan
	defer m.Close()
	m.art.Fetcher = &components.Fetcher{Mirror: good, MirrorDigest: goodPin}
	diffs, _, err := checkNode(ctx, m, w)
	if err != nil || len(diffs) != 1 || !strings.Contains(diffs[0].What, "haproxy") {
		t.Fatalf("check: %v, %v; want the one diff of haproxy", diffs, err)
	}
	w.debs = m.debPlans[planKey(w)]
	cmds := joinCmds(packageCommands(w))
	for _, want := range []string{"pool/main/h/haproxy/haproxy_", "pool/main/l/lua5.3/liblua5.3-0_", "apt-get install -y --no-install-recommends"} {
		if !strings.Contains(cmds, want) {
			t.Errorf("dry-run commands:\n%s\nwant %q", cmds, want)
		}
	}
	if strings.Contains(cmds, "libc6") {
		t.Errorf("dry-run commands install libc6, which the node has:\n%s", cmds)
	}
	t0 := time.Now()
	if _, err := applyNode(ctx, env, m, "06-lb", w); err != nil {
		t.Fatalf("offline install: %v", err)
	}
	t.Logf("offline install of %d .deb(s) took %v", len(w.debs.Debs), time.Since(t0))
	got := run("dpkg-query -W -f='${db:Status-Abbrev}${Package}\\n' haproxy liblua5.3-0; /usr/sbin/haproxy -v | head -1; ls /var/lib/apt/lists; ls " + nodeDebDir)
	for _, want := range []string{"ii haproxy", "ii liblua5.3-0", "HAProxy version"} {
		if !strings.Contains(got, want) {
			t.Errorf("after the offline install the node says:\n%s\nwant %q", got, want)
		}
	}
	if strings.Contains(got, "Packages") || strings.Contains(got, ".deb") {
		t.Errorf("the install left package lists or .debs behind:\n%s", got)
	}
	if diffs, _, err := checkNode(ctx, m, w); err != nil || len(diffs) != 0 {
		t.Errorf("check after the install: %v, %v; want clean", diffs, err)
	}
}

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
	pin := rootfsArchive(t, rootfs, mirror, arch)

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
		p := path.Join(nodeDebDir, df.Package.FileName())
		if err := os.MkdirAll(filepath.Join(root, nodeDebDir), 0o755); err != nil {
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
