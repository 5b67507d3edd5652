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
