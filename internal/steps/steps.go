// Package steps is the step engine behind `khw up` and `khw lab`.
//
// A Step is one lab of "Kubernetes the Hard Way" (01-machines, 02-pki, …,
// 04-etcd, …). It can read the actual state and say what differs from the
// desired state (Check), change only what differs (Apply), and show the shell
// commands it stands for (Commands). A Runner runs an ordered list of steps:
//
//	for each step: Check → no diffs: "✓ … (clean)"
//	                     → diffs:    Apply(diffs) → Check again, which must be clean
//
// so a second `khw up` finds every step clean and changes nothing. The shape
// borrows from kubeadm's phases (each runnable on its own: Options.From and
// Options.Until), k0sctl's phases (a dry-run that prints what would change)
// and kind's status lines (✓/✗ per step, a spinner while it runs on a TTY).
package steps

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/state"
)

// Step is one lab: an ID such as "04-etcd", a title such as "Bootstrap the
// etcd cluster", and the three things a lab needs.
//
// Contract for implementations:
//   - Check reads the actual state (files on nodes, unit states, API objects)
//     and returns one Diff per difference from the desired state, with a
//     specific message; nil or empty means the step is done. Check must not
//     change anything: `khw lab check` uses it to grade a step done by hand.
//     An error means the state could not be read (node unreachable, API down),
//     not that it differs.
//   - Apply changes only what the diffs name. It must be idempotent and safe
//     to re-run after a crash half-way. It is never called with empty diffs
//     and never in a dry-run. After Apply the Runner calls Check again; any
//     diff left is an error.
//   - Commands returns the shell equivalent, in order. With diffs == nil it
//     returns every command of the step (the lab view); with diffs it returns
//     only what fixes those diffs (--dry-run). It must not touch the network
//     or the nodes.
//
// Steps may return errors wrapped with OnNode so the Runner can name the node
// and point at its log.
type Step interface {
	// ID is the lab ID, "NN-name" (e.g. "04-etcd"); unique in a run.
	ID() string
	// Title is a short human title (e.g. "Bootstrap the etcd cluster").
	Title() string
	// Check returns the differences between desired and actual state.
	Check(ctx context.Context, env *Env) ([]Diff, error)
	// Apply fixes the given differences (as returned by Check).
	Apply(ctx context.Context, env *Env, diffs []Diff) error
	// Commands returns the shell commands equivalent to Apply(diffs), or to
	// the whole step when diffs is nil.
	Commands(env *Env, diffs []Diff) []Command
}

// Renderer is a Step whose commands copy files that it renders into the
// state directory (D/nodes, D/manifests) from facts measured on the nodes.
// Render writes them and changes no node, so that the commands shown for a
// learner to type name files that exist. Its errors are those of Check.
type Renderer interface {
	Render(ctx context.Context, env *Env) error
}

// Referencer is a Step that installs config files on nodes and can give
// khw's version of each, so that grading can say how a node's file differs
// and what the difference does (internal/lab/grade). References must not
// change anything; it may read the nodes (the facts a file is rendered
// from). Its errors are those of Check.
type Referencer interface {
	References(ctx context.Context, env *Env) ([]Reference, error)
}

// Reference is khw's version of one file that a step installs on a node.
type Reference struct {
	Node string
	// Path is the absolute path on the node.
	Path string
	// Input marks a file copied from the state directory (a certificate, a
	// key, a kubeconfig, the encryption config): it may hold a secret and is
	// compared as bytes, never shown.
	Input bool
	Data  []byte
	// Source is the jumpbox's copy of it (a path under the state
	// directory), "" when there is none.
	Source string
}

