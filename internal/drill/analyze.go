package drill

import (
	"math"
	"slices"
	"time"
)

// Analyze builds the report of drill rec from its samples (any order).
func Analyze(rec Record, samples []Sample, f Facts) Report {
	s := slices.Clone(samples)
	SortSamples(s)
	end := rec.BrokeAt
	if rec.EndedAt != nil {
		end = *rec.EndedAt
	} else if len(s) > 0 {
		end = s[len(s)-1].At
	}
	r := Report{ID: rec.ID, Cluster: rec.Cluster, Spec: rec.Spec, Actions: rec.Actions, BrokeAt: rec.BrokeAt, HealedAt: rec.HealedAt, EndedAt: end}
	brokenUntil := end
	if rec.HealedAt != nil {
		brokenUntil = *rec.HealedAt
	}
	r.BrokenFor = secs(brokenUntil.Sub(rec.BrokeAt))

	by := map[Signal][]Sample{}
	for _, x := range s {
		by[x.Signal] = append(by[x.Signal], x)
	}

	for _, sig := range Signals {
		if list := by[sig]; len(list) > 0 {
			r.Signals = append(r.Signals, signalSummary(sig, list, rec, end))
		}
	}
	r.Parts = partSummaries(by, rec)
	r.Etcd = etcdSummary(by[SigEtcd], rec, f)
	r.Leases = leaseSummaries(by[SigLeases], rec)
	r.Recovery = recovery(r.Signals, rec)

	// Timeline.
	tr := NewTracker()
	for _, x := range s {
		r.Timeline = append(r.Timeline, tr.Add(x)...)
	}

	r.Expectations = expectations(rec, r, f)
	// An interrupted drill did not see the recovery: its verdict is
	// incomplete, so it does not pass.
	r.Passed = !rec.Interrupted
	for _, e := range r.Expectations {
		if e.Result == Fail {
			r.Passed = false
		}
	}
	return r
}

// rel is t in seconds after the break; ptr a pointer to v.
func rel(rec Record, t time.Time) Seconds { return secs(t.Sub(rec.BrokeAt)) }
func ptr(v Seconds) *Seconds              { return &v }

// signalSummary sums up one signal's samples (sorted by time) from the
// break to end: counts, failing windows, rate, recovery after the heal.
func signalSummary(sig Signal, list []Sample, rec Record, end time.Time) SignalSummary {
	sum := SignalSummary{Signal: sig}
	var during int
	for i, x := range list {
		if x.At.Before(rec.BrokeAt) {
			continue
		}
		during++
		sum.Samples++
		sum.Slowest = max(sum.Slowest, secs(x.Latency))
		if !x.OK {
			sum.Failed++
			if sum.DetectedAfter == nil {
				sum.DetectedAfter = ptr(rel(rec, x.At))
			}
		}
		// Window bookkeeping: a window starts at a failing sample whose
		// predecessor (after the break) was healthy.
		if !x.OK && (i == 0 || list[i-1].OK || list[i-1].At.Before(rec.BrokeAt)) {
			w := Window{From: rel(rec, x.At)}
			errs := map[string]bool{}
			j := i
			for ; j < len(list) && !list[j].OK; j++ {
				if k := errKey(list[j].Err); !errs[k] && len(w.Errors) < 4 {
					errs[k] = true
					w.Errors = append(w.Errors, list[j].Err)
				}
			}
			if j < len(list) {
				w.To = rel(rec, list[j].At)
			} else {
				w.To, w.Open = rel(rec, end), true
			}
			w.Duration = w.To - w.From
			sum.Windows = append(sum.Windows, w)
			sum.Total += w.Duration
			sum.Longest = max(sum.Longest, w.Duration)
		}
	}
	if span := end.Sub(rec.BrokeAt).Seconds(); span > 0 {
		sum.Rate = math.Round(float64(during)/span*10) / 10
	}
	if rec.HealedAt != nil {
		sum.RecoveredAfterHeal = recoveredAfter(list, *rec.HealedAt)
	}
	return sum
}

