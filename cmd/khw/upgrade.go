package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	k8sversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/lab/upgrade"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/termtext"
)

// afterUpgrade are the steps of khw up run once the upgrade's own steps
// passed: each must find the nodes as it wants them (the binaries of the
// new version, every unit restarted since), and the smoke tests run again.
var afterUpgrade = []string{labid.ControlPlane, labid.Workers, labid.TLSBootstrap, labid.Smoke}

type upgradeOptions struct {
	to                   string
	yes, dryRun, abandon bool
	// locked: the caller holds the cluster's lock (khw lab 15).
	locked bool
}

func newUpgradeCmd(a *app) *cobra.Command {
	var o upgradeOptions
	cmd := &cobra.Command{
		Use:   "upgrade --to vX.Y.Z",
		Short: "Upgrade Kubernetes to the next patch or minor release, one component and one node at a time",
		Long:  help("upgrade"),
		Example: `  khw upgrade --to v1.37.2 --dry-run   # the versions running, the order, the commands
  khw upgrade --to v1.37.2             # asks, then upgrades while a prober watches
  khw report open                      # the upgrade's report, drawn`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.abandon {
				if o.to != "" || o.dryRun {
					return usagef("--abandon takes no --to or --dry-run")
				}
				return abandonUpgrade(a)
			}
			if o.to == "" {
				return usagef("give the version to upgrade to with --to, e.g. --to v1.37.2")
			}
			// Before the cluster is opened: a bad --to needs no node to be
			// refused, and it is written into commands and cluster.yaml.
			if _, err := upgrade.ParseTarget(o.to); err != nil {
				return usageError{err}
			}
			return runUpgrade(cmd.Context(), a, o, cmd.InOrStdin())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.to, "to", "", "the Kubernetes release to upgrade to (vX.Y.Z: a patch of the running minor, or the next minor)")
	f.BoolVarP(&o.yes, "yes", "y", false, "do not ask for confirmation")
	f.BoolVar(&o.dryRun, "dry-run", false, "say what runs now, what would change and in which order, change nothing")
	f.BoolVar(&o.abandon, "abandon", false, "give up an upgrade that cannot finish: cluster.yaml names the version it came from again, and khw up puts that version back on the nodes that got the new one")
	return cmd
}

