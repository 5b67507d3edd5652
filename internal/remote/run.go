package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// StderrTailLines is how many trailing lines of stderr a CommandError keeps.
const StderrTailLines = 20

// RunOptions tunes one Run call.
type RunOptions struct {
	// Sudo runs the command as root: `sudo -n -- sh -c '<cmd>'`. -n makes a
	// missing NOPASSWD rule fail at once instead of waiting for a password.
	// Ignored when the login user is root.
	Sudo bool
	// Stdin is written to the command's standard input, then closed. Pass
	// secrets (tokens, keys) here, never inside cmd: cmd appears in errors.
	Stdin []byte
}

// CommandError is the error of a Run call that did not exit 0 or could not
// run at all.
// ErrSessionNotOpened is the cause of a CommandError when no SSH session
// could be opened on the connection: the command did not run, and Pool.Run
// may run it again on a new connection.
var ErrSessionNotOpened = errors.New("open SSH session")

type CommandError struct {
	Node    Node
	Command string // cmd as passed to Run
	Sudo    bool   // run through sudo -n
	// ExitCode is the command's exit status, or -1 when it has none (killed
	// by a signal, session failed, connection lost, context ended).
	ExitCode int
	// Signal is the signal name without "SIG" when the command was killed.
	Signal string
	// StderrTail is the last StderrTailLines lines of stderr.
	StderrTail string
	// Err is the cause: *ssh.ExitError, a context error, or a transport
	// error.
	Err error
}

func (e *CommandError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s (%s): command %q", e.Node.Name, e.Node.Addr, shorten(e.Command, 300))
	if e.Sudo {
		b.WriteString(" (via sudo -n)")
	}
	switch {
	case e.ExitCode >= 0:
		fmt.Fprintf(&b, " exited with status %d", e.ExitCode)
	case e.Signal != "":
		fmt.Fprintf(&b, " was killed by signal %s", e.Signal)
	default:
		fmt.Fprintf(&b, " failed: %v", e.Err)
	}
	if strings.Contains(e.StderrTail, "sudo: a password is required") || strings.Contains(e.StderrTail, "sudo: a terminal is required") {
		b.WriteString("; the login user needs passwordless sudo on the node (a NOPASSWD rule in /etc/sudoers.d)")
	}
	if e.StderrTail != "" {
		fmt.Fprintf(&b, "; stderr (last %d lines):\n%s", StderrTailLines, e.StderrTail)
	} else {
		b.WriteString("; stderr was empty")
	}
	return b.String()
}

func (e *CommandError) Unwrap() error { return e.Err }

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// tail returns the last n lines of b (without a trailing newline), at most
// 4 KiB.
func tail(b []byte, n int) string {
	b = bytes.TrimRight(b, "\n")
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// shellQuote quotes s for a POSIX shell as one word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Run runs cmd on the node through the login user's shell and returns its
// full stdout and stderr. A non-zero exit, a signal, a failed session or an
// ended context yields a *CommandError carrying node, command, exit code and
// stderr tail; stdout and stderr are returned in every case. When ctx ends
// the command is sent SIGTERM and the session is closed, and Run returns
// within about a second. OpenSSH delivers that signal only for non-root
// logins (sshd's session_signal_req needs the privilege-separated child,
// which a root login does not get); a root login's command keeps running
// until it exits or writes to its closed stdout, and its channel counts
// against sshd's MaxSessions until then.
// At most Config.MaxSessions Run calls share one connection at a time.
func (c *Client) Run(ctx context.Context, cmd string, opts RunOptions) (stdout, stderr []byte, err error) {
	sudo := opts.Sudo && !c.root
	fail := func(code int, sig string, errOut []byte, cause error) *CommandError {
		return &CommandError{Node: c.Node, Command: cmd, Sudo: sudo, ExitCode: code, Signal: sig, StderrTail: tail(errOut, StderrTailLines), Err: cause}
	}
	select {
	case c.sessions <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, fail(-1, "", nil, ctx.Err())
	}
	defer func() { <-c.sessions }()

	sess, err := c.conn.NewSession()
	if err != nil {
		return nil, nil, fail(-1, "", nil, fmt.Errorf("%w: %w", ErrSessionNotOpened, err))
	}
	defer sess.Close()
	var outBuf, errBuf bytes.Buffer
	sess.Stdout = &outBuf
	sess.Stderr = &errBuf
	if opts.Stdin != nil {
		sess.Stdin = bytes.NewReader(opts.Stdin)
	}
	full := cmd
	if sudo {
		full = "sudo -n -- sh -c " + shellQuote(cmd)
	}
	if err := sess.Start(full); err != nil {
		return nil, nil, fail(-1, "", nil, fmt.Errorf("start command: %w", err))
	}
	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-ctx.Done():
		sess.Signal(ssh.SIGTERM)
		sess.Close()
		select {
		case <-done:
		case <-time.After(time.Second):
			// sshd keeps the channel open until the remote process lets go
			// of its stdout (a root login ignores the signal, see above);
			// the buffers may still be written to, so do not hand them out.
			return nil, nil, fail(-1, "", nil, ctx.Err())
		}
		return outBuf.Bytes(), errBuf.Bytes(), fail(-1, "", errBuf.Bytes(), ctx.Err())
	}
	stdout, stderr = outBuf.Bytes(), errBuf.Bytes()
	if werr == nil {
		return stdout, stderr, nil
	}
	var ee *ssh.ExitError
	if errors.As(werr, &ee) {
		if ee.Signal() != "" {
			return stdout, stderr, fail(-1, ee.Signal(), stderr, werr)
		}
		return stdout, stderr, fail(ee.ExitStatus(), "", stderr, werr)
	}
	return stdout, stderr, fail(-1, "", stderr, werr)
}
