package upgrade

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

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/termtext"
)

// afterUpgrade are the steps of khw up run once the upgrade's own steps
// passed: each must find the nodes as it wants them (the binaries of the
// new version, every unit restarted since), and the smoke tests run again.
var afterUpgrade = []string{labid.ControlPlane, labid.Workers, labid.TLSBootstrap, labid.Smoke}

// Options is how Run upgrades: what khw upgrade's command line (or khw lab
// 15) asked for, where it prints, and what it takes from its caller.
type Options struct {
	// To is the release to upgrade to (--to, "v1.37.2").
	To string
	// DryRun says what runs now, what would change and in which order,
	// and the commands by hand; it changes nothing, not even the state
	// directory.
	DryRun bool
	// Record is the upgrade under way (LoadRecord; nil: none). The caller
	// has refused one to another release than To.
	Record *Record
	// Out gets the progress; Verbosity is the steps' (-v).
	Out       io.Writer
	Verbosity int
	// Up gives khw up's steps (Up.Steps), run after the upgrade's own.
	Up nodeplan.Up
	// Lock takes the cluster's lock once the dry run is past, refusing
	// while a drill is active; nil: the caller holds it (khw lab 15).
	Lock func() (unlock func(), err error)
	// Confirm asks before anything changes, what being the sentence that
	// says what will; false means "do nothing". nil: no question (--yes).
	Confirm func(what string) (bool, error)
}

