package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/khw-dev/khw/internal/components"
)

// job is one component at one version for one arch.
type job struct {
	Component string
	Version   string
	Arch      string
	Arts      []components.Resolved
}

func (j job) String() string { return j.Component + "/" + j.Version + "/linux-" + j.Arch }

// product is one file the mirror gets, with the checksum file that covers it.
type product struct {
	Rel       string // mirror-relative path (slash-separated)
	Src       string // the file in the build cache
	SumRel    string // mirror-relative path of its checksum file
	SumFormat string // components.ChecksumHex or ChecksumSHA256Sum
	SumName   string // the name the checksum file lists (sha256sum format)
}

// binCheck is a version command to run on a built binary.
type binCheck struct {
	Name string
	Path string
	Arch string
	Args []string
	Want string // substring the output must contain
}

// built is what a job produced.
type built struct {
	Products []product
	Checks   []binCheck
	Notes    []string
}

func urlProduct(a components.Resolved, src string) (product, error) {
	rel, err := mirrorRelPath(a.URL)
	if err != nil {
		return product{}, err
	}
	sum, err := mirrorRelPath(a.ChecksumURL)
	if err != nil {
		return product{}, err
	}
	return product{Rel: rel, Src: src, SumRel: sum, SumFormat: a.ChecksumFormat, SumName: a.FileName}, nil
}

func imageProduct(a components.Resolved, src string) (product, error) {
	rel, err := imageRelPath(a.Image, a.Arch)
	if err != nil {
		return product{}, err
	}
	return product{Rel: rel, Src: src, SumRel: rel + ".sha256", SumFormat: components.ChecksumHex, SumName: path.Base(rel)}, nil
}

// derive (re)makes the derived file out (an archive or image tarball) unless
// out.recipe already holds recipe.
func derive(out, recipe string, lg *jobLog, make func() error) error {
	if old, err := os.ReadFile(out + ".recipe"); err == nil && string(old) == recipe && exists(out) {
		lg.printf("cached: %s", filepath.Base(out))
		return nil
	}
	os.Remove(out + ".recipe")
	lg.printf("writing %s", out)
	if err := make(); err != nil {
		return err
	}
	return os.WriteFile(out+".recipe", []byte(recipe), 0o644)
}

// buildJob dispatches on the catalog component name.
func (r *run) buildJob(ctx context.Context, j job, lg *jobLog) (*built, error) {
	switch j.Component {
	case "kubernetes":
		return r.buildKubernetes(ctx, j, lg)
	case "etcd":
		return r.buildEtcd(ctx, j, lg)
	case "containerd":
		return r.buildContainerd(ctx, j, lg)
	case "runc":
		return r.buildRunc(ctx, j, lg)
	case "cni-plugins":
		return r.buildCNI(ctx, j, lg)
	case "crictl":
		return r.buildCrictl(ctx, j, lg)
	case "pause":
		return r.buildPause(ctx, j, lg)
	case "coredns":
		return r.buildCoreDNS(ctx, j, lg)
	case "agnhost":
		return r.buildAgnhost(ctx, j, lg)
	case "ubuntu-cloud-image":
		return &built{Notes: []string{"not built: the Ubuntu cloud image is a download, not a build (out of scope for mkmirror); put it into the mirror by hand or let the fetcher download it"}}, nil
	}
	return nil, fmt.Errorf("catalog component %q: mkmirror does not know how to build it (fix: add a builder in hack/mkmirror/builders.go)", j.Component)
}

func one(j job) (components.Resolved, error) {
	if len(j.Arts) != 1 {
		return components.Resolved{}, fmt.Errorf("%s: catalog has %d artifacts, mkmirror expects 1", j, len(j.Arts))
	}
	return j.Arts[0], nil
}

// checkArchiveCoversCatalog fails when a file the catalog installs from the
// archive is not among the entries mkmirror writes.
func checkArchiveCoversCatalog(a components.Resolved, entries []entry) error {
	have := map[string]bool{}
	for _, e := range entries {
		have[e.Name] = true
	}
	for _, f := range a.Files {
		if !have[f.Path] {
			return fmt.Errorf("catalog artifact %s installs %q from its archive, but mkmirror's layout has no such member", a.Artifact.Name, f.Path)
		}
	}
	return nil
}

