package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
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

const shellLong = `Open a shell, or run one command, on "the jumpbox": a place where the
cluster's nodes are reachable by name, kubectl talks to the cluster as
admin, and ssh logs in to any node.

The network namespace. With provider nspawn the nodes (lb 192.168.122.10,
cp1 .11 …) sit on a bridge inside the cluster's own network namespace,
khw-<cluster>: a separate copy of the kernel's network stack with its own
interfaces, addresses, routes and firewall, made by khw up. Nothing in the
host's normal (root) namespace routes to them, so ping, ssh or kubectl fail
there. khw shell moves itself into that namespace (setns(2), what
` + "`ip netns exec khw-<cluster>`" + ` does) and then becomes your shell, so
everything you start from it sees the bridge khw0, the nodes and the
jumpbox's own address on that network (network.gateway, 192.168.122.1).

The hosts file. admin.kubeconfig names its server https://lb:6443 and you
want to type ssh cp1, so the node names must resolve. khw writes
<state>/hosts (every node as NAME and NAME.<network.domain>, the same lines
the nodes have in their /etc/hosts) and bind-mounts it over /etc/hosts in a
private mount namespace that only this shell and its children see: the
trick ip netns exec plays with /etc/netns/<ns>/hosts. The host's /etc/hosts
is not changed and other programs see no difference.

Inside the shell:
  KUBECONFIG      <state>/kubeconfigs/admin.kubeconfig (user admin, group
                  system:masters), so plain kubectl works
  PATH            <state>/bin first: kubectl of the cluster's Kubernetes
                  version for this host (installed as by khw kubectl)
  KHW_CLUSTER, KHW_STATE_DIR
                  so khw commands run in the shell pick this cluster
  KHW_SSH_CONFIG  <state>/ssh/config: ssh -F "$KHW_SSH_CONFIG" cp1 logs in
                  as ubuntu (sudo without password) with khw's key, and
                  refuses a node whose host key is not the one khw pinned
                  (add alias ssh='ssh -F "$KHW_SSH_CONFIG"' for short)
  KHW_NETNS       khw-<cluster>, e.g. for your prompt

How to leave: exit (or Ctrl-D). Nothing needs undoing: khw shell replaced
itself with the shell, the private mount namespace (and its /etc/hosts)
ends with the shell's last process, and the network namespace belongs to
the cluster: it stays until khw down.

With -- CMD ARGS… the command runs instead of a shell (looked up in the
PATH above) and its exit code becomes khw's. The shell is $SHELL, else bash,
else /bin/sh.

Provider libvirt: the VMs are on a bridge of the host itself, so there is no
namespace to enter; the shell gets the same variables and hosts file.
Needs root (entering namespaces and mounting are privileged).`

const shellExample = `  khw shell
  khw shell -- kubectl get nodes -o wide
  khw shell -- sh -c 'ssh -F "$KHW_SSH_CONFIG" cp1 sudo systemctl is-active etcd'
  khw shell -- getent hosts lb
  sudo -E khw shell   # keep KHW_* and KHW_MIRROR when not already root`

func newShellCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "shell [-- CMD ARGS...]",
		Short:   "A shell (or CMD) in the cluster's network, kubectl and ssh ready",
		Long:    shellLong,
		Example: shellExample,
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, c, err := a.load()
			if err != nil {
				return err
			}
			s, err := jumpbox.Prepare(c, d, os.Getenv("PATH"))
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
				argv = []string{loginShell(s)}
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

