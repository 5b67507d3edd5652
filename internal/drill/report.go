package drill

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Seconds is a duration in seconds, rounded to 0.1 s in JSON and text.
type Seconds float64

func secs(d time.Duration) Seconds { return Seconds(math.Round(d.Seconds()*10) / 10) }

func (s Seconds) String() string { return fmt.Sprintf("%.1f s", float64(s)) }

// MarshalJSON writes the number rounded to 0.1.
func (s Seconds) MarshalJSON() ([]byte, error) {
	return json.Marshal(math.Round(float64(s)*10) / 10)
}

// Window is one stretch during which a signal failed, in seconds after the
// break (negative: before it).
type Window struct {
	From     Seconds  `json:"from"`
	To       Seconds  `json:"to"`
	Duration Seconds  `json:"duration"`
	Open     bool     `json:"open,omitempty"` // still failing at the last sample
	Errors   []string `json:"errors,omitempty"`
}

// SignalSummary is what one signal did during the drill.
type SignalSummary struct {
	Signal  Signal `json:"signal"`
	Samples int    `json:"samples"`
	Failed  int    `json:"failed"`
	// Rate is samples per second between the break and the end.
	Rate float64 `json:"ratePerSecond"`
	// DetectedAfter is when, after the break, the first failing sample was
	// sent (nil: it never failed).
	DetectedAfter *Seconds `json:"detectedAfter,omitempty"`
	// Windows are the failing stretches after the break; Longest and Total
	// sum them up.
	Windows []Window `json:"windows,omitempty"`
	Longest Seconds  `json:"longest"`
	Total   Seconds  `json:"total"`
	// Slowest is the longest a single probe took after the break (a request
	// that hung on a dead backend shows here even when the next one
	// succeeded).
	Slowest Seconds `json:"slowest"`
	// RecoveredAfterHeal: from the heal to the first healthy sample after
	// the signal's last failure (0: it was healthy when healed; nil: it had
	// not recovered by the end).
	RecoveredAfterHeal *Seconds `json:"recoveredAfterHeal,omitempty"`
}

// PartSummary follows one part of a signal: an HAProxy backend, a worker's
// web pod, a Node's readiness, a control plane's /readyz.
type PartSummary struct {
	Signal Signal `json:"signal"`
	Part   string `json:"part"`
	// DownAfter: seconds after the break of the first sample that showed the
	// part unhealthy (nil: never); UpAfterHeal: seconds after the heal of the
	// first healthy sample after that (nil: not healed, or never down).
	DownAfter   *Seconds `json:"downAfter,omitempty"`
	DownAs      string   `json:"downAs,omitempty"`
	UpAfterHeal *Seconds `json:"upAfterHeal,omitempty"`
}

// EtcdSummary is what etcd's leadership did.
type EtcdSummary struct {
	LeaderBefore string `json:"leaderBefore"`
	LeaderAfter  string `json:"leaderAfter"`
	// Leaders is the sequence of leaders seen from the break on ("" = no
	// leader).
	Leaders    []string `json:"leaders"`
	TermBefore uint64   `json:"termBefore"`
	TermAfter  uint64   `json:"termAfter"`
	// Elections is TermAfter − TermBefore: each election increments the
	// raft term.
	Elections uint64 `json:"elections"`
	// QuorumBackAfterHeal: seconds from the heal to the first sample with a
	// leader and every member healthy.
	QuorumBackAfterHeal *Seconds `json:"quorumBackAfterHeal,omitempty"`
}

// LeaseSummary is one leader-election Lease before and after.
type LeaseSummary struct {
	Name              string   `json:"name"`
	HolderBefore      string   `json:"holderBefore"`
	HolderAfter       string   `json:"holderAfter"`
	TransitionsBefore int32    `json:"transitionsBefore"`
	TransitionsAfter  int32    `json:"transitionsAfter"`
	MovedAfter        *Seconds `json:"movedAfter,omitempty"`
}

// Result of one expectation.
const (
	Pass = "pass"
	Fail = "fail"
	Skip = "skip" // not observable in this drill (e.g. watched too briefly)
)