// --- Kubernetes -------------------------------------------------------------

var kubeMains = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl"}

const agnhostPkg = "k8s.io/kubernetes/test/images/agnhost"

// kubeModule is the build module for k8s.io/kubernetes at kver: it requires
// k8s.io/kubernetes and replaces every staging module it requires at v0.0.0
// with the published v0.X.Y (list read from kubernetes' own go.mod).
func (r *run) kubeModule(ctx context.Context, kver string) (goModule, error) {
	mi, err := r.downloadModule(ctx, "k8s.io/kubernetes", kver)
	if err != nil {
		return goModule{}, err
	}
	gomod, err := os.ReadFile(mi.GoMod)
	if err != nil {
		return goModule{}, err
	}
	sv, err := stagingVersion(kver)
	if err != nil {
		return goModule{}, err
	}
	m := goModule{Key: "kubernetes-" + kver, Requires: []string{"k8s.io/kubernetes " + kver}}
	for _, s := range stagingModules(gomod) {
		m.Replaces = append(m.Replaces, fmt.Sprintf("%s => %s %s", s, s, sv))
	}
	if len(m.Replaces) == 0 {
		return goModule{}, fmt.Errorf("k8s.io/kubernetes@%s go.mod (%s) requires no k8s.io/* module at v0.0.0; mkmirror cannot tell which staging modules to replace", kver, mi.GoMod)
	}
	for _, c := range kubeMains {
		m.Mains = append(m.Mains, "k8s.io/kubernetes/cmd/"+c)
	}
	m.Mains = append(m.Mains, agnhostPkg)
	return m, nil
}

func (r *run) buildKubernetes(ctx context.Context, j job, lg *jobLog) (*built, error) {
	m, err := r.kubeModule(ctx, j.Version)
	if err != nil {
		return nil, err
	}
	digest, err := r.ensureModule(ctx, m, lg)
	if err != nil {
		return nil, err
	}
	ld, err := kubeLDFlags(j.Version)
	if err != nil {
		return nil, err
	}
	out := buildDir(r.cache, "kubernetes", j.Version, j.Arch)
	var bins []goBinary
	known := map[string]bool{}
	for _, c := range kubeMains {
		known[c] = true
	}
	for _, a := range j.Arts {
		if !known[a.Artifact.Name] {
			return nil, fmt.Errorf("catalog kubernetes artifact %q is not one of %v", a.Artifact.Name, kubeMains)
		}
		bins = append(bins, goBinary{Name: a.Artifact.Name, Pkg: "k8s.io/kubernetes/cmd/" + a.Artifact.Name})
	}
	if err := r.goBuild(ctx, m, digest, j.Arch, goRecipe{LDFlags: ld}, bins, out, lg); err != nil {
		return nil, err
	}
	b := &built{}
	for _, a := range j.Arts {
		src := filepath.Join(out, a.Artifact.Name)
		p, err := urlProduct(a, src)
		if err != nil {
			return nil, err
		}
		b.Products = append(b.Products, p)
		c := binCheck{Name: a.Artifact.Name, Path: src, Arch: j.Arch, Args: []string{"--version"}, Want: "Kubernetes " + j.Version}
		if a.Artifact.Name == "kubectl" {
			c.Args, c.Want = []string{"version", "--client"}, "Client Version: "+j.Version
		}
		b.Checks = append(b.Checks, c)
	}
	return b, nil
}

// --- etcd -------------------------------------------------------------------

