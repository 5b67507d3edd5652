package drill

import (
	"bytes"
	"strings"
	"testing"
)

// The terminal summary names the failing signals, the verdict marks and
// where the report is; a failed expectation is the error.
func TestWriteSummary(t *testing.T) {
	store := Store{Dir: t.TempDir()}
	rec := Seconds(3.5)
	rep := Report{ID: "d1", BrokenFor: 20, Recovery: &rec,
		Signals: []SignalSummary{{Signal: "api-read", Samples: 20, Failed: 4, Longest: 2, Total: 2}, {Signal: "etcd", Samples: 20}},
		Expectations: []Expectation{
			{Text: "reads through lb keep working", Result: Pass, Evidence: "0 of 20 failed"},
			{Text: "etcd elects a new leader", Result: Fail, Evidence: "term 3 → 3"},
		}}
	var b bytes.Buffer
	err := WriteSummary(&b, store, rep)
	out := b.String()
	for _, want := range []string{"Drill d1: broken for ", "healthy again ", "api-read   failed 4 of 20", "✓ reads through lb", "✗ etcd elects", "Report: "} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "etcd       failed") {
		t.Errorf("a signal that never failed is listed:\n%s", out)
	}
	if err == nil || !strings.Contains(err.Error(), "1 expectation(s) did not hold") {
		t.Errorf("err = %v", err)
	}
	rep.Expectations = rep.Expectations[:1]
	if err := WriteSummary(&b, store, rep); err != nil {
		t.Errorf("all held: %v", err)
	}
}

// The summary prints the cluster's own text (an expectation's evidence,
// a Lease holder) with its control characters escaped.
func TestWriteSummaryEscapesClusterText(t *testing.T) {
	const nodeText, shown = "x\x1b[2J\ry", `x\x1b[2J\x0dy`
	rep := Report{ID: "d1", BrokenFor: 20,
		Leases:       []LeaseSummary{{Name: "kube-scheduler", HolderBefore: nodeText, HolderAfter: "cp2"}},
		Expectations: []Expectation{{Text: "etcd elects a new leader", Result: Pass, Evidence: "seen: " + nodeText}}}
	var b bytes.Buffer
	if err := WriteSummary(&b, Store{Dir: t.TempDir()}, rep); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.ContainsAny(out, "\x1b\r") || strings.Count(out, shown) != 2 {
		t.Errorf("want the cluster's text escaped twice, no raw control character:\n%q", out)
	}
}
