package challenge

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/lab/fault"
)

// TestCatalogueRows checks every row: a valid, unique ID; a lab of the
// course for its own lab and its check; a level of 1-3; a public source; an
// injection; and what the proof expects khw lab check to say.
func TestCatalogueRows(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range Catalogue() {
		if err := fault.ValidID(f.ID); err != nil {
			t.Error(err)
		}
		if seen[f.ID] {
			t.Errorf("%s: two rows with this ID", f.ID)
		}
		seen[f.ID] = true
		for _, id := range []string{f.Lab, f.CheckedBy()} {
			if l, err := lab.Lookup(id); err != nil || l.ID != id {
				t.Errorf("%s: lab %q is not a lab ID of the course (%v)", f.ID, id, err)
			}
		}
		if f.Level < 1 || f.Level > 3 {
			t.Errorf("%s: level %d, want 1, 2 or 3", f.ID, f.Level)
		}
		if !strings.HasPrefix(f.Source.URL, "https://") || f.Source.Title == "" {
			t.Errorf("%s: source %+v: a title and an https URL of the public report or document", f.ID, f.Source)
		}
		if f.Break == nil {
			t.Errorf("%s: no injection", f.ID)
		}
		if len(f.Named) == 0 {
			t.Errorf("%s: no Named strings: the proof needs what khw lab check %s must say", f.ID, f.CheckedBy())
		}
	}
}

// TestEveryFaultHasTexts: each fault has its text in English and Korean
// (no text without a fault), the Korean in Hangul, and both languages'
// fixes are the same commands (the proof runs the English one).
func TestEveryFaultHasTexts(t *testing.T) {
	en, _, err := Texts("en")
	if err != nil {
		t.Fatal(err)
	}
	ko, fellBack, err := Texts("ko")
	if err != nil {
		t.Fatal(err)
	}
	if len(fellBack) > 0 {
		t.Errorf("no Korean text for %s (labs/ko/challenges/)", strings.Join(fellBack, ", "))
	}
	ids := map[string]bool{}
	for _, f := range Catalogue() {
		ids[f.ID] = true
		e, ok := en[f.ID]
		if !ok {
			t.Errorf("%s: no English text (labs/challenges/%s.md)", f.ID, f.Lab)
			continue
		}
		if e.Lab != f.Lab {
			t.Errorf("%s: its text is in %s.md, but the fault belongs to %s", f.ID, e.Lab, f.Lab)
		}
		k := ko[f.ID]
		if k.FixScript != e.FixScript {
			t.Errorf("%s: the Korean fix differs from the English one:\n%s\n---\n%s", f.ID, k.FixScript, e.FixScript)
		}
		if !strings.ContainsFunc(k.Symptom+k.Why, func(r rune) bool { return unicode.Is(unicode.Hangul, r) }) {
			t.Errorf("%s: the Korean text has no Hangul", f.ID)
		}
	}
	for id := range en {
		if !ids[id] {
			t.Errorf("labs/challenges: a text for %s, which is not in the catalogue", id)
		}
	}
	for id := range ko {
		if !ids[id] {
			t.Errorf("labs/ko/challenges: a text for %s, which is not in the catalogue", id)
		}
	}
}

func TestChoose(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	first := Catalogue()[0]
	f, err := Choose(s, Request{})
	if err != nil || f.ID != first.ID {
		t.Fatalf("Choose({}) = %s, %v; want %s", f.ID, err, first.ID)
	}
	var re *RequestError
	for _, r := range []Request{{ID: "no-such-fault"}, {ID: first.ID, Level: 1}, {Level: 4}, {Lab: "99"}} {
		if _, err := Choose(s, r); !errors.As(err, &re) {
			t.Errorf("Choose(%+v): %v, want a *RequestError", r, err)
		}
	}
	// A solved one is skipped when another of the request is not.
	a := Active{ID: first.ID, Lab: first.Lab, Started: time.Now()}
	if _, err := s.Finish(a, Solved, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	f, err = Choose(s, Request{Lab: first.Lab})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(faultsOf(first.Lab)); n > 1 && f.ID == first.ID {
		t.Errorf("Choose picked %s again, solved already, among %d of lab %s", f.ID, n, first.Lab)
	}
}

func faultsOf(labID string) []Fault {
	var out []Fault
	for _, f := range Catalogue() {
		if f.Lab == labID {
			out = append(out, f)
		}
	}
	return out
}

// TestChooseProofRotates: rotate:N takes N faults a day and covers the
// catalogue over the days.
func TestChooseProofRotates(t *testing.T) {
	all := Catalogue()
	seen := map[string]bool{}
	day := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for i := range len(all) {
		fs, err := chooseProof("rotate:2", day.AddDate(0, 0, i))
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != min(2, len(all)) {
			t.Fatalf("rotate:2 gave %d faults", len(fs))
		}
		for _, f := range fs {
			seen[f.ID] = true
		}
	}
	if len(seen) != len(all) {
		t.Errorf("rotate:2 over %d days covered %d of %d faults", len(all), len(seen), len(all))
	}
	if _, err := chooseProof("rotate:0", day); err == nil {
		t.Error("rotate:0 accepted")
	}
}
