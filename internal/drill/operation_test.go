package drill

import (
	"strings"
	"testing"
	"time"
)

func TestOpReportAnalyze(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var samples []Sample
	// api-read: healthy before, failing from +1 to +4 (three samples), then
	// healthy; etcd healthy throughout. Given out of order.
	for i := 12; i >= -2; i-- {
		s := float64(i)
		samples = append(samples,
			Sample{Signal: SigAPIRead, At: at(s), OK: s < 1 || s >= 4, Err: map[bool]string{true: "", false: "EOF"}[s < 1 || s >= 4]},
			Sample{Signal: SigEtcd, At: at(s), OK: true})
	}
	rep := OpReport{ID: "x", Operation: "etcd restore", Command: "khw etcd restore a.db", StartedAt: t0, EndedAt: at(8),
		Steps: []OpStep{{Name: "stop", From: 0, To: 2}, {Name: "start", From: 2, To: 8, Err: "cp2: exit 1"}}}
	rep.Err = "phase 2 (start): cp2: exit 1"
	got := rep.analyze(samples, at(12))
	if got.Took != 8 {
		t.Fatalf("took %v, want 8 s", got.Took)
	}
	api, ok := Report{Signals: got.Signals}.signal(SigAPIRead)
	if !ok || api.Failed != 3 || api.Longest != 3 || api.Samples != 13 || len(api.Windows) != 1 || api.Windows[0].From != 1 {
		t.Fatalf("api-read summary %+v", api)
	}
	if e, _ := (Report{Signals: got.Signals}).signal(SigEtcd); e.Failed != 0 {
		t.Fatalf("etcd failed %d", e.Failed)
	}
	if got.Recovery != nil {
		t.Fatalf("a failed operation has no recovery, got %v", *got.Recovery)
	}
	var lines []string
	for _, e := range got.Timeline {
		lines = append(lines, e.Line(t0))
	}
	tl := strings.Join(lines, "\n")
	// In time order: the step, then the failure of api-read at +1, its
	// recovery at +4, the failed step at +8.
	order := []string{"operation   stop", "api-read    failing: EOF", "operation   start", "api-read    ok again (failed for 3.0s)", "operation   failed: cp2: exit 1"}
	last := -1
	for _, want := range order {
		i := strings.Index(tl, want)
		if i < 0 || i < last {
			t.Fatalf("timeline lacks %q after the previous line:\n%s", want, tl)
		}
		last = i
	}
	md := got.Markdown()
	for _, want := range []string{"# Etcd restore x — FAILED", "| start | 2.0 | 8.0 | 6.0 s | cp2: exit 1 |", "| api-read | ", "3 of 13"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
