package drill

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Event is one change the prober saw: a signal starting or stopping to
// fail, a new etcd leader or raft term, a Lease changing hands, a backend
// going DOWN, a node turning NotReady.
type Event struct {
	At     time.Time `json:"at"`
	Signal Signal    `json:"signal"`
	Text   string    `json:"text"`
}

// Tracker turns a stream of samples into Events. Samples of one signal that
// arrive older than the newest one already seen (a slow probe overtaken by
// later ones) are ignored for events. The zero value is not usable: call
// NewTracker.
type Tracker struct {
	last     map[Signal]Sample
	failFrom map[Signal]time.Time
	errSeen  map[Signal]map[string]bool
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{last: map[Signal]Sample{}, failFrom: map[Signal]time.Time{}, errSeen: map[Signal]map[string]bool{}}
}

// Add feeds one sample and returns the events it reveals (none for the first
// healthy sample of a signal; the first failing one is an event).
func (t *Tracker) Add(s Sample) []Event {
	prev, seen := t.last[s.Signal]
	if seen && s.At.Before(prev.At) {
		return nil
	}
	t.last[s.Signal] = s
	var ev []Event
	add := func(format string, a ...any) {
		ev = append(ev, Event{At: s.At, Signal: s.Signal, Text: shorten(fmt.Sprintf(format, a...), 200)})
	}
	// Healthy ↔ failing.
	switch {
	case !s.OK && (!seen || prev.OK):
		t.failFrom[s.Signal] = s.At
		t.errSeen[s.Signal] = map[string]bool{errKey(s.Err): true}
		add("failing: %s", s.Err)
	case !s.OK && seen && !prev.OK:
		k := errKey(s.Err)
		if !t.errSeen[s.Signal][k] && len(t.errSeen[s.Signal]) < 6 {
			t.errSeen[s.Signal][k] = true
			add("still failing, now: %s", s.Err)
		}
	case s.OK && seen && !prev.OK:
		add("ok again (failed for %s)", fmtDur(s.At.Sub(t.failFrom[s.Signal])))
	}
	if !seen {
		return ev
	}
	// Signal-specific changes.
	if s.Etcd != nil && prev.Etcd != nil {
		if s.Etcd.Leader != prev.Etcd.Leader {
			add("leader %s → %s (raft term %d)", orNone(prev.Etcd.Leader), orNone(s.Etcd.Leader), s.Etcd.Term)
		} else if s.Etcd.Term > prev.Etcd.Term && prev.Etcd.Term > 0 {
			add("raft term %d → %d", prev.Etcd.Term, s.Etcd.Term)
		}
	}
	if s.Leases != nil && prev.Leases != nil {
		for _, name := range sortedKeys(s.Leases) {
			now, was := s.Leases[name], prev.Leases[name]
			if now.Holder != was.Holder || now.Transitions != was.Transitions {
				add("%s lease: %s → %s (leaseTransitions %d → %d)", name, orNone(was.Holder), orNone(now.Holder), was.Transitions, now.Transitions)
			}
		}
	}
	if s.Parts != nil && prev.Parts != nil {
		for _, part := range sortedKeys(s.Parts) {
			now, was := s.Parts[part], prev.Parts[part]
			if partState(s.Signal, now) != partState(s.Signal, was) {
				add("%s: %s → %s", part, partLabel(s.Signal, was), partLabel(s.Signal, now))
			}
		}
	}
	return ev
}

// partState reduces a part's value to what counts as a change: for HAProxy
// the status word (UP, DOWN, MAINT, "UP 1/2" counts as going down), for the
// others ok vs the error/condition.
func partState(sig Signal, v string) string {
	switch sig {
	case SigHAProxy:
		return v
	case SigNodes:
		return v
	default:
		if v == "" {
			return "ok"
		}
		return "failing"
	}
}

func partLabel(sig Signal, v string) string {
	switch sig {
	case SigHAProxy, SigNodes:
		if v == "" {
			return "?"
		}
		return v
	default:
		if v == "" {
			return "ok"
		}
		return "failing (" + v + ")"
	}
}

// errKey groups error texts that differ only in numbers (ports, latencies).
func errKey(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= '0' && r <= '9' {
			continue
		}
		b.WriteRune(r)
	}
	k := b.String()
	if len(k) > 80 {
		k = k[:80]
	}
	return k
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// fmtDur prints a duration rounded to 0.1 s ("2.4s").
func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// Line renders the event with its time relative to the break:
// "  +12.3s  etcd        leader cp1 → (none) (raft term 7)".
func (e Event) Line(brokeAt time.Time) string {
	d := e.At.Sub(brokeAt)
	sign := "+"
	if d < 0 {
		sign, d = "-", -d
	}
	return fmt.Sprintf("%s%6.1fs  %-10s  %s", sign, d.Seconds(), e.Signal, e.Text)
}
