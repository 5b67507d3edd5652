package drill

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

	"github.com/khw-dev/khw/internal/termtext"
)

// Actuator performs and reverses Actions on the cluster.
type Actuator interface {
	// Break performs a (stop the unit, or power the node off at once).
	Break(ctx context.Context, a Action) error
	// Heal reverses a (start the unit without waiting for it to be ready,
	// or power the node on). Healing what is not broken is a no-op.
	Heal(ctx context.Context, a Action) error
}

// DefaultMaxRecovery bounds the wait for every signal to be healthy again
// after the heal, on nspawn nodes.
const DefaultMaxRecovery = 120 * time.Second

// Runner drives one drill: sampling, break, wait, heal, recovery, report.
type Runner struct {
	Store  Store
	Prober *Prober
	Act    Actuator
	// Out receives the live timeline (one line per event).
	Out io.Writer
	// Baseline is how long to sample before breaking (3 s by default).
	Baseline time.Duration
	// Settle is how long every signal must stay healthy after the heal to
	// call the cluster recovered (5 s by default); MaxRecovery bounds the
	// wait (DefaultMaxRecovery, 2× on emulated nodes: Prober.Emulated).
	Settle      time.Duration
	MaxRecovery time.Duration
	// Quiet keeps the live timeline off Out (the events still go to the
	// report): for an operation that prints its own progress.
	Quiet bool

	mu      sync.Mutex
	tracker *Tracker
	brokeAt time.Time
	pending []Sample
	events  []Event // not printed yet: printed in time order, a second late
	lastBad map[Signal]time.Time
	lastAt  map[Signal]time.Time
}

func (r *Runner) defaults() {
	if r.Baseline == 0 {
		r.Baseline = 3 * time.Second
	}
	if r.Settle == 0 {
		r.Settle = 5 * time.Second
	}
	if r.MaxRecovery == 0 {
		r.MaxRecovery = DefaultMaxRecovery
		if r.Prober != nil {
			r.MaxRecovery = r.Prober.pace(DefaultMaxRecovery, 2)
		}
	}
	r.tracker = NewTracker()
	r.lastBad = map[Signal]time.Time{}
	r.lastAt = map[Signal]time.Time{}
}

// ErrInterrupted is returned (wrapped) when ctx ended during a drill (see
// Run). errors.Is(err, context.Canceled) is true for it too, so callers
// that map cancellation to an exit status need nothing special.
var ErrInterrupted error = interruptedError{}

type interruptedError struct{}

func (interruptedError) Error() string        { return "interrupted" }
func (interruptedError) Is(target error) bool { return target == context.Canceled }

// sampling runs the prober in the background, printing events and
// appending samples to the drill's file every second. stop ends it and
// flushes.
func (r *Runner) sampling(rec *Record) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan Sample, 256)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		r.Prober.Run(ctx, ch)
		close(ch)
	}()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case s, ok := <-ch:
				if !ok {
					r.flush(rec)
					r.printEvents(true)
					return
				}
				r.observe(s)
			case <-tick.C:
				r.flush(rec)
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

func (r *Runner) observe(s Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = append(r.pending, s)
	if s.At.After(r.lastAt[s.Signal]) {
		r.lastAt[s.Signal] = s.At
	}
	if !s.OK && s.At.After(r.lastBad[s.Signal]) {
		r.lastBad[s.Signal] = s.At
	}
	r.events = append(r.events, r.tracker.Add(s)...)
	if r.Prober != nil {
		r.Prober.Done(s)
	}
}

// eventHoldback delays the printing of events so that those of probes that
// answer at different speeds come out in time order; a probe still in
// flight holds them back longer (printEvents).
const eventHoldback = time.Second

// emit queues one event of the drill itself (break, heal).
func (r *Runner) emit(at time.Time, text string) {
	r.mu.Lock()
	r.events = append(r.events, Event{At: at, Signal: "drill", Text: text})
	r.mu.Unlock()
}

