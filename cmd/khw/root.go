package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/state"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// app carries the global flags and the output streams to every command.
type app struct {
	stateBase string
	cluster   string
	verbosity int
	out       io.Writer
	errOut    io.Writer

	// locks are the cluster locks this process holds (see lock).
	locks state.Locks
}

// logf prints a progress or detail line to stderr when -v is at least level.
func (a *app) logf(level int, format string, args ...any) {
	if a.verbosity >= level {
		fmt.Fprintf(a.errOut, format+"\n", args...)
	}
}

// dir resolves the cluster state directory from --state-dir and --cluster.
func (a *app) dir() (state.Dir, error) {
	return state.Resolve(a.stateBase, a.cluster)
}

// loadForWrite is load for commands that change the cluster or its state
// directory: it also takes the cluster's lock (see lock). Call unlock when
// done.
func (a *app) loadForWrite() (state.Dir, *config.Cluster, func(), error) {
	d, c, err := a.load()
	if err != nil {
		return d, nil, nil, err
	}
	unlock, err := a.lock(d)
	if err != nil {
		return d, nil, nil, err
	}
	return d, c, unlock, nil
}

// lock takes the cluster lock (state.Dir.Lock) for a command that changes
// the cluster or its state directory, so two khw never change one cluster
// at once. Which commands lock:
//
//	lock:    init, pki, kubeconfig, encryption, render, up, down, power,
//	         smoke, break (for the whole drill), heal, lab run, lab check
//	         (it records the lab as done), lab reset, etcd snapshot save,
//	         etcd restore
//	no lock: status, config validate/show, pki inspect, up --dry-run,
//	         etcd restore --dry-run,
//	         lab list, fetch, mirror, version; shell and kubectl (the user's
//	         own hands in the cluster, like ssh: khw cannot know what they
//	         change, and a lab's observe commands run in khw shell while
//	         khw lab holds the lock)
//
// It is re-entrant within one command (khw lab run 12 runs the drill of
// khw break under the lab's lock). When the holder is a khw break watching
// its drill, the error says how to end it (khw heal).
func (a *app) lock(d state.Dir) (func(), error) {
	unlock, err := a.locks.Lock(d)
	return unlock, drill.ExplainLocked(d, err)
}

// load resolves the cluster and reads its cluster.yaml, printing warnings.
func (a *app) load() (state.Dir, *config.Cluster, error) {
	d, err := a.dir()
	if err != nil {
		return d, nil, usageError{err}
	}
	if !fsutil.Exists(d.ConfigPath()) {
		return d, nil, fmt.Errorf("no cluster %q: %s does not exist (fix: run `khw init --name %s`, or choose another with --cluster / --state-dir)", d.Name, d.ConfigPath(), d.Name)
	}
	c, warns, err := d.Load()
	for _, w := range warns {
		fmt.Fprintf(a.errOut, "Warning: %s\n", w)
	}
	if err != nil {
		return d, nil, invalidInputError{err}
	}
	a.logf(1, "cluster %q from %s", c.Name, d.ConfigPath())
	return d, c, nil
}

func newRootCmd(out, errOut io.Writer) *cobra.Command {
	a := &app{out: out, errOut: errOut}
	root := &cobra.Command{
		Use:           "khw",
		Short:         "Kubernetes the Hard Way, automated and explained",
		Long:          help("root"),
		Example:       help("root.example"),
		Version:       version,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see `%s --help`)", err, c.CommandPath())}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.stateBase, "state-dir", state.DefaultBase(), "state base directory (env "+state.EnvStateDir+")")
	pf.StringVarP(&a.cluster, "cluster", "c", "", "cluster (env "+state.EnvCluster+"; default: the only one)")
	pf.CountVarP(&a.verbosity, "verbose", "v", "more detail: -v decisions, -vv also files written")

	root.AddCommand(
		newInitCmd(a),
		newConfigCmd(a),
		newPKICmd(a),
		newKubeconfigCmd(a),
		newEncryptionCmd(a),
		newRenderCmd(a),
		newFetchCmd(a),
		newMirrorCmd(a),
		newUpCmd(a),
		newDownCmd(a),
		newStatusCmd(a),
		newEtcdCmd(a),
		newSmokeCmd(a),
		newShellCmd(a),
		newKubectlCmd(a),
		newPowerCmd(a),
		newBreakCmd(a),
		newHealCmd(a),
		newReportCmd(a),
		newUpgradeCmd(a),
		newLabCmd(a),
		newChallengeCmd(a),
		newVersionCmd(a),
	)
	return root
}

// exactArgs is cobra.ExactArgs with a usage error (exit 2).
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError{fmt.Errorf("%w (see `%s --help`)", err, cmd.CommandPath())}
		}
		return nil
	}
}

func maxArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.MaximumNArgs(n)(cmd, args); err != nil {
			return usageError{fmt.Errorf("%w (see `%s --help`)", err, cmd.CommandPath())}
		}
		return nil
	}
}

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print khw's version and the default component versions",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			v := config.DefaultVersions
			fmt.Fprintf(a.out, "khw %s\ndefault components: kubernetes %s, etcd %s, containerd %s, runc %s, cni-plugins %s, crictl %s, coredns %s, pause %s\n",
				version, v.Kubernetes, v.Etcd, v.Containerd, v.Runc, v.CNIPlugins, v.Crictl, v.CoreDNS, v.Pause)
			return nil
		},
	}
}
