package challenge

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/termtext"
)

// Row is one challenge as khw challenge list shows it.
type Row struct {
	ID     string `json:"id"`
	Lab    string `json:"lab"`
	Level  int    `json:"level"`
	Title  string `json:"title"`
	Source string `json:"source"`
	// Solved is how many times it was solved; Best the shortest time to
	// solve it, whole seconds (0: never solved).
	Solved  int `json:"solved"`
	GaveUp  int `json:"gaveUp"`
	BestSec int `json:"bestSeconds,omitempty"`
	// Active marks the challenge under way.
	Active bool `json:"active,omitempty"`
}

// Rows is the catalogue in lang with the results of store.
func Rows(store Store, lang string) ([]Row, error) {
	texts, _, err := Texts(lang)
	if err != nil {
		return nil, err
	}
	rs, err := store.Results()
	if err != nil {
		return nil, err
	}
	act, err := store.Active()
	if err != nil && !errors.Is(err, ErrNone) {
		return nil, err
	}
	var out []Row
	for _, f := range Catalogue() {
		r := Row{ID: f.ID, Lab: f.Lab, Level: f.Level, Title: texts[f.ID].Title, Source: f.Source.URL, Active: act.ID == f.ID}
		for _, res := range rs {
			if res.ID != f.ID {
				continue
			}
			switch res.Outcome {
			case Solved:
				r.Solved++
				if r.BestSec == 0 || res.Seconds < r.BestSec {
					r.BestSec = res.Seconds
				}
			case GaveUp:
				r.GaveUp++
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// WriteList writes rows as a table (format "text") or JSON ("json").
func WriteList(w io.Writer, rows []Row, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(termtext.NewWriter(w), 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLAB\tLEVEL\tDONE\tBEST\tTITLE")
	solved, labs := 0, map[string]bool{}
	for _, r := range rows {
		done, best := "-", "-"
		switch {
		case r.Active:
			done = "now"
		case r.Solved > 0:
			done = fmt.Sprintf("solved ×%d", r.Solved)
			solved++
		case r.GaveUp > 0:
			done = fmt.Sprintf("gave up ×%d", r.GaveUp)
		}
		if r.BestSec > 0 {
			best = (time.Duration(r.BestSec) * time.Second).String()
		}
		labs[r.Lab] = true
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.Lab, r.Level, done, best, r.Title)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d challenges over %d labs, %d solved. Levels: 1 one setting on one node; 2 a cause read in more than one place; 3 two causes, or the cause on another node than the symptom.\nkhw challenge start ID (or --lab NN, --level N, --random) begins one; -o json adds each one's source.\n", len(rows), len(labs), solved)
	return nil
}

// WriteStatus writes the challenge under way (its symptom and goal again,
// the time so far, the hints and checks), or when there is none the last
// results.
func (e *Env) WriteStatus() error {
	a, t, err := e.current()
	if errors.Is(err, ErrNone) {
		rs, rerr := e.Store.Results()
		if rerr != nil {
			return rerr
		}
		e.say("No challenge is under way.\n")
		for i := max(0, len(rs)-5); i < len(rs); i++ {
			r := rs[i]
			e.say("  %s  %-28s %-8s %s, %d %s\n", r.Ended.Local().Format("2006-01-02 15:04"), r.ID, r.Outcome, time.Duration(r.Seconds)*time.Second, r.Hints, steps.Plural(r.Hints, "hint", "hints"))
		}
		e.say("khw challenge list shows them all; khw challenge start begins one.\n")
		return nil
	}
	if err != nil {
		return err
	}
	since := a.Injected
	if since.IsZero() {
		since = a.Started
	}
	e.say(e.word("running"), a.ID, a.Lab, a.Level, e.now().Sub(since).Round(time.Second), a.Hints, a.Checks)
	if len(a.Peeked) > 0 {
		e.say(e.word("peeked"), strings.Join(a.Peeked, ", "))
	}
	e.markdown(fmt.Sprintf("## %s · %s\n\n### %s\n\n%s\n\n### %s\n\n%s\n", a.ID, t.Title, heading(e.Lang, 0), t.Symptom, heading(e.Lang, 1), t.Goal))
	return nil
}
