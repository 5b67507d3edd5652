package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

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
	return components.NewFetcher(components.FetchOptions{Mirror: fl.mirror, MirrorDigest: fl.digest, CacheDir: fl.cacheDir, Parallel: fl.parallel, Progress: a.errOut})
}

// signalContext is cmd's context, cancelled on SIGINT (Ctrl-C) and SIGTERM.
func signalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
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
			rs, err := components.Select(c, arch, fl.only)
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
			return f.FetchAll(ctx, rs, a.out)
		},
	}
	fl.register(cmd, "CPU architecture of the artifacts: amd64 or arm64 (default: the cluster's arch)")
	return cmd
}