// Diff is one difference between desired and actual state.
type Diff struct {
	// Kind says what sort of difference this is, for code that acts on it
	// (01-machines' Apply, khw lab check); What and Fix are for people and
	// are never parsed.
	Kind DiffKind
	// Subject is what the difference is about, for code that acts on it:
	// the path of a file on the node, a unit's name, an API object's field
	// ("Service kube-system/kube-dns clusterIP"); "" when nothing needs it.
	Subject string
	// Node is the node name ("cp1"), or "" for a cluster-wide or
	// workstation-side difference (a file under the state directory, an API
	// object).
	Node string
	// What states the difference, specific enough to grade a hand-done step:
	// "etcd.service is not active", "kube-apiserver.pem has no SAN for
	// 192.168.122.10".
	What string
	// Fix says what Apply will do about it: "start and enable etcd.service".
	// May be empty when the fix is obvious from What.
	Fix string
	// Evidence is what was read that shows the difference
	// ("/proc/sys/net/ipv4/ip_forward = 0"), for grading; "" when What says
	// it all.
	Evidence string
}

// DiffKind is the sort of a Diff.
type DiffKind int

const (
	// DiffContent is a file, setting or API object that differs from khw's
	// reference: maybe a correct hand-made variant.
	DiffContent DiffKind = iota
	// DiffMachineAbsent is a node that does not exist: it must be created
	// and booted.
	DiffMachineAbsent
	// DiffMachineStopped is a node that exists but is not running: it must
	// be booted.
	DiffMachineStopped
	// DiffUnit is a systemd unit that is unknown to systemd, not enabled or
	// not running: never a correct variant.
	DiffUnit
	// DiffFollows is what Apply will do only because of another
	// difference (restart a unit whose file it replaces): not a difference
	// of its own, so grading leaves it out.
	DiffFollows
	// DiffStale is a unit that runs with an older version of a file that
	// it reads only when it starts (its unit file, a config it does not
	// re-read by itself): the file's change has no effect until a
	// restart, so grading counts it as a mistake, never a variant.
	DiffStale
	// DiffCopy is a node's copy of a file the jumpbox made (a certificate,
	// a key, the encryption config) that is missing or is not the
	// jumpbox's: such a file has no variants, the node must hold what the
	// jumpbox issued, so grading counts it as a mistake.
	DiffCopy
	// DiffRequired is a node setting outside khw's files that the
	// components require (a kernel module, a sysctl, swap off): a mistake
	// in grading unless the lab excuses it (a worker whose kubelet is told
	// to run with swap).
	DiffRequired
)

// NotRunning reports whether d says something that must run does not: a
// machine or a systemd unit.
func (d Diff) NotRunning() bool {
	return d.Kind == DiffMachineAbsent || d.Kind == DiffMachineStopped || d.Kind == DiffUnit
}

// String renders "cp1: etcd.service is not active (fix: start etcd.service)";
// the node prefix is left out for Node == "" and the fix part for Fix == "".
func (d Diff) String() string {
	s := d.What
	if d.Node != "" {
		s = d.Node + ": " + s
	}
	if d.Fix != "" {
		s += " (fix: " + d.Fix + ")"
	}
	return s
}

// Command is one shell command a learner would type for a step.
type Command struct {
	// Node is where it runs: "" for the workstation (jumpbox) holding the
	// state directory, else a node name (the command runs there over ssh).
	Node string
	// Shell is the command line, possibly several lines (a heredoc).
	Shell string
	// Why is a one-line explanation shown above the command.
	Why string
}

// String renders the command as the lab and --dry-run show it:
//
//	# Why
//	cp1$ sudo systemctl enable --now etcd
//
// "$ " replaces "cp1$ " for Node == "". Each line of a multi-line Shell
// gets the prompt, so that it is clear where it runs, except a Shell with a
// here-document or a continued line, which is kept verbatim after the
// first prompt; a trailing newline is dropped.
func (c Command) String() string {
	var b strings.Builder
	if c.Why != "" {
		b.WriteString("# " + c.Why + "\n")
	}
	sh := strings.TrimRight(c.Shell, "\n")
	perLine := !strings.Contains(sh, "<<") && !strings.Contains(sh, "\\\n")
	for i, ln := range strings.Split(sh, "\n") {
		if i > 0 {
			b.WriteString("\n")
		}
		if i == 0 || perLine {
			b.WriteString(c.Node + "$ ")
		}
		b.WriteString(ln)
	}
	return b.String()
}

// Indent prefixes every line of s with p: a command's text (String) set
// under the line that says where it runs.
func Indent(s, p string) string {
	return p + strings.ReplaceAll(s, "\n", "\n"+p)
}

