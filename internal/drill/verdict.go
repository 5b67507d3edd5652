package drill

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// expectations are the promises checked for this kind of drill.
func expectations(rec Record, r Report, f Facts) []Expectation {
	v := &verdict{rec: rec, r: r, f: f, broken: rec.brokenNodes()}
	// The bounds below hold for sampling at Interval; a slower prober sees
	// each change up to `late` later.
	v.late = f.every() - Interval
	// HAProxy's detection time plus a second of slack.
	v.slack = time.Second + v.late
	v.lbBound = time.Duration(f.LBFall)*f.LBInter + f.LBInter + v.slack
	v.watched = time.Duration(float64(r.BrokenFor) * float64(time.Second))
	v.kind()
	v.recovered()
	return v.out
}

// verdict builds the expectations of one drill's report.
type verdict struct {
	rec                           Record
	r                             Report
	f                             Facts
	broken                        []string
	late, slack, lbBound, watched time.Duration
	out                           []Expectation
}

func (v *verdict) add(text string, ok bool, evidence string) {
	res := Fail
	if ok {
		res = Pass
	}
	v.out = append(v.out, Expectation{Text: text, Result: res, Evidence: evidence})
}

func (v *verdict) skip(text, why string) {
	v.out = append(v.out, Expectation{Text: text, Result: Skip, Evidence: why})
}

// apiAvailable: no failing stretch of API reads or writes through the
// load balancer longer than limit (plus the prober's lateness).
func (v *verdict) apiAvailable(limit time.Duration, why string) {
	rd, okR := v.r.signal(SigAPIRead)
	wr, okW := v.r.signal(SigAPIWrite)
	if !okR || !okW {
		v.add("the API stays available through the load balancer", false, "no API samples were taken")
		return
	}
	longest := max(rd.Longest, wr.Longest)
	limit += v.late
	v.add(fmt.Sprintf("the API stays available through the load balancer (no failing stretch longer than %s: %s)", fmtDur(limit), why),
		longest <= secs(limit),
		fmt.Sprintf("reads: %d of %d failed, longest %s, slowest request %s; writes: %d of %d failed, longest %s, slowest request %s", rd.Failed, rd.Samples, rd.Longest, rd.Slowest, wr.Failed, wr.Samples, wr.Longest, wr.Slowest))
}