func (r *run) buildEtcd(ctx context.Context, j job, lg *jobLog) (*built, error) {
	a, err := one(j)
	if err != nil {
		return nil, err
	}
	mods := map[string]string{"etcd": "go.etcd.io/etcd/server/v3", "etcdctl": "go.etcd.io/etcd/etcdctl/v3", "etcdutl": "go.etcd.io/etcd/etcdutl/v3"}
	m := goModule{Key: "etcd-" + j.Version}
	var bins []goBinary
	for _, n := range []string{"etcd", "etcdctl", "etcdutl"} {
		m.Requires = append(m.Requires, mods[n]+" "+j.Version)
		m.Mains = append(m.Mains, mods[n])
		bins = append(bins, goBinary{Name: n, Pkg: mods[n]})
	}
	digest, err := r.ensureModule(ctx, m, lg)
	if err != nil {
		return nil, err
	}
	out := buildDir(r.cache, "etcd", j.Version, j.Arch)
	// etcd's version is a constant in go.etcd.io/etcd/api/v3/version; its
	// build only adds -X …/version.GitSHA=<commit>, which a module build does
	// not know (scripts/build_lib.sh), so GitSHA keeps its default.
	if err := r.goBuild(ctx, m, digest, j.Arch, goRecipe{}, bins, out, lg); err != nil {
		return nil, err
	}
	// Docs as etcd's scripts/build-binary.sh package() copies them.
	var docs []entry
	if root, err := r.downloadModule(ctx, "go.etcd.io/etcd/v3", j.Version); err == nil {
		docs = append(docs, entry{Name: "README.md", Mode: 0o644, Src: filepath.Join(root.Dir, "README.md")})
		tree, err := dirEntries(filepath.Join(root.Dir, "Documentation"), "Documentation/")
		if err != nil {
			return nil, err
		}
		docs = append(docs, tree...)
	} else {
		lg.printf("note: no README.md/Documentation in the archive: %v", err)
	}
	if ctl, err := r.downloadModule(ctx, mods["etcdctl"], j.Version); err == nil {
		docs = append(docs, entry{Name: "README-etcdctl.md", Mode: 0o644, Src: filepath.Join(ctl.Dir, "README.md")})
		if exists(filepath.Join(ctl.Dir, "READMEv2.md")) {
			docs = append(docs, entry{Name: "READMEv2-etcdctl.md", Mode: 0o644, Src: filepath.Join(ctl.Dir, "READMEv2.md")})
		}
	}
	if utl, err := r.downloadModule(ctx, mods["etcdutl"], j.Version); err == nil {
		docs = append(docs, entry{Name: "README-etcdutl.md", Mode: 0o644, Src: filepath.Join(utl.Dir, "README.md")})
	}
	var nf []namedFile
	for _, b := range bins {
		nf = append(nf, namedFile{b.Name, filepath.Join(out, b.Name)})
	}
	entries := etcdEntries(j.Version, j.Arch, nf, docs)
	p, err := r.archive(a, out, entries, lg)
	if err != nil {
		return nil, err
	}
	v := strings.TrimPrefix(j.Version, "v")
	return &built{Products: []product{p}, Checks: []binCheck{
		{Name: "etcd", Path: nf[0].Path, Arch: j.Arch, Args: []string{"--version"}, Want: "etcd Version: " + v},
		{Name: "etcdctl", Path: nf[1].Path, Arch: j.Arch, Args: []string{"version"}, Want: "etcdctl version: " + v},
		{Name: "etcdutl", Path: nf[2].Path, Arch: j.Arch, Args: []string{"version"}, Want: "etcdutl version: " + v},
	}}, nil
}

// archive writes the tar.gz for artifact a from entries into out/dist/ and
// returns its mirror product.
func (r *run) archive(a components.Resolved, out string, entries []entry, lg *jobLog) (product, error) {
	if err := checkArchiveCoversCatalog(a, entries); err != nil {
		return product{}, err
	}
	recipe, err := entriesRecipe(entries)
	if err != nil {
		return product{}, err
	}
	dst := filepath.Join(out, "dist", a.FileName)
	if err := derive(dst, "tar.gz\n"+recipe, lg, func() error { return writeTarGzFile(dst, entries) }); err != nil {
		return product{}, err
	}
	return urlProduct(a, dst)
}

// dirEntries lists a directory tree as archive entries under prefix
// (directories first, names sorted; files 0644, directories 0755).
func dirEntries(dir, prefix string) ([]entry, error) {
	var out []entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		name := prefix
		if rel != "." {
			name = prefix + filepath.ToSlash(rel)
		}
		switch {
		case d.IsDir():
			if !strings.HasSuffix(name, "/") {
				name += "/"
			}
			out = append(out, entry{Name: name, Mode: 0o755})
		case d.Type().IsRegular():
			out = append(out, entry{Name: name, Mode: 0o644, Src: p})
		}
		return nil
	})
	return out, err
}

