package lab

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/vm"
)

// ResetAsked puts the nodes and the state directory back to before lab l
// as khw lab reset does: it asks first (unless ui.Yes, or l is the
// failover lab, whose reset changes no node), prints each stage and ends
// with the labs that are no longer done. A warning (the clocks could not
// be synchronised) goes to ui.Err. Errors: CanReset's, no answer or a no,
// Reset's.
func (c *Course) ResetAsked(ctx context.Context, l Lab, ui UI) error {
	if err := c.CanReset(l); err != nil {
		return err
	}
	if l.Kind != Drill && !ui.Yes {
		ui.say("Revert every node and the state directory of cluster %s to before lab %s? Everything done since is lost. [y/N]: ", c.S.Config.Name, l.ID)
		a, err := readAnswer(ui)
		if err != nil {
			return ErrNoAnswer
		}
		if a != "y" && a != "yes" {
			return fmt.Errorf("not reset")
		}
	}
	t0 := time.Now()
	warning, err := c.Reset(ctx, l, func(format string, args ...any) { ui.say(format+"\n", args...) })
	if warning != nil {
		fmt.Fprintf(ui.Err, "Warning: %v\n", warning)
	}
	if err != nil {
		return err
	}
	all := From(l.ID)
	notDone := fmt.Sprintf("Labs %s to %s are not done.", l.ID, all[len(all)-1].ID)
	if len(all) == 1 {
		notDone = fmt.Sprintf("Lab %s is not done.", l.ID)
	}
	ui.say("Back to before lab %s (%s). %s\n", l.ID, time.Since(t0).Round(100*time.Millisecond), notDone)
	if l.Kind != Drill && !l.MakesNodes {
		limit := vm.Scaled(c.S.Provider, SettleLimit, 6*SettleLimit)
		ui.say("Waiting for the nodes to boot again and the labs before %s to check done (at most %s)…\n", l.ID, limit)
		t1 := time.Now()
		if pending := c.settle(ctx, l.ID, limit, 2*time.Second); len(pending) > 0 {
			fmt.Fprintf(ui.Err, "Warning: after %s, not done yet: %s; khw lab list shows them again\n", limit, strings.Join(pending, "; "))
		} else {
			ui.say("The labs before %s check done again (%s).\n", l.ID, time.Since(t1).Round(100*time.Millisecond))
		}
	}
	ui.say("Continue with khw lab %s.\n", l.ID)
	return nil
}

// SettleLimit bounds the wait after a reset for the reverted nodes to boot
// and the earlier labs to check done again (on nspawn nodes; longer on
// slow ones, Target.Scaled).
const SettleLimit = 2 * time.Minute

// settle checks the labs before the lab before ("" every lab) every
// interval until each that is a step of khw up is done, at most limit (or
// until ctx ends): a reverted node boots again, and until its units run
// and its apiserver is ready the labs it belongs to look drifted. It
// returns the labs still not done then ("ID (detail)").
func (c *Course) settle(ctx context.Context, before string, limit, interval time.Duration) []string {
	deadline := time.Now().Add(limit)
	for {
		rows, err := c.List(ctx)
		var pending []string
		if err != nil {
			pending = append(pending, err.Error())
		}
		for _, r := range rows {
			// A drill's or an operation's status is a record, which no
			// booting node changes.
			if (before == "" || r.ID < before) && r.Status != Done && byID(r.ID).HasStep() {
				pending = append(pending, r.ID+" ("+r.Detail+")")
			}
		}
		if len(pending) == 0 || !time.Now().Add(interval).Before(deadline) {
			return pending
		}
		select {
		case <-ctx.Done():
			return pending
		case <-time.After(interval):
		}
	}
}

// ErrNoAnswer is ResetAsked's error when no answer could be read: a usage
// mistake (the command needs --yes without a terminal).
var ErrNoAnswer = errors.New("no answer (stdin closed): add --yes to reset without asking")

// WaitSteps waits until every lab that is a step of khw up checks done
// again, at most limit, as khw lab reset does after a revert; it returns
// the labs still not done then ("ID (detail)"), none when all are.
func (c *Course) WaitSteps(ctx context.Context, limit time.Duration) []string {
	return c.settle(ctx, "", limit, 2*time.Second)
}
