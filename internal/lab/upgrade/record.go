package upgrade

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/state"
)

// Record is an upgrade under way, kept in <state>/upgrade.json from the
// moment cluster.yaml names the new version until every step has passed:
// while it is there, khw up refuses to run (its steps would restart each
// control plane's components together, out of the policy's order) and
// khw upgrade --to To goes on where it stopped.
type Record struct {
	From      string    `json:"from"`
	To        string    `json:"to"`
	StartedAt time.Time `json:"startedAt"`
}

// RecordPath is the record's file in d.
func RecordPath(d state.Dir) string { return filepath.Join(d.Root, "upgrade.json") }

// LoadRecord returns the upgrade under way in d, nil when there is none.
func LoadRecord(d state.Dir) (*Record, error) { return loadRecord(RecordPath(d)) }

// SaveRecord writes r atomically (0600).
func SaveRecord(d state.Dir, r Record) error { return saveRecord(RecordPath(d), r) }

// ClearRecord removes the record (no error when there is none).
func ClearRecord(d state.Dir) error { return removeIfThere(RecordPath(d)) }

// AbandonedPath is <state>/upgrade-abandoned.json: an upgrade given up
// with khw upgrade --abandon, kept until khw up has put its From release
// back on every node. Only then may khw up install an older release than
// some node runs (an older versions.kubernetes is otherwise refused).
func AbandonedPath(d state.Dir) string { return filepath.Join(d.Root, "upgrade-abandoned.json") }

// LoadAbandoned returns the abandoned upgrade in d, nil when there is none.
func LoadAbandoned(d state.Dir) (*Record, error) { return loadRecord(AbandonedPath(d)) }

// SaveAbandoned records r as abandoned (atomically, 0600).
func SaveAbandoned(d state.Dir, r Record) error { return saveRecord(AbandonedPath(d), r) }

// ClearAbandoned removes the abandoned record (no error when there is none).
func ClearAbandoned(d state.Dir) error { return removeIfThere(AbandonedPath(d)) }

func loadRecord(path string) (*Record, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil || r.To == "" {
		return nil, fmt.Errorf("%s does not hold an upgrade (%v): remove it if no upgrade is under way", path, err)
	}
	return &r, nil
}

func saveRecord(path string, r Record) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(path, append(data, '\n'), fsutil.SecretMode)
}

func removeIfThere(path string) error {
	err := os.Remove(path)
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

// InProgressError is a command refused during an upgrade: it would
// change the nodes outside the upgrade's order, waits and drains.
func InProgressError(r *Record) error {
	return fmt.Errorf("an upgrade from %s to %s is under way (started %s), and this command would change the nodes outside its order: finish it with khw upgrade --to %s, or go back to %s with khw upgrade --abandon (then khw up)",
		r.From, r.To, r.StartedAt.Local().Format("2006-01-02 15:04"), r.To, r.From)
}

// WriteStatus writes khw status's line for the upgrade under way in d:
// nothing when there is none, or when its record cannot be read (khw
// status reports what it can).
func WriteStatus(w io.Writer, d state.Dir) {
	if rec, err := LoadRecord(d); err == nil && rec != nil {
		fmt.Fprintf(w, "\nUPGRADE  from %s to %s, under way since %s: khw upgrade --to %s goes on where it stopped, khw upgrade --abandon goes back\n",
			rec.From, rec.To, rec.StartedAt.Local().Format("2006-01-02 15:04"), rec.To)
	}
}