// --- containerd -------------------------------------------------------------

func (r *run) buildContainerd(ctx context.Context, j job, lg *jobLog) (*built, error) {
	a, err := one(j)
	if err != nil {
		return nil, err
	}
	const mod = "github.com/containerd/containerd/v2"
	m := goModule{Key: "containerd-" + j.Version, Requires: []string{mod + " " + j.Version},
		Mains: []string{mod + "/cmd/containerd", mod + "/cmd/ctr", mod + "/cmd/containerd-stress", mod + "/cmd/containerd-shim-runc-v2"}}
	digest, err := r.ensureModule(ctx, m, lg)
	if err != nil {
		return nil, err
	}
	out := buildDir(r.cache, "containerd", j.Version, j.Arch)
	// containerd Makefile: -X version.Version/Package (Revision needs git);
	// tag urfave_cli_no_docs always, the shim adds no_grpc and is static. With
	// CGO_ENABLED=0 the cgo-only btrfs snapshotter drops out; overlayfs stays.
	ld := []string{"-X", mod + "/version.Version=" + j.Version, "-X", mod + "/version.Package=" + mod}
	main := []goBinary{{"containerd", mod + "/cmd/containerd"}, {"ctr", mod + "/cmd/ctr"}, {"containerd-stress", mod + "/cmd/containerd-stress"}}
	if err := r.goBuild(ctx, m, digest, j.Arch, goRecipe{Tags: []string{"urfave_cli_no_docs"}, LDFlags: ld}, main, out, lg); err != nil {
		return nil, err
	}
	shim := []goBinary{{"containerd-shim-runc-v2", mod + "/cmd/containerd-shim-runc-v2"}}
	if err := r.goBuild(ctx, m, digest, j.Arch, goRecipe{Tags: []string{"urfave_cli_no_docs", "no_grpc"}, LDFlags: ld}, shim, out, lg); err != nil {
		return nil, err
	}
	var nf []namedFile
	for _, n := range []string{"containerd", "containerd-shim-runc-v2", "containerd-stress", "ctr"} {
		nf = append(nf, namedFile{n, filepath.Join(out, n)})
	}
	p, err := r.archive(a, out, containerdEntries(nf), lg)
	if err != nil {
		return nil, err
	}
	return &built{Products: []product{p}, Checks: []binCheck{
		{Name: "containerd", Path: nf[0].Path, Arch: j.Arch, Args: []string{"--version"}, Want: " " + j.Version},
		{Name: "containerd-shim-runc-v2", Path: nf[1].Path, Arch: j.Arch, Args: []string{"-v"}, Want: j.Version},
		{Name: "ctr", Path: nf[3].Path, Arch: j.Arch, Args: []string{"--version"}, Want: " " + j.Version},
	}}, nil
}

// --- runc -------------------------------------------------------------------

// crossTriplet is the Debian multiarch triplet of arch.
func crossTriplet(arch string) string {
	if arch == "arm64" {
		return "aarch64-linux-gnu"
	}
	return "x86_64-linux-gnu"
}

// cEnv returns the C compiler (and pkg-config setting) for a cgo build for
// arch on this amd64 host, or an error saying which Debian packages to
// install.
func cEnv(arch string) (cc string, env []string, err error) {
	trip := crossTriplet(arch)
	if arch == runtime.GOARCH {
		cc = "gcc"
	} else {
		cc = trip + "-gcc"
		env = append(env, "PKG_CONFIG_LIBDIR=/usr/lib/"+trip+"/pkgconfig:/usr/share/pkgconfig")
	}
	if _, err := exec.LookPath(cc); err != nil {
		pkg := "gcc"
		if arch != runtime.GOARCH {
			pkg = "gcc-" + trip
		}
		return "", nil, prereqf("no C compiler %s for linux/%s (fix: apt-get install %s, or `make mirror-deps` / `make mirror-deps-arm64`)", cc, arch, pkg)
	}
	return cc, append(env, "CC="+cc), nil
}

