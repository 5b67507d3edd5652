package challenge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/lab/fault"
	"github.com/khw-dev/khw/internal/labtext"
	"github.com/khw-dev/khw/internal/termtext"
	"github.com/khw-dev/khw/internal/vm"
)

// SnapshotName is the checkpoint a challenge takes before it injects its
// fault (lab.Course.Checkpoint).
const SnapshotName = "challenge"

// ErrNotSolved is Check's error while the goal is not reached: not a
// failure of khw (exit status 1, as khw lab check).
var ErrNotSolved = errors.New("not solved yet")

// Env is the challenges of one open cluster.
type Env struct {
	Course *lab.Course
	Store  Store
	// Lang is the language of the texts ("en", "ko"); Plain prints them
	// as Markdown also on a terminal.
	Lang  string
	Plain bool
	// Out receives the texts and progress, in order; Err the warnings.
	Out, Err io.Writer
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

func (e *Env) now() time.Time {
	if e.Now == nil {
		return time.Now()
	}
	return e.Now()
}

func (e *Env) say(format string, args ...any) {
	fmt.Fprintf(termtext.NewWriter(e.Out), format, args...)
}

// markdown writes a challenge text (khw's own, not read on a node):
// rendered on a terminal, as Markdown elsewhere (labtext.RenderMarkdown).
func (e *Env) markdown(md string) { labtext.RenderMarkdown(e.Out, md, e.Plain) }

// text returns f's text in e.Lang (English when it has none).
func (e *Env) text(id string) (labtext.ChallengeText, error) {
	ts, _, err := Texts(e.Lang)
	if err != nil {
		return labtext.ChallengeText{}, err
	}
	t, ok := ts[id]
	if !ok {
		return t, fmt.Errorf("challenge %s has no text (labs/challenges/): a build problem", id)
	}
	return t, nil
}

// health returns why the cluster is not healthy, as a drill would refuse
// it (drill.Env.Preflight), one line each; none when it is.
func (e *Env) health(ctx context.Context) []string {
	d, err := drill.Open(e.Course.S)
	if err != nil {
		return []string{err.Error()}
	}
	_, problems := d.Preflight(ctx)
	return problems
}

// Start begins challenge f: it refuses while another challenge or a
// drill is under way, on a cluster that is not khw's standard topology
// (the texts name its nodes and addresses), on an unhealthy cluster and
// when f's lab does not pass its check; then it snapshots the nodes and
// the state directory, records the challenge, injects the fault, and
// prints the symptom and the goal. From then on give-up can always
// restore the snapshot, also when the injection failed half-way.
func (e *Env) Start(ctx context.Context, f fault.Fault) error {
	if a, err := e.Store.Active(); err == nil {
		return fmt.Errorf("challenge %s is under way (since %s): khw challenge check grades it, khw challenge give-up ends it", a.ID, a.Started.Local().Format("15:04"))
	} else if !errors.Is(err, ErrNone) {
		return err
	}
	s := e.Course.S
	if rec, err := drill.StoreOf(s.Dir).Active(); err == nil {
		return fmt.Errorf("drill %s is active: khw heal first", rec.ID)
	}
	if err := standardTopology(s.Config); err != nil {
		return err
	}
	t, err := e.text(f.ID)
	if err != nil {
		return err
	}
	l, err := lab.Lookup(f.CheckedBy())
	if err != nil {
		return err
	}
	e.say("Checking that cluster %s is healthy and that lab %s passes…\n", s.Config.Name, l.ID)
	if problems := e.health(ctx); len(problems) > 0 {
		return fmt.Errorf("cluster %s is not healthy, so the challenge's symptom would be mixed with other faults:\n  - %s\nfix it first (khw status, khw up)", s.Config.Name, strings.Join(problems, "\n  - "))
	}
	g, err := e.Course.Grade(ctx, l)
	if err != nil {
		return err
	}
	if !g.Pass() {
		return fmt.Errorf("lab %s does not pass its check before the challenge (khw lab check %s says why): fix that first, or khw up", l.ID, l.ID)
	}
	e.say("Taking a snapshot of every node and of the state directory (give-up restores it)…\n")
	snap, err := e.Course.Checkpoint(ctx, SnapshotName)
	if err != nil {
		return fmt.Errorf("snapshot before the challenge: %w", err)
	}
	e.say("Snapshot %q taken in %s.\n", SnapshotName, snap.Took.Round(100*time.Millisecond))
	a := Active{ID: f.ID, Lab: f.Lab, Checked: f.CheckedBy(), Level: f.Level, Started: e.now().UTC()}
	if err := e.Store.SaveActive(a); err != nil {
		_ = e.Course.DropCheckpoint(ctx, SnapshotName)
		return err
	}
	if err := f.Break(ctx, nodeActions{s: s}); err != nil {
		return fmt.Errorf("injecting %s: %w (khw challenge give-up restores the snapshot)", f.ID, err)
	}
	a.Injected = e.now().UTC()
	if err := e.Store.SaveActive(a); err != nil {
		return err
	}
	e.markdown(fmt.Sprintf("## %s · %s\n\n"+e.word("level")+"\n\n### %s\n\n%s\n\n### %s\n\n%s\n", f.ID, t.Title, f.Lab, f.Level, heading(e.Lang, 0), t.Symptom, heading(e.Lang, 1), t.Goal))
	e.say("%s", e.word("clock"))
	return nil
}

// heading is the i-th section heading of a challenge text in lang.
func heading(lang string, i int) string {
	hs, ok := labtext.ChallengeSections[lang]
	if !ok {
		hs = labtext.ChallengeSections["en"]
	}
	return hs[i]
}

// Check grades the challenge under way: the goal's probe (the cluster is
// healthy, as a drill needs it) and the fault's lab's check (khw lab
// check), which while something is wrong says only where to look. When
// both pass, the challenge is solved: its result is kept, the
// explanation shown and the snapshot dropped. Errors: ErrNotSolved
// (wrapped), ErrNone, or what kept the check from running.
func (e *Env) Check(ctx context.Context) error {
	a, err := e.Store.Active()
	if err != nil {
		return err
	}
	if a.Injected.IsZero() {
		return fmt.Errorf("challenge %s's fault was never fully injected: khw challenge give-up restores the snapshot", a.ID)
	}
	a.Checks++
	if err := e.Store.SaveActive(a); err != nil {
		return err
	}
	l, err := lab.Lookup(a.checked())
	if err != nil {
		return err
	}
	problems := e.health(ctx)
	labErr := e.Course.Check(ctx, l, lab.UI{Out: e.Out, Err: e.Err, Hints: true, NextHint: e.word("nexthint"), Lang: e.Lang})
	if len(problems) > 0 {
		e.say("%s", e.word("unhealthy"))
		for _, p := range problems {
			e.say("  - %s\n", p)
		}
	}
	if len(problems) > 0 || labErr != nil {
		return fmt.Errorf("challenge %s: %w (khw challenge hint gives a hint; khw challenge check again after a fix)", a.ID, ErrNotSolved)
	}
	t, err := e.text(a.ID)
	if err != nil {
		return err
	}
	r, err := e.Store.Finish(a, Solved, "", e.now())
	if err != nil {
		return err
	}
	e.say(e.word("solved"), a.ID, time.Duration(r.Seconds)*time.Second, r.Hints)
	if len(r.Peeked) > 0 {
		e.say(e.word("peeked"), strings.Join(r.Peeked, ", "))
	}
	e.markdown(fmt.Sprintf("### %s\n\n%s\n", heading(e.Lang, 5), t.Why))
	if err := e.Course.DropCheckpoint(ctx, SnapshotName); err != nil {
		fmt.Fprintf(e.Err, "Warning: the challenge's snapshot could not be removed: %v\n", err)
	}
	return nil
}

// current returns the challenge under way and its text (ErrNone when
// there is none).
func (e *Env) current() (Active, labtext.ChallengeText, error) {
	a, err := e.Store.Active()
	if err != nil {
		return a, labtext.ChallengeText{}, err
	}
	t, err := e.text(a.ID)
	return a, t, err
}

// Hint shows the next rung of the ladder of the challenge under way
// (where to look, what is wrong, the fix) and counts it.
func (e *Env) Hint() error {
	a, t, err := e.current()
	if err != nil {
		return err
	}
	if a.Hints >= len(t.Hints) {
		e.say("%s", e.word("nomore"))
		e.markdown(fmt.Sprintf("### %s\n\n%s\n", heading(e.Lang, 4), t.Hints[2]))
		e.say("%s", e.word("nomore2"))
		return nil
	}
	a.Hints++
	if err := e.Store.SaveActive(a); err != nil {
		return err
	}
	e.markdown(fmt.Sprintf("### "+e.word("hint")+"\n\n%s\n", a.Hints, len(t.Hints), heading(e.Lang, 1+a.Hints), t.Hints[a.Hints-1]))
	if a.Hints < len(t.Hints) {
		e.say("%s", e.word("next"))
	}
	return nil
}

// GiveUp ends the challenge under way: it shows what was wrong, the fix
// and the explanation, restores the snapshot, waits (at most
// lab.SettleLimit, longer on slow nodes) for the cluster to be healthy,
// and keeps the result as given up. A failed restore leaves the challenge
// under way, so that give-up can be run again.
func (e *Env) GiveUp(ctx context.Context) error {
	a, t, err := e.current()
	if err != nil {
		return err
	}
	e.markdown(fmt.Sprintf("## %s · %s\n\n### %s\n\n%s\n\n### %s\n\n%s\n\n### %s\n\n%s\n", a.ID, t.Title, heading(e.Lang, 3), t.Hints[1], heading(e.Lang, 4), t.Hints[2], heading(e.Lang, 5), t.Why))
	warning, err := e.Course.RevertCheckpoint(ctx, SnapshotName, func(format string, args ...any) { e.say(format+"\n", args...) })
	if warning != nil {
		fmt.Fprintf(e.Err, "Warning: %v\n", warning)
	}
	if err != nil {
		return fmt.Errorf("restoring the snapshot: %w (khw challenge give-up tries again)", err)
	}
	limit := vm.Scaled(e.Course.S.Provider, lab.SettleLimit, 6*lab.SettleLimit)
	e.say("Waiting for the nodes to boot again, every step to check done and the cluster to be healthy (at most %s)…\n", limit)
	t0 := time.Now()
	problems := e.Course.WaitSteps(ctx, limit)
	if len(problems) == 0 {
		problems = e.settle(ctx, max(limit-time.Since(t0), 10*time.Second))
	}
	if len(problems) == 0 {
		// Once more a little later: right after the revert, a kubelet
		// that has just come back restarts its pods, and CoreDNS can
		// drop out of ready for a moment after it first looked done.
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
		}
		problems = e.Course.WaitSteps(ctx, max(limit-time.Since(t0), 30*time.Second))
	}
	if len(problems) > 0 {
		fmt.Fprintf(e.Err, "Warning: after %s the cluster is not healthy yet:\n  - %s\nkhw status shows it; khw up repairs what is left\n", limit, strings.Join(problems, "\n  - "))
	}
	if _, err := e.Store.Finish(a, GaveUp, "", e.now()); err != nil {
		return err
	}
	if err := e.Course.DropCheckpoint(ctx, SnapshotName); err != nil {
		fmt.Fprintf(e.Err, "Warning: the challenge's snapshot could not be removed: %v\n", err)
	}
	e.say("%s", e.word("back"))
	return nil
}