// WaitLoop is the shell loop a learner types to wait for something slow
// to start: probe is tried up to tries times, pause seconds apart, its
// output discarded, and the loop ends at the first success. It never
// fails by itself, so a script (set -e) goes on to the command after it,
// which shows what the wait ended on.
func WaitLoop(tries, pause int, probe string) string {
	return fmt.Sprintf("for i in $(seq %d); do %s >/dev/null 2>&1 && break; sleep %d; done", tries, strings.TrimSpace(probe), pause)
}

// NodeError attaches a node name to an error from Check or Apply, so the
// Runner's StepError can name the node and its log. Build it with OnNode.
type NodeError struct {
	Node string
	Err  error
}

// Error renders "<node>: <err>".
func (e *NodeError) Error() string { return e.Node + ": " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *NodeError) Unwrap() error { return e.Err }

// OnNode wraps err as a *NodeError for node; it returns nil for a nil err.
func OnNode(node string, err error) error {
	if err == nil {
		return nil
	}
	return &NodeError{Node: node, Err: err}
}

// ClusterLogName is the base name of the log for node "" (the workstation
// and the Runner's own trail of checks and applies) in <state>/logs. A node
// name is a DNS label and cannot contain "_", so it never collides with a
// node's log.
const ClusterLogName = "_khw.log"

// Env is what steps get to work with. Build it with NewEnv; add fields here
// (an SSH pool, a VM provider, a clock) as steps need them. It is safe for
// concurrent use by a step's goroutines (one per node) as long as the fields
// are not changed during a run.
type Env struct {
	// Cluster is the desired state (cluster.yaml), validated.
	Cluster *config.Cluster
	// State is the cluster's state directory.
	State state.Dir
	// Verbosity is the -v level: 0 status lines only; 1 also the diffs the
	// Runner fixed; steps may log more at higher levels.
	Verbosity int
	// DryRun is set by Runner.Run from Options.DryRun for the steps to read;
	// Apply is never called in a dry-run anyway. While it is set, the node
	// logs are not written (a dry-run leaves the state directory as it was).
	DryRun bool

	mu   sync.Mutex
	logs map[string]*logFile
	note func(string)
}

// Notef shows a line to the person running the step, above its status line
// (the Runner indents it under the step), and writes it to the cluster log.
// Steps use it sparingly, for what a learner should watch happen (e.g. the
// CSRs of a TLS bootstrap as they appear). Safe for concurrent use.
func (e *Env) Notef(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintln(e.NodeLog(""), msg)
	e.mu.Lock()
	note := e.note
	e.mu.Unlock()
	if note != nil {
		note(msg)
	}
}

// NewEnv returns an Env for cluster c with state directory dir.
func NewEnv(c *config.Cluster, dir state.Dir) *Env {
	return &Env{Cluster: c, State: dir}
}

