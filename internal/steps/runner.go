package steps

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/termtext"
)

// Options select what Runner.Run does.
type Options struct {
	// From and Until bound the steps to run, both inclusive; "" means the
	// first or the last step. They accept what Lookup accepts ("04-etcd",
	// "04", "etcd").
	From, Until string
	// DryRun checks without changing anything: each step with diffs prints
	// them and its Commands and Apply is never called. Steps after the first
	// one that would change are not checked (marked "not checked"), because
	// their Check would read a state that the earlier step has not made yet
	// (e.g. 04-etcd cannot ssh to machines that 01-machines would create) and
	// could hang on timeouts or report misleading diffs.
	DryRun bool
	// Recheck runs the Check of SkipWhenUnchanged steps (11-smoke) even when
	// nothing was applied since they last passed.
	Recheck bool
}

// StepResult is what happened to one step.
type StepResult struct {
	ID    string
	Title string
	// Clean: the first Check found nothing to do.
	Clean bool
	// Applied: Apply ran and the Check after it was clean.
	Applied bool
	// NotChecked is the reason a step was skipped in a dry-run ("04-etcd
	// would change"); "" otherwise.
	NotChecked string
	// Skipped is why a SkipWhenUnchanged step counted as clean without its
	// Check ("passed …, nothing applied since"); "" otherwise.
	Skipped string
	// Duration is the wall time of the step (Check, Apply and re-Check).
	Duration time.Duration
	// Diffs are the differences the first Check found: fixed when Applied,
	// would be fixed in a dry-run, being fixed when Apply failed.
	Diffs []Diff
	// Remaining are the differences the Check after Apply still found; set
	// only when the step failed that way.
	Remaining []Diff
	// Commands are the step's Commands(env, Diffs) in a dry-run.
	Commands []Command
	// Err is the step's *StepError when it failed.
	Err error
}

// Report lists the steps Run looked at, in order; a failed or cancelled run
// lists the steps up to and including the failed one.
type Report struct {
	DryRun bool
	Steps  []StepResult
}