// Expectation is one promise of Kubernetes/etcd/HAProxy checked against the
// samples.
type Expectation struct {
	Text     string `json:"text"`
	Result   string `json:"result"`
	Evidence string `json:"evidence"`
}

// Report is the analysis of one drill.
type Report struct {
	ID       string     `json:"id"`
	Cluster  string     `json:"cluster"`
	Spec     Spec       `json:"spec"`
	Actions  []Action   `json:"actions"`
	BrokeAt  time.Time  `json:"brokeAt"`
	HealedAt *time.Time `json:"healedAt,omitempty"`
	EndedAt  time.Time  `json:"endedAt"`
	// BrokenFor is from the break to the heal (or the end).
	BrokenFor Seconds         `json:"brokenFor"`
	Signals   []SignalSummary `json:"signals"`
	Parts     []PartSummary   `json:"parts"`
	Etcd      EtcdSummary     `json:"etcd"`
	Leases    []LeaseSummary  `json:"leases"`
	// Recovery: seconds from the heal until every signal was healthy and
	// stayed so (nil: not healed, or not recovered by the end).
	Recovery     *Seconds      `json:"recovery,omitempty"`
	Timeline     []Event       `json:"timeline"`
	Expectations []Expectation `json:"expectations"`
	// Passed is true when no expectation failed and the drill was not
	// interrupted.
	Passed bool `json:"passed"`
}

// Facts are the cluster settings the expectations depend on.
type Facts struct {
	ControlPlanes int
	// LBInter and LBFall are HAProxy's check interval and fall count
	// (loadBalancer.interval, loadBalancer.fall in cluster.yaml).
	LBInter time.Duration
	LBFall  int
	// LeaseDuration is the leader-election lease duration of
	// kube-controller-manager and kube-scheduler (15 s upstream default).
	LeaseDuration time.Duration
	// NodeMonitorGracePeriod is kube-controller-manager's
	// --node-monitor-grace-period (50 s upstream default since v1.32).
	NodeMonitorGracePeriod time.Duration
	// Every is the prober's sampling period (Prober.Every; 0 means
	// Interval). A failing stretch is measured from sample to sample and a
	// change is seen up to one period late: the verdict's time bounds,
	// set for sampling at Interval, grow by Every − Interval.
	Every time.Duration
}

