package drill

import (
	"fmt"
	"strings"
)

// Markdown renders the report for people: what was broken, the verdict,
// each signal's detection and unavailability, etcd and Lease changes, the
// backends, and the timeline.
func (r Report) Markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	verdict := "PASSED"
	if !r.Passed {
		verdict = "FAILED"
	}
	p("# Drill %s — %s\n\n", r.ID, verdict)
	p("Cluster `%s`: `khw break %s`", r.Cluster, r.Spec.CommandLine())
	p(".\n\nBroken at %s UTC", r.BrokeAt.UTC().Format("2006-01-02 15:04:05.0"))
	if r.HealedAt != nil {
		p(", healed %s later", r.BrokenFor)
	} else {
		p(", not healed (watched %s)", r.BrokenFor)
	}
	if r.Recovery != nil {
		p(", every signal healthy again %s after the heal", *r.Recovery)
	}
	p(".\n\n")
	p("What was done:\n\n")
	for _, a := range r.Actions {
		p("- %s\n", a)
	}
	p("\n%s", r.verdictTable().markdown())
	p("\n%s", r.signalTable().markdown())
	p("\n## etcd\n\nLeaders: %s. Raft term %d → %d (%d election(s)).", leaderSeq(r.Etcd), r.Etcd.TermBefore, r.Etcd.TermAfter, r.Etcd.Elections)
	if r.Etcd.QuorumBackAfterHeal != nil {
		p(" All members healthy with a leader %s after the heal.", *r.Etcd.QuorumBackAfterHeal)
	}
	p("\n\n%s", r.leaseTable().markdown())
	p("\n%s", r.partTable().markdown())
	p("\n## Timeline\n\n```\n")
	for _, e := range r.Timeline {
		p("%s\n", e.Line(r.BrokeAt))
	}
	p("```\n")
	return b.String()
}

// CommandLine is the spec as `khw break` arguments.
func (s Spec) CommandLine() string {
	parts := []string{string(s.Kind)}
	switch s.Kind {
	case KindEtcd, KindAPIServer:
		if s.Count > 0 {
			parts = append(parts, fmt.Sprintf("--count %d", s.Count))
		}
		if len(s.Nodes) > 0 {
			parts = append(parts, "--nodes "+strings.Join(s.Nodes, ","))
		}
	default:
		parts = append(parts, s.Nodes...)
	}
	if s.For > 0 {
		parts = append(parts, "--for "+s.For.String())
	}
	if s.Force {
		parts = append(parts, "--force")
	}
	return strings.Join(parts, " ")
}

func mdCell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ")
}

func optPlus(s *Seconds) string {
	if s == nil {
		return "—"
	}
	return fmt.Sprintf("+%.1f", float64(*s))
}
