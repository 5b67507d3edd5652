package drill

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/termtext"
)

// Kinds of report.
const (
	KindDrill     = "drill"
	KindOperation = "operation"
)

// Entry is one drill or day-2 operation kept in a state directory.
type Entry struct {
	ID    string
	Kind  string // KindDrill or KindOperation
	Store Store
	// Verdict: PASSED/FAILED for a drill, done/FAILED for an operation,
	// "no report" while it runs (or when it was cut short before one).
	Verdict string
	// Took: how long the drill was broken, or the operation took.
	Took Seconds
	// What: the command line ("khw break etcd --count 2", "khw pki renew
	// --all").
	What string
}

// ErrNoReport is returned by Find for an ID that names no report;
// ErrNoReports when the cluster has none at all.
var (
	ErrNoReport  = errors.New("no such report")
	ErrNoReports = errors.New("no reports yet")
)

// Entries lists the drills (<state>/drills) and operations
// (<state>/operations) of d, oldest first (IDs start with their UTC
// time). A directory whose report.json cannot be read is listed with
// Verdict "no report".
func Entries(d state.Dir) ([]Entry, error) {
	var out []Entry
	for _, src := range []struct {
		kind  string
		store Store
	}{{KindDrill, StoreOf(d)}, {KindOperation, OperationsOf(d)}} {
		des, err := os.ReadDir(src.store.Dir)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, de := range des {
			if !de.IsDir() {
				continue
			}
			out = append(out, src.store.entry(src.kind, de.Name()))
		}
	}
	slices.SortStableFunc(out, func(a, b Entry) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// entry reads what the list shows of report id.
func (s Store) entry(kind, id string) Entry {
	e := Entry{ID: id, Kind: kind, Store: s, Verdict: "no report"}
	_, js := s.ReportPaths(id)
	data, err := os.ReadFile(js)
	if err != nil {
		return e
	}
	if kind == KindDrill {
		var r Report
		if json.Unmarshal(data, &r) == nil {
			e.Verdict, e.Took, e.What = "PASSED", r.BrokenFor, "khw break "+r.Spec.CommandLine()
			if !r.Passed {
				e.Verdict = "FAILED"
			}
		}
		return e
	}
	var r OpReport
	if json.Unmarshal(data, &r) == nil {
		e.Verdict, e.Took, e.What = "done", r.Took, r.Command
		if r.Err != "" {
			e.Verdict = "FAILED"
		}
	}
	return e
}

// Find returns the report named id: its whole ID, a prefix only one ID
// has, or "" for the newest that has a report. Errors: an id that could
// name a path (with a slash, or "." and ".."), no reports at all
// (ErrNoReports), no report by that ID (ErrNoReport, naming the newest
// few), a prefix of several IDs (naming them).
func Find(d state.Dir, id string) (Entry, error) {
	if strings.ContainsAny(id, `/\`) || id == "." || id == ".." {
		return Entry{}, fmt.Errorf("report ID %q: an ID is a directory name such as 20261205-101500-etcd-2, without slashes", id)
	}
	all, err := Entries(d)
	if err != nil {
		return Entry{}, err
	}
	if id == "" {
		for i := len(all) - 1; i >= 0; i-- {
			if all[i].What != "" {
				return all[i], nil
			}
		}
	}
	if len(all) == 0 || id == "" {
		return Entry{}, fmt.Errorf("%w: no drill or day-2 operation has finished in this cluster (khw break, khw etcd restore, khw pki renew, khw upgrade write reports)", ErrNoReports)
	}
	var match []Entry
	for _, e := range all {
		if e.ID == id {
			return e, nil
		}
		if strings.HasPrefix(e.ID, id) {
			match = append(match, e)
		}
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		var newest []string
		for _, e := range all[max(0, len(all)-3):] {
			newest = append(newest, e.ID)
		}
		return Entry{}, fmt.Errorf("%w: %q (the newest: %s; khw report list shows all)", ErrNoReport, id, strings.Join(newest, ", "))
	}
	var ids []string
	for _, e := range match {
		ids = append(ids, e.ID)
	}
	return Entry{}, fmt.Errorf("report ID %q names %d reports (%s): give more of it", id, len(match), strings.Join(ids, ", "))
}

// HTML returns the path of e's report.html, writing it first from
// report.json and samples.jsonl when it is missing (a report written
// before khw drew pictures). Errors: no report.json yet (the drill is
// still broken or was cut short), an unreadable file.
func (e Entry) HTML() (string, error) {
	path := e.Store.HTMLPath(e.ID)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	_, js := e.Store.ReportPaths(e.ID)
	data, err := os.ReadFile(js)
	if os.IsNotExist(err) {
		if active, aerr := e.Store.Active(); aerr == nil && active.ID == e.ID {
			return "", fmt.Errorf("drill %s is still broken: khw heal heals it and writes its report", e.ID)
		}
		return "", fmt.Errorf("%s %s has no report: it was cut short before writing one (khw report list shows the others)", e.Kind, e.ID)
	}
	if err != nil {
		return "", err
	}
	samples, err := ReadSamples(e.Store.SamplesPath(e.ID))
	if err != nil {
		return "", err
	}
	var page []byte
	if e.Kind == KindDrill {
		var r Report
		if err := json.Unmarshal(data, &r); err != nil {
			return "", fmt.Errorf("%s: %w", js, err)
		}
		page, err = r.HTML(samples)
	} else {
		var r OpReport
		if err := json.Unmarshal(data, &r); err != nil {
			return "", fmt.Errorf("%s: %w", js, err)
		}
		page, err = r.HTML(samples)
	}
	if err != nil {
		return "", err
	}
	if err := fsutil.WriteFileAtomic(path, page, fsutil.SecretMode); err != nil {
		return "", err
	}
	return path, nil
}

// htmlBeside is the report.html beside a report.md.
func htmlBeside(md string) string { return filepath.Join(filepath.Dir(md), "report.html") }

// WriteEntries writes khw report list: a table of all (ID, kind, verdict,
// how long, command line), their text escaped (termtext.Escape, as it is
// read from the reports' files), or a line saying there is none yet.
func WriteEntries(w io.Writer, all []Entry) error {
	if len(all) == 0 {
		fmt.Fprintln(w, "No reports yet: khw break, khw etcd restore and khw pki renew write them.")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tVERDICT\tTOOK\tCOMMAND")
	for _, e := range all {
		took := "-"
		if e.Took > 0 {
			took = e.Took.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", termtext.Escape(e.ID), termtext.Escape(e.Kind), termtext.Escape(e.Verdict), took, termtext.Escape(e.What))
	}
	return tw.Flush()
}