// printEvents prints the queued events older than the holdback and than
// the oldest probe still in flight (all of them when all is true), sorted
// by time, relative to the break ("before" while nothing is broken yet):
// the live timeline comes out in time order.
func (r *Runner) printEvents(all bool) {
	r.mu.Lock()
	sort.SliceStable(r.events, func(i, j int) bool { return r.events[i].At.Before(r.events[j].At) })
	cut := len(r.events)
	if !all {
		limit := time.Now().Add(-eventHoldback)
		if r.Prober != nil {
			// A slow probe's sample, observed later, can be older than
			// the events queued now: wait for it.
			if t, ok := r.Prober.InFlightSince(); ok && t.Before(limit) {
				limit = t
			}
		}
		cut = sort.Search(len(r.events), func(i int) bool { return r.events[i].At.After(limit) })
	}
	out := r.events[:cut]
	r.events = append([]Event(nil), r.events[cut:]...)
	ref := r.brokeAt
	r.mu.Unlock()
	if r.Quiet {
		return
	}
	for _, e := range out {
		if ref.IsZero() {
			fmt.Fprintf(r.Out, "  %s  %-10s  %s\n", "  before", e.Signal, termtext.Escape(e.Text))
			continue
		}
		fmt.Fprintf(r.Out, "  %s\n", termtext.Escape(e.Line(ref)))
	}
}

func (r *Runner) flush(rec *Record) {
	r.printEvents(false)
	r.mu.Lock()
	batch := r.pending
	r.pending = nil
	r.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	if err := AppendSamples(r.Store.SamplesPath(rec.ID), batch); err != nil {
		fmt.Fprintf(r.Out, "  warning: cannot save samples: %v\n", err)
	}
}

// healthySince returns how long every sampled signal has been healthy (0
// if one failed in its latest sample), considering only samples sent at or
// after from.
func (r *Runner) healthySince(from time.Time, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lastAt) == 0 {
		return 0
	}
	since := from
	for sig, at := range r.lastAt {
		if at.Before(from) {
			return 0 // no sample of this signal since from yet
		}
		if bad := r.lastBad[sig]; !bad.Before(from) {
			if !bad.Before(at) {
				return 0
			}
			if bad.After(since) {
				since = bad
			}
		}
	}
	return now.Sub(since)
}

// Run performs the drill rec (already planned and saved as active): it
// samples a baseline, breaks, keeps the cluster broken for rec.Spec.For (or,
// without For, until ctx ends or another process heals it), heals, waits
// for recovery, and writes the report.
//
// Without For, a ctx that ends leaves the cluster broken: Run saves the
// record and returns an error wrapping ErrInterrupted (heal later with
// Heal). With For, a ctx that ends heals at once, writes the report and
// returns an error wrapping ErrInterrupted.
func (r *Runner) Run(ctx context.Context, rec *Record) (Report, error) {
	r.defaults()
	rec.WatcherPID = os.Getpid()
	rec.StartedAt = time.Now()
	if err := r.Store.Save(rec); err != nil {
		return Report{}, err
	}
	stop := r.sampling(rec)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	select {
	case <-time.After(r.Baseline):
	case <-ctx.Done():
		stop()
		stopped = true
		r.Store.ClearActive()
		return Report{}, fmt.Errorf("drill %s: %w before anything was broken", rec.ID, ErrInterrupted)
	}

	// Break: every action at once.
	rec.BrokeAt = time.Now()
	r.mu.Lock()
	r.brokeAt = rec.BrokeAt
	r.mu.Unlock()
	r.emit(rec.BrokeAt, "break: "+actionList(rec.Actions, false))
	breakErr := r.each(context.WithoutCancel(ctx), rec.Actions, r.Act.Break)
	rec.Applied = len(rec.Actions)
	rec.BreakTook = time.Since(rec.BrokeAt)
	r.emit(time.Now(), "break done (took "+fmtDur(rec.BreakTook)+")")
	if err := r.Store.Save(rec); err != nil {
		return Report{}, err
	}
	if breakErr != nil {
		fmt.Fprintf(r.Out, "  the break failed (%v): healing what was done\n", breakErr)
	}

	// Broken.
	interrupted := false
	if breakErr == nil {
		interrupted = r.waitBroken(ctx, rec)
	}
	if interrupted && rec.Spec.For == 0 {
		stop()
		stopped = true
		rec.WatcherPID = 0
		if err := r.Store.Save(rec); err != nil {
			return Report{}, err
		}
		return Report{}, fmt.Errorf("drill %s: %w; the cluster is still broken (%s): run khw heal", rec.ID, ErrInterrupted, actionList(rec.Actions, false))
	}

	// Heal (unless another process already did).
	if cur, err := r.Store.Load(rec.ID); err == nil && cur.HealedAt != nil {
		rec.HealedAt = cur.HealedAt
	} else {
		if err := r.heal(rec); err != nil {
			return Report{}, err
		}
	}

	// Recovery.
	rec.Interrupted = interrupted
	if !interrupted {
		r.waitRecovered(ctx, *rec.HealedAt)
	}
	stop()
	stopped = true
	rep, err := r.finish(rec)
	if err != nil {
		return rep, err
	}
	if breakErr != nil {
		return rep, fmt.Errorf("drill %s: the break failed: %w", rec.ID, breakErr)
	}
	if interrupted {
		return rep, fmt.Errorf("drill %s: %w; healed before exiting", rec.ID, ErrInterrupted)
	}
	return rep, nil
}

