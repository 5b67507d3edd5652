package fsutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// ErrNoRsync is returned by RsyncPath and Rsync when rsync is not
// installed; its text says how to install it (Debian/Ubuntu).
var ErrNoRsync = errors.New("rsync is not installed on this host: apt-get install rsync")

// RsyncExitVanished is rsync's exit status 24, "Partial transfer due to
// vanished source files" (rsync(1), EXIT VALUES): a file was in rsync's file
// list but gone when it came to be copied. Everything else was copied.
const RsyncExitVanished = 24

// RsyncPath returns the path of the rsync binary, or ErrNoRsync.
func RsyncPath() (string, error) {
	path, err := exec.LookPath("rsync")
	if err != nil {
		return "", ErrNoRsync
	}
	return path, nil
}

// RsyncError is a failed rsync run.
type RsyncError struct {
	Args     []string // rsync's arguments, as passed to Rsync
	ExitCode int      // rsync's exit status (rsync(1), EXIT VALUES); -1 when it did not exit by itself (killed, ctx cancelled)
	Stderr   string   // the last 600 bytes of rsync's stderr, trimmed
	Err      error    // from os/exec
}

func (e *RsyncError) Error() string {
	return fmt.Sprintf("rsync %s: %v: %s", strings.Join(e.Args, " "), e.Err, e.Stderr)
}

func (e *RsyncError) Unwrap() error { return e.Err }

// IsRsyncVanished reports whether err is (or wraps) an RsyncError with exit
// status RsyncExitVanished and nothing worse: the copy is complete except for
// source files that were deleted while rsync ran.
func IsRsyncVanished(err error) bool {
	var re *RsyncError
	return errors.As(err, &re) && re.ExitCode == RsyncExitVanished
}

// Rsync runs `rsync args...` (flags, then sources and destination, as on
// the command line) and waits for it. A failure is returned as an
// *RsyncError (arguments, exit status, the last 600 bytes of rsync's
// stderr); IsRsyncVanished tells the vanished-files case apart. ctx cancels
// it (the process is killed).
func Rsync(ctx context.Context, args ...string) error {
	path, err := RsyncPath()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 600 {
			msg = "…" + msg[len(msg)-600:]
		}
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) && ctx.Err() == nil {
			code = ee.ExitCode() // -1 when killed by a signal
		}
		return &RsyncError{Args: append([]string(nil), args...), ExitCode: code, Stderr: msg, Err: err}
	}
	return nil
}
