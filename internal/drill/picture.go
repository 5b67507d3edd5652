package drill

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Lane states: what a stretch of a lane is drawn as.
const (
	StateOK   = "ok"   // the probe succeeded / the part was healthy
	StateFail = "fail" // the probe failed / the part was unhealthy
	StateNone = "none" // no sample said anything about the part
)

// Picture is a report's timeline as lanes: the data the HTML report's SVG
// is drawn from. Times are absolute; Zero is the instant the axis counts
// from (the break, or the operation's first step).
type Picture struct {
	Start, End, Zero time.Time
	Lanes            []Lane
	// Marks are instants drawn across every lane (break, heal); Bands are
	// stretches drawn above the lanes (the operation's steps).
	Marks []Mark
	Bands []Band
}

// Lane is one row of the picture: a signal (Part "") or one part of it (an
// etcd member, an apiserver, an HAProxy backend, a worker's web pod, a
// Node).
type Lane struct {
	Signal Signal
	Part   string
	Spans  []Span
	// Labels are instants worth a word on the lane: a new etcd leader, a
	// Lease changing hands.
	Labels []Mark
}

// Title is the lane's name as drawn: the signal, or the part's name.
func (l Lane) Title() string {
	if l.Part == "" {
		return string(l.Signal)
	}
	return l.Part
}

// Span is a stretch of one state: from one sample's time to the next
// sample's (the last one to the picture's end). Text is the first sample's
// error or part value ("" when healthy).
type Span struct {
	From, To time.Time
	State    string
	Text     string
}

// Mark is an instant with a label.
type Mark struct {
	At   time.Time
	Text string
}

// Band is an operation step: its stretch, name and error ("" when it
// succeeded).
type Band struct {
	From, To time.Time
	Text     string
	Err      string
}

// NewPicture lays samples (any order) out as lanes from start to end: one
// lane per signal sampled, in Signals order, each followed by one lane per
// part the samples name (sorted); the etcd lane labels each change of
// leader, the leases lane each change of a Lease's holder. A signal's
// lane fails exactly where the report's Windows say it does (both go from
// a failing sample to the next healthy one). Samples outside [start, end]
// are dropped; a span is clipped to end.
func NewPicture(samples []Sample, start, zero, end time.Time) Picture {
	s := slices.Clone(samples)
	SortSamples(s)
	by := map[Signal][]Sample{}
	for _, x := range s {
		if x.At.Before(start) || x.At.After(end) {
			continue
		}
		by[x.Signal] = append(by[x.Signal], x)
	}
	pic := Picture{Start: start, End: end, Zero: zero}
	for _, sig := range Signals {
		list := by[sig]
		if len(list) == 0 {
			continue
		}
		lane := Lane{Signal: sig}
		lane.Spans = spans(list, end, func(x Sample) (string, string) {
			if x.OK {
				return StateOK, ""
			}
			return StateFail, x.Err
		})
		switch sig {
		case SigEtcd:
			lane.Labels = leaderLabels(list)
		case SigLeases:
			lane.Labels = leaseLabels(list)
		}
		pic.Lanes = append(pic.Lanes, lane)
		parts := map[string]bool{}
		for _, x := range list {
			for p := range x.Parts {
				parts[p] = true
			}
		}
		for _, p := range sortedKeys(parts) {
			pic.Lanes = append(pic.Lanes, Lane{Signal: sig, Part: p, Spans: spans(list, end, func(x Sample) (string, string) {
				v, ok := x.Parts[p]
				switch {
				case !ok:
					return StateNone, ""
				case partOK(sig, v):
					return StateOK, ""
				case v == "":
					return StateFail, "?"
				}
				return StateFail, v
			})})
		}
	}
	return pic
}

// spans turns samples (sorted) into stretches of equal state; state says
// what one sample shows.
func spans(list []Sample, end time.Time, state func(Sample) (string, string)) []Span {
	var out []Span
	for i, x := range list {
		st, text := state(x)
		to := end
		if i+1 < len(list) {
			to = list[i+1].At
		}
		if n := len(out); n > 0 && out[n-1].State == st {
			out[n-1].To = to
			continue
		}
		out = append(out, Span{From: x.At, To: to, State: st, Text: text})
	}
	return out
}

// leaderLabels marks the first leader seen and each change of leader
// ("leader cp2", "no leader").
func leaderLabels(list []Sample) []Mark {
	var out []Mark
	prev, seen := "", false
	for _, x := range list {
		if x.Etcd == nil {
			continue
		}
		if !seen || x.Etcd.Leader != prev {
			text := "no leader"
			if x.Etcd.Leader != "" {
				text = "leader " + x.Etcd.Leader
			}
			out = append(out, Mark{At: x.At, Text: text})
		}
		prev, seen = x.Etcd.Leader, true
	}
	return out
}

// leaseLabels marks each change of a Lease's holder after its first
// sample ("scheduler → cp3" for kube-scheduler's Lease).
func leaseLabels(list []Sample) []Mark {
	var out []Mark
	prev := map[string]string{}
	for _, x := range list {
		for _, name := range sortedKeys(x.Leases) {
			h := x.Leases[name].Holder
			if p, ok := prev[name]; ok && h != p && h != "" {
				out = append(out, Mark{At: x.At, Text: fmt.Sprintf("%s → %s", strings.TrimPrefix(name, "kube-"), h)})
			}
			if h != "" {
				prev[name] = h
			}
		}
	}
	return out
}

// Picture is the drill's timeline from the first sample to the end of
// the watch, counted from the break, marked at the break and the heal.
func (r Report) Picture(samples []Sample) Picture {
	start := r.BrokeAt
	for _, x := range samples {
		if x.At.Before(start) {
			start = x.At
		}
	}
	pic := NewPicture(samples, start, r.BrokeAt, r.EndedAt)
	pic.Marks = append(pic.Marks, Mark{At: r.BrokeAt, Text: "break"})
	if r.HealedAt != nil {
		pic.Marks = append(pic.Marks, Mark{At: *r.HealedAt, Text: "heal"})
	}
	return pic
}

// Picture is the operation's timeline from the first sample (the
// baseline) to the end of the watch, counted from the first step, with
// one band per step.
func (r OpReport) Picture(samples []Sample, end time.Time) Picture {
	start := r.StartedAt
	for _, x := range samples {
		if x.At.Before(start) {
			start = x.At
		}
		if x.At.After(end) {
			end = x.At
		}
	}
	pic := NewPicture(samples, start, r.StartedAt, end)
	for _, st := range r.Steps {
		pic.Bands = append(pic.Bands, Band{From: r.at(st.From), To: r.at(st.To), Text: st.Name, Err: st.Err})
	}
	return pic
}

// at is the instant sec seconds after the operation started.
func (r OpReport) at(sec Seconds) time.Time {
	return r.StartedAt.Add(time.Duration(float64(sec) * float64(time.Second)))
}