// loginShell picks $SHELL, else bash, else /bin/sh.
func loginShell(s *jumpbox.Session) string {
	if sh := os.Getenv("SHELL"); sh != "" {
		if _, err := jumpbox.LookPath(sh, s.Getenv("PATH")); err == nil {
			return sh
		}
	}
	if p, err := jumpbox.LookPath("bash", s.Getenv("PATH")); err == nil {
		return p
	}
	return "/bin/sh"
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

const kubectlLong = `Run kubectl against the cluster as admin, from where the cluster is
reachable: exactly ` + "`khw shell -- kubectl ARGS...`" + ` (see khw help shell:
inside the cluster's network namespace, node names resolving through
<state>/hosts, KUBECONFIG=<state>/kubeconfigs/admin.kubeconfig).

kubectl itself is <state>/bin/kubectl, of the cluster's Kubernetes version
(cluster.yaml versions.kubernetes) for this host's architecture, taken from
khw's component catalog like every other binary: from the artifact cache
($KHW_CACHE_DIR), the mirror in $KHW_MIRROR (pinned by $KHW_MIRROR_DIGEST),
or dl.k8s.io, verified as khw fetch verifies (khw help fetch). It is rewritten only when it differs; remove it to
get a fresh copy.

Everything after the word kubectl belongs to kubectl, flags included
(khw kubectl -n kube-system get pods). khw's own flags (--state-dir,
--cluster/-c, -v) go before it: khw -c lab kubectl get nodes. So
khw kubectl --help is kubectl's help; this text is khw help kubectl.
The exit code is kubectl's. Needs root, like khw shell.`

const kubectlExample = `  khw kubectl get nodes -o wide
  khw kubectl -n kube-system get leases
  khw -c lab kubectl get --raw '/readyz?verbose'
  khw kubectl version`

func newKubectlCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:                "kubectl [KUBECTL ARGS...]",
		Short:              "Run kubectl as admin inside the cluster's network",
		Long:               kubectlLong,
		Example:            kubectlExample,
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			khwFlags, kargs := splitKubectlArgs(cmd.Name(), args, os.Args[1:], cmd.Root().PersistentFlags())
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

// splitKubectlArgs separates khw's flags from kubectl's. With
// DisableFlagParsing cobra hands the command every argument except its own
// name, so `khw --cluster a kubectl get` and `khw kubectl --cluster a get`
// (kubectl's --cluster) both arrive as [--cluster a get]. raw is the
// command line cobra parsed (os.Args[1:] when main runs it): the first
// occurrence of name whose removal gives args marks the split, as cobra
// removes the first non-flag name. When raw is not that command line
// (arguments set with SetArgs, as the tests do), the leading arguments that
// are khw persistent flags (with their values) are khw's.
func splitKubectlArgs(name string, args, raw []string, khwFlags *pflag.FlagSet) (khw, kubectl []string) {
	if len(raw) == len(args)+1 {
		for i, tok := range raw {
			if tok == name && slices.Equal(raw[:i], args[:i]) && slices.Equal(raw[i+1:], args[i:]) {
				return args[:i], args[i:]
			}
		}
	}
	i := 0
	for i < len(args) {
		tok := args[i]
		if tok == "--" || tok == "-" || !strings.HasPrefix(tok, "-") {
			break
		}
		var f *pflag.Flag
		takesNext := false
		if strings.HasPrefix(tok, "--") {
			fname, _, hasValue := strings.Cut(tok[2:], "=")
			if fname == "help" {
				i++
				continue
			}
			if f = khwFlags.Lookup(fname); f == nil {
				break
			}
			takesNext = !hasValue && f.NoOptDefVal == ""
		} else {
			if tok[1:2] == "h" && len(tok) == 2 {
				i++
				continue
			}
			if f = khwFlags.ShorthandLookup(tok[1:2]); f == nil {
				break
			}
			takesNext = len(tok) == 2 && f.NoOptDefVal == ""
		}
		i++
		if takesNext {
			i++
		}
	}
	i = min(i, len(args))
	return args[:i], args[i:]
}

const powerLong = `Power nodes off and on, as you would pull a machine's plug or press its
power button: the tool of the failover labs (power off cp2 and watch the API
stay up through the load balancer, the leases move and etcd elect a new
leader).

  khw power off NODE...          graceful: the node's systemd stops every
                                 unit (kubelet, etcd, the apiserver…) and
                                 shuts down, bounded by --timeout
  khw power off --force NODE...  at once, like pulling the plug: every
                                 process of the node is killed, nothing is
                                 flushed or deregistered; what a crash
                                 looks like to the rest of the cluster
  khw power on NODE...           boot the node again; its units start as
                                 on any boot

It acts through the cluster's provider (nspawn: the systemd-nspawn process
of the node; libvirt: the VM) and prints each node's result and how long it
took. NODE is a name from cluster.yaml (lb, cp1 …); several nodes are
handled at the same time. power on does not wait for the node: khw status
shows when it is running again, and the services take a few seconds more.`

const powerExample = `  khw power off cp2              # a control plane goes away cleanly
  khw power off --force cp2 cp3  # two of three etcd members crash: quorum lost
  khw power on cp2 cp3
  khw status`

func newPowerCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "power on|off NODE...",
		Short:   "Power nodes off (gracefully or pulling the plug) and on",
		Long:    powerLong,
		Example: powerExample,
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
		Long:  powerLong,
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
		Long:  powerLong,
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

// checkNodes returns names without duplicates, in the order given, or a
// usage error naming the unknown ones and listing the nodes of cluster.yaml.
func checkNodes(c *config.Cluster, names []string) ([]string, error) {
	var out, unknown []string
	for _, n := range names {
		if _, ok := c.Node(n); !ok {
			unknown = append(unknown, fmt.Sprintf("%q", n))
			continue
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(unknown) > 0 {
		valid := make([]string, 0, len(c.Nodes))
		for _, n := range c.Nodes {
			valid = append(valid, n.Name)
		}
		noun := "node"
		if len(unknown) > 1 {
			noun = "nodes"
		}
		return nil, usagef("cluster %s has no %s %s; its nodes are: %s", c.Name, noun, strings.Join(unknown, ", "), strings.Join(valid, ", "))
	}
	return out, nil
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
	nodes, err := checkNodes(c, names)
	if err != nil {
		return err
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