// Run is khw upgrade --to o.To on cluster c (state d): it checks the
// target against the mirror and the version-skew policy, asks, records
// the upgrade and sets versions.kubernetes in cluster.yaml, then runs
// Steps and afterUpgrade while the drill prober watches, and clears the
// record when every step passed. The report goes under
// <state>/operations; Ctrl-C and SIGTERM stop it between steps, and khw
// upgrade --to o.To goes on where it stopped. Errors: *SkewError (with
// PolicyURL appended) and *TargetError, the command line's mistakes; a
// step's, naming how to go on or back.
func Run(parent context.Context, c *config.Cluster, d state.Dir, o Options) error {
	rec := o.Record
	// A dry run writes nothing in the state directory: no SSH key (a
	// read-only session makes one in memory when there is none), no log.
	access := cluster.ReadWrite
	if o.DryRun {
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
	target.Versions.Kubernetes = o.To
	tenv := steps.NewEnv(&target, d)
	tenv.Verbosity, tenv.DryRun = o.Verbosity, o.DryRun
	defer tenv.Close()

	running, err := Observe(ctx, m, tenv)
	if err != nil {
		return err
	}
	oldest, err := Check(running, o.To)
	var se *SkewError
	if errors.As(err, &se) {
		return fmt.Errorf("%w\nsee %s", err, PolicyURL)
	}
	if err != nil {
		return err
	}
	out := o.Out
	fmt.Fprintf(out, "Cluster %s runs:\n", c.Name)
	for _, n := range c.ControlPlanes() {
		fmt.Fprintf(out, "  kube-apiserver on %-4s %s\n", n.Name, termtext.Escape(orDash(running.APIServers[n.Name])))
	}
	for _, n := range c.Nodes {
		if v, ok := running.Kubelets[n.Name]; ok {
			fmt.Fprintf(out, "  kubelet on %-9s %s\n", n.Name, termtext.Escape(v))
		}
	}
	if rec == nil && c.Versions.Kubernetes == o.To && AllAt(running, o.To) {
		fmt.Fprintf(out, "Every apiserver and kubelet already runs %s (cluster.yaml says so too): nothing to upgrade. khw up checks the rest.\n", o.To)
		return nil
	}
	fmt.Fprintf(out, "\nFetching the %s binaries (each checked against its digest)…\n", o.To)
	if err := m.FetchBinaries(ctx, tenv, Binaries...); err != nil {
		err = fmt.Errorf("the binaries of %s: %w\n(with a mirror: copy cluster.yaml, set versions.kubernetes: %s in the copy, run hack/build-mirror.sh --config COPY --only kubernetes, then pin the mirror again: KHW_MIRROR_DIGEST=$(hack/mirror-pin.sh MIRROR))", o.To, err, o.To)
		if !o.DryRun {
			return err
		}
		fmt.Fprintf(out, "  (the upgrade would stop here: %v)\n", err)
	}
	fmt.Fprintf(out, "\nUpgrade to %s, in the order of the version-skew policy (%s):\n", o.To, PolicyURL)
	all := Steps(m)
	for i, s := range all {
		fmt.Fprintf(out, "  %d. %-20s %s\n", i+1, s.ID(), s.Title())
	}
	fmt.Fprintf(out, "  then khw up's %s check the result, and the smoke tests run again.\n", strings.Join(afterUpgrade[:len(afterUpgrade)-1], ", "))
	if o.DryRun {
		fmt.Fprintln(out, "\nBy hand, one node at a time in that order (in khw shell):")
		cmds, err := ByHand(ctx, m, c, o.To, steps.Quote(filepath.Join(d.Root, "downloads", o.To)), nodeplan.AdminKubeconfig(tenv))
		if err != nil {
			return err
		}
		for _, cmd := range cmds {
			fmt.Fprintln(out, steps.Indent(cmd.String(), "  "))
		}
		fmt.Fprintln(out, "(--dry-run: nothing was done.)")
		return nil
	}
	if o.Lock != nil {
		unlock, err := o.Lock()
		if err != nil {
			return err
		}
		defer unlock()
	}
	if o.Confirm != nil {
		ok, err := o.Confirm(fmt.Sprintf("cluster.yaml will say %s, and every node's Kubernetes binaries change, one node at a time.", o.To))
		if !ok || err != nil {
			return err
		}
	}
	if rec == nil {
		if err := denv.ReadyToRoll(ctx, out, "khw status, khw up"); err != nil {
			return err
		}
	} else {
		// Going on: a node this upgrade changed may be what is unhealthy;
		// the steps change no node while the cluster is unhealthy, and say
		// which node they wait for.
		fmt.Fprintf(out, "Checking cluster %s…\n", c.Name)
		if _, problems := denv.Preflight(ctx); len(problems) > 0 {
			fmt.Fprintf(out, "  not healthy (going on; the steps change no node until it is, or khw upgrade --abandon goes back to %s):\n  - %s\n", rec.From, strings.Join(problems, "\n  - "))
		}
		if err := denv.PrepareWorkload(ctx, out); err != nil {
			return err
		}
	}
	if rec == nil {
		rec = &Record{From: "v" + oldest.String(), To: o.To, StartedAt: time.Now()}
		if err := SaveRecord(d, *rec); err != nil {
			return err
		}
		if err := config.SetVersion(d.ConfigPath(), "kubernetes", o.To); err != nil {
			_ = ClearRecord(d)
			return err
		}
		fmt.Fprintf(out, "cluster.yaml: versions.kubernetes %s → %s (until the upgrade ends, khw up refuses to run: khw upgrade --to %s goes on)\n", c.Versions.Kubernetes, o.To, o.To)
	} else {
		fmt.Fprintf(out, "Going on with the upgrade from %s to %s started %s.\n", rec.From, rec.To, rec.StartedAt.Local().Format("2006-01-02 15:04"))
		if c.Versions.Kubernetes != rec.To { // stopped between the record and cluster.yaml
			if err := config.SetVersion(d.ConfigPath(), "kubernetes", rec.To); err != nil {
				return err
			}
			fmt.Fprintf(out, "cluster.yaml: versions.kubernetes %s → %s\n", c.Versions.Kubernetes, rec.To)
		}
	}
	w, err := drill.StartWatch(drill.OperationsOf(d), denv.Prober, out, c.Name, "upgrade", "khw upgrade --to "+o.To)
	if err != nil {
		return err
	}
	upSteps := o.Up.Steps(m, &target)
	runner := steps.NewRunner(tenv, out)
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
		fmt.Fprintf(out, "\n[%d/%d] %s  %s\n", i+1, len(all), s.ID(), s.Title())
		opErr = w.Step(s.ID(), func() error {
			_, err := runner.Run(ctx, []steps.Step{s}, steps.Options{})
			return err
		})
		if opErr != nil {
			break
		}
	}
	if opErr == nil {
		opErr = w.Step("every apiserver and kubelet at "+o.To, func() error {
			now, err := Observe(ctx, m, tenv)
			if err != nil {
				return err
			}
			if !AllAt(now, o.To) {
				return fmt.Errorf("not every component reports %s: apiservers %v, kubelets %v", o.To, now.APIServers, now.Kubelets)
			}
			for name, v := range now.APIServers {
				w.Fact("kube-apiserver on "+name, v)
			}
			return nil
		})
	}
	if opErr == nil {
		if err := ClearRecord(d); err != nil {
			opErr = err
		}
	} else {
		opErr = fmt.Errorf("%w\nThe upgrade to %s is not finished: fix what is named above, then khw upgrade --to %s goes on where it stopped (or khw upgrade --abandon goes back to %s)", opErr, o.To, o.To, rec.From)
	}
	_, err = w.End(ctx, out, opErr)
	return err
}

func orDash(s string) string {
	if s == "" {
		return "- (no answer)"
	}
	return s
}