// partSummaries says when each part of a signal (an etcd member, an
// HAProxy backend, a worker, a node, an apiserver) went down after the
// break and came back after the heal.
func partSummaries(by map[Signal][]Sample, rec Record) []PartSummary {
	var out []PartSummary
	for _, sig := range []Signal{SigEtcd, SigHAProxy, SigWorkload, SigNodes, SigAPIServers} {
		parts := map[string]bool{}
		for _, x := range by[sig] {
			for p := range x.Parts {
				parts[p] = true
			}
		}
		for _, p := range sortedKeys(parts) {
			ps := PartSummary{Signal: sig, Part: p}
			var downAt time.Time
			for _, x := range by[sig] {
				v, ok := x.Parts[p]
				if !ok || x.At.Before(rec.BrokeAt) {
					continue
				}
				if !partOK(sig, v) && ps.DownAfter == nil {
					ps.DownAfter, ps.DownAs, downAt = ptr(rel(rec, x.At)), v, x.At
				}
			}
			if ps.DownAfter != nil && rec.HealedAt != nil {
				// The first healthy sample after the heal with no unhealthy
				// one after it.
				var up *time.Time
				for _, x := range by[sig] {
					v, ok := x.Parts[p]
					if !ok || x.At.Before(*rec.HealedAt) || x.At.Before(downAt) {
						continue
					}
					if partOK(sig, v) {
						if up == nil {
							t := x.At
							up = &t
						}
					} else {
						up = nil
					}
				}
				if up != nil {
					ps.UpAfterHeal = ptr(secs(up.Sub(*rec.HealedAt)))
				}
			}
			out = append(out, ps)
		}
	}

	return out
}

// etcdSummary follows the leader and the raft term through the drill,
// and when a quorum of healthy members was back after the heal.
func etcdSummary(etcd []Sample, rec Record, f Facts) EtcdSummary {
	var e EtcdSummary
	for _, x := range etcd {
		if x.Etcd == nil {
			continue
		}
		if x.At.Before(rec.BrokeAt) {
			if x.Etcd.Leader != "" {
				e.LeaderBefore = x.Etcd.Leader
			}
			e.TermBefore = max(e.TermBefore, x.Etcd.Term)
			continue
		}
		if n := len(e.Leaders); n == 0 || e.Leaders[n-1] != x.Etcd.Leader {
			e.Leaders = append(e.Leaders, x.Etcd.Leader)
		}
		e.LeaderAfter = x.Etcd.Leader
		e.TermAfter = max(e.TermAfter, x.Etcd.Term)
	}
	if e.TermAfter > e.TermBefore && e.TermBefore > 0 {
		e.Elections = e.TermAfter - e.TermBefore
	}
	if rec.HealedAt != nil {
		for _, x := range etcd {
			if !x.At.Before(*rec.HealedAt) && x.Etcd != nil && x.Etcd.Quorum && x.Etcd.Leader != "" && x.Etcd.Healthy >= f.ControlPlanes {
				e.QuorumBackAfterHeal = ptr(secs(x.At.Sub(*rec.HealedAt)))
				break
			}
		}
	}

	return e
}

// leaseSummaries follows each leader-election Lease's holder and
// transitions from before the break to the end.
func leaseSummaries(samples []Sample, rec Record) []LeaseSummary {
	var out []LeaseSummary
	names := map[string]bool{}
	for _, x := range samples {
		for n := range x.Leases {
			names[n] = true
		}
	}
	for _, n := range sortedKeys(names) {
		ls := LeaseSummary{Name: n}
		seenBefore := false
		for _, x := range samples {
			l, ok := x.Leases[n]
			if !ok {
				continue
			}
			if x.At.Before(rec.BrokeAt) {
				ls.HolderBefore, ls.TransitionsBefore, seenBefore = l.Holder, l.Transitions, true
				continue
			}
			if !seenBefore {
				ls.HolderBefore, ls.TransitionsBefore, seenBefore = l.Holder, l.Transitions, true
			}
			if ls.MovedAfter == nil && l.Holder != ls.HolderBefore {
				ls.MovedAfter = ptr(rel(rec, x.At))
			}
			ls.HolderAfter, ls.TransitionsAfter = l.Holder, l.Transitions
		}
		out = append(out, ls)
	}

	return out
}

// recovery is when every signal was healthy again after the heal (the
// slowest signal's recovery), nil when one never recovered or there was
// no heal.
func recovery(sums []SignalSummary, rec Record) *Seconds {
	if rec.HealedAt != nil {
		var worst Seconds
		ok := true
		for _, sum := range sums {
			if sum.RecoveredAfterHeal == nil {
				ok = false
				break
			}
			worst = max(worst, *sum.RecoveredAfterHeal)
		}
		if ok && len(sums) > 0 {
			return ptr(worst)
		}
	}

	return nil
}
