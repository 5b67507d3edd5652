package drill

import (
	"fmt"
	"strings"
)

// table is one table of a report, rendered as Markdown (report.md) and as
// HTML (report.html) from the same rows.
type table struct {
	Title string
	Head  []string
	Rows  [][]string
	// Marks: the first column holds ✓ ✗ – (an expectation's result).
	Marks bool
}

// markdown renders t as a "## Title" section with a pipe table.
func (t table) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n|", t.Title)
	for _, h := range t.Head {
		if h != "" {
			b.WriteString(" " + h)
		}
		b.WriteString(" |")
	}
	fmt.Fprintf(&b, "\n|%s\n", strings.Repeat("---|", len(t.Head)))
	for _, r := range t.Rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = mdCell(c)
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	return b.String()
}

// resultMark is the sign of an expectation's result.
func resultMark(result string) string {
	return map[string]string{Pass: "✓", Fail: "✗", Skip: "–"}[result]
}

func (r Report) verdictTable() table {
	t := table{Title: "Verdict", Head: []string{"", "expectation", "evidence"}, Marks: true}
	for _, e := range r.Expectations {
		t.Rows = append(t.Rows, []string{resultMark(e.Result), e.Text, e.Evidence})
	}
	return t
}

func (r Report) signalTable() table {
	t := table{Title: "Signals (times in seconds after the break)",
		Head: []string{"signal", "samples/s", "failed", "detected", "longest outage", "total outage", "slowest probe", "recovered after heal", "errors"}}
	for _, s := range r.Signals {
		t.Rows = append(t.Rows, []string{string(s.Signal), fmt.Sprintf("%.1f", s.Rate), fmt.Sprintf("%d of %d", s.Failed, s.Samples),
			optPlus(s.DetectedAfter), s.Longest.String(), s.Total.String(), s.Slowest.String(), optSecs(s.RecoveredAfterHeal), strings.Join(distinctErrors(s), " · ")})
	}
	return t
}

func (r Report) leaseTable() table {
	t := table{Title: "Leases", Head: []string{"lease", "holder before", "holder after", "moved at", "leaseTransitions"}}
	for _, l := range r.Leases {
		t.Rows = append(t.Rows, []string{l.Name, orNone(l.HolderBefore), orNone(l.HolderAfter), optPlus(l.MovedAfter), fmt.Sprintf("%d → %d", l.TransitionsBefore, l.TransitionsAfter)})
	}
	return t
}

func (r Report) partTable() table {
	t := table{Title: "Parts (first unhealthy sample after the break, healthy again after the heal)",
		Head: []string{"signal", "part", "down at", "seen as", "up after heal"}}
	for _, x := range r.Parts {
		if x.DownAfter == nil {
			continue
		}
		t.Rows = append(t.Rows, []string{string(x.Signal), x.Part, optPlus(x.DownAfter), x.DownAs, optSecs(x.UpAfterHeal)})
	}
	return t
}

func (r OpReport) stepTable() table {
	t := table{Title: "Steps (seconds after the start)", Head: []string{"#", "step", "from", "to", "took", "error"}}
	for i, s := range r.Steps {
		t.Rows = append(t.Rows, []string{fmt.Sprint(i + 1), s.Name, fmt.Sprintf("%.1f", float64(s.From)), fmt.Sprintf("%.1f", float64(s.To)), (s.To - s.From).String(), s.Err})
	}
	return t
}

func (r OpReport) signalTable() table {
	t := table{Title: "What the clients saw (from the start to the end of the watch)",
		Head: []string{"signal", "samples/s", "failed", "first failure", "longest outage", "total outage", "recovered after the end", "errors"}}
	for _, s := range r.Signals {
		t.Rows = append(t.Rows, []string{string(s.Signal), fmt.Sprintf("%.1f", s.Rate), fmt.Sprintf("%d of %d", s.Failed, s.Samples),
			optPlus(s.DetectedAfter), s.Longest.String(), s.Total.String(), optSecs(s.RecoveredAfterHeal), strings.Join(distinctErrors(s), " · ")})
	}
	return t
}
