package steps

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/khw-dev/khw/internal/fsutil"
)

// SkipWhenUnchanged is a step whose Check is costly or creates objects
// (11-smoke runs pods): the Runner does not run it again when it passed
// after the last change any step applied to the cluster and every step
// before it was checked clean in this run, unless Options.Recheck is set.
// Its status line then says it was skipped and why.
type SkipWhenUnchanged interface {
	Step
	// SkipWhenUnchanged marks the step; it does nothing.
	SkipWhenUnchanged()
}

// RecordFile is <state>/steps.json: when a step last began to apply changes
// to the cluster, and when each SkipWhenUnchanged step last passed. It lives
// in the state directory proper (not logs/), so that khw lab reset, which
// restores the state directory, restores it too.
const RecordFile = "steps.json"

// record is the content of RecordFile.
type record struct {
	// LastChange is when a step last began to Apply (zero: never).
	LastChange time.Time `json:"lastChange"`
	// Passed maps a SkipWhenUnchanged step's ID to when it last passed.
	Passed map[string]time.Time `json:"passed,omitempty"`
}

func (e *Env) recordPath() string { return filepath.Join(e.State.Root, RecordFile) }

// readRecord reads RecordFile; a missing file is an empty record.
func (e *Env) readRecord() (record, error) {
	var r record
	data, err := os.ReadFile(e.recordPath())
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w (delete it: the next khw up runs every check)", e.recordPath(), err)
	}
	return r, nil
}

// updateRecord applies fn to RecordFile and writes it atomically (0600).
// Nothing is written in a dry-run.
func (e *Env) updateRecord(fn func(*record)) error {
	if e.DryRun {
		return nil
	}
	r, err := e.readRecord()
	if err != nil {
		return err
	}
	fn(&r)
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := fsutil.EnsureDir(e.State.Root); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(e.recordPath(), append(data, '\n'), 0o600)
}

// Passed records that step s's Check just found nothing to change, when s
// is a SkipWhenUnchanged step (other steps are not recorded). The Runner
// calls it; so does whoever runs such a Check outside a Runner (khw lab).
// Nothing is written in a dry-run.
func (e *Env) Passed(s Step) error {
	if _, ok := s.(SkipWhenUnchanged); !ok {
		return nil
	}
	return e.updateRecord(func(rec *record) {
		if rec.Passed == nil {
			rec.Passed = map[string]time.Time{}
		}
		rec.Passed[s.ID()] = time.Now()
	})
}

// skipReason says why step s need not be checked again, or "" when it
// must be: s passed after the last change and nothing in this run changed.
func (e *Env) skipReason(s Step, earlierClean, recheck bool) string {
	if _, ok := s.(SkipWhenUnchanged); !ok || recheck || !earlierClean || e.DryRun {
		return ""
	}
	r, err := e.readRecord()
	if err != nil {
		return ""
	}
	passed, ok := r.Passed[s.ID()]
	if !ok || !passed.After(r.LastChange) {
		return ""
	}
	return fmt.Sprintf("passed %s, nothing applied since; khw up --smoke runs it again", passed.Local().Format("2006-01-02 15:04:05"))
}
