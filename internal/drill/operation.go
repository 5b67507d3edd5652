package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/state"
)

// OperationsOf is the store of day-2 operations of state directory d:
// <state>/operations, one directory per operation with the Store layout
// (samples.jsonl, report.md, report.json).
func OperationsOf(d state.Dir) Store { return Store{Dir: filepath.Join(d.Root, "operations")} }

// SigOperation is the signal of the operation's own events in a timeline
// (each step starting, ending or failing).
const SigOperation Signal = "operation"

// OpStep is one step of an operation, in seconds after the operation
// started (the first step).
type OpStep struct {
	Name string  `json:"name"`
	From Seconds `json:"from"`
	To   Seconds `json:"to"`
	// Err is why the step failed ("" when it did not).
	Err string `json:"error,omitempty"`
}

// OpFact is one result of an operation worth a line in its report (the
// snapshot's revision, the revision after the restore …), in the order
// the operation found them.
type OpFact struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// OpReport is what the cluster's clients saw while a day-2 operation ran:
// its steps, each signal's failed samples and failing stretches (times in
// seconds after the first step started), and the timeline.
type OpReport struct {
	ID        string `json:"id"`
	Cluster   string `json:"cluster"`
	Operation string `json:"operation"`
	// Command is the khw command line that ran it.
	Command   string    `json:"command"`
	StartedAt time.Time `json:"startedAt"`
	// EndedAt is when the last step ended; Took is from StartedAt to it.
	EndedAt time.Time `json:"endedAt"`
	Took    Seconds   `json:"took"`
	Steps   []OpStep  `json:"steps"`
	Facts   []OpFact  `json:"facts,omitempty"`
	// Signals: RecoveredAfterHeal counts from the end of the last step.
	Signals []SignalSummary `json:"signals"`
	// Recovery: seconds from the end of the last step until every signal
	// was healthy and stayed so (nil: not within the wait, or failed).
	Recovery *Seconds `json:"recovery,omitempty"`
	Timeline []Event  `json:"timeline"`
	// Err is why the operation failed ("" when it succeeded).
	Err string `json:"error,omitempty"`
}

// Watch samples a cluster with a Prober while a day-2 operation runs its
// steps, prints the live timeline, and writes the operation's report. Use
// StartWatch, then Step for each step, then Finish.
type Watch struct {
	r    *Runner
	rec  *Record
	stop func()
	rep  OpReport
}

// StartWatch starts sampling the cluster with p for operation op (e.g.
// "etcd restore", run by the khw command line command) and stores it in
// store under a new ID (<UTC time>-<op with dashes>). It samples a
// baseline (3 s) before it returns, so the report shows the cluster
// before the first step. Nothing is printed while it samples (the
// operation prints its own progress; the events are in the report); out
// gets the line about a recovery that did not come. Errors: the store's
// directory cannot be made.
func StartWatch(store Store, p *Prober, out io.Writer, cluster, op, command string) (*Watch, error) {
	now := time.Now()
	id := now.UTC().Format("20060102-150405") + "-" + strings.Join(strings.Fields(op), "-")
	if err := fsutil.EnsureDir(store.dir(id)); err != nil {
		return nil, err
	}
	rec := &Record{ID: id, Cluster: cluster, StartedAt: now}
	r := &Runner{Store: store, Prober: p, Out: out, Quiet: true}
	r.defaults()
	w := &Watch{r: r, rec: rec, rep: OpReport{ID: id, Cluster: cluster, Operation: op, Command: command}}
	w.stop = r.sampling(rec)
	time.Sleep(r.Baseline)
	w.rep.StartedAt = time.Now()
	return w, nil
}

// ID is the operation's ID (its directory in the store).
func (w *Watch) ID() string { return w.rep.ID }

// Step runs fn as the operation's step name and records its times (the
// report's timeline gets its start, and its failure). It returns fn's
// error.
func (w *Watch) Step(name string, fn func() error) error {
	start := time.Now()
	err := fn()
	st := OpStep{Name: name, From: secs(start.Sub(w.rep.StartedAt)), To: secs(time.Since(w.rep.StartedAt))}
	if err != nil {
		st.Err = err.Error()
	}
	w.rep.Steps = append(w.rep.Steps, st)
	return err
}

// Fact records one result for the report.
func (w *Watch) Fact(name, value string) {
	w.rep.Facts = append(w.rep.Facts, OpFact{Name: name, Value: value})
}

// Finish ends the operation: when opErr is nil it first samples until
// every signal has been healthy for a few seconds (at most the Runner's
// MaxRecovery, or until ctx ends), then stops sampling and writes the
// report (report.json and report.md, 0600). It returns the report and
// the paths of its files; err is the store's.
func (w *Watch) Finish(ctx context.Context, opErr error) (rep OpReport, md, js string, err error) {
	w.rep.EndedAt = time.Now()
	if opErr == nil {
		w.r.waitRecovered(ctx, w.rep.EndedAt)
	}
	w.stop()
	end := time.Now()
	if opErr != nil {
		w.rep.Err = opErr.Error()
	}
	samples, err := ReadSamples(w.r.Store.SamplesPath(w.rep.ID))
	if err != nil {
		return w.rep, "", "", err
	}
	w.rep = w.rep.analyze(samples, end)
	md, js, err = w.r.Store.WriteOpReport(w.rep, samples)
	return w.rep, md, js, err
}

