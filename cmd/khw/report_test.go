package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/state"
)

// TestReportListAndOpen: khw report lists a drill and an operation in time
// order with their verdicts, open prints the newest page or the one an ID
// prefix names, writes a missing page from report.json and the samples,
// and refuses IDs that name a path, nothing or several reports.
func TestReportListAndOpen(t *testing.T) {
	base := filepath.Join(t.TempDir(), "state")
	if _, e, code := run(t, base, "init", "--name", "lab", "--arch", "amd64", "--provider", "nspawn"); code != 0 {
		t.Fatalf("init: %s", e)
	}
	if out, _, code := run(t, base, "report", "open"); code != 1 || out != "" {
		t.Errorf("open without reports: exit %d, %q", code, out)
	}
	d := state.Dir{Root: filepath.Join(base, "lab")}
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	var samples []drill.Sample
	for i := -4; i < 20; i++ {
		at := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		samples = append(samples, drill.Sample{Signal: drill.SigAPIRead, At: at, OK: i < 2 || i > 5, Err: "EOF"})
	}
	heal := t0.Add(5 * time.Second)
	rec := drill.Record{ID: "20261205-100000-lb", Cluster: "lab", Spec: drill.Spec{Kind: drill.KindLB}, BrokeAt: t0, HealedAt: &heal, EndedAt: &heal}
	rep := drill.Analyze(rec, samples, drill.Facts{})
	if err := drill.AppendSamples(filepath.Join(d.Root, "drills", rec.ID, "samples.jsonl"), samples); err == nil {
		t.Fatal("the drill's directory should not exist yet")
	}
	if _, _, err := drill.StoreOf(d).WriteReport(rep, samples); err != nil {
		t.Fatal(err)
	}
	if err := drill.AppendSamples(drill.StoreOf(d).SamplesPath(rec.ID), samples); err != nil {
		t.Fatal(err)
	}
	op := drill.OpReport{ID: "20261205-101500-pki-renew", Cluster: "lab", Operation: "pki renew", Command: "khw pki renew --all\x1b[31m", StartedAt: t0, EndedAt: heal, Took: 5}
	if _, _, err := drill.OperationsOf(d).WriteOpReport(op, samples); err != nil {
		t.Fatal(err)
	}

	out, e, code := run(t, base, "report", "list")
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, e)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "20261205-100000-lb") || !strings.Contains(lines[1], "drill") ||
		!strings.Contains(lines[2], "operation") || !strings.Contains(lines[2], "done") || !strings.Contains(lines[2], `khw pki renew --all\x1b[31m`) {
		t.Errorf("list:\n%s\nwant the report's command with its control character escaped", out)
	}
	if strings.ContainsRune(out, 0x1b) {
		t.Errorf("list printed a raw ESC from a report file:\n%q", out)
	}
	wantVerdict := "PASSED"
	if !rep.Passed {
		wantVerdict = "FAILED"
	}
	if !strings.Contains(lines[1], wantVerdict) {
		t.Errorf("the drill's verdict is not %s:\n%s", wantVerdict, out)
	}

	out, _, code = run(t, base, "report", "open")
	if code != 0 || strings.TrimSpace(out) != filepath.Join(d.Root, "operations", op.ID, "report.html") {
		t.Errorf("open: exit %d, %q", code, out)
	}
	// A drill's page removed (as for a report older than pages): open
	// writes it again from report.json and the samples.
	page := drill.StoreOf(d).HTMLPath(rec.ID)
	first, _ := os.ReadFile(page)
	if err := os.Remove(page); err != nil {
		t.Fatal(err)
	}
	out, _, code = run(t, base, "report", "open", "20261205-1000")
	if code != 0 || strings.TrimSpace(out) != page {
		t.Fatalf("open by prefix: exit %d, %q", code, out)
	}
	again, err := os.ReadFile(page)
	if err != nil || string(again) != string(first) {
		t.Errorf("the page written again differs from the first (%v)", err)
	}
	if st, err := os.Stat(page); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("page mode: %v %v", st, err)
	}
	// --print: the page itself.
	out, _, code = run(t, base, "report", "open", "--print", rec.ID)
	if code != 0 || out != string(first) {
		t.Errorf("open --print: exit %d, %d bytes (the page has %d)", code, len(out), len(first))
	}
	// A drill cut short before its report: listed, not opened by default,
	// and named as cut short when asked for.
	if err := os.MkdirAll(filepath.Join(d.Root, "drills", "20261205-110000-etcd-1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if out, _, code := run(t, base, "report", "open"); code != 0 || strings.TrimSpace(out) != filepath.Join(d.Root, "operations", op.ID, "report.html") {
		t.Errorf("open with a cut-short drill newest: exit %d, %q", code, out)
	}
	if _, e, code := run(t, base, "report", "open", "20261205-11"); code != 1 || !strings.Contains(e, "cut short before writing one") {
		t.Errorf("open of the cut-short drill: exit %d, %q", code, e)
	}
	if out, _, _ := run(t, base, "report", "list"); !regexp.MustCompile(`20261205-110000-etcd-1 +drill +no report`).MatchString(out) {
		t.Errorf("list with the cut-short drill:\n%s", out)
	}
	if _, e, code := run(t, base, "report", "bogus"); code != 2 || !strings.Contains(e, `unknown command "bogus"`) {
		t.Errorf("report bogus: exit %d, %q", code, e)
	}
	if _, _, code := run(t, base, "report", "open", "a", "b"); code != 2 {
		t.Errorf("report open a b: exit %d, want 2", code)
	}
	for _, bad := range []struct{ id, want string }{
		{"../lab", "without slashes"},
		{"..", "without slashes"},
		{"2025", "the newest: 20261205-100000-lb, 20261205-101500-pki-renew, 20261205-110000-etcd-1"},
		{"20261205-10", "names 2 reports"},
	} {
		out, e, code := run(t, base, "report", "open", bad.id)
		if code != 2 || out != "" || !strings.Contains(e, bad.want) {
			t.Errorf("open %s: exit %d, out %q, err %q (want %q)", bad.id, code, out, e, bad.want)
		}
	}
}
