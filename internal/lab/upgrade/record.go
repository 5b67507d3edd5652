package upgrade

import (
	"encoding/json"
	"fmt"
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
func LoadRecord(d state.Dir) (*Record, error) {
	data, err := os.ReadFile(RecordPath(d))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil || r.To == "" {
		return nil, fmt.Errorf("%s does not hold an upgrade (%v): remove it if no upgrade is under way", RecordPath(d), err)
	}
	return &r, nil
}

// SaveRecord writes r atomically (0600).
func SaveRecord(d state.Dir, r Record) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(RecordPath(d), append(data, '\n'), fsutil.SecretMode)
}

// ClearRecord removes the record (no error when there is none).
func ClearRecord(d state.Dir) error {
	err := os.Remove(RecordPath(d))
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

// InProgressError is khw up refused during an upgrade.
func InProgressError(r *Record) error {
	return fmt.Errorf("an upgrade from %s to %s is under way (started %s): khw up's steps would restart each control plane's components together, out of the version-skew policy's order; finish it with khw upgrade --to %s (or go back to %s with khw upgrade --abandon)",
		r.From, r.To, r.StartedAt.Local().Format("2006-01-02 15:04"), r.To, r.From)
}
