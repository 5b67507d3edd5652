package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/lab/upgrade"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// Up is khw up as the day-2 operations (khw pki renew, khw upgrade) run
// parts of it again: its steps (Steps), a run of them recorded in the
// labs' progress (RecordRun), and RefuseReleaseChange.
func Up() nodeplan.Up {
	return nodeplan.Up{
		Steps:               Steps,
		Record:              func(d state.Dir, rep *steps.Report) error { return RecordRun(d, rep, false) },
		RefuseReleaseChange: RefuseReleaseChange,
	}
}

// RefuseReleaseChange is upgrade.RefuseReleaseChange once the cluster's
// control plane was built (khw lab list's progress has
// labid.ControlPlane): a cluster never built is not judged, and not asked
// for its versions either (khw up's own steps say what is missing).
func RefuseReleaseChange(ctx context.Context, d state.Dir, c *config.Cluster, s *cluster.Session) error {
	if prog, err := LoadProgress(d); err != nil || prog[labid.ControlPlane].IsZero() {
		return nil
	}
	return upgrade.RefuseReleaseChange(ctx, d, c, s)
}

// RunUp is khw up on cluster c (state d), under the caller's lock unless
// opts.DryRun: every step in order (opts.From to opts.Until) on machines
// opened read-write (read-only for a dry run: no SSH key written), after
// RefuseReleaseChange unless a dry run; the labs whose steps passed are
// recorded (a progress file that cannot be written is a note on errOut
// with verbosity 1 or more); a full run that passed clears an abandoned
// upgrade's record, its release running everywhere again; a dry run ends
// with what would change first. out gets the steps' progress; verbosity
// is the steps' (-v). Ctrl-C and SIGTERM stop it between steps. Errors:
// the first failed step's (steps.StepError), the refusal, the session's.
func RunUp(parent context.Context, c *config.Cluster, d state.Dir, opts steps.Options, out, errOut io.Writer, verbosity int) error {
	env := steps.NewEnv(c, d)
	env.Verbosity = verbosity
	defer env.Close()
	access := cluster.ReadWrite
	if opts.DryRun {
		access = cluster.ReadOnly // no SSH key written
	}
	s, err := cluster.Open(c, d, access, env.NodeLog(""))
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !opts.DryRun {
		if err := RefuseReleaseChange(ctx, d, c, s); err != nil {
			return err
		}
	}
	rep, err := steps.NewRunner(env, out).Run(ctx, Steps(nodeplan.New(s), c), opts)
	if merr := RecordRun(d, rep, opts.DryRun); merr != nil && verbosity >= 1 {
		fmt.Fprintf(errOut, "lab progress: %v\n", merr)
	}
	if err != nil {
		return err
	}
	if !opts.DryRun && opts.From == "" && opts.Until == "" {
		// Every step passed: the release an abandoned upgrade went back
		// to runs everywhere again.
		if err := upgrade.ClearAbandoned(d); err != nil {
			return err
		}
	}
	if opts.DryRun {
		if ch := rep.Changed(); len(ch) > 0 {
			fmt.Fprintf(out, "dry-run: %s would change; nothing was changed\n", ch[0])
		} else {
			fmt.Fprintln(out, "dry-run: every step is clean")
		}
	}
	return nil
}