// Changed returns the IDs of the steps that were applied, or in a dry-run
// would be.
func (r *Report) Changed() []string {
	var ids []string
	for _, s := range r.Steps {
		if s.Applied || (r.DryRun && !s.Clean && s.NotChecked == "" && s.Err == nil) {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

// Phases of a step, as named in a StepError.
const (
	PhaseCheck  = "check"
	PhaseApply  = "apply"
	PhaseVerify = "verify" // the Check after Apply
)

// StepError is a failed step. Its message names the step, the phase, the
// node when known, what failed (the error or the diffs) and the logs to read.
type StepError struct {
	// Step and Title identify the step ("04-etcd", "Bootstrap the etcd cluster").
	Step, Title string
	// Phase is PhaseCheck, PhaseApply or PhaseVerify.
	Phase string
	// Node is the node that failed ("" = cluster-wide or unknown): from an
	// OnNode-wrapped error, or the single node all remaining diffs are on.
	Node string
	// Diffs: for PhaseApply the diffs being fixed; for PhaseVerify the diffs
	// still there after Apply.
	Diffs []Diff
	// Err is the step's error (nil when PhaseVerify found diffs).
	Err error
	// Logs are the log files worth reading: the involved nodes' logs that
	// exist, then the Runner's own log (<state>/logs/_khw.log).
	Logs []string
}

// Error renders, e.g.:
//
//	step 04-etcd (Bootstrap the etcd cluster): still differs after apply on node cp1:
//	  - cp1: etcd.service is not active (fix: start etcd.service)
//	  look at: /…/logs/cp1.log, /…/logs/_khw.log
func (e *StepError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %s (%s): ", e.Step, e.Title)
	switch e.Phase {
	case PhaseCheck:
		b.WriteString("check failed")
	case PhaseApply:
		b.WriteString("apply failed")
	case PhaseVerify:
		if e.Err != nil {
			b.WriteString("check after apply failed")
		} else {
			b.WriteString("still differs after apply")
		}
	default:
		b.WriteString("failed")
	}
	if e.Node != "" {
		b.WriteString(" on node " + e.Node)
	}
	if e.Err != nil {
		msg := e.Err.Error()
		var ne *NodeError
		if errors.As(e.Err, &ne) && ne == e.Err && ne.Node == e.Node {
			msg = ne.Err.Error()
		}
		b.WriteString(": " + msg)
	}
	if len(e.Diffs) > 0 {
		if e.Phase == PhaseApply {
			b.WriteString("\n  while fixing:")
		} else {
			b.WriteString(":")
		}
		// In apply the diffs are context, not the error: keep the list short
		// (the full list is in the cluster log).
		shown := e.Diffs
		if e.Phase == PhaseApply && len(shown) > MaxDiffsInError {
			shown = shown[:MaxDiffsInError]
		}
		for _, d := range shown {
			b.WriteString("\n  - " + d.String())
		}
		if n := len(e.Diffs) - len(shown); n > 0 {
			fmt.Fprintf(&b, "\n  … and %d more (all of them are in %s)", n, ClusterLogName)
		}
	}
	if len(e.Logs) > 0 {
		b.WriteString("\n  look at: " + strings.Join(e.Logs, ", "))
	}
	return b.String()
}

// MaxDiffsInError bounds the "while fixing" list of an apply error.
const MaxDiffsInError = 5

// Unwrap returns Err, so errors.Is(err, context.Canceled) works.
func (e *StepError) Unwrap() error { return e.Err }

// Runner runs steps and prints one status line per step to Out.
type Runner struct {
	// Env is handed to every step; required.
	Env *Env
	// Out receives the status lines; nil discards them.
	Out io.Writer
	// TTY enables the spinner: the status line is redrawn in place with "\r"
	// while the step runs. NewRunner sets it when Out is a terminal; set it
	// false for --no-spinner or a dumb terminal.
	TTY bool
	// SpinInterval is the spinner's redraw period; 0 means 100ms.
	SpinInterval time.Duration

	mu sync.Mutex // serialises writes to Out (spinner goroutine vs. Run)
}

// NewRunner returns a Runner printing to out, with the spinner on when out
// is an *os.File attached to a terminal (golang.org/x/term.IsTerminal).
func NewRunner(env *Env, out io.Writer) *Runner {
	r := &Runner{Env: env, Out: out}
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		r.TTY = true
	}
	return r
}

// Run runs the selected steps in order (see Options) and returns what
// happened. For each step: Check; no diffs → "✓ ID  Title  (clean, 0.3s)";
// diffs → Apply(diffs), then Check again, which must return no diffs →
// "✓ ID  Title  (applied 2 changes, 4.1s)". In a dry-run a step with diffs
// prints "• ID  Title  (would change 2, 0.3s)", then the diffs and the
// commands, and later steps print "- ID  Title  (not checked: ID would
// change)".
//
// Errors: a bad From/Until or duplicate IDs (nothing runs); a failed step
// returns a *StepError and prints "✗ ID  Title  (failed in PHASE, 1.2s)",
// later steps do not run; a cancelled ctx stops before the next step with an
// error wrapping ctx.Err() that names the step not started (a step already
// running sees ctx itself; its error is a *StepError wrapping ctx.Err()). The
// Report is non-nil whenever steps were selected.
func (r *Runner) Run(ctx context.Context, steps []Step, opts Options) (*Report, error) {
	if r.Env == nil {
		return nil, errors.New("steps.Runner.Env is nil: build it with steps.NewEnv")
	}
	sel, err := Select(steps, opts.From, opts.Until)
	if err != nil {
		return nil, err
	}
	r.Env.DryRun = opts.DryRun
	r.Env.mu.Lock()
	r.Env.note = func(msg string) { r.line("    " + msg) }
	r.Env.mu.Unlock()
	defer func() {
		r.Env.mu.Lock()
		r.Env.note = nil
		r.Env.mu.Unlock()
	}()
	rep := &Report{DryRun: opts.DryRun}
	wouldChange := ""
	// earlierClean: every step before the current one, from the first of
	// the whole list, was checked clean in this run.
	earlierClean := len(sel) > 0 && len(steps) > 0 && sel[0].ID() == steps[0].ID()
	for i, s := range sel {
		if err := ctx.Err(); err != nil {
			r.logf("%s not started: %v", s.ID(), err)
			done := "no step finished"
			if i > 0 {
				done = "steps up to " + sel[i-1].ID() + " finished"
			}
			r.line(fmt.Sprintf("✗ %s  %s  (not started: interrupted)", s.ID(), s.Title()))
			return rep, fmt.Errorf("interrupted before step %s (%s; run again to continue, finished steps will check clean): %w", s.ID(), done, err)
		}
		if wouldChange != "" {
			res := StepResult{ID: s.ID(), Title: s.Title(), NotChecked: wouldChange + " would change"}
			r.line(fmt.Sprintf("- %s  %s  (not checked: %s)", s.ID(), s.Title(), res.NotChecked))
			rep.Steps = append(rep.Steps, res)
			continue
		}
		if why := r.Env.skipReason(s, earlierClean, opts.Recheck); why != "" {
			res := StepResult{ID: s.ID(), Title: s.Title(), Clean: true, Skipped: why}
			r.logf("%s check: skipped (%s)", s.ID(), why)
			r.line(fmt.Sprintf("✓ %s  %s  (clean, 0s) skipped: %s", s.ID(), s.Title(), why))
			rep.Steps = append(rep.Steps, res)
			continue
		}
		res, err := r.runStep(ctx, s, opts.DryRun)
		rep.Steps = append(rep.Steps, res)
		if err != nil {
			return rep, err
		}
		earlierClean = earlierClean && res.Clean
		if res.Clean || res.Applied {
			if err := r.Env.Passed(s); err != nil {
				r.logf("%s: record the pass: %v", s.ID(), err)
			}
		}
		if opts.DryRun && !res.Clean {
			wouldChange = s.ID()
		}
	}
	return rep, nil
}

func (r *Runner) runStep(ctx context.Context, s Step, dryRun bool) (StepResult, error) {
	res := StepResult{ID: s.ID(), Title: s.Title()}
	start := time.Now()
	sp := r.startSpinner(s, start)
	defer sp.stop()

	fail := func(phase string, diffs []Diff, err error) (StepResult, error) {
		res.Duration = time.Since(start)
		se := r.stepError(s, phase, diffs, err)
		res.Err = se
		r.logf("%s %s failed: %s", s.ID(), phase, se.Error())
		sp.stop()
		r.line(fmt.Sprintf("✗ %s  %s  (failed in %s, %s)", s.ID(), s.Title(), phase, fmtDuration(res.Duration)))
		return res, se
	}

	diffs, err := s.Check(ctx, r.Env)
	if err != nil {
		return fail(PhaseCheck, nil, err)
	}
	res.Diffs = diffs
	if len(diffs) == 0 {
		res.Clean = true
		res.Duration = time.Since(start)
		r.logf("%s check: clean", s.ID())
		sp.stop()
		// A check that runs tests (the smoke) did work: say they passed,
		// so that "clean" keeps meaning "looked, nothing to do".
		word := "clean"
		if _, ok := s.(SkipWhenUnchanged); ok {
			word = "passed"
		}
		r.line(fmt.Sprintf("✓ %s  %s  (%s, %s)", s.ID(), s.Title(), word, fmtDuration(res.Duration)))
		return res, nil
	}
	r.logf("%s check: %d difference(s):%s", s.ID(), len(diffs), diffList(diffs))

	if dryRun {
		res.Commands = s.Commands(r.Env, diffs)
		res.Duration = time.Since(start)
		sp.stop()
		var b strings.Builder
		fmt.Fprintf(&b, "• %s  %s  (would change %d, %s)", s.ID(), s.Title(), len(diffs), fmtDuration(res.Duration))
		for _, d := range diffs {
			b.WriteString("\n    - " + d.String())
		}
		for _, c := range res.Commands {
			b.WriteString("\n    " + strings.ReplaceAll(c.String(), "\n", "\n    "))
		}
		r.line(b.String())
		return res, nil
	}

	sp.phase(fmt.Sprintf("applying %d %s", len(diffs), Plural(len(diffs), "change", "changes")))
	// Recorded before Apply: an Apply that fails half-way has changed the
	// cluster too.
	if err := r.Env.updateRecord(func(rec *record) { rec.LastChange = time.Now() }); err != nil {
		return fail(PhaseApply, diffs, fmt.Errorf("record the change: %w", err))
	}
	if err := s.Apply(ctx, r.Env, diffs); err != nil {
		return fail(PhaseApply, diffs, err)
	}
	r.logf("%s apply: done", s.ID())

	sp.phase("verifying")
	left, err := s.Check(ctx, r.Env)
	if err != nil {
		return fail(PhaseVerify, nil, err)
	}
	if len(left) > 0 {
		res.Remaining = left
		return fail(PhaseVerify, left, nil)
	}
	res.Applied = true
	res.Duration = time.Since(start)
	r.logf("%s verify: clean", s.ID())
	sp.stop()
	var b strings.Builder
	fmt.Fprintf(&b, "✓ %s  %s  (applied %d %s, %s)", s.ID(), s.Title(), len(diffs), Plural(len(diffs), "change", "changes"), fmtDuration(res.Duration))
	if r.Env.Verbosity >= 1 {
		for _, d := range diffs {
			b.WriteString("\n    fixed " + d.String())
		}
	}
	r.line(b.String())
	return res, nil
}

// stepError builds the StepError, picking the node and the logs to read.
func (r *Runner) stepError(s Step, phase string, diffs []Diff, err error) *StepError {
	se := &StepError{Step: s.ID(), Title: s.Title(), Phase: phase, Diffs: diffs, Err: err}
	var nodes []string
	var ne *NodeError
	if errors.As(err, &ne) {
		se.Node = ne.Node
		nodes = []string{ne.Node}
	} else {
		set := map[string]bool{}
		for _, d := range diffs {
			if d.Node != "" {
				set[d.Node] = true
			}
		}
		for n := range set {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		if len(nodes) == 1 && phase == PhaseVerify {
			se.Node = nodes[0]
		}
	}
	for _, n := range nodes {
		if p := r.Env.NodeLogPath(n); n != "" && fsutil.Exists(p) {
			se.Logs = append(se.Logs, p)
		}
	}
	if p := r.Env.NodeLogPath(""); !r.Env.DryRun || fsutil.Exists(p) {
		se.Logs = append(se.Logs, p)
	}
	return se
}

// logf appends a timestamped line to the Runner's own log (node ""). A log
// that cannot be written must not fail the run, so errors are dropped.
func (r *Runner) logf(format string, args ...any) {
	fmt.Fprintf(r.Env.NodeLog(""), "%s %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
}

// line prints a finished status line (ending the spinner's line on a TTY).
// s holds text read on the nodes (differences, errors): its control
// characters are escaped (termtext), the spinner's own are not.
func (r *Runner) line(s string) {
	if r.Out == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.TTY {
		io.WriteString(r.Out, "\r\x1b[K")
	}
	io.WriteString(r.Out, termtext.Escape(s)+"\n")
}

func diffList(diffs []Diff) string {
	var b strings.Builder
	for _, d := range diffs {
		b.WriteString("\n  - " + d.String())
	}
	return b.String()
}

// Plural returns one when n is 1, else many ("1 change", "2 changes").
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// fmtDuration renders a step duration: "0.3s" below a minute (one decimal),
// else rounded to the second ("1m12s").
func fmtDuration(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

var spinFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// spinner redraws "⠋ ID  Title  (phase 1.2s)" in place until stopped. The
// zero spinner (no TTY) does nothing.
type spinner struct {
	r     *Runner
	mu    sync.Mutex
	ph    string
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
	label string
	start time.Time
}

func (r *Runner) startSpinner(s Step, start time.Time) *spinner {
	sp := &spinner{r: r, ph: "checking"}
	if !r.TTY || r.Out == nil {
		return sp
	}
	sp.done = make(chan struct{})
	sp.label = s.ID() + "  " + s.Title()
	sp.start = start
	every := r.SpinInterval
	if every <= 0 {
		every = 100 * time.Millisecond
	}
	sp.wg.Add(1)
	go func() {
		defer sp.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for i := 0; ; i++ {
			sp.draw(spinFrames[i%len(spinFrames)])
			select {
			case <-sp.done:
				return
			case <-t.C:
			}
		}
	}()
	return sp
}

func (sp *spinner) phase(p string) {
	sp.mu.Lock()
	sp.ph = p
	sp.mu.Unlock()
}

func (sp *spinner) draw(frame string) {
	sp.mu.Lock()
	ph := sp.ph
	sp.mu.Unlock()
	sp.r.mu.Lock()
	defer sp.r.mu.Unlock()
	fmt.Fprintf(sp.r.Out, "\r\x1b[K%s %s  (%s %s)", frame, sp.label, ph, fmtDuration(time.Since(sp.start)))
}

// stop ends the redraw goroutine and waits for it; safe to call twice.
func (sp *spinner) stop() {
	if sp.done == nil {
		return
	}
	sp.once.Do(func() { close(sp.done) })
	sp.wg.Wait()
}
