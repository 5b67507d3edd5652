package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/khw-dev/khw/internal/components"
)

// image writes the image tarball for artifact a into out/dist/ and returns
// its mirror product.
func (r *run) image(a components.Resolved, out string, spec imageSpec, lg *jobLog) (product, error) {
	recipe, err := entriesRecipe(spec.Files)
	if err != nil {
		return product{}, err
	}
	recipe = fmt.Sprintf("image %s %s\nconfig %+v\n%s", spec.Ref, spec.Arch, spec.Config, recipe)
	dst := filepath.Join(out, "dist", "image-linux-"+a.Arch+".tar")
	err = derive(dst, recipe, lg, func() error {
		img, err := buildImage(spec)
		if err != nil {
			return err
		}
		return writeImageTarball(dst, spec.Ref, img)
	})
	if err != nil {
		return product{}, err
	}
	return imageProduct(a, dst)
}

// buildPause compiles k8s.io/kubernetes' build/pause/linux/pause.c (from the
// kubernetes module at versions.kubernetes) the way build/pause/Makefile
// does: $(CC) -Os -Wall -Werror -static -DVERSION=v<tag>, then strip. amd64
// uses gcc, arm64 the Debian cross compiler aarch64-linux-gnu-gcc.
func (r *run) buildPause(ctx context.Context, j job, lg *jobLog) (*built, error) {
	a, err := one(j)
	if err != nil {
		return nil, err
	}
	kver := r.cluster.Versions.Kubernetes
	mi, err := r.downloadModule(ctx, "k8s.io/kubernetes", kver)
	if err != nil {
		return nil, err
	}
	src := filepath.Join(mi.Dir, "build/pause/linux/pause.c")
	cc, _, err := cEnv(j.Arch)
	if err != nil {
		return nil, err
	}
	ccVer, _ := exec.CommandContext(ctx, cc, "-dumpfullversion").Output()
	srcSum, err := fileSHA256(src)
	if err != nil {
		return nil, err
	}
	out := buildDir(r.cache, "pause", j.Version, j.Arch)
	bin := filepath.Join(out, "pause")
	args := []string{"-Os", "-Wall", "-Werror", "-static", "-DVERSION=v" + j.Version, "-o", bin + ".tmp", src}
	recipe := fmt.Sprintf("cc: %s %s\nsrc: %s sha256=%s\nargs: %v\n", cc, strings.TrimSpace(string(ccVer)), src, srcSum, args)
	err = derive(bin, recipe, lg, func() error {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		for _, c := range [][]string{append([]string{cc}, args...), {strings.TrimSuffix(cc, "gcc") + "strip", bin + ".tmp"}} {
			cmd := exec.CommandContext(ctx, c[0], c[1:]...)
			cmd.Stdout, cmd.Stderr = lg, lg
			lg.printf("$ %s", strings.Join(c, " "))
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s: %w\n%s", c[0], err, lg.tail(10))
			}
		}
		return os.Rename(bin+".tmp", bin)
	})
	if err != nil {
		return nil, err
	}
	p, err := r.image(a, out, pauseImage(a.Image, j.Arch, bin), lg)
	if err != nil {
		return nil, err
	}
	return &built{Products: []product{p}, Checks: []binCheck{{Name: "pause", Path: bin, Arch: j.Arch, Args: []string{"-v"}, Want: "pause.c v" + j.Version}}}, nil
}

func (r *run) buildCoreDNS(ctx context.Context, j job, lg *jobLog) (*built, error) {
	a, err := one(j)
	if err != nil {
		return nil, err
	}
	const mod = "github.com/coredns/coredns"
	m := goModule{Key: "coredns-" + j.Version, Requires: []string{mod + " " + j.Version}, Mains: []string{mod}}
	digest, err := r.ensureModule(ctx, m, lg)
	if err != nil {
		return nil, err
	}
	out := buildDir(r.cache, "coredns", j.Version, j.Arch)
	// CoreDNS' version is the constant coremain.CoreVersion; its Makefile
	// only adds -X coremain.GitCommit (unknown here). CGO_ENABLED=0 as upstream.
	if err := r.goBuild(ctx, m, digest, j.Arch, goRecipe{}, []goBinary{{"coredns", mod}}, out, lg); err != nil {
		return nil, err
	}
	bin := filepath.Join(out, "coredns")
	ca := "/etc/ssl/certs/ca-certificates.crt"
	if !exists(ca) {
		ca = ""
		lg.printf("note: no %s on this host; the CoreDNS image gets no CA bundle (only DNS-over-TLS/HTTPS forwarding needs one)", "/etc/ssl/certs/ca-certificates.crt")
	}
	p, err := r.image(a, out, corednsImage(a.Image, j.Arch, bin, ca), lg)
	if err != nil {
		return nil, err
	}
	return &built{Products: []product{p}, Checks: []binCheck{{Name: "coredns", Path: bin, Arch: j.Arch, Args: []string{"-version"}, Want: "CoreDNS-" + strings.TrimPrefix(j.Version, "v")}}}, nil
}

