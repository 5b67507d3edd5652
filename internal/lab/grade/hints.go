package grade

import (
	"strings"
)

// Rungs is how many hints a finding's ladder has.
const Rungs = 3

// Ladder is a hint ladder for one finding, from the least given away to the
// most: where to look (a log, a command), what is wrong there (the file or
// setting and what was read), and the fix. A student who did a lab by hand
// climbs it one rung at a time (khw lab hint), so that the check teaches
// where to look before it tells the answer.
type Ladder [Rungs]string

// LadderOf builds f's ladder. look is where to look for mistakes of f's lab:
// commands, with "{node}" standing for the node the evidence was read on
// (the catalogue's Look); "" when the lab has none.
func LadderOf(f Finding, look string) Ladder {
	var l Ladder
	where := "in the cluster (the API)"
	switch f.Node {
	case "":
	case "jumpbox":
		where = "in the state directory on the jumpbox"
	default:
		where = "on " + f.Node
	}
	node := f.Node
	if node == "" || node == "jumpbox" {
		node = "NODE"
	}
	look = strings.ReplaceAll(look, "{node}", node)
	if look == "" {
		look = "read the logs of what lab " + f.Lab + " installs there, and compare its files with the lab's text"
	}
	l[0] = "Something is wrong " + where + " (lab " + f.Lab + "). Look: " + look
	second := f.What
	if f.Evidence != "" {
		second += "\n  what was read: " + f.Evidence
	}
	if f.Why != "" {
		second += "\n  why it matters: " + f.Why
	}
	l[1] = second
	l[2] = "Fix: " + f.Fix
	if f.Fix == "" {
		l[2] = "Fix: make it what lab " + f.Lab + "'s text describes (khw lab " + f.Lab + " --plain shows it)"
	}
	return l
}