// waitBroken waits for the --for time, or without it for another process to
// heal; true when ctx ended first.
func (r *Runner) waitBroken(ctx context.Context, rec *Record) bool {
	var deadline <-chan time.Time
	if rec.Spec.For > 0 {
		t := time.NewTimer(rec.Spec.For - time.Since(rec.BrokeAt))
		defer t.Stop()
		deadline = t.C
	}
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return true
		case <-deadline:
			return false
		case <-poll.C:
			if cur, err := r.Store.Load(rec.ID); err == nil && cur.HealedAt != nil {
				r.emit(*cur.HealedAt, "healed by khw heal in another shell")
				rec.HealedAt = cur.HealedAt
				return false
			}
		}
	}
}

func (r *Runner) heal(rec *Record) error {
	now := time.Now()
	rec.HealedAt = &now
	r.emit(now, "heal: "+actionList(rec.Actions[:rec.Applied], true))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := r.each(ctx, rec.Actions[:rec.Applied], r.Act.Heal); err != nil {
		rec.HealedAt = nil
		r.Store.Save(rec)
		return fmt.Errorf("drill %s: heal failed: %w (the drill stays active: fix the node and run khw heal again)", rec.ID, err)
	}
	return r.Store.Save(rec)
}

// waitRecovered returns when every signal has been healthy for Settle, or
// after MaxRecovery, or when ctx ends.
func (r *Runner) waitRecovered(ctx context.Context, healedAt time.Time) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	limit := time.NewTimer(r.MaxRecovery)
	defer limit.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-limit.C:
			fmt.Fprintf(r.Out, "  not every signal recovered within %s of the heal\n", r.MaxRecovery)
			return
		case now := <-tick.C:
			if r.healthySince(healedAt, now) >= r.Settle {
				return
			}
		}
	}
}

func (r *Runner) finish(rec *Record) (Report, error) {
	now := time.Now()
	rec.EndedAt = &now
	rec.WatcherPID = 0
	if err := r.Store.Save(rec); err != nil {
		return Report{}, err
	}
	samples, err := ReadSamples(r.Store.SamplesPath(rec.ID))
	if err != nil {
		return Report{}, err
	}
	rep := Analyze(*rec, samples, rec.Facts)
	if _, _, err := r.Store.WriteReport(rep, samples); err != nil {
		return rep, err
	}
	if err := r.Store.ClearActive(); err != nil {
		return rep, err
	}
	return rep, nil
}

// Heal restores the active drill rec: reverses its actions, then (when no
// other process is watching it) samples until the cluster has recovered and
// writes the report. watching is true when a live `khw break` will write the
// report instead.
func (r *Runner) Heal(ctx context.Context, rec *Record) (rep Report, watching bool, err error) {
	r.defaults()
	if rec.HealedAt == nil {
		if err := r.heal(rec); err != nil {
			return Report{}, false, err
		}
	}
	if rec.WatcherPID != 0 && rec.WatcherPID != os.Getpid() && ProcessAlive(rec.WatcherPID) {
		return Report{}, true, nil
	}
	r.brokeAt = rec.BrokeAt
	rec.WatcherPID = os.Getpid()
	if err := r.Store.Save(rec); err != nil {
		return Report{}, false, err
	}
	stop := r.sampling(rec)
	r.waitRecovered(ctx, *rec.HealedAt)
	stop()
	rep, err = r.finish(rec)
	return rep, false, err
}

// each runs fn for every action in parallel and joins the errors.
func (r *Runner) each(ctx context.Context, actions []Action, fn func(context.Context, Action) error) error {
	errs := make([]error, len(actions))
	var wg sync.WaitGroup
	for i, a := range actions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx, a); err != nil {
				errs[i] = fmt.Errorf("%s: %w", a, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func actionList(as []Action, heal bool) string {
	var parts []string
	for _, a := range as {
		if heal {
			parts = append(parts, a.HealString())
		} else {
			parts = append(parts, a.String())
		}
	}
	return strings.Join(parts, "; ")
}
