// Command mkmirror builds a local mirror of every download in khw's component
// catalog (internal/components/catalog.yaml) from source, for machines that
// cannot reach the official hosts but can reach the Go module proxy and
// Debian's apt repositories. It is test tooling, not part of khw.
//
// The mirror has exactly the layout of the official downloads: the file of
// https://HOST/PATH is MIRROR/HOST/PATH, next to the checksum file at the
// catalog's checksum URL in the catalog's checksum format; a container image
// REGISTRY/REPO:TAG is MIRROR/REGISTRY/REPO/TAG/image-linux-ARCH.tar (an
// image tarball `ctr -n k8s.io images import` reads) plus a .sha256 (hex).
//
// Every build is cached under $XDG_CACHE_HOME/khw (build/COMPONENT/VERSION/
// linux-ARCH/, build modules in src/, logs in logs/); the mirror files are
// hard links into that cache. See hack/README.md for what each component is
// built from, the prerequisites and the measured cost.
//
// Usage:
//
//	go run ./hack/mkmirror [--out DIR] [--arch amd64,arm64] [--config cluster.yaml]
//	    [--only kubernetes,etcd,…] [-j N] [--cache DIR] [--runc-fallback=false]
//	    [--busybox=false] [--verify-only] [--vm-image DIR]
//	    [--node-debs MANIFEST [--distro debian/bookworm] [--debs-from URL] [--debs-only]]
//
// --vm-image DIR puts the cloud image hack/libvirt-cloud-image.sh made in
// DIR into the mirror at the catalog's fallback path for it (Ubuntu's
// releases/noble/release/, with SHA256SUMS and the .manifest; see
// vmimage.go), so a libvirt cluster gets its base image from the mirror.
//
// Exit status: 0 when every selected artifact was built and verified, 1 when
// a build or the verification failed, 2 for bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
)

// run is one invocation's settings and shared state.
type run struct {
	cache, out   string
	goVersion    string // e.g. go1.26.8
	goLine       string // go directive for build modules, e.g. 1.26.0
	cluster      *config.Cluster
	runcFallback bool
	busybox      bool
	locks        sync.Map // string -> *sync.Mutex
	modInfo      sync.Map // "dl:mod@ver" -> moduleInfo
}

func (r *run) lock(key string) *sync.Mutex {
	v, _ := r.locks.LoadOrStore(key, &sync.Mutex{})
	return v.(*sync.Mutex)
}

// jobOrder puts the longest builds first so -j 2 overlaps them with the
// short ones.
var jobOrder = []string{"kubernetes", "coredns", "containerd", "etcd", "agnhost", "crictl", "cni-plugins", "runc", "pause", "ubuntu-cloud-image"}

func main() { os.Exit(realMain(os.Args[1:])) }

func realMain(args []string) int {
	o, code := parseArgs(args)
	if o == nil {
		return code
	}
	r, arches, code := o.setup()
	if r == nil {
		return code
	}
	if *o.debs.only {
		if *o.debs.manifest == "" {
			fmt.Fprintln(os.Stderr, "mkmirror: --debs-only needs --node-debs MANIFEST")
			return 2
		}
		if err := runNodeDebs(context.Background(), r.out, arches, o.debs); err != nil {
			fmt.Fprintln(os.Stderr, "mkmirror: node packages:", err)
			return 1
		}
		return 0
	}
	cat, err := components.Load()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkmirror:", err)
		return 1
	}
	only, resolved, jobsList, code := o.plan(cat, r, arches)
	if jobsList == nil && code != 0 {
		return code
	}
	gv, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkmirror: go env GOVERSION:", err, "(fix: put the Go toolchain on PATH)")
		return 1
	}
	r.goVersion = strings.TrimSpace(string(gv))
	r.goLine = goDirective(r.goVersion)

	fmt.Fprintf(os.Stderr, "mkmirror: mirror %s, cache %s, arch %s, %d jobs (-j %d), %s\n", r.out, r.cache, strings.Join(arches, ","), len(jobsList), *o.jobs, r.goVersion)
	ctx := context.Background()
	start := time.Now()
	results := r.buildAll(ctx, jobsList, *o.jobs, *o.verifyOnly)
	if !r.assembleAndVerify(ctx, o, start, results, resolved, only) {
		return 1
	}
	if *o.verifyOnly {
		return 0
	}
	return r.finish(ctx, o, cat, arches)
}

