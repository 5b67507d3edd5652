package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/smoketest"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/termtext"
)

// StoreOf is the drill store of state directory d: <state>/drills.
func StoreOf(d state.Dir) Store { return Store{Dir: filepath.Join(d.Root, "drills")} }

// PlanError is a drill that cannot be planned on this cluster (a bad
// command line: an unknown node, more etcd members than there are); Err
// says why.
type PlanError struct{ Err error }

func (e *PlanError) Error() string { return e.Err.Error() }
func (e *PlanError) Unwrap() error { return e.Err }

// Break runs the drill spec on env's cluster and records it in store: it
// refuses while another drill is active, checks that the cluster is
// healthy (an unhealthy one is refused unless spec.Force), prepares the
// probe workload, saves the record, breaks, samples until the heal (after
// spec.For, on khw heal or when ctx ends), and writes the report. Progress
// lines go to out, the --force warning to errOut, in the order things
// happen.
//
// The Report is returned whenever the drill ran (its ID is set), also with
// an error: then an expectation failed or the heal did not finish. Errors
// before the drill ran: another drill active, an unhealthy cluster, a
// *PlanError, the workload, the store.
func (e *Env) Break(ctx context.Context, store Store, spec Spec, out, errOut io.Writer) (Report, error) {
	c := e.S.Config
	if rec, err := store.Active(); err == nil {
		if rec.HealedAt != nil && ProcessAlive(rec.WatcherPID) {
			return Report{}, fmt.Errorf("drill %s is healed; khw (pid %d) is still recording the recovery (at most 2 min): start the next drill after it writes the report", rec.ID, rec.WatcherPID)
		}
		return Report{}, fmt.Errorf("drill %s (khw break %s) is still active: run khw heal first", rec.ID, rec.Spec.CommandLine())
	} else if !errors.Is(err, ErrNoActive) {
		return Report{}, err
	}
	fmt.Fprintf(out, "Checking that cluster %s is healthy…\n", c.Name)
	live, problems := e.Preflight(ctx)
	if len(problems) > 0 {
		if !spec.Force {
			return Report{}, fmt.Errorf("cluster %s is not healthy, so a drill would measure the wrong thing:\n  - %s\nfix it (khw status, khw up) or add --force", c.Name, strings.Join(problems, "\n  - "))
		}
		fmt.Fprintf(errOut, "Warning: drilling an unhealthy cluster (--force):\n  - %s\n", strings.Join(problems, "\n  - "))
	}
	actions, err := Plan(c, spec, live)
	if err != nil {
		return Report{}, &PlanError{err}
	}
	if err := e.PrepareWorkload(ctx, out); err != nil {
		return Report{}, err
	}

	rec := NewRecord(c, spec, actions, e.Prober.NodePort, e.Prober.Every(), time.Now())
	if err := store.Save(rec); err != nil {
		return Report{}, err
	}
	if err := store.SetActive(rec.ID); err != nil {
		return Report{}, err
	}
	heal := "until khw heal"
	if spec.For > 0 {
		heal = "for " + spec.For.String() + " (Ctrl-C heals early)"
	}
	fmt.Fprintf(out, "Drill %s: %s, %s\n", rec.ID, describeActions(actions, live), heal)
	fmt.Fprintf(out, "Sampling %s (each every %s)\n", signalList(e.Prober), e.Prober.Every())
	r := &Runner{Store: store, Prober: e.Prober, Act: e.Act, Out: out}
	return r.Run(ctx, rec)
}

// PrepareWorkload makes the probe workload (EnsureWorkload: a web pod per
// worker behind a NodePort Service in namespace Namespace), points the
// Prober's workload signal at it and waits until every worker answers
// through it, saying so on out first. Errors: the workload cannot be
// made, or does not answer within the bound (a data plane that fails
// before anything is done would be blamed on what comes next).
func (e *Env) PrepareWorkload(ctx context.Context, out io.Writer) error {
	cs, err := e.S.Clientset()
	if err != nil {
		return err
	}
	image, err := smoketest.AgnhostImage(e.S.Config)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Preparing the probe workload (namespace %s)…\n", Namespace)
	port, err := EnsureWorkload(ctx, cs, image, e.Prober.Target.Scaled(2*time.Minute, 6*time.Minute))
	if err != nil {
		return fmt.Errorf("probe workload: %w", err)
	}
	e.Prober.NodePort = port
	return waitWorkload(ctx, e.Prober, e.Prober.Target.Scaled(time.Minute, 4*time.Minute))
}

