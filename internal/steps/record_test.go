package steps

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// costly is a clean step that the Runner may skip (SkipWhenUnchanged).
type costly struct{ *mapStep }

func (costly) SkipWhenUnchanged() {}

// A SkipWhenUnchanged step runs once, then is skipped while nothing is
// applied and every earlier step is checked clean; a change, --smoke
// (Recheck) or a run that starts after the first step runs it again.
func TestSkipWhenUnchanged(t *testing.T) {
	r, out := newRunner(t)
	a := clean("01-a", "A")
	s := costly{clean("11-smoke", "Smoke")}
	all := []Step{a, s}
	run := func(opts Options) *Report {
		t.Helper()
		out.Reset()
		rep, err := r.Run(context.Background(), all, opts)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	run(Options{})
	if s.checks != 1 {
		t.Fatalf("first run: smoke checked %d times", s.checks)
	}
	matchLines(t, out.String(),
		`✓ 01-a  A  \(clean, `+dur+`\)`,
		`✓ 11-smoke  Smoke  \(passed, `+dur+`\)`)
	rep := run(Options{})
	if s.checks != 1 || rep.Steps[1].Skipped == "" || !rep.Steps[1].Clean {
		t.Fatalf("second run: smoke checked %d times, result %+v; want it skipped", s.checks, rep.Steps[1])
	}
	matchLines(t, out.String(),
		`✓ 01-a  A  \(clean, `+dur+`\)`,
		`✓ 11-smoke  Smoke  \(clean, 0s\) skipped: passed .*, nothing applied since; khw up --smoke runs it again`)
	run(Options{Recheck: true})
	if s.checks != 2 {
		t.Errorf("--smoke: smoke checked %d times, want 2", s.checks)
	}
	run(Options{From: "11-smoke"})
	if s.checks != 3 {
		t.Errorf("a run from the smoke step: checked %d times, want 3 (the earlier steps were not checked)", s.checks)
	}
	run(Options{})
	if s.checks != 3 {
		t.Errorf("nothing changed: smoke checked %d times, want it skipped (3)", s.checks)
	}
	// A change applied: the next run checks the smoke again, and so does
	// the one after an Apply that failed.
	a.actual["cp1/a"] = "0"
	run(Options{})
	if a.applies != 1 || s.checks != 4 {
		t.Errorf("after a change: %d applies, smoke checked %d times, want 1 and 4", a.applies, s.checks)
	}
	a.actual["cp1/a"], a.applyErr = "0", errors.New("boom")
	if _, err := r.Run(context.Background(), all, Options{}); err == nil {
		t.Fatal("a failing Apply did not fail the run")
	}
	a.actual["cp1/a"], a.applyErr = "1", nil
	run(Options{})
	if s.checks != 5 {
		t.Errorf("after a failed Apply: smoke checked %d times, want 5", s.checks)
	}
	// A dry-run writes no record and skips nothing.
	rec, _ := os.ReadFile(filepath.Join(r.Env.State.Root, RecordFile))
	run(Options{DryRun: true})
	if again, _ := os.ReadFile(filepath.Join(r.Env.State.Root, RecordFile)); string(again) != string(rec) || s.checks != 6 {
		t.Errorf("dry-run: record changed %v, smoke checked %d times (want 6)", string(again) != string(rec), s.checks)
	}
}