// opts are mkmirror's flags.
type opts struct {
	out, cache, archFlag, cfgPath, onlyFlag, vmImage *string
	jobs                                             *int
	runcFallback, busybox, verifyOnly                *bool
	debs                                             *debsFlags
}

// parseArgs parses the command line; nil and the exit code when it is bad.
func parseArgs(args []string) (*opts, int) {
	fs := flag.NewFlagSet("mkmirror", flag.ContinueOnError)
	o := &opts{
		out:          fs.String("out", "", "mirror directory (default $XDG_CACHE_HOME/khw/mirror)"),
		cache:        fs.String("cache", "", "build cache directory (default $XDG_CACHE_HOME/khw)"),
		archFlag:     fs.String("arch", "", "comma-separated architectures: amd64, arm64 (default amd64 for CI speed, or the cluster.yaml arch with --config)"),
		cfgPath:      fs.String("config", "", "cluster.yaml whose versions to mirror (default: config.Default's versions)"),
		onlyFlag:     fs.String("only", "", "comma-separated catalog components to build (default all)"),
		jobs:         fs.Int("j", 2, "components built at the same time (each go build also uses every core)"),
		runcFallback: fs.Bool("runc-fallback", true, "when runc cannot be built, put Debian's runc package into the mirror instead (loudly)"),
		busybox:      fs.Bool("busybox", true, "add Debian's busybox-static (sh, nslookup, wget, nc) to the agnhost image"),
		verifyOnly:   fs.Bool("verify-only", false, "build nothing; only verify an existing mirror"),
	}
	o.vmImage = vmImageFlag(fs)
	o.debs = addDebsFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "mkmirror: unexpected arguments %q (all options are flags)\n", fs.Args())
		return nil, 2
	}
	if *o.jobs < 1 {
		fmt.Fprintf(os.Stderr, "mkmirror: -j %d: want at least 1\n", *o.jobs)
		return nil, 2
	}
	return o, 0
}

// setup makes the run: its cache and mirror directories, the cluster whose
// versions it mirrors, the architectures. nil and the exit code on error.
func (o *opts) setup() (*run, []string, int) {
	r := &run{runcFallback: *o.runcFallback, busybox: *o.busybox}
	var err error
	if r.cache = *o.cache; r.cache == "" {
		if r.cache, err = cacheRoot(); err != nil {
			fmt.Fprintln(os.Stderr, "mkmirror:", err)
			return nil, nil, 2
		}
	}
	if r.out = *o.out; r.out == "" {
		r.out = filepath.Join(r.cache, "mirror")
	}
	if r.out, err = filepath.Abs(r.out); err != nil {
		fmt.Fprintln(os.Stderr, "mkmirror:", err)
		return nil, nil, 2
	}
	if *o.cfgPath != "" {
		c, warns, err := config.Load(*o.cfgPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mkmirror:", err)
			return nil, nil, 2
		}
		for _, w := range warns {
			fmt.Fprintf(os.Stderr, "mkmirror: %s: warning: %v\n", *o.cfgPath, w)
		}
		r.cluster = c
	} else {
		r.cluster = config.Default(config.DefaultName, config.ArchAMD64, config.ProviderNspawn)
	}
	arches := splitList(*o.archFlag)
	if len(arches) == 0 {
		if *o.cfgPath != "" {
			arches = []string{r.cluster.Arch}
		} else {
			arches = []string{config.ArchAMD64}
		}
	}
	return r, arches, 0
}

