package grade

import (
	"path"
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
	look = lookAt(f, look)
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

// lookAt says where on its node a finding's evidence is, without saying
// what it is, from its Subject: a unit file ("/etc/systemd/system/x.service"
// or "… --flag") is read with systemctl cat, a unit with systemctl status,
// a sysctl or a kernel module with the command that shows it; for another
// node file, the lab's log (labLook) and then the lab's files. labLook when
// the Subject says nothing of where (free text, an API object, a file on
// the jumpbox).
func lookAt(f Finding, labLook string) string {
	if f.Node == "" || f.Node == "jumpbox" {
		return labLook
	}
	ssh := "`ssh -F \"$KHW_SSH_CONFIG\" {node} "
	file, _, _ := strings.Cut(f.Subject, " ")
	switch {
	case strings.HasPrefix(file, "/etc/systemd/system/") && strings.HasSuffix(file, ".service"):
		unit := path.Base(file)
		return ssh + "systemctl cat " + unit + "` (the unit and the flags it runs with), and " + ssh + "sudo journalctl -u " + unit + " -n 30 --no-pager`"
	case strings.HasPrefix(file, "/") && labLook != "":
		// Naming the file would be the second hint: the log first.
		return labLook + "; then the files lab " + f.Lab + " installs there"
	case strings.HasSuffix(f.Subject, ".service") && !strings.Contains(f.Subject, " "):
		return ssh + "systemctl status " + f.Subject + "`, and " + ssh + "sudo journalctl -u " + f.Subject + " -n 30 --no-pager`"
	case strings.HasPrefix(f.Subject, "sysctl "):
		return ssh + "sudo sysctl net.ipv4 net.bridge` (the kernel settings lab 07 sets), and /etc/sysctl.d/ there"
	case strings.HasPrefix(f.Subject, "kernel module "):
		return ssh + "lsmod` (the kernel modules lab 07 loads), and /etc/modules-load.d/ there"
	}
	return labLook
}
