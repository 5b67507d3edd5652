package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
)

func newMirrorCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mirror",
		Short: "Make and serve a mirror of every artifact (offline, classroom)",
		Long:  help("mirror"),
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(newMirrorExportCmd(a), newMirrorServeCmd(a))
	return cmd
}

func newMirrorExportCmd(a *app) *cobra.Command {
	var fl artifactFlags
	var arches []string
	var nodeDebs, distro, debsKeyring, keep string
	cmd := &cobra.Command{
		Use:   "export DIR",
		Short: "Write everything the cluster needs into DIR, mirror layout",
		Long:  help("mirror-export"),
		Example: `  khw mirror export /media/usb/khw-mirror
  khw mirror export ./mirror --arch amd64,arm64   # a classroom with both kinds of laptop
  khw mirror export ./mirror --node-debs ubuntu-24.04-server-cloudimg-amd64.manifest`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, c, err := a.load()
			if err != nil {
				return err
			}
			if len(arches) == 0 {
				arches = []string{c.Arch}
			}
			var rs []components.Resolved
			for _, arch := range arches {
				sel, err := components.Select(c, strings.TrimSpace(arch), fl.only)
				if err != nil {
					return err
				}
				rs = append(rs, sel...)
			}
			f, err := fl.fetcher(a)
			if err != nil {
				return err
			}
			dir, err := filepath.Abs(args[0])
			if err != nil {
				return usagef("mirror directory %q: %v", args[0], err)
			}
			if f.Mirror != "" && filepath.Clean(f.Mirror) == dir {
				return usagef("--mirror and DIR are both %s: export into another directory", dir)
			}
			if err := state.CheckNotSystemDir("mirror directory", dir, "an export writes into it and `khw mirror serve` publishes what it holds",
				"export into a directory of its own, e.g. /srv/khw-mirror"); err != nil {
				return usageError{err}
			}
			var plans []components.NodeDebsPlan
			if nodeDebs == "" && (cmd.Flags().Changed("distro") || cmd.Flags().Changed("debs-keyring")) {
				return usagef("--distro and --debs-keyring say which node packages to export: give --node-debs MANIFEST too")
			}
			if nodeDebs != "" {
				if plans, err = components.PlanNodeDebs(arches, nodeDebs, distro, debsKeyring); err != nil {
					return err
				}
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			o := components.MirrorExportOptions{Dir: dir, Keep: keep, Arches: arches, NodeDebs: plans, Out: a.out, ErrOut: a.errOut}
			if a.verbosity >= 2 {
				o.Written = a.errOut
			}
			return f.ExportMirror(ctx, rs, o)
		},
	}
	fl.register(cmd, "")
	cmd.Flags().StringSliceVar(&arches, "arch", nil, "CPU architectures to export, comma-separated: amd64, arm64 (default: the cluster's arch)")
	cmd.RegisterFlagCompletionFunc("arch", fixedCompletions(config.ArchARM64, config.ArchAMD64))
	cmd.Flags().StringVar(&keep, "keep", "", "the pin (sha256:<hex>) an earlier export into DIR printed: the entries of DIR's manifest that this export does not replace are kept only when it is that one (e.g. a second --arch exported into the same directory); without it they are left out and listed")
	cmd.Flags().StringVar(&nodeDebs, "node-debs", "", "package manifest of the node image (name<TAB>version lines): also export the distribution packages its nodes need offline")
	cmd.Flags().StringVar(&distro, "distro", "ubuntu/noble", "the node image's os-release ID/VERSION_CODENAME, for --node-debs")
	cmd.Flags().StringVar(&debsKeyring, "debs-keyring", "", "OpenPGP keyring with the archive's signing key (default: the distribution's, e.g. /usr/share/keyrings/ubuntu-archive-keyring.gpg from ubuntu-keyring)")
	return cmd
}

func newMirrorServeCmd(a *app) *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "serve DIR",
		Short: "Serve a mirror directory over HTTP (read-only)",
		Long:  help("mirror-serve"),
		Example: `  khw mirror serve ./mirror                          # http://127.0.0.1:8080/
  khw mirror serve ./mirror --listen 0.0.0.0:8080    # for the classroom
  khw fetch --mirror http://<this host>:8080 --mirror-digest sha256:<pin it prints>   # on each laptop`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := filepath.Abs(args[0])
			if err != nil {
				return usagef("mirror directory %q: %v", args[0], err)
			}
			if err := state.CheckNotSystemDir("mirror directory", dir, "khw mirror serve would publish what it holds",
				"serve the directory `khw mirror export` wrote, e.g. /srv/khw-mirror"); err != nil {
				return usageError{err}
			}
			srv, err := components.MirrorServer(dir, a.errOut)
			if err != nil {
				return invalidInputError{err}
			}
			digest, err := components.ManifestDigest(dir)
			if err != nil {
				return invalidInputError{fmt.Errorf("%w (fix: a mirror made by `khw mirror export` has one; export into %s again)", err, dir)}
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			return components.ServeMirror(ctx, srv, dir, digest, listen, a.out, a.errOut)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "address:port to listen on")
	return cmd
}