// every is f.Every, or Interval when unset.
func (f Facts) every() time.Duration {
	if f.Every > 0 {
		return f.Every
	}
	return Interval
}

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
	rel := func(t time.Time) Seconds { return secs(t.Sub(rec.BrokeAt)) }
	ptr := func(v Seconds) *Seconds { return &v }

	by := map[Signal][]Sample{}
	for _, x := range s {
		by[x.Signal] = append(by[x.Signal], x)
	}

	// Per signal.
	for _, sig := range Signals {
		list := by[sig]
		if len(list) == 0 {
			continue
		}
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
					sum.DetectedAfter = ptr(rel(x.At))
				}
			}
			// Window bookkeeping: a window starts at a failing sample whose
			// predecessor (after the break) was healthy.
			if !x.OK && (i == 0 || list[i-1].OK || list[i-1].At.Before(rec.BrokeAt)) {
				w := Window{From: rel(x.At)}
				errs := map[string]bool{}
				j := i
				for ; j < len(list) && !list[j].OK; j++ {
					if k := errKey(list[j].Err); !errs[k] && len(w.Errors) < 4 {
						errs[k] = true
						w.Errors = append(w.Errors, list[j].Err)
					}
				}
				if j < len(list) {
					w.To = rel(list[j].At)
				} else {
					w.To, w.Open = rel(end), true
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
		r.Signals = append(r.Signals, sum)
	}

	// Parts.
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
					ps.DownAfter, ps.DownAs, downAt = ptr(rel(x.At)), v, x.At
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
			r.Parts = append(r.Parts, ps)
		}
	}

	// etcd.
	etcd := by[SigEtcd]
	for _, x := range etcd {
		if x.Etcd == nil {
			continue
		}
		if x.At.Before(rec.BrokeAt) {
			if x.Etcd.Leader != "" {
				r.Etcd.LeaderBefore = x.Etcd.Leader
			}
			r.Etcd.TermBefore = max(r.Etcd.TermBefore, x.Etcd.Term)
			continue
		}
		if n := len(r.Etcd.Leaders); n == 0 || r.Etcd.Leaders[n-1] != x.Etcd.Leader {
			r.Etcd.Leaders = append(r.Etcd.Leaders, x.Etcd.Leader)
		}
		r.Etcd.LeaderAfter = x.Etcd.Leader
		r.Etcd.TermAfter = max(r.Etcd.TermAfter, x.Etcd.Term)
	}
	if r.Etcd.TermAfter > r.Etcd.TermBefore && r.Etcd.TermBefore > 0 {
		r.Etcd.Elections = r.Etcd.TermAfter - r.Etcd.TermBefore
	}
	if rec.HealedAt != nil {
		for _, x := range etcd {
			if !x.At.Before(*rec.HealedAt) && x.Etcd != nil && x.Etcd.Quorum && x.Etcd.Leader != "" && x.Etcd.Healthy >= f.ControlPlanes {
				r.Etcd.QuorumBackAfterHeal = ptr(secs(x.At.Sub(*rec.HealedAt)))
				break
			}
		}
	}

	// Leases.
	names := map[string]bool{}
	for _, x := range by[SigLeases] {
		for n := range x.Leases {
			names[n] = true
		}
	}
	for _, n := range sortedKeys(names) {
		ls := LeaseSummary{Name: n}
		seenBefore := false
		for _, x := range by[SigLeases] {
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
				ls.MovedAfter = ptr(rel(x.At))
			}
			ls.HolderAfter, ls.TransitionsAfter = l.Holder, l.Transitions
		}
		r.Leases = append(r.Leases, ls)
	}

	// Recovery of everything.
	if rec.HealedAt != nil {
		var worst Seconds
		ok := true
		for _, sum := range r.Signals {
			if sum.RecoveredAfterHeal == nil {
				ok = false
				break
			}
			worst = max(worst, *sum.RecoveredAfterHeal)
		}
		if ok && len(r.Signals) > 0 {
			r.Recovery = ptr(worst)
		}
	}

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

// recoveredAfter: seconds from heal to the first healthy sample after the
// last failing one at or after heal; 0 when none failed after heal; nil
// when the last sample fails.
func recoveredAfter(list []Sample, heal time.Time) *Seconds {
	lastFail := -1
	for i, x := range list {
		if !x.At.Before(heal) && !x.OK {
			lastFail = i
		}
	}
	zero := Seconds(0)
	if lastFail < 0 {
		// Healthy since the heal; a failure right before it that ends
		// after it is counted from the first healthy sample.
		for _, x := range list {
			if !x.At.Before(heal) {
				if x.OK {
					return &zero
				}
			}
		}
		return nil
	}
	if lastFail+1 < len(list) {
		v := secs(list[lastFail+1].At.Sub(heal))
		return &v
	}
	return nil
}

func partOK(sig Signal, v string) bool {
	switch sig {
	case SigHAProxy:
		// "UP 1/2" (a check failed, still in rotation) counts as up;
		// "DOWN", "DOWN 1/2" (rising), "MAINT", "NOLB" do not.
		return strings.HasPrefix(v, "UP")
	case SigNodes:
		return v == "Ready"
	default:
		return v == ""
	}
}

func (r Report) signal(sig Signal) (SignalSummary, bool) {
	for _, s := range r.Signals {
		if s.Signal == sig {
			return s, true
		}
	}
	return SignalSummary{}, false
}

func (r Report) part(sig Signal, name string) (PartSummary, bool) {
	for _, p := range r.Parts {
		if p.Signal == sig && p.Part == name {
			return p, true
		}
	}
	return PartSummary{}, false
}

