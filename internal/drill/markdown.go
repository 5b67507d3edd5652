package drill

import (
	"fmt"
	"strings"
	"time"
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
	p("# Drill %s — %s\n\n", mdText(r.ID), verdict)
	p("Cluster %s: %s", mdCode(r.Cluster), mdCode("khw break "+r.Spec.CommandLine()))
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
		p("- %s\n", mdText(a.String()))
	}
	p("\n%s", r.verdictTable().markdown())
	p("\n%s", r.signalTable().markdown())
	p("\n## etcd\n\nLeaders: %s. Raft term %d → %d (%d election(s)).", mdText(leaderSeq(r.Etcd)), r.Etcd.TermBefore, r.Etcd.TermAfter, r.Etcd.Elections)
	if r.Etcd.QuorumBackAfterHeal != nil {
		p(" All members healthy with a leader %s after the heal.", *r.Etcd.QuorumBackAfterHeal)
	}
	p("\n\n%s", r.leaseTable().markdown())
	p("\n%s", r.partTable().markdown())
	p("\n## Timeline\n\n%s", mdTimeline(r.Timeline, r.BrokeAt))
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

// Text from a report's fields (node output, names, errors, paths) goes
// into report.md only through these, so that it cannot add HTML, links,
// lines or table cells of its own.

// mdText is s as running Markdown text on one line: '<', '>' and '&'
// become entities (no tag or entity of s is live), '\', '`', '[' and ']'
// are backslash-escaped (s opens no code span or link), and line breaks
// (CR, LF) become spaces (s starts no block).
func mdText(s string) string { return mdTextReplacer.Replace(s) }

// mdCell is mdText for a cell of a pipe table: '|' is escaped too, so s
// stays one cell.
func mdCell(s string) string { return mdCellReplacer.Replace(s) }

var (
	mdTextReplacer = strings.NewReplacer(mdTextPairs...)
	mdCellReplacer = strings.NewReplacer(append([]string{"|", "\\|"}, mdTextPairs...)...)
	mdTextPairs    = []string{"\\", "\\\\", "`", "\\`", "[", "\\[", "]", "\\]", "&", "&amp;", "<", "&lt;", ">", "&gt;", "\r\n", " ", "\r", " ", "\n", " "}
	lineBreaks     = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ")
)

// mdCode is s as an inline code span on one line: its contents are shown
// as they are (HTML in it is text), with a fence of one backtick more
// than the longest run of backticks in s, so s cannot close it.
func mdCode(s string) string {
	s = lineBreaks.Replace(s)
	fence := strings.Repeat("`", longestRun(s, '`')+1)
	if len(fence) > 1 || s == "" {
		// A code span drops one space at each end: a backtick at an end of
		// s stays apart from the fence.
		return fence + " " + s + " " + fence
	}
	return fence + s + fence
}

// mdTimeline is the timeline as a fenced code block: one line per event
// (line breaks in its text become spaces), in a fence of backticks longer
// than any run of backticks in the lines (at least 3), so no line ends
// the block early.
func mdTimeline(events []Event, since time.Time) string {
	var lines strings.Builder
	for _, e := range events {
		lines.WriteString(lineBreaks.Replace(e.Line(since)))
		lines.WriteString("\n")
	}
	fence := strings.Repeat("`", max(3, longestRun(lines.String(), '`')+1))
	return fence + "\n" + lines.String() + fence + "\n"
}

// longestRun is the length of the longest run of c in s.
func longestRun(s string, c byte) int {
	longest, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] != c {
			run = 0
			continue
		}
		run++
		longest = max(longest, run)
	}
	return longest
}

func optPlus(s *Seconds) string {
	if s == nil {
		return "—"
	}
	return fmt.Sprintf("+%.1f", float64(*s))
}