// runUpgrade checks the target against the mirror and the version-skew
// policy, asks, records the upgrade and sets versions.kubernetes in
// cluster.yaml, then runs upgrade.Steps and afterUpgrade while the drill
// prober watches, and clears the record when every step passed.
func runUpgrade(parent context.Context, a *app, o upgradeOptions, in io.Reader) error {
	d, c, err := a.load()
	if err != nil {
		return err
	}
	rec, err := upgrade.LoadRecord(d)
	if err != nil {
		return err
	}
	if rec != nil && rec.To != o.to {
		return usagef("an upgrade from %s to %s is under way: finish it first with khw upgrade --to %s", rec.From, rec.To, rec.To)
	}
	// A dry run writes nothing in the state directory: no SSH key (a
	// read-only session makes one in memory when there is none), no log.
	access := cluster.ReadWrite
	if o.dryRun {
		access = cluster.ReadOnly
	}
	s, err := cluster.Open(c, d, access, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	denv, err := drill.Open(s)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := nodeplan.New(denv.S)
	target := *c
	target.Versions.Kubernetes = o.to
	tenv := steps.NewEnv(&target, d)
	tenv.Verbosity, tenv.DryRun = a.verbosity, o.dryRun
	defer tenv.Close()

	running, err := upgrade.Observe(ctx, m, tenv)
	if err != nil {
		return err
	}
	oldest, err := upgrade.Check(running, o.to)
	var se *upgrade.SkewError
	var te *upgrade.TargetError
	switch {
	case errors.As(err, &se):
		return usageError{fmt.Errorf("%w\nsee %s", err, upgrade.PolicyURL)}
	case errors.As(err, &te):
		return usageError{err}
	case err != nil:
		return err
	}
	fmt.Fprintf(a.out, "Cluster %s runs:\n", c.Name)
	for _, n := range c.ControlPlanes() {
		fmt.Fprintf(a.out, "  kube-apiserver on %-4s %s\n", n.Name, termtext.Escape(orDash(running.APIServers[n.Name])))
	}
	for _, n := range c.Nodes {
		if v, ok := running.Kubelets[n.Name]; ok {
			fmt.Fprintf(a.out, "  kubelet on %-9s %s\n", n.Name, termtext.Escape(v))
		}
	}
	if rec == nil && c.Versions.Kubernetes == o.to && upgrade.AllAt(running, o.to) {
		fmt.Fprintf(a.out, "Every apiserver and kubelet already runs %s (cluster.yaml says so too): nothing to upgrade. khw up checks the rest.\n", o.to)
		return nil
	}
	fmt.Fprintf(a.out, "\nFetching the %s binaries (each checked against its digest)…\n", o.to)
	if err := m.FetchBinaries(ctx, tenv, upgrade.Binaries...); err != nil {
		err = fmt.Errorf("the binaries of %s: %w\n(with a mirror: copy cluster.yaml, set versions.kubernetes: %s in the copy, run hack/build-mirror.sh --config COPY --only kubernetes, then pin the mirror again: KHW_MIRROR_DIGEST=$(hack/mirror-pin.sh MIRROR))", o.to, err, o.to)
		if !o.dryRun {
			return err
		}
		fmt.Fprintf(a.out, "  (the upgrade would stop here: %v)\n", err)
	}
	fmt.Fprintf(a.out, "\nUpgrade to %s, in the order of the version-skew policy (%s):\n", o.to, upgrade.PolicyURL)
	all := upgrade.Steps(m)
	for i, s := range all {
		fmt.Fprintf(a.out, "  %d. %-20s %s\n", i+1, s.ID(), s.Title())
	}
	fmt.Fprintf(a.out, "  then khw up's %s check the result, and the smoke tests run again.\n", strings.Join(afterUpgrade[:len(afterUpgrade)-1], ", "))
	if o.dryRun {
		fmt.Fprintln(a.out, "\nBy hand, one node at a time in that order (in khw shell):")
		cmds, err := upgrade.ByHand(ctx, m, c, o.to, steps.Quote(filepath.Join(d.Root, "downloads", o.to)), nodeplan.AdminKubeconfig(tenv))
		if err != nil {
			return err
		}
		for _, cmd := range cmds {
			fmt.Fprintln(a.out, steps.Indent(cmd.String(), "  "))
		}
		fmt.Fprintln(a.out, "(--dry-run: nothing was done.)")
		return nil
	}
	if !o.locked {
		unlock, err := lockWithoutDrill(a, d)
		if err != nil {
			return err
		}
		defer unlock()
	}
	if !o.yes {
		ok, err := goOn(a, in, fmt.Sprintf("cluster.yaml will say %s, and every node's Kubernetes binaries change, one node at a time.", o.to), "upgrade")
		if !ok || err != nil {
			return err
		}
	}
	if rec == nil {
		if err := denv.ReadyToRoll(ctx, a.out, "khw status, khw up"); err != nil {
			return err
		}
	} else {
		// Going on: a node this upgrade changed may be what is unhealthy;
		// the steps change no node while the cluster is unhealthy, and say
		// which node they wait for.
		fmt.Fprintf(a.out, "Checking cluster %s…\n", c.Name)
		if _, problems := denv.Preflight(ctx); len(problems) > 0 {
			fmt.Fprintf(a.out, "  not healthy (going on; the steps change no node until it is, or khw upgrade --abandon goes back to %s):\n  - %s\n", rec.From, strings.Join(problems, "\n  - "))
		}
		if err := denv.PrepareWorkload(ctx, a.out); err != nil {
			return err
		}
	}
	if rec == nil {
		rec = &upgrade.Record{From: "v" + oldest.String(), To: o.to, StartedAt: time.Now()}
		if err := upgrade.SaveRecord(d, *rec); err != nil {
			return err
		}
		if err := config.SetVersion(d.ConfigPath(), "kubernetes", o.to); err != nil {
			_ = upgrade.ClearRecord(d)
			return err
		}
		fmt.Fprintf(a.out, "cluster.yaml: versions.kubernetes %s → %s (until the upgrade ends, khw up refuses to run: khw upgrade --to %s goes on)\n", c.Versions.Kubernetes, o.to, o.to)
	} else {
		fmt.Fprintf(a.out, "Going on with the upgrade from %s to %s started %s.\n", rec.From, rec.To, rec.StartedAt.Local().Format("2006-01-02 15:04"))
		if c.Versions.Kubernetes != rec.To { // stopped between the record and cluster.yaml
			if err := config.SetVersion(d.ConfigPath(), "kubernetes", rec.To); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "cluster.yaml: versions.kubernetes %s → %s\n", c.Versions.Kubernetes, rec.To)
		}
	}
	w, err := drill.StartWatch(drill.OperationsOf(d), denv.Prober, a.out, c.Name, "upgrade", "khw upgrade --to "+o.to)
	if err != nil {
		return err
	}
	upSteps := lab.Steps(m, &target)
	runner := steps.NewRunner(tenv, a.out)
	for _, id := range afterUpgrade {
		s, err := steps.Lookup(upSteps, id)
		if err != nil {
			return err
		}
		all = append(all, s)
	}
	var opErr error
	for i, s := range all {
		if ctx.Err() != nil {
			opErr = fmt.Errorf("interrupted before %s", s.ID())
			break
		}
		fmt.Fprintf(a.out, "\n[%d/%d] %s  %s\n", i+1, len(all), s.ID(), s.Title())
		opErr = w.Step(s.ID(), func() error {
			_, err := runner.Run(ctx, []steps.Step{s}, steps.Options{})
			return err
		})
		if opErr != nil {
			break
		}
	}
	if opErr == nil {
		opErr = w.Step("every apiserver and kubelet at "+o.to, func() error {
			now, err := upgrade.Observe(ctx, m, tenv)
			if err != nil {
				return err
			}
			if !upgrade.AllAt(now, o.to) {
				return fmt.Errorf("not every component reports %s: apiservers %v, kubelets %v", o.to, now.APIServers, now.Kubelets)
			}
			for name, v := range now.APIServers {
				w.Fact("kube-apiserver on "+name, v)
			}
			return nil
		})
	}
	if opErr == nil {
		if err := upgrade.ClearRecord(d); err != nil {
			opErr = err
		}
	} else {
		opErr = fmt.Errorf("%w\nThe upgrade to %s is not finished: fix what is named above, then khw upgrade --to %s goes on where it stopped (or khw upgrade --abandon goes back to %s)", opErr, o.to, o.to, rec.From)
	}
	_, err = w.End(ctx, a.out, opErr)
	return err
}

