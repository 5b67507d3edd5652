package components

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/khw-dev/khw/internal/config"
)

// ArgError is a mistake in what the user asked for (a flag's value): the
// message names the flag and the fix. khw exits 2 on it.
type ArgError struct{ Msg string }

func (e *ArgError) Error() string { return e.Msg }

func argErrorf(format string, args ...any) error { return &ArgError{Msg: fmt.Sprintf(format, args...)} }

// ResolveError is a catalog that cannot be resolved for cluster.yaml (a
// version the catalog does not know): the input file is wrong, khw exits 3.
type ResolveError struct{ Err error }

func (e *ResolveError) Error() string { return e.Err.Error() }
func (e *ResolveError) Unwrap() error { return e.Err }

// Select resolves the catalog for cluster c and CPU architecture arch
// (amd64 or arm64) and keeps what the cluster needs: everything but the VM
// image, which only the libvirt provider boots; or, when only is not
// empty, exactly the artifacts and components it names (the VM image too,
// on any provider). Errors: *ArgError for an unknown arch or name in only
// (listing the known names), *ResolveError when the catalog does not
// resolve for c.
func Select(c *config.Cluster, arch string, only []string) ([]Resolved, error) {
	if arch != config.ArchAMD64 && arch != config.ArchARM64 {
		return nil, argErrorf("--arch %q: use amd64 or arm64", arch)
	}
	cat, err := Load()
	if err != nil {
		return nil, err
	}
	all, err := cat.Resolve(c, arch)
	if err != nil {
		return nil, &ResolveError{err}
	}
	if len(only) == 0 {
		var out []Resolved
		for _, r := range all {
			if slices.Contains(r.Artifact.Roles, RoleVMImage) && c.Provider != config.ProviderLibvirt {
				continue
			}
			out = append(out, r)
		}
		return out, nil
	}
	want := map[string]bool{}
	for _, n := range only {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	var out []Resolved
	used := map[string]bool{}
	for _, r := range all {
		if want[r.Artifact.Name] || want[r.Component] {
			out = append(out, r)
			used[r.Artifact.Name], used[r.Component] = true, true
		}
	}
	var unknown []string
	for n := range want {
		if !used[n] {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, argErrorf("--only: unknown artifact %s (known: %s)", strings.Join(unknown, ", "), strings.Join(names(all), ", "))
	}
	return out, nil
}

// names is every artifact and component name of rs, sorted, once each.
func names(rs []Resolved) []string {
	var out []string
	for _, r := range rs {
		for _, n := range []string{r.Artifact.Name, r.Component} {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// FetchOptions are what khw fetch and khw mirror export take from their
// flags to make a Fetcher.
type FetchOptions struct {
	// Mirror is a directory (or file:// URL) or an http(s) base URL; ""
	// for none. MirrorDigest is its pin, required with a mirror.
	Mirror, MirrorDigest string
	CacheDir             string
	// Parallel is how many downloads run at a time (at least 1).
	Parallel int
	// Progress gets the progress lines.
	Progress io.Writer
}

// NewFetcher checks o and returns the Fetcher it describes, with a local
// mirror made absolute. Errors (*ArgError): a mirror that is neither a
// directory nor an http(s) URL, a mirror without a pin or with a
// malformed one, Parallel below 1.
func NewFetcher(o FetchOptions) (*Fetcher, error) {
	mirror := o.Mirror
	if mirror != "" && !strings.HasPrefix(mirror, "http://") && !strings.HasPrefix(mirror, "https://") {
		abs, err := filepath.Abs(strings.TrimPrefix(mirror, "file://"))
		if err != nil {
			return nil, argErrorf("--mirror %q: %v", mirror, err)
		}
		st, err := os.Stat(abs)
		if err != nil || !st.IsDir() {
			return nil, argErrorf("--mirror %q is neither a directory nor an http(s) URL (fix: give the directory `khw mirror export` wrote, or the URL `khw mirror serve` prints)", mirror)
		}
		mirror = abs
	}
	if o.Parallel < 1 {
		return nil, argErrorf("--parallel %d: use 1 or more", o.Parallel)
	}
	if mirror != "" {
		if strings.TrimSpace(o.MirrorDigest) == "" {
			return nil, &ArgError{Msg: NewMirrorPinError(mirror).Error()}
		}
		if _, err := ParseMirrorDigest(o.MirrorDigest); err != nil {
			return nil, &ArgError{Msg: err.Error()}
		}
	}
	return &Fetcher{CacheDir: o.CacheDir, Mirror: mirror, MirrorDigest: o.MirrorDigest, Parallel: o.Parallel, Progress: o.Progress}, nil
}

// WriteFetched prints res as khw fetch's table (name, version, arch, size,
// digest prefix, fetched/cached/FAILED, source) and a total line.
func WriteFetched(w io.Writer, res []Fetched) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tARCH\tSIZE\tSHA256\tSTATUS\tSOURCE")
	var fetched, cached, failed int
	var total int64
	var notes []string
	for _, r := range res {
		status, size, digest, source := "fetched", HumanBytes(r.Size), r.SHA256, r.Source
		version := r.Resolved.Version
		switch {
		case r.Err != nil:
		case r.Fallback && r.Resolved.Fallback != nil:
			version = "current (fallback)"
			notes = append(notes, fmt.Sprintf("%s %s: not the pinned %s but its fallback %s, verified by %s", r.Resolved.Artifact.Name, r.Resolved.Arch, r.Resolved.Version, r.Resolved.Fallback.URL, r.VerifiedBy))
		case r.Archive:
			notes = append(notes, fmt.Sprintf("%s %s: the pinned %s from the archive (%s): %s", r.Resolved.Artifact.Name, r.Resolved.Arch, r.Resolved.Version, source, r.ArchiveReason))
		}
		if len(digest) > 12 {
			digest = digest[:12]
		}
		switch {
		case r.Err != nil:
			status, size, digest, source = "FAILED", "-", "-", "-"
			failed++
		case r.Cached:
			status = "cached"
			cached++
		default:
			fetched++
		}
		total += r.Size
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Resolved.Artifact.Name, version, r.Resolved.Arch, size, digest, status, source)
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintf(w, "%d artifacts, %s: %d fetched, %d cached", len(res), HumanBytes(total), fetched, cached)
	if failed > 0 {
		fmt.Fprintf(w, ", %d FAILED", failed)
	}
	fmt.Fprintln(w)
}

// NodeDebsPlan is what khw mirror export --node-debs exports for one
// architecture: the archive, the image's package manifest and the pinned
// keyring, all read and checked before anything is downloaded.
type NodeDebsPlan struct {
	Archive  DebArchive
	Arch     string
	Manifest []byte
	Keyring  []byte
}

// PlanNodeDebs checks the node image's manifest file, its distribution
// (ID/VERSION_CODENAME, e.g. ubuntu/noble) and the keyring (default: the
// archive's own) for every arch. Errors (*ArgError) name the flag
// (--node-debs, --distro, --debs-keyring) and the fix.
func PlanNodeDebs(arches []string, manifest, distro, keyringPath string) ([]NodeDebsPlan, error) {
	osID, codename, ok := strings.Cut(distro, "/")
	if !ok {
		return nil, argErrorf("--distro %q: want ID/VERSION_CODENAME as in the image's /etc/os-release, e.g. ubuntu/noble", distro)
	}
	man, err := os.ReadFile(manifest)
	if err != nil {
		return nil, argErrorf("--node-debs: %v", err)
	}
	var plans []NodeDebsPlan
	for _, arch := range arches {
		arch = strings.TrimSpace(arch)
		ar, err := FindDebArchive(osID, codename, arch)
		if err != nil {
			return nil, argErrorf("--distro %s: %v", distro, err)
		}
		kp := keyringPath
		if kp == "" {
			kp = ar.Keyring
		}
		kr, err := os.ReadFile(kp)
		if err != nil {
			return nil, argErrorf("--debs-keyring: %v (fix: install the distribution's keyring package, e.g. apt-get install ubuntu-keyring, or pass --debs-keyring FILE)", err)
		}
		plans = append(plans, NodeDebsPlan{Archive: ar, Arch: arch, Manifest: man, Keyring: kr})
	}
	return plans, nil
}

// ExportNodeDebsPlans adds the node packages of each plan to the mirror
// in dir (ExportNodeDebs), prints one line per plan to w, and returns the
// mirror's new pin.
func (f *Fetcher) ExportNodeDebsPlans(ctx context.Context, w io.Writer, dir string, plans []NodeDebsPlan) (string, error) {
	digest := ""
	for _, pl := range plans {
		rep, err := f.ExportNodeDebs(ctx, dir, pl.Archive, pl.Arch, pl.Manifest, pl.Keyring, nil)
		if err != nil {
			return "", fmt.Errorf("mirror export: node packages for %s %s: %w", pl.Archive, pl.Arch, err)
		}
		var size int64
		var names []string
		for _, p := range rep.Debs {
			size += p.Size
			names = append(names, p.Name)
		}
		fmt.Fprintf(w, "Exported %d node package(s) (%s, %s %s: %s) to %s: %d files written, %d unchanged\n",
			len(rep.Debs), HumanBytes(size), pl.Archive, pl.Arch, strings.Join(names, " "), dir, len(rep.Written), len(rep.Unchanged))
		WriteDropped(w, filepath.Join(dir, MirrorManifestFile), rep.Dropped)
		digest = rep.Digest
	}
	return digest, nil
}

// FetchAll is khw fetch: rs fetched and verified into the cache, the
// table of what was fetched (WriteFetched) on out, also when some failed.
// Errors: an interruption (saying that nothing unverified was cached and
// where the partial downloads resume), the fetch's.
func (f *Fetcher) FetchAll(ctx context.Context, rs []Resolved, out io.Writer) error {
	res, err := f.Fetch(ctx, rs)
	if res != nil {
		WriteFetched(out, res)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("fetch interrupted; nothing unverified was cached, and partial downloads in %s resume on the next `khw fetch`: %w",
			filepath.Join(f.CacheDir, "partial"), err)
	}
	if err != nil {
		return fetchError(f.Mirror, res, err)
	}
	return nil
}

// fetchError is FetchAll's error for err, the joined failures of res: one
// failure as it is; several as their count and the first, since the table
// above already lists each. Without a mirror, a host that cannot be reached
// gets the fix for working offline.
func fetchError(mirror string, res []Fetched, err error) error {
	var failed []error
	for _, r := range res {
		if r.Err != nil {
			failed = append(failed, r.Err)
		}
	}
	if len(failed) > 1 {
		err = fmt.Errorf("%d of %d artifacts failed (each is listed above); the first: %w", len(failed), len(res), failed[0])
	}
	if mirror == "" && unreachable(err) {
		return fmt.Errorf("fetch: %w (fix: this machine cannot reach the download site; offline, give khw a mirror and its pin: --mirror and --mirror-digest, or %s and %s; see docs/mirror-and-classroom.md)", err, EnvMirror, EnvMirrorDigest)
	}
	return fmt.Errorf("fetch: %w", err)
}

// unreachable reports whether err is a failure to reach a host at all (no
// DNS answer, a refused or timed-out connection) rather than an answer the
// host gave.
func unreachable(err error) bool {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	return errors.As(err, &dnsErr) || errors.As(err, &opErr)
}