// End ends the operation as khw prints it to out: when opErr is nil it
// says it watches until every signal is healthy again, then writes the
// report (Finish) and prints its summary (WriteOpSummary). It returns the
// report, and opErr joined with the report's own error.
func (w *Watch) End(ctx context.Context, out io.Writer, opErr error) (OpReport, error) {
	if opErr == nil {
		fmt.Fprintln(out, "\nWatching until every signal is healthy again…")
	}
	rep, md, js, err := w.Finish(ctx, opErr)
	if err != nil {
		return rep, errors.Join(opErr, err)
	}
	WriteOpSummary(out, rep, md, js)
	return rep, opErr
}

// analyze fills r's Took, Signals, Recovery and Timeline from samples
// (any order), the watch having ended at end: each signal summed up from
// the first step on, the recovery counted from the last step's end (none
// for a failed operation), and the timeline of the samples' events and
// the steps' starts.
func (r OpReport) analyze(samples []Sample, end time.Time) OpReport {
	r.Took = secs(r.EndedAt.Sub(r.StartedAt))
	s := slices.Clone(samples)
	SortSamples(s)
	rec := Record{BrokeAt: r.StartedAt, HealedAt: &r.EndedAt}
	by := map[Signal][]Sample{}
	for _, x := range s {
		by[x.Signal] = append(by[x.Signal], x)
	}
	r.Signals = nil
	for _, sig := range Signals {
		if list := by[sig]; len(list) > 0 {
			r.Signals = append(r.Signals, signalSummary(sig, list, rec, end))
		}
	}
	if r.Err == "" {
		r.Recovery = recovery(r.Signals, rec)
	}
	tr := NewTracker()
	r.Timeline = nil
	for _, x := range s {
		r.Timeline = append(r.Timeline, tr.Add(x)...)
	}
	for _, st := range r.Steps {
		r.Timeline = append(r.Timeline, Event{At: r.at(st.From), Signal: SigOperation, Text: st.Name})
		if st.Err != "" {
			r.Timeline = append(r.Timeline, Event{At: r.at(st.To), Signal: SigOperation, Text: "failed: " + shorten(oneLine(st.Err), 160)})
		}
	}
	slices.SortStableFunc(r.Timeline, func(a, b Event) int { return a.At.Compare(b.At) })
	return r
}

// WriteOpReport writes the Markdown, JSON and HTML reports of rep (0600);
// samples are the operation's (for the HTML report's picture).
func (s Store) WriteOpReport(rep OpReport, samples []Sample) (md, js string, err error) {
	page, err := rep.HTML(samples)
	if err != nil {
		return "", "", err
	}
	return s.writeReports(rep.ID, rep, rep.Markdown(), page)
}

// Markdown renders the operation's report for people: its steps, its
// facts, what each signal saw, and the timeline.
func (r OpReport) Markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	verdict := "done"
	if r.Err != "" {
		verdict = "FAILED"
	}
	p("# %s — %s\n\n", mdText(r.title()), verdict)
	p("Cluster %s: %s, started %s UTC, took %s", mdCode(r.Cluster), mdCode(r.Command), r.StartedAt.UTC().Format("2006-01-02 15:04:05.0"), r.Took)
	if r.Recovery != nil {
		p(", every signal healthy again %s after it", *r.Recovery)
	}
	p(".\n\n")
	if r.Err != "" {
		p("Error: %s\n\n", mdText(r.Err))
	}
	p("%s", r.stepTable().markdown())
	if len(r.Facts) > 0 {
		p("\n## Results\n\n")
		for _, f := range r.Facts {
			p("- %s: %s\n", mdText(f.Name), mdText(f.Value))
		}
	}
	p("\n%s", r.signalTable().markdown())
	p("\n## Timeline\n\n%s", mdTimeline(r.Timeline, r.StartedAt))
	return b.String()
}

// title is "Etcd restore <id>": the operation's name, capitalised, and
// its ID.
func (r OpReport) title() string {
	if r.Operation == "" {
		return "Operation " + r.ID
	}
	return strings.ToUpper(r.Operation[:1]) + r.Operation[1:] + " " + r.ID
}

// WriteOpSummary writes the end of an operation for the terminal: how
// long it took, the signals that failed (count, longest and total
// outage), and where the report is (report.md, report.json, report.html).
func WriteOpSummary(w io.Writer, rep OpReport, md, js string) {
	fmt.Fprintf(w, "\n%s %s: took %s", rep.Operation, rep.ID, rep.Took)
	if rep.Recovery != nil {
		fmt.Fprintf(w, ", every signal healthy again %s after it", *rep.Recovery)
	}
	fmt.Fprintln(w)
	clean := true
	for _, s := range rep.Signals {
		if s.Failed == 0 {
			continue
		}
		clean = false
		fmt.Fprintf(w, "  %-10s failed %d of %d samples, longest outage %s, total %s\n", s.Signal, s.Failed, s.Samples, s.Longest, s.Total)
	}
	if clean {
		fmt.Fprintln(w, "  no signal failed")
	}
	fmt.Fprintf(w, "Report: %s (JSON: %s)\nTimeline drawn: %s (open it in a browser)\n", md, js, htmlBeside(md))
}