// settle waits until the cluster is healthy, at most limit; it returns
// the problems left then.
func (e *Env) settle(ctx context.Context, limit time.Duration) []string {
	deadline := time.Now().Add(limit)
	for {
		problems := e.health(ctx)
		if len(problems) == 0 || time.Now().After(deadline) {
			return problems
		}
		select {
		case <-ctx.Done():
			return problems
		case <-time.After(3 * time.Second):
		}
	}
}

// standardTopology refuses a cluster whose nodes, addresses or networks
// are not those of khw init: the challenges' texts and fixes name them
// (lb at 192.168.122.10, cp3, port 6443, the kube-dns IP).
func standardTopology(c *config.Cluster) error {
	want := config.Default(c.Name, c.Arch, c.Provider)
	same := len(c.Nodes) == len(want.Nodes) &&
		c.Kubernetes.APIServerPort == want.Kubernetes.APIServerPort &&
		c.Kubernetes.ServiceCIDR == want.Kubernetes.ServiceCIDR &&
		c.Kubernetes.ClusterCIDR == want.Kubernetes.ClusterCIDR &&
		c.Kubernetes.ClusterDNS == want.Kubernetes.ClusterDNS &&
		c.Kubernetes.ClusterDomain == want.Kubernetes.ClusterDomain
	for i := 0; same && i < len(want.Nodes); i++ {
		same = c.Nodes[i].Name == want.Nodes[i].Name && c.Nodes[i].IP == want.Nodes[i].IP && c.Nodes[i].Role == want.Nodes[i].Role
	}
	if !same {
		return fmt.Errorf("cluster %s is not khw's standard cluster (lb, cp1-cp3, w1-w3 at the addresses, ports and networks of khw init): the challenges' texts and fixes are written for that one; make one with khw init --name NAME", c.Name)
	}
	return nil
}
