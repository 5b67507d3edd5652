package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
)

// Run is khw break on cluster c (state d), under the caller's lock: the
// drill of spec run (Env.Break) with a context that Ctrl-C and SIGTERM
// cancel, then its summary (WriteSummary) and, with html, the path of its
// report's page alone on the last line. Errors: *PlanError (the live
// cluster refuses spec: a command-line mistake), Break's (when the drill
// did not run, nothing else is printed), the summary's (an expectation
// that did not hold).
func Run(parent context.Context, c *config.Cluster, d state.Dir, spec Spec, html bool, out, errOut io.Writer) error {
	env, err := OpenCluster(c, d)
	if err != nil {
		return err
	}
	defer env.S.Close()
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	store := StoreOf(d)
	rep, err := env.Break(ctx, store, spec, out, errOut)
	if err != nil && rep.ID == "" {
		return err
	}
	if perr := WriteSummary(out, store, rep); perr != nil && err == nil {
		err = perr
	}
	if html {
		fmt.Fprintln(out, store.HTMLPath(rep.ID))
	}
	return err
}

// Heal is khw heal on cluster c (state d): a line on out when no drill is
// active; else, under the cluster's lock (healLock), the active drill
// healed and its report written (Env.HealActive) with a context that
// Ctrl-C and SIGTERM cancel. lock takes the cluster's lock as every khw
// command that changes the cluster does; log gets a -v line.
func Heal(parent context.Context, c *config.Cluster, d state.Dir, out io.Writer, lock func() (func(), error), log func(format string, args ...any)) error {
	store := StoreOf(d)
	rec, err := store.Active()
	if errors.Is(err, ErrNoActive) {
		fmt.Fprintf(out, "Nothing to heal: no drill is active in cluster %s.\n", c.Name)
		return nil
	}
	if err != nil {
		return err
	}
	unlock, err := healLock(rec, lock, log)
	if err != nil {
		return err
	}
	defer unlock()
	env, err := OpenCluster(c, d)
	if err != nil {
		return err
	}
	defer env.S.Close()
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return env.HealActive(ctx, store, out)
}

// healLock takes the cluster lock for khw heal, with one exception: when
// the lock is held by the live khw break (or khw lab 12) that is watching
// drill rec, heal goes on without it. That process holds the lock for the
// drill's whole life and only samples while it waits; healing is the end
// it waits for (README: "stays broken; later, from any shell: khw heal"),
// and it writes the report itself. So the documented flow cannot deadlock,
// and no other command can change the cluster in between.
func healLock(rec *Record, lock func() (func(), error), log func(format string, args ...any)) (func(), error) {
	unlock, err := lock()
	if err == nil {
		return unlock, nil
	}
	var le *state.LockedError
	if errors.As(err, &le) && le.PID != 0 && le.PID == rec.WatcherPID && ProcessAlive(rec.WatcherPID) {
		log("the lock is held by khw (pid %d) watching drill %s: healing under its lock", le.PID, rec.ID)
		return func() {}, nil
	}
	return nil, err
}
