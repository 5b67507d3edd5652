package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/jumpbox"
)

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
			s, _, err := jumpbox.Enter(cmd.Context(), c, d, jumpbox.WithSelf(os.Getenv("PATH")), a.errOut, true)
			if err != nil {
				return err
			}
			argv := args
			if len(argv) == 0 {
				argv = []string{s.LoginShell()}
				fmt.Fprintln(a.errOut, s.Banner(c))
			}
			return s.Exec(argv)
		},
	}
	cmd.Flags().SetInterspersed(false) // khw shell ls -la: -la is ls's
	return cmd
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
			s, k, err := jumpbox.Enter(cmd.Context(), c, d, os.Getenv("PATH"), a.errOut, false)
			if err != nil {
				return err
			}
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
			return powerNodes(cmd.Context(), a, args, "off", cluster.PowerOff(force, timeout))
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
			return powerNodes(cmd.Context(), a, args, "on", cluster.PowerOn)
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