// NodeLogPath returns <state>/logs/<node>.log, or <state>/logs/_khw.log for
// node "". Path separators in node are replaced by "_" so the log stays
// inside the logs directory.
func (e *Env) NodeLogPath(node string) string {
	name := ClusterLogName
	if node != "" {
		name = strings.NewReplacer("/", "_", `\`, "_").Replace(node)
		if strings.HasPrefix(name, ".") {
			name = "_" + name
		}
		name += ".log"
	}
	return filepath.Join(e.State.LogsDir(), name)
}

// NodeLog returns the append-only log of node ("" = workstation/cluster-wide,
// see ClusterLogName). The file <state>/logs/<node>.log is opened on the
// first Write with O_APPEND and mode 0600 (logs can hold command output that
// names secrets' paths; never write key material or tokens to it), and the
// logs directory is created 0700. Writes from several goroutines to the same
// node are serialised. A Write whose file cannot be opened returns an error
// naming the path. Call Close when done.
func (e *Env) NodeLog(node string) io.Writer {
	path := e.NodeLogPath(node)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.logs == nil {
		e.logs = map[string]*logFile{}
	}
	l, ok := e.logs[path]
	if !ok {
		l = &logFile{path: path, root: e.State.Root, env: e}
		e.logs[path] = l
	}
	return l
}

// Close closes the node log files opened so far; later writes reopen them.
func (e *Env) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for _, l := range e.logs {
		errs = append(errs, l.close())
	}
	return errors.Join(errs...)
}

type logFile struct {
	mu   sync.Mutex
	path string
	root string
	env  *Env
	f    *os.File
}

func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.env != nil && l.env.DryRun {
		return len(p), nil
	}
	if l.f == nil {
		if l.root == "" {
			return 0, fmt.Errorf("node log %s: Env.State.Root is empty (build the Env with steps.NewEnv and a state.Dir)", l.path)
		}
		if err := fsutil.EnsureDir(filepath.Dir(l.path)); err != nil {
			return 0, fmt.Errorf("node log: %w", err)
		}
		f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, fsutil.SecretMode)
		if err != nil {
			return 0, fmt.Errorf("node log: %w", err)
		}
		// An existing log made by hand or by an older khw may be wider.
		if err := f.Chmod(fsutil.SecretMode); err != nil {
			f.Close()
			return 0, fmt.Errorf("node log: %w", err)
		}
		l.f = f
	}
	return l.f.Write(p)
}

func (l *logFile) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Lookup finds the step named name: its exact ID ("04-etcd"), else the
// unique step whose number ("04", or "4") or name ("etcd") part matches. The error
// lists the valid IDs.
func Lookup(steps []Step, name string) (Step, error) {
	for _, s := range steps {
		if s.ID() == name {
			return s, nil
		}
	}
	var found []Step
	for _, s := range steps {
		num, rest, _ := strings.Cut(s.ID(), "-")
		if name != "" && (num == name || rest == name || strings.TrimLeft(num, "0") == strings.TrimLeft(name, "0") && strings.Trim(name, "0123456789") == "" && strings.TrimLeft(name, "0") != "") {
			found = append(found, s)
		}
	}
	if len(found) == 1 {
		return found[0], nil
	}
	ids := make([]string, len(steps))
	for i, s := range steps {
		ids[i] = s.ID()
	}
	if len(found) > 1 {
		return nil, fmt.Errorf("step %q is ambiguous: give the full ID, one of %s", name, strings.Join(ids, ", "))
	}
	return nil, fmt.Errorf("no step %q: valid steps are %s", name, strings.Join(ids, ", "))
}

// Select returns the sub-range of steps from `from` to `until`, both
// inclusive and resolved with Lookup; "" means the first or the last step.
// It fails on an unknown name, on from coming after until, and on duplicate
// IDs in steps.
func Select(steps []Step, from, until string) ([]Step, error) {
	seen := map[string]bool{}
	for _, s := range steps {
		if seen[s.ID()] {
			return nil, fmt.Errorf("step ID %q appears twice in the step list (a programming error: IDs must be unique)", s.ID())
		}
		seen[s.ID()] = true
	}
	if len(steps) == 0 {
		return nil, nil
	}
	index := func(name string, def int, flag string) (int, error) {
		if name == "" {
			return def, nil
		}
		s, err := Lookup(steps, name)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", flag, err)
		}
		for i := range steps {
			if steps[i].ID() == s.ID() {
				return i, nil
			}
		}
		return def, nil
	}
	lo, err := index(from, 0, "--from")
	if err != nil {
		return nil, err
	}
	hi, err := index(until, len(steps)-1, "--until")
	if err != nil {
		return nil, err
	}
	if lo > hi {
		return nil, fmt.Errorf("--from %s comes after --until %s: steps run in order %s … %s", steps[lo].ID(), steps[hi].ID(), steps[0].ID(), steps[len(steps)-1].ID())
	}
	return steps[lo : hi+1], nil
}

// Parallel runs fn(i) for every i in [0, n) at once, waits for all, and
// returns each call's error at its index: the one fan-out of the steps over
// nodes. One call failing does not stop the others (nothing is cancelled),
// so every node's outcome is known; fn wraps its error with OnNode when it
// is about a node. Callers that want one error join them (errors.Join
// skips the nils).
func Parallel(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	var g errgroup.Group
	for i := range n {
		g.Go(func() error {
			errs[i] = fn(i)
			return nil
		})
	}
	_ = g.Wait()
	return errs
}