// brokenNodes are the nodes of the actions.
func (rec Record) brokenNodes() []string {
	var out []string
	for _, a := range rec.Actions {
		out = append(out, a.Node)
	}
	return out
}

// expectations are the promises checked for this kind of drill.
func expectations(rec Record, r Report, f Facts) []Expectation {
	var out []Expectation
	add := func(text string, ok bool, evidence string) {
		res := Fail
		if ok {
			res = Pass
		}
		out = append(out, Expectation{Text: text, Result: res, Evidence: evidence})
	}
	skip := func(text, why string) { out = append(out, Expectation{Text: text, Result: Skip, Evidence: why}) }
	broken := rec.brokenNodes()
	// The bounds below hold for sampling at Interval; a slower prober sees
	// each change up to `late` later.
	late := f.every() - Interval
	// HAProxy's detection time plus a second of slack.
	slack := time.Second + late
	lbBound := time.Duration(f.LBFall)*f.LBInter + f.LBInter + slack
	watched := time.Duration(float64(r.BrokenFor) * float64(time.Second))

	apiAvailable := func(limit time.Duration, why string) {
		rd, okR := r.signal(SigAPIRead)
		wr, okW := r.signal(SigAPIWrite)
		if !okR || !okW {
			add("the API stays available through the load balancer", false, "no API samples were taken")
			return
		}
		longest := max(rd.Longest, wr.Longest)
		limit += late
		add(fmt.Sprintf("the API stays available through the load balancer (no failing stretch longer than %s: %s)", fmtDur(limit), why),
			longest <= secs(limit),
			fmt.Sprintf("reads: %d of %d failed, longest %s, slowest request %s; writes: %d of %d failed, longest %s, slowest request %s", rd.Failed, rd.Samples, rd.Longest, rd.Slowest, wr.Failed, wr.Samples, wr.Longest, wr.Slowest))
	}
	workloadServes := func(except []string) {
		w, ok := r.signal(SigWorkload)
		if !ok {
			skip("running pods keep serving", "the workload signal was not sampled")
			return
		}
		var bad []string
		for _, p := range r.Parts {
			if p.Signal == SigWorkload && p.DownAfter != nil && !slices.Contains(except, p.Part) {
				bad = append(bad, fmt.Sprintf("%s failed at +%s (%s)", p.Part, *p.DownAfter, p.DownAs))
			}
		}
		text := "running pods keep serving (the data plane needs neither the API nor etcd)"
		if len(except) > 0 {
			text = "pods on the other workers keep serving"
		}
		ev := fmt.Sprintf("%d workload samples", w.Samples)
		if len(bad) > 0 {
			ev += "; " + strings.Join(bad, "; ")
		} else {
			ev += ", every worker answered every time"
		}
		add(text, len(bad) == 0, ev)
	}
	backendsDown := func(nodes []string) {
		if _, ok := r.signal(SigHAProxy); !ok {
			skip("HAProxy marks the broken backends DOWN", "the HAProxy stats were not read")
			return
		}
		for _, n := range nodes {
			p, ok := r.part(SigHAProxy, n)
			text := fmt.Sprintf("HAProxy takes %s out of rotation (DOWN) within fall×inter + inter + %s (%d×%s + %s + %s = %s)", n, fmtDur(slack), f.LBFall, fmtDur(f.LBInter), fmtDur(f.LBInter), fmtDur(slack), fmtDur(lbBound))
			switch {
			case !ok || p.DownAfter == nil:
				add(text, false, "HAProxy never reported "+n+" DOWN")
			default:
				add(text, *p.DownAfter <= secs(lbBound), fmt.Sprintf("%s at +%s", p.DownAs, *p.DownAfter))
			}
		}
	}
	leasesMove := func(nodes []string) {
		bound := f.LeaseDuration + 10*time.Second
		for _, l := range r.Leases {
			if !slices.Contains(nodes, l.HolderBefore) {
				continue
			}
			text := fmt.Sprintf("the %s Lease moves off %s (lease duration %s)", l.Name, l.HolderBefore, fmtDur(f.LeaseDuration))
			if l.MovedAfter == nil && watched < bound {
				skip(text, fmt.Sprintf("watched %s while broken; a takeover needs up to about %s", fmtDur(watched), fmtDur(bound)))
				continue
			}
			if l.MovedAfter == nil {
				add(text, false, fmt.Sprintf("still held by %s after %s", l.HolderBefore, fmtDur(watched)))
				continue
			}
			add(text, l.TransitionsAfter > l.TransitionsBefore, fmt.Sprintf("%s → %s at +%s, leaseTransitions %d → %d", l.HolderBefore, l.HolderAfter, *l.MovedAfter, l.TransitionsBefore, l.TransitionsAfter))
		}
	}
	recovered := func() {
		if rec.HealedAt == nil {
			skip("everything is healthy again after the heal", "not healed yet (run khw heal)")
			return
		}
		if rec.Interrupted {
			skip("everything is healthy again after the heal", "interrupted: healed, but the recovery was not watched (khw status shows it now)")
			return
		}
		if r.Recovery == nil {
			var still []string
			for _, s := range r.Signals {
				if s.RecoveredAfterHeal == nil {
					still = append(still, string(s.Signal))
				}
			}
			add("everything is healthy again after the heal", false, "still failing at the end: "+strings.Join(still, ", "))
			return
		}
		add("everything is healthy again after the heal", true, fmt.Sprintf("all signals healthy %s after the heal", *r.Recovery))
	}

	quorum := f.ControlPlanes/2 + 1
	switch rec.Spec.Kind {
	case KindEtcd:
		left := f.ControlPlanes - len(broken)
		if left >= quorum {
			apiAvailable(2*time.Second, fmt.Sprintf("%d of %d members keep quorum (%d)", left, f.ControlPlanes, quorum))
			if slices.Contains(broken, r.Etcd.LeaderBefore) {
				add("a new etcd leader is elected (raft term grows)", r.Etcd.Elections >= 1,
					fmt.Sprintf("leaders %s; raft term %d → %d", leaderSeq(r.Etcd), r.Etcd.TermBefore, r.Etcd.TermAfter))
			} else {
				add("the etcd leader stays (a follower stopped)", r.Etcd.Elections == 0,
					fmt.Sprintf("leaders %s; raft term %d → %d", leaderSeq(r.Etcd), r.Etcd.TermBefore, r.Etcd.TermAfter))
			}
		} else {
			add(fmt.Sprintf("etcd loses its leader (%d of %d members left, quorum is %d)", left, f.ControlPlanes, quorum), slices.Contains(r.Etcd.Leaders, ""),
				fmt.Sprintf("leaders %s", leaderSeq(r.Etcd)))
			rd, _ := r.signal(SigAPIRead)
			wr, _ := r.signal(SigAPIWrite)
			add("API reads and writes fail while quorum is lost", rd.Failed > 0 && wr.Failed > 0,
				fmt.Sprintf("reads failed %d of %d, writes %d of %d; errors: %s", rd.Failed, rd.Samples, wr.Failed, wr.Samples, strings.Join(distinctErrors(rd, wr), " | ")))
			if rec.HealedAt != nil {
				add("quorum returns after the heal and the raft term has grown", r.Etcd.QuorumBackAfterHeal != nil && r.Etcd.TermAfter > r.Etcd.TermBefore,
					fmt.Sprintf("quorum back %s after the heal; raft term %d → %d", optSecs(r.Etcd.QuorumBackAfterHeal), r.Etcd.TermBefore, r.Etcd.TermAfter))
			}
		}
		workloadServes(nil)
	case KindAPIServer:
		if len(broken) < f.ControlPlanes {
			apiAvailable(lbBound, "HAProxy routes around the stopped apiservers")
			backendsDown(broken)
			leasesMove(broken)
		} else {
			rd, _ := r.signal(SigAPIRead)
			add("the API is unavailable (no apiserver left)", rd.Failed > 0, fmt.Sprintf("reads failed %d of %d", rd.Failed, rd.Samples))
		}
		workloadServes(nil)
	case KindNode:
		n := broken[0]
		switch {
		case slices.Contains(rec.ControlPlanes, n):
			apiAvailable(lbBound, "HAProxy routes around the powered-off control plane")
			backendsDown(broken)
			leasesMove(broken)
			if r.Etcd.LeaderBefore == n {
				add("a new etcd leader is elected (raft term grows)", r.Etcd.Elections >= 1, fmt.Sprintf("leaders %s; raft term %d → %d", leaderSeq(r.Etcd), r.Etcd.TermBefore, r.Etcd.TermAfter))
			} else {
				add("the etcd leader stays (a follower went away)", r.Etcd.LeaderAfter == r.Etcd.LeaderBefore || r.Etcd.Elections == 0, fmt.Sprintf("leaders %s; raft term %d → %d", leaderSeq(r.Etcd), r.Etcd.TermBefore, r.Etcd.TermAfter))
			}
			workloadServes(nil)
		case n == rec.LB:
			rd, _ := r.signal(SigAPIRead)
			add("the API through the load balancer is unavailable", rd.Failed > 0, fmt.Sprintf("reads failed %d of %d", rd.Failed, rd.Samples))
			workloadServes(nil)
		default:
			apiAvailable(2*time.Second, "a worker is not on the API's path")
			workloadServes(broken)
			nodeNotReady(&out, r, f, n, watched)
		}
	case KindLB:
		rd, _ := r.signal(SigAPIRead)
		add("the API through the load balancer is unavailable", rd.Failed > 0, fmt.Sprintf("reads failed %d of %d", rd.Failed, rd.Samples))
		as, ok := r.signal(SigAPIServers)
		add("every apiserver stays ready when asked directly", ok && as.Failed == 0, fmt.Sprintf("direct /readyz: %d of %d samples failed", as.Failed, as.Samples))
		workloadServes(nil)
	case KindKubelet:
		apiAvailable(2*time.Second, "the kubelet is not on the API's path")
		workloadServes(nil)
		nodeNotReady(&out, r, f, broken[0], watched)
	}
	recovered()
	return out
}