func orDash(s string) string {
	if s == "" {
		return "- (no answer)"
	}
	return s
}

// refuseDuringUpgrade fails while an upgrade is under way in d: the
// commands that run khw up's steps (up, lab, pki renew) would restart each
// control plane's components together, out of the skew policy's order.
func refuseDuringUpgrade(d state.Dir) error {
	rec, err := upgrade.LoadRecord(d)
	if err != nil || rec == nil {
		return err
	}
	return upgrade.InProgressError(rec)
}

// refuseReleaseChange fails when cluster.yaml names another Kubernetes
// release than the built cluster runs and no upgrade is under way, before
// khw up, a step lab run by khw, or khw pki renew runs khw up's steps
// (versions.kubernetes edited by hand, or an upgrade by hand half done): a
// newer one would be installed node by node without the upgrade's order,
// waits and drains (upgrade.PolicyURL); an older one is a downgrade, which
// the policy does not support, unless khw upgrade --abandon went back
// (upgrade.AbandonedPath). It compares every apiserver's /version and
// every Node's kubelet. A cluster whose control plane was never built, or
// whose apiservers do not answer within seconds, is not judged (khw up's
// own steps say why).
func refuseReleaseChange(ctx context.Context, d state.Dir, c *config.Cluster, s *cluster.Session) error {
	if prog, err := lab.LoadProgress(d); err != nil || prog[labid.ControlPlane].IsZero() {
		return nil
	}
	want, err := k8sversion.ParseSemantic(c.Versions.Kubernetes)
	if err != nil {
		return nil
	}
	ab, err := upgrade.LoadAbandoned(d)
	if err != nil {
		return err
	}
	// going back is the abandoned upgrade's way back: from its To (or
	// less) to its From, which cluster.yaml names again.
	goingBack := func(got *k8sversion.Version) bool {
		if ab == nil || ab.From != c.Versions.Kubernetes {
			return false
		}
		to, err := k8sversion.ParseSemantic(ab.To)
		return err == nil && !got.GreaterThan(to)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	env := steps.NewEnv(c, d)
	defer env.Close()
	running, err := upgrade.Observe(ctx, nodeplan.New(s), env)
	if err != nil && len(running.APIServers) == 0 {
		return nil
	}
	check := func(what, node, v string) error {
		got, err := k8sversion.ParseSemantic(v)
		switch {
		case err != nil:
			return nil
		case want.GreaterThan(got):
			return fmt.Errorf("cluster.yaml says versions.kubernetes: %s, but the %s on %s runs v%s: khw up's steps would install %s node by node without an upgrade's order, waits and drains (%s). Upgrade with khw upgrade --to %s (--dry-run first), or set versions.kubernetes back to v%s",
				c.Versions.Kubernetes, what, node, got, c.Versions.Kubernetes, upgrade.PolicyURL, c.Versions.Kubernetes, got)
		case got.GreaterThan(want) && !goingBack(got):
			return fmt.Errorf("cluster.yaml says versions.kubernetes: %s, but the %s on %s runs v%s already: khw up's steps would downgrade it, which the version-skew policy does not support (%s). Set versions.kubernetes to v%s once every component runs it (an upgrade by hand ends with that edit)",
				c.Versions.Kubernetes, what, node, got, upgrade.PolicyURL, got)
		}
		return nil
	}
	for _, n := range c.ControlPlanes() {
		if err := check("kube-apiserver", n.Name, running.APIServers[n.Name]); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := check("kubelet", n.Name, running.Kubelets[n.Name]); err != nil {
			return err
		}
	}
	return nil
}

// abandonUpgrade ends the upgrade under way without finishing it:
// versions.kubernetes goes back to the record's From and the record
// becomes upgrade.AbandonedPath's, so that khw up runs again and puts From's binaries back on the
// nodes that got To's (within one minor version, as the apiservers of an
// HA cluster may differ while an upgrade runs).
func abandonUpgrade(a *app) error {
	d, _, err := a.load()
	if err != nil {
		return err
	}
	unlock, err := a.lock(d)
	if err != nil {
		return err
	}
	defer unlock()
	rec, err := upgrade.LoadRecord(d)
	if err != nil {
		return err
	}
	if rec == nil {
		fmt.Fprintln(a.out, "No upgrade is under way: nothing to abandon.")
		return nil
	}
	if err := config.SetVersion(d.ConfigPath(), "kubernetes", rec.From); err != nil {
		return err
	}
	if err := upgrade.SaveAbandoned(d, *rec); err != nil {
		return err
	}
	if err := upgrade.ClearRecord(d); err != nil {
		return err
	}
	fmt.Fprintf(a.out, "Abandoned the upgrade from %s to %s: cluster.yaml says versions.kubernetes: %s again.\nkhw up puts %s back on the nodes that got %s (khw up --dry-run shows which), one node at a time while the cluster serves.\n", rec.From, rec.To, rec.From, rec.From, rec.To)
	return nil
}
