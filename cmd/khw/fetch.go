package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
)

// artifactFlags are the flags fetch and mirror export share.
type artifactFlags struct {
	arch     string
	mirror   string
	digest   string
	only     []string
	cacheDir string
	parallel int
}

// register adds the flags to cmd; --arch only when archHelp is set.
func (fl *artifactFlags) register(cmd *cobra.Command, archHelp string) {
	f := cmd.Flags()
	if archHelp != "" {
		f.StringVar(&fl.arch, "arch", "", archHelp)
		cmd.RegisterFlagCompletionFunc("arch", fixedCompletions(config.ArchARM64, config.ArchAMD64))
	}
	f.StringVar(&fl.mirror, "mirror", components.DefaultMirror(), "read https://HOST/PATH from MIRROR/HOST/PATH: a directory or an http(s) base URL (env "+components.EnvMirror+")")
	f.StringVar(&fl.digest, "mirror-digest", components.DefaultMirrorDigest(), "the mirror's pin, sha256:<hex> of its khw-mirror.json as khw mirror export prints it; required with --mirror (env "+components.EnvMirrorDigest+")")
	f.StringSliceVar(&fl.only, "only", nil, "fetch only these artifacts or components (comma-separated, e.g. kubectl,etcd); also selects the VM image on any provider")
	f.StringVar(&fl.cacheDir, "cache-dir", components.DefaultCacheDir(), "artifact cache directory (env "+components.EnvCacheDir+")")
	f.IntVar(&fl.parallel, "parallel", components.DefaultParallel, "downloads at a time")
}

// fetcher builds the Fetcher the flags describe; progress goes to stderr.
func (fl *artifactFlags) fetcher(a *app) (*components.Fetcher, error) {
	mirror := fl.mirror
	if mirror != "" && !strings.HasPrefix(mirror, "http://") && !strings.HasPrefix(mirror, "https://") {
		abs, err := filepath.Abs(strings.TrimPrefix(mirror, "file://"))
		if err != nil {
			return nil, usagef("--mirror %q: %v", mirror, err)
		}
		st, err := os.Stat(abs)
		if err != nil || !st.IsDir() {
			return nil, usagef("--mirror %q is neither a directory nor an http(s) URL (fix: give the directory `khw mirror export` wrote, or the URL `khw mirror serve` prints)", mirror)
		}
		mirror = abs
	}
	if fl.parallel < 1 {
		return nil, usagef("--parallel %d: use 1 or more", fl.parallel)
	}
	if mirror != "" {
		if strings.TrimSpace(fl.digest) == "" {
			return nil, usageError{components.NewMirrorPinError(mirror)}
		}
		if _, err := components.ParseMirrorDigest(fl.digest); err != nil {
			return nil, usageError{err}
		}
	}
	return &components.Fetcher{CacheDir: fl.cacheDir, Mirror: mirror, MirrorDigest: fl.digest, Parallel: fl.parallel, Progress: a.errOut}, nil
}

// selectArtifacts resolves the catalog for c and arch and keeps what the
// cluster needs: everything but the VM image (which only the libvirt
// provider boots), or exactly the artifacts/components named by only.
func selectArtifacts(c *config.Cluster, arch string, only []string) ([]components.Resolved, error) {
	if arch != config.ArchAMD64 && arch != config.ArchARM64 {
		return nil, usagef("--arch %q: use amd64 or arm64", arch)
	}
	cat, err := components.Load()
	if err != nil {
		return nil, err
	}
	all, err := cat.Resolve(c, arch)
	if err != nil {
		return nil, invalidInputError{err}
	}
	if len(only) > 0 {
		want := map[string]bool{}
		for _, n := range only {
			if n = strings.TrimSpace(n); n != "" {
				want[n] = true
			}
		}
		var out []components.Resolved
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
			return nil, usagef("--only: unknown artifact %s (known: %s)", strings.Join(unknown, ", "), strings.Join(artifactNames(all), ", "))
		}
		return out, nil
	}
	var out []components.Resolved
	for _, r := range all {
		if hasRole(r, components.RoleVMImage) && c.Provider != config.ProviderLibvirt {
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

func hasRole(r components.Resolved, role string) bool {
	for _, ro := range r.Artifact.Roles {
		if ro == role {
			return true
		}
	}
	return false
}

func artifactNames(rs []components.Resolved) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rs {
		for _, n := range []string{r.Artifact.Name, r.Component} {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// signalContext is cmd's context, cancelled on SIGINT (Ctrl-C) and SIGTERM.
func signalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

// printFetched prints the result table: name, version, arch, size, digest
// prefix, cached/fetched, source.
func printFetched(a *app, res []components.Fetched) {
	tw := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tARCH\tSIZE\tSHA256\tSTATUS\tSOURCE")
	var fetched, cached, failed int
	var total int64
	for _, r := range res {
		status, size, digest, source := "fetched", components.HumanBytes(r.Size), short(r.SHA256), r.Source
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Resolved.Artifact.Name, r.Resolved.Version, r.Resolved.Arch, size, digest, status, source)
	}
	tw.Flush()
	fmt.Fprintf(a.out, "%d artifacts, %s: %d fetched, %d cached", len(res), components.HumanBytes(total), fetched, cached)
	if failed > 0 {
		fmt.Fprintf(a.out, ", %d FAILED", failed)
	}
	fmt.Fprintln(a.out)
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

func newFetchCmd(a *app) *cobra.Command {
	var fl artifactFlags
	cmd := &cobra.Command{
		Use:     "fetch",
		Short:   "Download, verify and cache every binary and image needed",
		Long:    help("fetch"),
		Example: help("fetch.example"),
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, c, err := a.load()
			if err != nil {
				return err
			}
			arch := fl.arch
			if arch == "" {
				arch = c.Arch
			}
			rs, err := selectArtifacts(c, arch, fl.only)
			if err != nil {
				return err
			}
			f, err := fl.fetcher(a)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			a.logf(1, "fetching %d artifacts for linux/%s into %s", len(rs), arch, f.CacheDir)
			res, err := f.Fetch(ctx, rs)
			if res != nil {
				printFetched(a, res)
			}
			if errors.Is(err, context.Canceled) {
				return fmt.Errorf("fetch interrupted; nothing unverified was cached, and partial downloads in %s resume on the next `khw fetch`: %w",
					filepath.Join(f.CacheDir, "partial"), err)
			}
			if err != nil {
				return fmt.Errorf("fetch: %w", err)
			}
			return nil
		},
	}
	fl.register(cmd, "CPU architecture of the artifacts: amd64 or arm64 (default: the cluster's arch)")
	return cmd
}
