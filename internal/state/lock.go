package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/khw-dev/khw/internal/fsutil"
)

// ErrLocked is returned (wrapped) by Lock when another khw holds the lock.
var ErrLocked = errors.New("cluster is locked")

// Lock takes an exclusive, non-blocking flock(2) on <root>/.lock so two khw
// processes never change one cluster's state at once (two concurrent `khw
// pki` runs would otherwise write certs signed by different CAs). It creates
// the cluster directory (0700) if needed and writes the holder's pid into the
// lock file for the error message. The lock is released by the returned
// function or when the process exits.
func (d Dir) Lock() (unlock func(), err error) {
	if err := fsutil.EnsureDir(d.Root); err != nil {
		return nil, err
	}
	p := filepath.Join(d.Root, ".lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, fsutil.SecretMode)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(p)
		f.Close()
		who := strings.TrimSpace(string(holder))
		if who == "" {
			who = "unknown"
		}
		return nil, fmt.Errorf("%w: another khw (pid %s) is changing cluster %q; wait for it to finish (lock file %s)", ErrLocked, who, d.Name, p)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