// describeActions says what the drill does to which node, with the roles
// that node held when it started (etcd leader, Lease holders).
func describeActions(actions []Action, live Live) string {
	var parts []string
	for _, a := range actions {
		s := a.String()
		var roles []string
		if a.Node == live.EtcdLeader {
			roles = append(roles, "etcd leader")
		}
		for i, h := range live.LeaseHolders {
			if h == a.Node {
				roles = append(roles, []string{"controller-manager leader", "scheduler leader"}[min(i, 1)])
			}
		}
		if len(roles) > 0 {
			s += " (" + strings.Join(roles, ", ") + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// signalList names the signals p samples.
func signalList(p *Prober) string {
	s := []string{"api-read", "api-write", "etcd", "apiservers", "leases", "nodes"}
	if p.LBDial != nil {
		s = append(s, "haproxy")
	}
	if p.NodePort > 0 {
		s = append(s, "workload")
	}
	return strings.Join(s, ", ")
}

// WriteSummary writes the end of a drill for the terminal: how long it was
// broken, the failing signals, the raft term and Lease holders before and
// after, the verdict and where the report is. Lease holders and evidence
// come from the cluster, so control characters are escaped (termtext).
// The error says when an expectation did not hold (or is the writer's).
func WriteSummary(w io.Writer, store Store, rep Report) error {
	w = termtext.NewWriter(w)
	md, js := store.ReportPaths(rep.ID)
	fmt.Fprintf(w, "\nDrill %s: broken for %s", rep.ID, rep.BrokenFor)
	if rep.Recovery != nil {
		fmt.Fprintf(w, ", healthy again %s after the heal", *rep.Recovery)
	}
	fmt.Fprintln(w)
	for _, s := range rep.Signals {
		if s.Failed == 0 {
			continue
		}
		fmt.Fprintf(w, "  %-10s failed %d of %d samples, longest outage %s, total %s\n", s.Signal, s.Failed, s.Samples, s.Longest, s.Total)
	}
	fmt.Fprintf(w, "  etcd: raft term %d → %d", rep.Etcd.TermBefore, rep.Etcd.TermAfter)
	for _, l := range rep.Leases {
		fmt.Fprintf(w, "; %s %s → %s", l.Name, l.HolderBefore, l.HolderAfter)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Verdict:")
	failed := 0
	for _, e := range rep.Expectations {
		mark := map[string]string{Pass: "✓", Fail: "✗", Skip: "-"}[e.Result]
		if e.Result == Fail {
			failed++
		}
		fmt.Fprintf(w, "  %s %s\n      %s\n", mark, e.Text, e.Evidence)
	}
	fmt.Fprintf(w, "Report: %s (JSON: %s)\nTimeline drawn: %s (open it in a browser)\n", md, js, store.HTMLPath(rep.ID))
	if failed > 0 {
		return fmt.Errorf("drill %s: %d expectation(s) did not hold (see the report)", rep.ID, failed)
	}
	return nil
}

// waitWorkload waits until the workload signal is healthy: the web pod
// answers through its NodePort on every worker. A Service just made is not
// in every kube-proxy's rules at once, and a baseline sample failing then
// would be blamed on the drill. Errors: still failing after wait, or ctx
// ended.
func waitWorkload(ctx context.Context, p *Prober, wait time.Duration) error {
	if len(p.Workers) == 0 {
		return nil
	}
	deadline := time.Now().Add(wait)
	for {
		s := p.workload(ctx)
		if s.OK {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("probe workload: still failing after %s (%s): a drill needs the data plane healthy before it breaks anything", wait, s.Err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