// buildAgnhost builds test/images/agnhost from the kubernetes build module
// (versions.kubernetes) with -X main.Version=<catalog version>, like its
// Makefile. The catalog pins agnhost's version; when the kubernetes
// release's test/images/agnhost/VERSION says otherwise, the image is still
// tagged with the catalog version and a warning says so.
func (r *run) buildAgnhost(ctx context.Context, j job, lg *jobLog) (*built, error) {
	a, err := one(j)
	if err != nil {
		return nil, err
	}
	kver := r.cluster.Versions.Kubernetes
	m, err := r.kubeModule(ctx, kver)
	if err != nil {
		return nil, err
	}
	digest, err := r.ensureModule(ctx, m, lg)
	if err != nil {
		return nil, err
	}
	mi, err := r.downloadModule(ctx, "k8s.io/kubernetes", kver)
	if err != nil {
		return nil, err
	}
	b := &built{}
	if v, err := os.ReadFile(filepath.Join(mi.Dir, "test/images/agnhost/VERSION")); err == nil && strings.TrimSpace(string(v)) != j.Version {
		msg := fmt.Sprintf("agnhost: k8s.io/kubernetes@%s has agnhost %s, the catalog wants %s; building the %s source tagged %s", kver, strings.TrimSpace(string(v)), j.Version, kver, j.Version)
		lg.warn("%s", msg)
		b.Notes = append(b.Notes, msg)
	}
	out := buildDir(r.cache, "agnhost", j.Version, j.Arch)
	g := goRecipe{LDFlags: []string{"-X", "main.Version=" + j.Version}}
	if err := r.goBuild(ctx, m, digest, j.Arch, g, []goBinary{{"agnhost", agnhostPkg}}, out, lg); err != nil {
		return nil, err
	}
	bin := filepath.Join(out, "agnhost")
	busybox := ""
	if r.busybox {
		root, debVer, err := r.debianPackage(ctx, "busybox-static", j.Arch, lg)
		if err != nil {
			lg.warn("agnhost image without busybox (no sh/nslookup/wget in it): %v", err)
			b.Notes = append(b.Notes, "agnhost image has no busybox: "+err.Error())
		} else {
			busybox = filepath.Join(root, "bin/busybox")
			b.Notes = append(b.Notes, "agnhost image carries Debian busybox-static "+debVer+" as /bin/busybox (+ applet links) in place of upstream's alpine tools")
		}
	}
	p, err := r.image(a, out, agnhostImage(a.Image, j.Arch, bin, filepath.Join(mi.Dir, "test/images/agnhost/porter"), busybox), lg)
	if err != nil {
		return nil, err
	}
	b.Products = []product{p}
	b.Checks = []binCheck{{Name: "agnhost", Path: bin, Arch: j.Arch, Args: []string{"--version"}, Want: j.Version}}
	return b, nil
}

// --- Debian packages --------------------------------------------------------

// debianPackage downloads PKG:ARCH with `apt-get download` and unpacks it
// with `dpkg-deb -x` into CACHE/deb/PKG_ARCH/root (never into a live root).
// It returns that root and the package version. A foreign arch needs
// `dpkg --add-architecture ARCH && apt-get update` first.
func (r *run) debianPackage(ctx context.Context, pkg, arch string, lg *jobLog) (string, string, error) {
	mu := r.lock("deb:" + pkg + ":" + arch)
	mu.Lock()
	defer mu.Unlock()
	dir := filepath.Join(r.cache, "deb", pkg+"_"+arch)
	if v, err := os.ReadFile(filepath.Join(dir, ".version")); err == nil {
		return filepath.Join(dir, "root"), strings.TrimSpace(string(v)), nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), pkg+"-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "apt-get", "download", pkg+":"+arch)
	cmd.Dir = tmp
	cmd.Stdout, cmd.Stderr = lg, lg
	lg.printf("$ apt-get download %s:%s", pkg, arch)
	if err := cmd.Run(); err != nil {
		fix := "apt-get update"
		if arch != runtime.GOARCH {
			fix = "dpkg --add-architecture " + arch + " && apt-get update"
		}
		return "", "", fmt.Errorf("apt-get download %s:%s: %v (fix: %s)", pkg, arch, err, fix)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return "", "", fmt.Errorf("apt-get download %s:%s left %d .deb files", pkg, arch, len(debs))
	}
	root := filepath.Join(tmp, "root")
	if o, err := exec.CommandContext(ctx, "dpkg-deb", "-x", debs[0], root).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("dpkg-deb -x %s: %v: %s", debs[0], err, o)
	}
	ver, err := exec.CommandContext(ctx, "dpkg-deb", "-f", debs[0], "Version").Output()
	if err != nil {
		return "", "", fmt.Errorf("dpkg-deb -f %s Version: %w", debs[0], err)
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	if err := os.Rename(root, filepath.Join(dir, "root")); err != nil {
		return "", "", err
	}
	v := strings.TrimSpace(string(ver))
	if err := os.WriteFile(filepath.Join(dir, ".version"), []byte(v+"\n"), 0o644); err != nil {
		return "", "", err
	}
	return filepath.Join(dir, "root"), v, nil
}

func copyFile(src, dst string, mode fs.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