func nodeNotReady(out *[]Expectation, r Report, f Facts, node string, watched time.Duration) {
	text := fmt.Sprintf("Node %s turns NotReady/Unknown after the node-monitor grace period (%s)", node, fmtDur(f.NodeMonitorGracePeriod))
	p, ok := r.part(SigNodes, node)
	bound := f.NodeMonitorGracePeriod + 15*time.Second
	switch {
	case ok && p.DownAfter != nil:
		res := Pass
		if *p.DownAfter > secs(bound) {
			res = Fail
		}
		*out = append(*out, Expectation{Text: text, Result: res, Evidence: fmt.Sprintf("%s at +%s", p.DownAs, *p.DownAfter)})
	case watched < bound:
		*out = append(*out, Expectation{Text: text, Result: Skip, Evidence: fmt.Sprintf("watched %s while broken; give --for %ds or more to see it", fmtDur(watched), int(bound.Seconds())+5)})
	default:
		*out = append(*out, Expectation{Text: text, Result: Fail, Evidence: fmt.Sprintf("still Ready after %s", fmtDur(watched))})
	}
}

func leaderSeq(e EtcdSummary) string {
	seq := []string{orNone(e.LeaderBefore)}
	for _, l := range e.Leaders {
		if orNone(l) != seq[len(seq)-1] {
			seq = append(seq, orNone(l))
		}
	}
	return strings.Join(seq, " → ")
}

func optSecs(s *Seconds) string {
	if s == nil {
		return "never"
	}
	return s.String()
}

func distinctErrors(sums ...SignalSummary) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range sums {
		for _, w := range s.Windows {
			for _, e := range w.Errors {
				if k := errKey(e); !seen[k] {
					seen[k] = true
					out = append(out, e)
				}
			}
		}
	}
	sort.Strings(out)
	if len(out) > 4 {
		out = out[:4]
	}
	return out
}