func (r *run) buildRunc(ctx context.Context, j job, lg *jobLog) (*built, error) {
	a, err := one(j)
	if err != nil {
		return nil, err
	}
	out := buildDir(r.cache, "runc", j.Version, j.Arch)
	want := "runc version " + strings.TrimPrefix(j.Version, "v")
	bin, berr := r.buildRuncFromModule(ctx, j, out, lg)
	b := &built{}
	if berr != nil {
		var pe prereqError
		if !r.runcFallback || errors.As(berr, &pe) {
			return nil, berr
		}
		lg.warn("runc %s for linux/%s could not be built from the Go module: %v\n!!! FALLING BACK to Debian's runc package: the mirror file at the runc %s URL will be Debian's runc (older, dynamically linked against libseccomp2), NOT %s.", j.Version, j.Arch, berr, j.Version, j.Version)
		root, debVer, err := r.debianPackage(ctx, "runc", j.Arch, lg)
		if err != nil {
			return nil, fmt.Errorf("runc: build failed (%v) and the Debian fallback failed too: %w", berr, err)
		}
		bin = filepath.Join(out, "runc-debian")
		if err := copyFile(filepath.Join(root, "usr/sbin/runc"), bin, 0o755); err != nil {
			return nil, err
		}
		b.Notes = append(b.Notes, fmt.Sprintf("!!! FALLBACK: runc %s is Debian's runc %s, not %s (see the warning above)", j.Arch, debVer, j.Version))
		want = "runc version"
	}
	p, err := urlProduct(a, bin)
	if err != nil {
		return nil, err
	}
	b.Products = append(b.Products, p)
	b.Checks = append(b.Checks, binCheck{Name: "runc", Path: bin, Arch: j.Arch, Args: []string{"--version"}, Want: want})
	return b, nil
}

// buildRuncFromModule: runc needs cgo (libcontainer/nsenter is C) and the
// seccomp tag with libseccomp (without it every container with a seccomp
// profile fails, and CoreDNS asks for RuntimeDefault). Static link against
// Debian's libseccomp.a; tags as runc's Makefile minus libpathrs (a Rust
// library; runc falls back to its Go path handling) plus netgo/osusergo for
// a static binary. Version comes from runc's embedded VERSION file; the
// commit (-X main.gitCommit) is unknown for a module build.
func (r *run) buildRuncFromModule(ctx context.Context, j job, out string, lg *jobLog) (string, error) {
	cc, env, err := cEnv(j.Arch)
	if err != nil {
		return "", err
	}
	trip := crossTriplet(j.Arch)
	if !exists("/usr/lib/" + trip + "/libseccomp.a") {
		fix := "apt-get install libseccomp-dev pkg-config"
		if j.Arch != runtime.GOARCH {
			fix = "dpkg --add-architecture arm64 && apt-get update && apt-get install gcc-aarch64-linux-gnu libseccomp-dev:arm64"
		}
		return "", prereqf("no /usr/lib/%s/libseccomp.a for a static runc with seccomp (fix: %s, or `make mirror-deps`)", trip, fix)
	}
	seccompVer := "unknown"
	pc := exec.CommandContext(ctx, "pkg-config", "--modversion", "libseccomp")
	pc.Env = append(os.Environ(), env...)
	if o, err := pc.Output(); err == nil {
		seccompVer = strings.TrimSpace(string(o))
	} else {
		return "", prereqf("pkg-config --modversion libseccomp for linux/%s failed: %v (fix: apt-get install pkg-config libseccomp-dev%s)", j.Arch, err, map[bool]string{true: ":arm64", false: ""}[j.Arch == "arm64"])
	}
	const mod = "github.com/opencontainers/runc"
	m := goModule{Key: "runc-" + j.Version, Requires: []string{mod + " " + j.Version}, Mains: []string{mod}}
	digest, err := r.ensureModule(ctx, m, lg)
	if err != nil {
		return "", err
	}
	g := goRecipe{CGO: true, Env: env, Tags: []string{"seccomp", "urfave_cli_no_docs", "netgo", "osusergo"}, Static: true,
		Extra: "cc=" + cc + " libseccomp=" + seccompVer}
	if err := r.goBuild(ctx, m, digest, j.Arch, g, []goBinary{{"runc", mod}}, out, lg); err != nil {
		return "", err
	}
	return filepath.Join(out, "runc"), nil
}