// plan resolves the catalog for each arch and makes one job per component
// (those of --only), in jobOrder. A nil job list with a non-zero code is an
// error already printed.
func (o *opts) plan(cat *components.Catalog, r *run, arches []string) (only map[string]bool, resolved map[string][]components.Resolved, jobsList []job, code int) {
	known := map[string]bool{}
	for _, c := range cat.Components {
		known[c.Name] = true
	}
	only = map[string]bool{}
	for _, o := range splitList(*o.onlyFlag) {
		if !known[o] {
			fmt.Fprintf(os.Stderr, "mkmirror: --only %s: not a catalog component (have: %s)\n", o, strings.Join(sortedKeys(known), ", "))
			return nil, nil, nil, 2
		}
		only[o] = true
	}
	resolved = map[string][]components.Resolved{}
	jobsList = []job{}
	for _, arch := range arches {
		rs, err := cat.Resolve(r.cluster, arch)
		if err != nil {
			fmt.Fprintf(os.Stderr, "mkmirror: --arch %s: %v\n", arch, err)
			return nil, nil, nil, 2
		}
		resolved[arch] = rs
		byComp := map[string]*job{}
		for _, a := range rs {
			if len(only) > 0 && !only[a.Component] {
				continue
			}
			j := byComp[a.Component]
			if j == nil {
				j = &job{Component: a.Component, Version: a.Version, Arch: arch}
				byComp[a.Component] = j
			}
			j.Arts = append(j.Arts, a)
		}
		for _, c := range orderComponents(byComp) {
			jobsList = append(jobsList, *byComp[c])
		}
	}
	return only, resolved, jobsList, 0
}

// result is one job's outcome.
type result struct {
	j    job
	b    *built
	err  error
	took time.Duration
}

// buildAll runs the jobs, n at a time, each with its log (none with
// verifyOnly).
func (r *run) buildAll(ctx context.Context, jobsList []job, n int, verifyOnly bool) []result {
	results := make([]result, len(jobsList))
	for i, j := range jobsList {
		results[i].j = j
	}
	if verifyOnly {
		return results
	}
	g := new(errgroup.Group)
	g.SetLimit(n)
	for i, j := range jobsList {
		g.Go(func() error {
			t0 := time.Now()
			lg, err := newJobLog(r.cache, j.String())
			if err != nil {
				results[i] = result{j: j, err: err}
				return nil
			}
			defer lg.close()
			lg.printf("start")
			b, err := r.buildJob(ctx, j, lg)
			results[i] = result{j: j, b: b, err: err, took: time.Since(t0)}
			if err != nil {
				lg.printf("FAILED after %s: %v", time.Since(t0).Round(time.Second), err)
			} else {
				lg.printf("done in %s", time.Since(t0).Round(100*time.Millisecond))
			}
			return nil
		})
	}
	g.Wait()
	return results
}

// assembleAndVerify puts the built products into the mirror, verifies it
// against the catalog, runs the version commands and prints the times,
// versions, notes and problems; false when a build failed or a problem
// was found.
func (r *run) assembleAndVerify(ctx context.Context, o *opts, start time.Time, results []result, resolved map[string][]components.Resolved, only map[string]bool) bool {
	buildTime := time.Since(start)
	failed := 0
	var products []product
	var checks []binCheck
	var notes []string
	for _, res := range results {
		if res.err != nil {
			failed++
			continue
		}
		if res.b != nil {
			products = append(products, res.b.Products...)
			checks = append(checks, res.b.Checks...)
			for _, n := range res.b.Notes {
				notes = append(notes, res.j.String()+": "+n)
			}
		}
	}
	t0 := time.Now()
	if err := assemble(r.out, products); err != nil {
		fmt.Fprintln(os.Stderr, "mkmirror: assembling the mirror:", err)
		failed++
	}
	assembleTime := time.Since(t0)

	t0 = time.Now()
	problems, vnotes, checked := verifyMirror(r.out, resolved, only)
	notes = append(notes, vnotes...)
	type vline struct{ name, arch, line string }
	var versions []vline
	notRun := 0
	for _, c := range checks {
		line, ran, err := runCheck(ctx, c)
		if err != nil {
			problems = append(problems, err.Error())
		}
		if !ran {
			notRun++
		}
		versions = append(versions, vline{c.Name, c.Arch, line})
	}
	if notRun > 0 {
		notes = append(notes, fmt.Sprintf("%d version command(s) not run: cross-built binaries need qemu user-mode emulation (apt-get install qemu-user)", notRun))
	}
	verifyTime := time.Since(t0)

	fmt.Printf("\n== mkmirror: per-component wall time (%s) ==\n", r.goVersion)
	for _, res := range results {
		status := "ok"
		if res.err != nil {
			status = "FAILED: " + res.err.Error()
		}
		if *o.verifyOnly {
			status = "skipped (--verify-only)"
		}
		fmt.Printf("  %-40s %8.1fs  %s\n", res.j.String(), res.took.Seconds(), status)
	}
	fmt.Printf("  %-40s %8.1fs\n  %-40s %8.1fs\n  %-40s %8.1fs\n", "builds (wall, -j "+fmt.Sprint(*o.jobs)+")", buildTime.Seconds(),
		"mirror assembly + checksum files", assembleTime.Seconds(), "verification + version commands", verifyTime.Seconds())
	fmt.Printf("  %-40s %8.1fs\n", "TOTAL", time.Since(start).Seconds())

	if len(versions) > 0 {
		fmt.Printf("\n== version commands ==\n")
		for _, v := range versions {
			fmt.Printf("  %-26s %-6s %s\n", v.name, v.arch, v.line)
		}
	}
	if len(notes) > 0 {
		fmt.Printf("\n== notes ==\n")
		for _, n := range notes {
			fmt.Printf("  - %s\n", n)
		}
	}
	fmt.Printf("\n== verification: %d catalog artifacts checked in %s ==\n", checked, r.out)
	for _, p := range problems {
		fmt.Printf("  PROBLEM: %s\n", p)
	}
	if failed > 0 || len(problems) > 0 {
		fmt.Printf("mkmirror: %d build(s) failed, %d verification problem(s); logs in %s\n", failed, len(problems), filepath.Join(r.cache, "logs"))
		return false
	}
	fmt.Printf("  all verified\n")
	return true
}

