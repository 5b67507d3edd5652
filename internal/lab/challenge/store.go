package challenge

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/state"
)

// Active is the challenge under way: <state>/challenges/active.json
// (0600). It exists from before the injection until the challenge ends,
// so that give-up can always restore the snapshot.
type Active struct {
	ID  string `json:"id"`
	Lab string `json:"lab"`
	// Checked is the lab whose check grades it (fault.Fault.CheckedBy).
	Checked string    `json:"checked,omitempty"`
	Level   int       `json:"level"`
	Started time.Time `json:"started"`
	// Injected is when the fault was in place (zero: the injection did
	// not finish; give-up restores the snapshot all the same).
	Injected time.Time `json:"injected,omitzero"`
	// Hints is how many rungs of the ladder were shown (0-3).
	Hints int `json:"hints"`
	// Checks is how many times khw challenge check ran.
	Checks int `json:"checks"`
	// Peeked are the commands run meanwhile that show the answer (khw lab
	// check without --hints, khw lab hint, khw up --dry-run), once each.
	Peeked []string `json:"peeked,omitempty"`
}

func (a Active) checked() string {
	if a.Checked != "" {
		return a.Checked
	}
	return a.Lab
}

// Outcome is how a challenge ended.
type Outcome string

const (
	// Solved: khw challenge check passed.
	Solved Outcome = "solved"
	// GaveUp: khw challenge give-up showed the answer and restored the
	// snapshot.
	GaveUp Outcome = "gave-up"
	// Ended: the challenge ended another way (khw up, khw lab reset or
	// khw etcd restore with --force repaired the cluster): not solved.
	Ended Outcome = "ended"
)

// Result is one finished challenge, kept in <state>/challenges/results.json.
type Result struct {
	ID      string    `json:"id"`
	Lab     string    `json:"lab"`
	Level   int       `json:"level"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	// Seconds is the time from the injection to the end, whole seconds.
	Seconds int `json:"seconds"`
	Hints   int `json:"hints"`
	Checks  int `json:"checks"`
	// Peeked are the commands that showed the answer (Active.Peeked).
	Peeked  []string `json:"peeked,omitempty"`
	Outcome Outcome  `json:"outcome"`
	// By is what ended a challenge that was not solved or given up (the
	// command, e.g. "khw up --force").
	By string `json:"by,omitempty"`
}

// Store is a cluster's challenge records: <state>/challenges (0700).
type Store struct{ Dir string }

// StoreOf is the challenge store of state directory d.
func StoreOf(d state.Dir) Store { return Store{Dir: filepath.Join(d.Root, "challenges")} }

func (s Store) activePath() string  { return filepath.Join(s.Dir, "active.json") }
func (s Store) resultsPath() string { return filepath.Join(s.Dir, "results.json") }

// ErrNone is Active's error when no challenge is under way.
var ErrNone = errors.New("no challenge is under way (khw challenge list shows them; khw challenge start begins one)")

// Active returns the challenge under way, or ErrNone.
func (s Store) Active() (Active, error) {
	var a Active
	data, err := os.ReadFile(s.activePath())
	if errors.Is(err, fs.ErrNotExist) {
		return a, ErrNone
	}
	if err != nil {
		return a, err
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return a, fmt.Errorf("%s: %w (remove it to forget the challenge; khw lab reset undoes the nodes)", s.activePath(), err)
	}
	return a, nil
}

// SaveActive writes a atomically.
func (s Store) SaveActive(a Active) error { return s.write(s.activePath(), a) }

// Results returns the finished challenges, oldest first (none: empty).
func (s Store) Results() ([]Result, error) {
	var rs []Result
	data, err := os.ReadFile(s.resultsPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &rs); err != nil {
		return nil, fmt.Errorf("%s: %w", s.resultsPath(), err)
	}
	return rs, nil
}

// Finish ends the challenge under way: its Result is appended to the
// results, then the active record is removed (a crash between the two
// leaves both, and the next Finish would count it twice, so the result is
// not appended when the last one has the same ID and start).
func (s Store) Finish(a Active, o Outcome, by string, now time.Time) (Result, error) {
	from := a.Injected
	if from.IsZero() {
		from = a.Started
	}
	r := Result{ID: a.ID, Lab: a.Lab, Level: a.Level, Started: a.Started, Ended: now.UTC(),
		Seconds: int(now.Sub(from).Seconds()), Hints: a.Hints, Checks: a.Checks, Peeked: a.Peeked, Outcome: o, By: by}
	rs, err := s.Results()
	if err != nil {
		return r, err
	}
	if n := len(rs); n == 0 || rs[n-1].ID != a.ID || !rs[n-1].Started.Equal(a.Started) {
		if err := s.write(s.resultsPath(), append(rs, r)); err != nil {
			return r, err
		}
	}
	if err := os.Remove(s.activePath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return r, err
	}
	return r, nil
}

func (s Store) write(p string, v any) error {
	if err := fsutil.EnsureDir(s.Dir); err != nil {
		return err
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(p, append(data, '\n'), 0o600)
}

// RefuseDuring fails while a challenge is under way in s: command (e.g.
// "khw up") would repair the cluster for the student, and a challenge
// repaired that way is not solved. With force it ends the challenge as
// Ended by command instead, saying so on w (the nodes' snapshot stays
// until the next challenge replaces it).
func (s Store) RefuseDuring(command string, force bool, w io.Writer, now time.Time) error {
	a, err := s.Active()
	if errors.Is(err, ErrNone) {
		return nil
	}
	if err != nil {
		return err
	}
	if !force {
		return fmt.Errorf("challenge %s is under way: %s would repair the cluster for you. Solve it (khw challenge check) or give up (khw challenge give-up, which restores the cluster); or add --force to run %s anyway, which ends the challenge as not solved", a.ID, command, command)
	}
	if _, err := s.Finish(a, Ended, command+" --force", now); err != nil {
		return err
	}
	fmt.Fprintf(w, "Challenge %s ended, not solved: %s --force runs while it was under way.\n", a.ID, command)
	return nil
}

// Peek records that command, which shows the answer, ran while a
// challenge was under way, and says so on w: the challenge goes on, and
// its result keeps it (a teacher sees it). Nothing happens without a
// challenge.
func (s Store) Peek(command string, w io.Writer) error {
	a, err := s.Active()
	if errors.Is(err, ErrNone) {
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Note: challenge %s is under way, and %s shows the answer; its result will say so (khw challenge check says only where to look).\n", a.ID, command)
	for _, p := range a.Peeked {
		if p == command {
			return nil
		}
	}
	a.Peeked = append(a.Peeked, command)
	return s.SaveActive(a)
}
