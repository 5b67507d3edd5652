package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/state"
)

// lockWithoutDrill takes the cluster's lock for a day-2 operation and
// refuses while a drill is active (its prober and breaks would mix with
// the operation's). Errors: the lock is held, or the drill's ID and heal.
func lockWithoutDrill(a *app, d state.Dir) (unlock func(), err error) {
	unlock, err = a.lock(d)
	if err != nil {
		return nil, err
	}
	if active, err := drill.StoreOf(d).Active(); err == nil {
		unlock()
		return nil, fmt.Errorf("drill %s (khw break %s) is active: run khw heal first", active.ID, active.Spec.CommandLine())
	}
	return unlock, nil
}

// goOn asks what (a sentence) and "Go on? [y/N]" on in; true for y or
// yes. Any other answer prints "Nothing done."; a closed stdin without an
// answer is a usage error naming --yes, the flag that does verb without
// asking.
func goOn(a *app, in io.Reader, what, verb string) (bool, error) {
	fmt.Fprintf(a.out, "%s Go on? [y/N]: ", what)
	line, rerr := bufio.NewReader(in).ReadString('\n')
	switch ans := strings.ToLower(strings.TrimSpace(line)); {
	case ans == "y" || ans == "yes":
		return true, nil
	case rerr != nil && ans == "":
		return false, usagef("no answer (stdin closed): rerun with --yes to %s without asking", verb)
	}
	fmt.Fprintln(a.out, "Nothing done.")
	return false, nil
}
