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

// RsyncPath returns the path of the rsync binary, or ErrNoRsync.
func RsyncPath() (string, error) {
	path, err := exec.LookPath("rsync")
	if err != nil {
		return "", ErrNoRsync
	}
	return path, nil
}

// Rsync runs `rsync args...` (flags, then sources and destination, as on
// the command line) and waits for it. A failure is returned as an error
// holding the arguments, the exit status and the last 600 bytes of rsync's
// stderr. ctx cancels it (the process is killed).
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
		return fmt.Errorf("rsync %s: %w: %s", strings.Join(args, " "), err, msg)
	}
	return nil
}