// finish places the VM image (--vm-image), writes the manifest khw trusts
// the mirror through and adds the node packages (--node-debs); the exit
// code.
func (r *run) finish(ctx context.Context, o *opts, cat *components.Catalog, arches []string) int {
	if *o.vmImage != "" {
		arch, err := vmImageArch(*o.vmImage, arches)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mkmirror:", err)
			return 2
		}
		p, err := placeVMImage(r.out, *o.vmImage, arch, r.cluster)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mkmirror:", err)
			return 1
		}
		fmt.Printf("\n== VM image ==\n  %s (%s, from %s)\n", p, arch, *o.vmImage)
	}
	// The manifest khw trusts the mirror through: every catalog artifact of
	// either arch present in the mirror, hashed now. Its digest is the pin a
	// user passes to khw (--mirror-digest, KHW_MIRROR_DIGEST).
	var all []components.Resolved
	for _, arch := range []string{config.ArchAMD64, config.ArchARM64} {
		rs, err := cat.Resolve(r.cluster, arch)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mkmirror:", err)
			return 1
		}
		all = append(all, rs...)
	}
	fresh := map[string]bool{}
	for _, e := range all {
		for _, r := range []*components.Resolved{&e, e.Fallback} {
			if r == nil {
				continue
			}
			if rel, err := r.MirrorPath(); err == nil {
				fresh[rel] = true
			}
		}
	}
	kept := keptEntries(r.out, fresh)
	pin, err := components.ManifestFromDir(r.out, all)
	if err == nil && len(kept) > 0 {
		pin, err = components.MergeMirrorManifest(r.out, kept)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkmirror: writing the manifest:", err)
		return 1
	}
	fmt.Printf("\n== manifest ==\n  %s\n  mirror pin: %s\n  use: KHW_MIRROR=%s KHW_MIRROR_DIGEST=%s\n", filepath.Join(r.out, components.MirrorManifestFile), pin, r.out, pin)
	if *o.debs.manifest != "" {
		if err := runNodeDebs(ctx, r.out, arches, o.debs); err != nil {
			fmt.Fprintln(os.Stderr, "mkmirror: node packages:", err)
			return 1
		}
	}
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// orderComponents sorts job keys by jobOrder (unknown names last, by name).
func orderComponents(m map[string]*job) []string {
	rank := map[string]int{}
	for i, c := range jobOrder {
		rank[c] = i
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		ra, oka := rank[keys[a]]
		rb, okb := rank[keys[b]]
		switch {
		case oka && okb:
			return ra < rb
		case oka != okb:
			return oka
		}
		return keys[a] < keys[b]
	})
	return keys
}

// goDirective turns "go1.26.8" into the go.mod directive "1.26.0" for build
// modules (the language version only; `go mod tidy` raises it when a
// dependency needs more).
func goDirective(goVersion string) string {
	v := strings.TrimPrefix(goVersion, "go")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	minor := parts[1]
	if i := strings.IndexAny(minor, "-+ rc"); i > 0 {
		minor = minor[:i]
	}
	return parts[0] + "." + minor + ".0"
}