// prereqError is a missing host prerequisite (compiler, libseccomp): the fix
// is an apt-get install, so runc does not fall back to Debian's package.
type prereqError struct{ msg string }

func (e prereqError) Error() string { return e.msg }

func prereqf(format string, a ...any) error { return prereqError{fmt.Sprintf(format, a...)} }

// --- CNI plugins ------------------------------------------------------------

func (r *run) buildCNI(ctx context.Context, j job, lg *jobLog) (*built, error) {
	a, err := one(j)
	if err != nil {
		return nil, err
	}
	const mod = "github.com/containernetworking/plugins"
	mi, err := r.downloadModule(ctx, mod, j.Version)
	if err != nil {
		return nil, err
	}
	// The plugins to build are the ones the catalog installs (upstream's
	// tarball has all 18; khw uses these).
	var bins []goBinary
	for _, f := range a.Files {
		n := path.Base(f.Path)
		pkg := ""
		for _, kind := range []string{"main", "ipam", "meta"} {
			if exists(filepath.Join(mi.Dir, "plugins", kind, n)) {
				pkg = mod + "/plugins/" + kind + "/" + n
			}
		}
		if pkg == "" {
			return nil, fmt.Errorf("CNI plugin %q (catalog) is not in %s@%s plugins/{main,ipam,meta}", n, mod, j.Version)
		}
		bins = append(bins, goBinary{n, pkg})
	}
	m := goModule{Key: "cni-plugins-" + j.Version, Requires: []string{mod + " " + j.Version}}
	for _, b := range bins {
		m.Mains = append(m.Mains, b.Pkg)
	}
	digest, err := r.ensureModule(ctx, m, lg)
	if err != nil {
		return nil, err
	}
	out := buildDir(r.cache, "cni-plugins", j.Version, j.Arch)
	ld := []string{"-X", mod + "/pkg/utils/buildversion.BuildVersion=" + j.Version}
	if err := r.goBuild(ctx, m, digest, j.Arch, goRecipe{LDFlags: ld}, bins, out, lg); err != nil {
		return nil, err
	}
	var nf []namedFile
	b := &built{}
	for _, bn := range bins {
		p := filepath.Join(out, bn.Name)
		nf = append(nf, namedFile{bn.Name, p})
		b.Checks = append(b.Checks, binCheck{Name: bn.Name, Path: p, Arch: j.Arch, Args: []string{"--version"}, Want: j.Version})
	}
	docs := []entry{{Name: "LICENSE", Mode: 0o644, Src: filepath.Join(mi.Dir, "LICENSE")},
		{Name: "README.md", Mode: 0o644, Src: filepath.Join(mi.Dir, "README.md")}}
	p, err := r.archive(a, out, cniEntries(nf, docs), lg)
	if err != nil {
		return nil, err
	}
	b.Products = []product{p}
	return b, nil
}

// --- crictl -----------------------------------------------------------------

func (r *run) buildCrictl(ctx context.Context, j job, lg *jobLog) (*built, error) {
	a, err := one(j)
	if err != nil {
		return nil, err
	}
	const mod = "sigs.k8s.io/cri-tools"
	m := goModule{Key: "crictl-" + j.Version, Requires: []string{mod + " " + j.Version}, Mains: []string{mod + "/cmd/crictl"}}
	digest, err := r.ensureModule(ctx, m, lg)
	if err != nil {
		return nil, err
	}
	out := buildDir(r.cache, "crictl", j.Version, j.Arch)
	// cri-tools hack/release.sh keeps the "v" in pkg/version.Version.
	ld := []string{"-X", mod + "/pkg/version.Version=" + j.Version}
	if err := r.goBuild(ctx, m, digest, j.Arch, goRecipe{LDFlags: ld}, []goBinary{{"crictl", mod + "/cmd/crictl"}}, out, lg); err != nil {
		return nil, err
	}
	bin := filepath.Join(out, "crictl")
	p, err := r.archive(a, out, crictlEntries(bin), lg)
	if err != nil {
		return nil, err
	}
	return &built{Products: []product{p}, Checks: []binCheck{{Name: "crictl", Path: bin, Arch: j.Arch, Args: []string{"--version"}, Want: "crictl version " + j.Version}}}, nil
}

// --- images -----------------------------------------------------------------