// workloadServes: the probe workload answers on every worker but those in
// except.
func (v *verdict) workloadServes(except []string) {
	w, ok := v.r.signal(SigWorkload)
	if !ok {
		v.skip("running pods keep serving", "the workload signal was not sampled")
		return
	}
	var bad []string
	for _, p := range v.r.Parts {
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
	v.add(text, len(bad) == 0, ev)
}

// backendsDown: HAProxy marks each of nodes DOWN within its detection
// bound.
func (v *verdict) backendsDown(nodes []string) {
	if _, ok := v.r.signal(SigHAProxy); !ok {
		v.skip("HAProxy marks the v.broken backends DOWN", "the HAProxy stats were not read")
		return
	}
	for _, n := range nodes {
		p, ok := v.r.part(SigHAProxy, n)
		text := fmt.Sprintf("HAProxy takes %s out of rotation (DOWN) within fall×inter + inter + %s (%d×%s + %s + %s = %s)", n, fmtDur(v.slack), v.f.LBFall, fmtDur(v.f.LBInter), fmtDur(v.f.LBInter), fmtDur(v.slack), fmtDur(v.lbBound))
		switch {
		case !ok || p.DownAfter == nil:
			v.add(text, false, "HAProxy never reported "+n+" DOWN")
		default:
			v.add(text, *p.DownAfter <= secs(v.lbBound), fmt.Sprintf("%s at +%s", p.DownAs, *p.DownAfter))
		}
	}
}

// leasesMove: each leader-election Lease held on one of nodes moves to
// another instance within the lease duration (plus slack).
func (v *verdict) leasesMove(nodes []string) {
	bound := v.f.LeaseDuration + 10*time.Second
	for _, l := range v.r.Leases {
		if !slices.Contains(nodes, l.HolderBefore) {
			continue
		}
		text := fmt.Sprintf("the %s Lease moves off %s (lease duration %s)", l.Name, l.HolderBefore, fmtDur(v.f.LeaseDuration))
		if l.MovedAfter == nil && v.watched < bound {
			v.skip(text, fmt.Sprintf("v.watched %s while v.broken; a takeover needs up to about %s", fmtDur(v.watched), fmtDur(bound)))
			continue
		}
		if l.MovedAfter == nil {
			v.add(text, false, fmt.Sprintf("still held by %s after %s", l.HolderBefore, fmtDur(v.watched)))
			continue
		}
		v.add(text, l.TransitionsAfter > l.TransitionsBefore, fmt.Sprintf("%s → %s at +%s, leaseTransitions %d → %d", l.HolderBefore, l.HolderAfter, *l.MovedAfter, l.TransitionsBefore, l.TransitionsAfter))
	}
}

// recovered: every signal is healthy again after the heal.
func (v *verdict) recovered() {
	if v.rec.HealedAt == nil {
		v.skip("everything is healthy again after the heal", "not healed yet (run khw heal)")
		return
	}
	if v.rec.Interrupted {
		v.skip("everything is healthy again after the heal", "interrupted: healed, but the recovery was not v.watched (khw status shows it now)")
		return
	}
	if v.r.Recovery == nil {
		var still []string
		for _, s := range v.r.Signals {
			if s.RecoveredAfterHeal == nil {
				still = append(still, string(s.Signal))
			}
		}
		v.add("everything is healthy again after the heal", false, "still failing at the end: "+strings.Join(still, ", "))
		return
	}
	v.add("everything is healthy again after the heal", true, fmt.Sprintf("all signals healthy %s after the heal", *v.r.Recovery))
}

// kind adds what the drill's kind of break must and must not do.
func (v *verdict) kind() {
	quorum := v.f.ControlPlanes/2 + 1
	switch v.rec.Spec.Kind {
	case KindEtcd:
		left := v.f.ControlPlanes - len(v.broken)
		if left >= quorum {
			v.apiAvailable(2*time.Second, fmt.Sprintf("%d of %d members keep quorum (%d)", left, v.f.ControlPlanes, quorum))
			if slices.Contains(v.broken, v.r.Etcd.LeaderBefore) {
				v.add("a new etcd leader is elected (raft term grows)", v.r.Etcd.Elections >= 1,
					fmt.Sprintf("leaders %s; raft term %d → %d", leaderSeq(v.r.Etcd), v.r.Etcd.TermBefore, v.r.Etcd.TermAfter))
			} else {
				v.add("the etcd leader stays (a follower stopped)", v.r.Etcd.Elections == 0,
					fmt.Sprintf("leaders %s; raft term %d → %d", leaderSeq(v.r.Etcd), v.r.Etcd.TermBefore, v.r.Etcd.TermAfter))
			}
		} else {
			v.add(fmt.Sprintf("etcd loses its leader (%d of %d members left, quorum is %d)", left, v.f.ControlPlanes, quorum), slices.Contains(v.r.Etcd.Leaders, ""),
				fmt.Sprintf("leaders %s", leaderSeq(v.r.Etcd)))
			rd, _ := v.r.signal(SigAPIRead)
			wr, _ := v.r.signal(SigAPIWrite)
			v.add("API reads and writes fail while quorum is lost", rd.Failed > 0 && wr.Failed > 0,
				fmt.Sprintf("reads failed %d of %d, writes %d of %d; errors: %s", rd.Failed, rd.Samples, wr.Failed, wr.Samples, strings.Join(distinctErrors(rd, wr), " | ")))
			if v.rec.HealedAt != nil {
				v.add("quorum returns after the heal and the raft term has grown", v.r.Etcd.QuorumBackAfterHeal != nil && v.r.Etcd.TermAfter > v.r.Etcd.TermBefore,
					fmt.Sprintf("quorum back %s after the heal; raft term %d → %d", optSecs(v.r.Etcd.QuorumBackAfterHeal), v.r.Etcd.TermBefore, v.r.Etcd.TermAfter))
			}
		}
		v.workloadServes(nil)
	case KindAPIServer:
		if len(v.broken) < v.f.ControlPlanes {
			v.apiAvailable(v.lbBound, "HAProxy routes around the stopped apiservers")
			v.backendsDown(v.broken)
			v.leasesMove(v.broken)
		} else {
			rd, _ := v.r.signal(SigAPIRead)
			v.add("the API is unavailable (no apiserver left)", rd.Failed > 0, fmt.Sprintf("reads failed %d of %d", rd.Failed, rd.Samples))
		}
		v.workloadServes(nil)
	case KindNode:
		n := v.broken[0]
		switch {
		case slices.Contains(v.rec.ControlPlanes, n):
			v.apiAvailable(v.lbBound, "HAProxy routes around the powered-off control plane")
			v.backendsDown(v.broken)
			v.leasesMove(v.broken)
			if v.r.Etcd.LeaderBefore == n {
				v.add("a new etcd leader is elected (raft term grows)", v.r.Etcd.Elections >= 1, fmt.Sprintf("leaders %s; raft term %d → %d", leaderSeq(v.r.Etcd), v.r.Etcd.TermBefore, v.r.Etcd.TermAfter))
			} else {
				v.add("the etcd leader stays (a follower went away)", v.r.Etcd.LeaderAfter == v.r.Etcd.LeaderBefore || v.r.Etcd.Elections == 0, fmt.Sprintf("leaders %s; raft term %d → %d", leaderSeq(v.r.Etcd), v.r.Etcd.TermBefore, v.r.Etcd.TermAfter))
			}
			v.workloadServes(nil)
		case n == v.rec.LB:
			rd, _ := v.r.signal(SigAPIRead)
			v.add("the API through the load balancer is unavailable", rd.Failed > 0, fmt.Sprintf("reads failed %d of %d", rd.Failed, rd.Samples))
			v.workloadServes(nil)
		default:
			v.apiAvailable(2*time.Second, "a worker is not on the API's path")
			v.workloadServes(v.broken)
			nodeNotReady(&v.out, v.r, v.f, n, v.watched)
		}
	case KindLB:
		rd, _ := v.r.signal(SigAPIRead)
		v.add("the API through the load balancer is unavailable", rd.Failed > 0, fmt.Sprintf("reads failed %d of %d", rd.Failed, rd.Samples))
		as, ok := v.r.signal(SigAPIServers)
		v.add("every apiserver stays ready when asked directly", ok && as.Failed == 0, fmt.Sprintf("direct /readyz: %d of %d samples failed", as.Failed, as.Samples))
		v.workloadServes(nil)
	case KindKubelet:
		v.apiAvailable(2*time.Second, "the kubelet is not on the API's path")
		v.workloadServes(nil)
		nodeNotReady(&v.out, v.r, v.f, v.broken[0], v.watched)
	}
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
