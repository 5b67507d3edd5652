package labcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/state"
)

// StartPath is where an Operation lab keeps what it recorded when it
// began, which its check compares the cluster with:
// <state>/labs/<id>-start.json.
func StartPath(d state.Dir, id string) string {
	return filepath.Join(d.Root, "labs", id+"-start.json")
}

// Checker is a start record that can say what is wrong with it once read
// back (a value the lab could not have recorded).
type Checker interface {
	Check() error
}

// LoadStart reads lab id's start record into v (a pointer to the lab's
// record type); ok is false when the lab has not begun. Errors: the file
// cannot be read, is not the record's JSON, or v is a Checker whose Check
// fails (the error names the file and says to remove it and begin the lab
// again).
func LoadStart(d state.Dir, id string, v any) (ok bool, err error) {
	data, err := os.ReadFile(StartPath(d, id))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("%s: %w (remove it and begin khw lab %s again)", StartPath(d, id), err, id)
	}
	if c, is := v.(Checker); is {
		if err := c.Check(); err != nil {
			return false, fmt.Errorf("%s is damaged: %w (remove it and begin khw lab %s again)", StartPath(d, id), err, id)
		}
	}
	return true, nil
}

// SaveStart writes v as lab id's start record: indented JSON, atomically,
// 0600 (it may name the cluster's identities and versions).
func SaveStart(d state.Dir, id string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(StartPath(d, id), append(data, '\n'), fsutil.SecretMode)
}
