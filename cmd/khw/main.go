// Command khw builds a real, highly available Kubernetes cluster "the hard
// way" — every certificate, kubeconfig, systemd unit and bootstrap step made
// in the open — and teaches it one lab at a time.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/jumpbox"
	"github.com/khw-dev/khw/internal/termtext"
)

// Exit codes. They are part of the interface: scripts and the classroom
// grader rely on them.
const (
	exitOK          = 0
	exitFailed      = 1   // the operation ran and failed (a node, a cert, a check)
	exitUsage       = 2   // bad command line: unknown flag, wrong arguments
	exitInvalid     = 3   // cluster.yaml or another input file is invalid; nothing was changed
	exitNotFound    = 127 // khw shell -- CMD: CMD was not found (as in a shell)
	exitInterrupted = 130 // interrupted by Ctrl-C or SIGTERM; run the command again to continue
)

// usageError marks command-line mistakes (exit 2).
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// invalidInputError marks rejected input files (exit 3).
type invalidInputError struct{ error }

func (e invalidInputError) Unwrap() error { return e.error }

func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ue usageError
	var ie invalidInputError
	var ve *config.ValidationError
	switch {
	case errors.As(err, new(*jumpbox.NotFoundError)):
		// khw shell -- CMD / khw kubectl: the command does not exist, as a
		// shell says it.
		return exitNotFound
	case errors.Is(err, context.Canceled):
		// Interrupted (Ctrl-C, SIGTERM): the shell convention 128+SIGINT.
		return exitInterrupted
	case errors.As(err, &ue), errors.As(err, new(*components.ArgError)), strings.HasPrefix(err.Error(), "unknown command "):
		return exitUsage
	case errors.As(err, &ie), errors.As(err, &ve), errors.As(err, new(*components.ResolveError)):
		return exitInvalid
	}
	return exitFailed
}

func main() {
	cmd := newRootCmd(os.Stdout, os.Stderr)
	err := cmd.Execute()
	if err != nil {
		printError(os.Stderr, err)
	}
	os.Exit(exitCode(err))
}

// printError writes err as the last line(s) khw prints: "Error: " and its
// text, control characters escaped (termtext.Escape), since the text may
// quote a node (an ssh error, a unit's state, a file read there).
func printError(w io.Writer, err error) {
	fmt.Fprintln(w, "Error:", termtext.Escape(err.Error()))
}
