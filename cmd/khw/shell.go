package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/jumpbox"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/vm"
)

// withSelf is path with the directory of this khw in front, so that khw
// shell can run khw itself (a lab's by-hand commands use khw etcd restore
// --dry-run); path unchanged when it is empty (jumpbox.Prepare then uses
// the login PATH) or the executable cannot be found.
func withSelf(path string) string {
	self, err := os.Executable()
	if err != nil || path == "" {
		return path
	}
	return filepath.Dir(self) + string(os.PathListSeparator) + path
}

func newShellCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "shell [-- CMD ARGS...]",
		Short:   "A shell (or CMD) in the cluster's network, kubectl and ssh ready",
		Long:    help("shell"),
		Example: help("shell.example"),
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, c, err := a.load()
			if err != nil {
				return err
			}
			s, err := jumpbox.Prepare(c, d, withSelf(os.Getenv("PATH")))
			if err != nil {
				return err
			}
			// kubectl is a convenience here: the shell starts without it,
			// and without waiting for download retries.
			if k, err := ensureKubectl(cmd.Context(), c, d, nil, -1); err != nil {
				fmt.Fprintf(a.errOut, "khw: warning: no kubectl in %s: %v\n", jumpbox.BinDir(d), err)
			} else if k.Written {
				fmt.Fprintf(a.errOut, "khw: installed kubectl %s (%s) at %s\n", k.Version, k.Arch, k.Path)
			}
			warnNoKubeconfig(a, s)
			argv := args
			if len(argv) == 0 {
				argv = []string{s.LoginShell()}
				fmt.Fprintln(a.errOut, shellBanner(c, s))
			}
			return s.Exec(argv)
		},
	}
	cmd.Flags().SetInterspersed(false) // khw shell ls -la: -la is ls's
	return cmd
}

// shellBanner is the one line khw shell prints before the interactive shell.
func shellBanner(c *config.Cluster, s *jumpbox.Session) string {
	where := "network namespace " + vm.NetnsName(c.Name)
	if s.Netns == "" {
		where = "the host's network (provider " + c.Provider + ")"
	}
	return fmt.Sprintf("khw shell: cluster %s, in %s; kubectl is admin, ssh -F \"$%s\" cp1 reaches a node; exit or Ctrl-D leaves",
		c.Name, where, jumpbox.EnvSSHConfig)
}

func warnNoKubeconfig(a *app, s *jumpbox.Session) {
	// khw lab runs its observe commands through khw shell with
	// KHW_LAB_OBSERVE=1: before lab 03 there is no kubeconfig, as expected.
	if !fsutil.Exists(s.Kubeconfig) && os.Getenv("KHW_LAB_OBSERVE") == "" {
		fmt.Fprintf(a.errOut, "khw: warning: no admin kubeconfig at %s yet (fix: khw pki && khw kubeconfig); kubectl will not reach the cluster\n", s.Kubeconfig)
	}
}

// ensureKubectl installs <state>/bin/kubectl for the host's architecture
// from the artifact cache, $KHW_MIRROR or the official URL. progress gets
// the fetch's progress lines (nil: none); retries is Fetcher.Retries (0:
// the default, -1: none).
func ensureKubectl(ctx context.Context, c *config.Cluster, d state.Dir, progress io.Writer, retries int) (jumpbox.Kubectl, error) {
	f := components.EnvFetcher()
	f.Progress, f.Retries = progress, retries
	// runtime.GOARCH, not hostArch(): kubectl must run here, and an
	// architecture without a kubectl build is an error, not arm64.
	return jumpbox.EnsureKubectl(ctx, c, d, runtime.GOARCH, &f)
}

func newKubectlCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:                "kubectl [KUBECTL ARGS...]",
		Short:              "Run kubectl as admin inside the cluster's network",
		Long:               help("kubectl"),
		Example:            help("kubectl.example"),
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			khwFlags, kargs := jumpbox.SplitKubectlArgs(cmd.Name(), args, os.Args[1:], cmd.Root().PersistentFlags())
			fs := pflag.NewFlagSet("khw", pflag.ContinueOnError)
			fs.SetOutput(io.Discard)
			fs.AddFlagSet(cmd.Root().PersistentFlags())
			help := fs.BoolP("help", "h", false, "")
			if err := fs.Parse(khwFlags); err != nil {
				return usagef("%v before `kubectl` (khw's flags there are --state-dir, --cluster/-c, -v; kubectl's go after it; see `khw help kubectl`)", err)
			}
			if *help {
				return cmd.Help()
			}
			if fs.NArg() > 0 {
				return usagef("unexpected %q before `kubectl`", fs.Args())
			}
			d, c, err := a.load()
			if err != nil {
				return err
			}
			s, err := jumpbox.Prepare(c, d, os.Getenv("PATH"))
			if err != nil {
				return err
			}
			k, err := ensureKubectl(cmd.Context(), c, d, a.errOut, 0)
			if err != nil {
				return err
			}
			if k.Written {
				fmt.Fprintf(a.errOut, "khw: installed kubectl %s (%s) at %s\n", k.Version, k.Arch, k.Path)
			}
			warnNoKubeconfig(a, s)
			return s.Exec(append([]string{k.Path}, kargs...))
		},
	}
}

func newPowerCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "power on|off NODE...",
		Short:   "Power nodes off (gracefully or pulling the plug) and on",
		Long:    help("power"),
		Example: help("power.example"),
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("say on or off: khw power off cp2, khw power on cp2 (see `khw power --help`)")
			}
			return usagef("unknown power action %q: use on or off (khw power off cp2)", args[0])
		},
	}
	var force bool
	var timeout time.Duration
	off := &cobra.Command{
		Use:   "off NODE...",
		Short: "Power nodes off: gracefully, or --force (pull the plug)",
		Long:  help("power"),
		Args:  nodeArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return usagef("--timeout %s: use a positive duration such as 2m", timeout)
			}
			how := "graceful"
			if force {
				how = "forced"
			}
			return powerNodes(cmd.Context(), a, args, "off", func(ctx context.Context, p vm.Provider, node string) (string, error) {
				ctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				if err := p.Stop(ctx, node, force); err != nil {
					return "", err
				}
				return "powered off (" + how + ")", nil
			})
		},
	}
	off.Flags().BoolVar(&force, "force", false, "pull the plug: kill the node at once instead of shutting it down")
	off.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long a graceful power-off may take before it is an error (then use --force)")
	on := &cobra.Command{
		Use:   "on NODE...",
		Short: "Power nodes on (boot them); khw status shows when they run",
		Long:  help("power"),
		Args:  nodeArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return powerNodes(cmd.Context(), a, args, "on", func(ctx context.Context, p vm.Provider, node string) (string, error) {
				if err := p.Start(ctx, node); err != nil {
					return "", err
				}
				return "started", nil
			})
		},
	}
	cmd.AddCommand(off, on)
	return cmd
}

// nodeArgs requires at least one NODE (usage error, exit 2).
func nodeArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usagef("name at least one node, e.g. `%s cp2` (see `%s --help`)", cmd.CommandPath(), cmd.CommandPath())
	}
	return nil
}

// powerProvider makes the provider khw power works through; tests replace
// it with a fake.
var powerProvider = cluster.NewProvider

// powerNodes validates names against cluster.yaml, takes the cluster lock,
// skips nodes already in the wanted state, runs act on the others in
// parallel and prints one line per node as it finishes.
func powerNodes(ctx context.Context, a *app, names []string, want string,
	act cluster.PowerAct) error {
	d, c, unlock, err := a.loadForWrite()
	if err != nil {
		return err
	}
	defer unlock()
	nodes, err := c.PickNodes(names)
	if err != nil {
		return usageError{err}
	}
	p, err := powerProvider(c, d, "", nil)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	done, err := cluster.Power(ctx, p, nodes, want, act, func(format string, args ...any) {
		fmt.Fprintf(a.out, format+"\n", args...)
	})
	if err != nil {
		return fmt.Errorf("power %s: %w", want, err)
	}
	if want == "on" && done > 0 {
		fmt.Fprintln(a.out, "booting; `khw status` shows when the nodes run, their services take a few seconds more")
	}
	return nil
}
