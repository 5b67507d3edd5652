package drill

import (
	"encoding/json"
	"fmt"
	"math"
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
