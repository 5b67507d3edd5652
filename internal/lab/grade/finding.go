package grade

import "fmt"

// Kind is the sort of a Finding, for code that decides on it; What and Fix
// are for people and are never parsed.
type Kind string

const (
	// Wrong is a mistake that no more specific kind names (the detectors'
	// findings, e.g. a certificate without a SAN it needs).
	Wrong Kind = ""
	// NotRunning: a machine or a systemd unit that must run does not.
	NotRunning Kind = "not-running"
	// Breaks: a setting whose value stops something from working (a
	// listener on an address its clients cannot reach, a value that
	// contradicts cluster.yaml).
	Breaks Kind = "breaks"
	// Weakens: a security setting turned down (anonymous access, an
	// authorizer, client-certificate checks).
	Weakens Kind = "weakens"
	// Inconsistent: a setting or file that must be the same on a node's
	// peers (every control plane, every worker) or agree with another
	// component's, and does not.
	Inconsistent Kind = "inconsistent"
	// Variant: differs from khw's reference in a way that a rule knows to
	// work (harmless); reported for information, with what the setting
	// does and why the change is harmless.
	Variant Kind = "variant"
	// NotJudged: differs from khw's reference in a setting that no rule
	// knows; reported with what the setting does. It fails nothing by
	// itself: the lab's live tryout decides whether the cluster works.
	NotJudged Kind = "not-judged"
)

// Finding is one thing grading found.
type Finding struct {
	// Lab is the lab whose step made the mistake ("02-pki"); it can be
	// earlier than the lab being checked (a cert of 02-pki found wrong while
	// checking 04-etcd).
	Lab string
	// Node is the node the evidence was read on ("cp1"), "jumpbox" for a
	// file of the state directory, or "" for a cluster-wide API object.
	Node string
	Kind Kind
	// Subject is what the finding is about, for code: a node path, a unit,
	// "path key" for a setting ("/etc/systemd/system/etcd.service
	// --listen-client-urls"); "" when nothing needs it.
	Subject string
	// What names the finding in one sentence.
	What string
	// Why says what the setting does or what the mistake breaks: the
	// template's own comment, or a rule's reason with its upstream source.
	Why string
	// Evidence is what was read that shows it: a path and the offending
	// value, a flag, a line. It never holds a private key or a token secret.
	Evidence string
	// Fix is the concrete repair: a command, or the setting and its value.
	Fix string
}

// Mistake reports whether f fails the lab (every kind but Variant and
// NotJudged).
func (f Finding) Mistake() bool { return f.Kind != Variant && f.Kind != NotJudged }

// String formats f on one line per field, for terminals and logs.
func (f Finding) String() string {
	where := f.Node
	if where == "" {
		where = "cluster"
	}
	s := fmt.Sprintf("[%s] %s: %s", f.Lab, where, f.What)
	if f.Why != "" {
		s += "\n    why: " + f.Why
	}
	if f.Evidence != "" {
		s += "\n    evidence: " + f.Evidence
	}
	if f.Fix != "" {
		s += "\n    fix: " + f.Fix
	}
	return s
}
