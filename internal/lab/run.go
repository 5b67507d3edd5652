package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/labtext"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/termtext"
)

// UI is how the lab workflows (Run, Check, Reset) talk to the person at
// the terminal: where text and warnings go, where answers come from, and
// what the command line allowed.
type UI struct {
	Out, Err io.Writer
	// In gives the answers to the questions before changes are applied
	// and before a reset; when it ends, the question is an error that
	// names the flag that skips it.
	In io.Reader
	// Yes applies without asking; Force runs a lab whose earlier labs are
	// not done; Plain renders the text as plain Markdown; Hints makes
	// Check show where to look for each mistake, not the answer, and save
	// the hint ladders for NextHint; ByHand makes Run show the changes for
	// the student to type, wait, and grade them instead of applying them.
	Yes, Force, Plain, Hints, ByHand bool
	// NextHint is what Check with Hints says to do next ("" names khw
	// lab hint and khw lab check --hints).
	NextHint string
	// Lang is the language of the hints' framing ("en", "ko"; "" English).
	Lang string
	// QuizOrder gives the order in which Quiz shows a question's n
	// choices, as rand.Perm does; nil shuffles them at random.
	QuizOrder func(n int) []int
	// Observe runs one read-only observe block (shell text) inside khw
	// shell, writing its output to w (nil: the blocks are only shown).
	Observe func(ctx context.Context, shell string, w io.Writer) error
	// Drill runs the failover lab's drill (khw break etcd --count 1 --for
	// 20s) under the caller's lock.
	Drill func(ctx context.Context) error
	// Operate runs an Operation lab's operation (13-etcd-backup: the
	// objects, a snapshot, the changes, khw etcd restore) under the
	// caller's lock, printing as it goes.
	Operate func(ctx context.Context, l Lab) error
}

// say prints to u.Out with control characters escaped (termtext.Escape):
// what it prints holds text read on the nodes (findings, differences,
// errors), which must not drive the terminal.
func (u UI) say(format string, args ...any) {
	io.WriteString(u.Out, termtext.Escape(fmt.Sprintf(format, args...)))
}

// ErrStopped is returned by Run when the user answered no before the
// changes were applied.
var ErrStopped = errors.New("stopped before applying")

// Run runs lab l with text t, as khw lab does once it has shown the text
// (labtext.Lab.Render, before the cluster is opened, so it can be read ahead):
// a refusal naming the first earlier lab not done (unless ui.Force; a
// drifted lab does not block, khw lab check says whether the drift is a
// mistake); the "You should have" block run with ui.Observe; the step's
// check; when something differs, a
// snapshot of every node and the state directory, each change with the
// shell commands it stands for grouped by node, a question per node
// (unless ui.Yes) and the step applied; then the lab marked done and its
// observe blocks run. With ui.ByHand the changes are shown for the student
// to type in khw shell and, once a line is read from ui.In, graded as khw
// lab check --hints does (ByHand). The failover lab runs ui.Drill instead
// of a step.
// Errors: the step's check or apply failed, the user said no
// (ErrStopped, wrapped with what to do), the snapshot or the progress file
// could not be written.
func (c *Course) Run(ctx context.Context, l Lab, t labtext.Lab, ui UI) error {
	missing, err := c.EarlierNotDone(ctx, l, ui.Force)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		if !ui.Force {
			return fmt.Errorf("lab %s comes after %s, which is not done: run khw lab %s first (khw lab list shows every lab; --force runs this one anyway)", l.ID, missing[0], missing[0])
		}
		fmt.Fprintf(ui.Err, "Warning: earlier labs not done (%s); going on because of --force\n", strings.Join(missing, ", "))
	}
	// The lab that makes the nodes runs no command in khw shell before
	// they exist: its "you should have" is read in the text.
	if t.Have.Shell != "" && !l.MakesNodes {
		observe(ctx, ui, "You should have, from the earlier labs", []labtext.Block{t.Have})
	}
	if l.Kind == Drill && ui.ByHand {
		ui.say("\n── %s by hand: run a drill yourself, for example khw break etcd --count 1 --for 20s (khw break --help lists them);\n"+
			"khw lab check %s passes once a drill has passed its verdict.\n", l.ID, l.ID)
		return nil
	}
	if l.Kind == Operation {
		return c.runOperation(ctx, l, t, ui)
	}
	if l.Kind == Drill {
		if err := confirmDrill(ui, l); err != nil {
			return err
		}
		ui.say("\n── %s: khw break etcd --count 1 --for 20s (then try the others by hand: khw break --help)\n", l.ID)
		if err := ui.Drill(ctx); err != nil {
			return err
		}
		return MarkDone(c.S.Dir, l.ID)
	}
	ui.say("\n── %s: checking what is already there…\n", l.ID)
	st, diffs, err := c.Status(ctx, l)
	if err != nil {
		return err
	}
	if st.Status == Unknown {
		return fmt.Errorf("lab %s: the check failed: %s", l.ID, st.Detail)
	}
	if len(diffs) == 0 {
		ui.say("✓ %s is already done: nothing to change.\n", l.ID)
		if ui.ByHand {
			ui.say("%s", c.byHandAgain(l))
		}
	} else {
		if _, err := c.snapshotOnce(ctx, l, ui); err != nil {
			return err
		}
		if ui.ByHand && l.MakesNodes {
			// Making machines is the hypervisor's work, not a Kubernetes
			// skill: khw makes them and the student checks them.
			ui.say("\n── %s by hand: making the machines is your hypervisor's work, so khw makes them (the commands below are what it does);\n"+
				"then check them yourself with the commands of \"What to look at now\".\n", l.ID)
		} else if ui.ByHand {
			return c.byHand(ctx, l, t, ui, diffs)
		}
		if err := c.confirm(ctx, ui, l, diffs); err != nil {
			return err
		}
		ui.say("\n")
		if err := c.Apply(ctx, l, ui.Out); err != nil {
			return err
		}
	}
	if err := MarkDone(c.S.Dir, l.ID); err != nil {
		return err
	}
	c.finish(ctx, l, t, ui)
	return nil
}

// snapshotOnce takes the snapshot from before lab l, unless one is kept
// from an earlier try that is not done (again is then true): tried before
// (by hand, or cut short), the snapshot from before the first try is where
// khw lab reset must go back to, not the half-done state of now.
func (c *Course) snapshotOnce(ctx context.Context, l Lab, ui UI) (again bool, err error) {
	if c.keptSnapshot(l) {
		ui.say("Snapshot %q kept from your first try of this lab: khw lab reset %s goes back to before it.\n", SnapshotName(l.ID), l.ID)
		return true, nil
	}
	snap, err := c.TakeSnapshot(ctx, l)
	if err != nil {
		return false, err
	}
	c.saySnapshot(ui, l, snap)
	return false, nil
}

// waitByHand shows cmds for the student to type in khw shell of cluster
// (named, so that another terminal's KHW_CLUSTER cannot pick another
// cluster), where they are written (path) and later, then waits for a line on ui.In; false when the input
// ended first (it then says how to grade later).
func waitByHand(ui UI, cluster string, l Lab, cmds []steps.Command, path, later string) bool {
	ui.say("\nThe commands, in order:\n")
	for _, cmd := range cmds {
		for _, ln := range strings.Split(cmd.String(), "\n") {
			ui.say("    %s\n", ln)
		}
	}
	// The cluster is named: another terminal may have KHW_CLUSTER set to
	// another cluster, whose nodes the commands would change.
	ui.say("\nType these commands in `khw --cluster %s shell` (in another terminal), then press Enter here to grade your work.\n"+
		"They are also in %s, to read or copy from.\n%s\n", cluster, path, later)
	if ui.In == nil {
		ui.In = strings.NewReader("")
	}
	if _, err := bufio.NewReader(ui.In).ReadString('\n'); err != nil {
		grade := "khw lab check " + l.ID
		if l.Kind != Operation {
			grade += " --hints"
		}
		ui.say("\nNo input: grade your work when it is done with %s.\n", grade)
		return false
	}
	return true
}

// runOperation runs an Operation lab: after the question (unless ui.Yes
// or ui.ByHand), a snapshot of every node and the state directory (so that
// khw lab reset can go back), the lab's begin record, then either the
// commands for the student to type and, once a line is read from ui.In,
// the check, or ui.Operate and the check. A lab that passes is
// done and its observe blocks run.
func (c *Course) runOperation(ctx context.Context, l Lab, t labtext.Lab, ui UI) error {
	if !ui.ByHand {
		what := "This lab changes the cluster: " + l.title + "."
		if l.stopsAPI {
			what = "This lab changes the cluster: " + l.title + ", with its API down for a while."
		}
		if err := goOn(ui, what,
			"rerun with --yes to run it without asking, or with --by-hand to do it yourself", "khw lab "+l.ID+", or khw lab "+l.ID+" --by-hand"); err != nil {
			return err
		}
	}
	again, err := c.snapshotOnce(ctx, l, ui)
	if err != nil {
		return err
	}
	if err := l.begin(ctx, c.S, again); err != nil {
		return err
	}
	if ui.ByHand {
		cmds := l.byHand(ctx, c.S.Config, c.S.Dir)
		path, err := writeByHand(c.S.Dir, l.ID, cmds)
		if err != nil {
			return err
		}
		if !waitByHand(ui, c.S.Dir.Name, l, cmds, path, "khw lab check "+l.ID+" grades it later too; khw lab reset "+l.ID+" starts again.") {
			return nil
		}
	} else if err := ui.Operate(ctx, l); err != nil {
		return err
	}
	ui.say("\n")
	if err := c.Check(ctx, l, ui); err != nil {
		return err
	}
	c.finish(ctx, l, t, ui)
	return nil
}

// finish runs the observe blocks of a lab that is done and names the next.
func (c *Course) finish(ctx context.Context, l Lab, t labtext.Lab, ui UI) {
	observe(ctx, ui, "What to look at now", t.Observe)
	ui.say("\nLab %s done. %s\n", l.ID, c.whatNext(l))
}

// byHand shows diffs with their commands for the student to type, waits
// for a line on ui.In and grades the result with hints (Check); a lab
// that passes is done (Grade marks it) and its observe blocks run. When
// the input ends before a line, it says how to grade later and returns
// nil: nothing was changed by khw.
func (c *Course) byHand(ctx context.Context, l Lab, t labtext.Lab, ui UI, diffs []steps.Diff) error {
	if s, err := c.step(l); err == nil {
		if r, ok := s.(steps.Renderer); ok {
			if err := r.Render(ctx, c.Env); err != nil {
				return err
			}
		}
	}
	cmds := c.Commands(l, diffs)
	path, err := writeByHand(c.S.Dir, l.ID, cmds)
	if err != nil {
		return err
	}
	// The changes node by node, then the commands once, in the order the
	// script has them (a command that needs every node, such as etcd's
	// member list, comes after all of them).
	ui.say("%d change(s) to make:\n", len(diffs))
	for _, d := range diffs {
		where := d.Node
		if where == "" {
			where = "jumpbox"
		}
		ui.say("  - %s: %s\n", where, d.What)
	}
	if !waitByHand(ui, c.S.Dir.Name, l, cmds, path, fmt.Sprintf("khw lab check %s --hints grades it later too; khw lab hint %s helps with a mistake; khw lab reset %s starts again.", l.ID, l.ID, l.ID)) {
		return nil
	}
	ui.Hints = true
	if err := c.Check(ctx, l, ui); err != nil {
		return err
	}
	c.finish(ctx, l, t, ui)
	return nil
}

// keptSnapshot reports whether lab l, not marked done, already has the
// snapshots taken when it was first run. They are from the same past as
// now: khw lab reset deletes the snapshots of the labs after the one it
// resets, and the nodes' snapshot is taken before the state directory's.
func (c *Course) keptSnapshot(l Lab) bool {
	prog, err := LoadProgress(c.S.Dir)
	if err != nil {
		return false
	}
	if _, done := prog[l.ID]; done {
		return false
	}
	st, err := os.Stat(stateSnapshotDir(c.S.Dir, l.ID))
	return err == nil && st.IsDir()
}

// whatNext names the first later lab that is not marked done, as the
// progress file has it (khw lab list checks each one live).
func (c *Course) whatNext(l Lab) string {
	next, ok := Next(l.ID)
	if !ok {
		return "That was the last lab."
	}
	prog, err := LoadProgress(c.S.Dir)
	if err != nil {
		return "Next: khw lab " + next.ID
	}
	for _, later := range From(next.ID) {
		if _, done := prog[later.ID]; !done {
			return "Next: khw lab " + later.ID
		}
	}
	return "Every later lab is done too (khw lab list checks them on the nodes)."
}

// saySnapshot says what the snapshot before lab l holds.
func (c *Course) saySnapshot(ui UI, l Lab, snap Snapshot) {
	if snap.NoNodeSupport {
		fmt.Fprintf(ui.Err, "Warning: provider %s cannot snapshot nodes; khw lab reset %s will not be possible\n", c.S.Provider.Name(), l.ID)
	}
	what := "the state directory"
	if snap.Nodes {
		what = "every node and the state directory"
		if snap.Freeze > 0 {
			what += fmt.Sprintf(" (nodes paused %s for the final pass)", snap.Freeze.Round(100*time.Millisecond))
		}
	}
	ui.say("Snapshot %q taken in %s of %s: khw lab reset %s goes back to it.\n", snap.Name, snap.Took.Round(100*time.Millisecond), what, l.ID)
}

// confirm shows the diffs and their shell commands (show) and asks before
// each node's group unless ui.Yes.
func (c *Course) confirm(ctx context.Context, ui UI, l Lab, diffs []steps.Diff) error {
	var in *bufio.Reader
	if ui.In != nil {
		in = bufio.NewReader(ui.In)
	}
	all := ui.Yes
	return c.show(ui, l, diffs, func() error {
		if all {
			return nil
		}
		var err error
		if all, err = ask(ui, in, l); err != nil {
			return err
		}
		return ctx.Err()
	})
}

// show prints the diffs and their shell commands, grouped by node in the
// order they were found, calling after (when not nil) after each group; an
// error from it stops show.
func (c *Course) show(ui UI, l Lab, diffs []steps.Diff, after func() error) error {
	groups := map[string][]steps.Diff{}
	var order []string
	for _, d := range diffs {
		if _, ok := groups[d.Node]; !ok {
			order = append(order, d.Node)
		}
		groups[d.Node] = append(groups[d.Node], d)
	}
	ui.say("%d change(s) to make:\n", len(diffs))
	for _, node := range order {
		where := node
		if where == "" {
			where = "jumpbox / cluster"
		}
		ui.say("\n── on %s:\n", where)
		for _, d := range groups[node] {
			ui.say("  - %s\n", d.What)
		}
		if cmds := c.Commands(l, groups[node]); len(cmds) > 0 {
			ui.say("  The shell commands this stands for:\n")
			for _, cmd := range cmds {
				for _, ln := range strings.Split(cmd.String(), "\n") {
					ui.say("    %s\n", ln)
				}
			}
		}
		if after != nil {
			if err := after(); err != nil {
				return err
			}
		}
	}
	return nil
}

// confirmDrill asks before the failover lab stops an etcd member, unless
// ui.Yes: only y or yes goes on. Errors: no answer (input ended), or
// ErrStopped.
func confirmDrill(ui UI, l Lab) error {
	return goOn(ui, "This lab runs a failover drill now: it stops etcd on one control plane for 20 s, and the cluster must keep serving.",
		"rerun with --yes to run the drill without asking", "khw lab "+l.ID+", or khw break etcd --count 1 --for 20s")
}

// goOn asks what (a sentence) and "Go on? [y/N]", unless ui.Yes: only y or
// yes goes on. Errors: no answer (input ended), naming noAnswer as the way
// out, or ErrStopped, naming later as how to run it when ready.
func goOn(ui UI, what, noAnswer, later string) error {
	if ui.Yes {
		return nil
	}
	ui.say("\n%s Go on? [y/N]: ", what)
	a, err := readAnswer(ui)
	switch {
	case a == "y" || a == "yes":
		return nil
	case err != nil && a == "":
		return fmt.Errorf("no answer (stdin closed): %s", noAnswer)
	}
	return fmt.Errorf("%w: run it when you are ready (%s)", ErrStopped, later)
}

// readAnswer reads one line from ui.In, trimmed and lower-cased, and the
// read's error (io.EOF when there is no input at all, or when the input
// ends before a newline: the text read is still returned).
func readAnswer(ui UI) (string, error) {
	if ui.In == nil {
		return "", io.EOF
	}
	line, err := bufio.NewReader(ui.In).ReadString('\n')
	return strings.ToLower(strings.TrimSpace(line)), err
}

// ask asks whether to go on after one node's changes; all is true when
// the answer was "all".
func ask(ui UI, in *bufio.Reader, l Lab) (all bool, err error) {
	for {
		ui.say("Go on? khw applies the step as a whole once every node is accepted. [y]es, next node / [a]ll, apply now / [n]o, stop and do it by hand: ")
		if in == nil {
			return false, fmt.Errorf("no answer (no input): rerun with --yes to apply without asking")
		}
		line, err := in.ReadString('\n')
		if err != nil {
			return false, fmt.Errorf("no answer (stdin closed): rerun with --yes to apply without asking")
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes", "":
			return false, nil
		case "a", "all":
			return true, nil
		case "n", "no", "q":
			return false, fmt.Errorf("%w: do the changes by hand (the commands above), then grade them with khw lab check %s", ErrStopped, l.ID)
		}
	}
}

// observe shows read-only blocks under heading and runs each with
// ui.Observe, bounded to 30 s, its output indented under it. A block that
// is not read-only (labtext.CheckReadOnly) is skipped with a warning.
func observe(ctx context.Context, ui UI, heading string, blocks []labtext.Block) {
	if len(blocks) == 0 {
		return
	}
	ui.say("\n── %s (read-only, run in khw shell):\n", heading)
	for _, b := range blocks {
		if err := labtext.CheckReadOnly(b.Shell); err != nil {
			fmt.Fprintf(ui.Err, "Warning: skipped an observe block that is not read-only: %v\n", err)
			continue
		}
		ui.say("\n%s\n", b.Intro)
		for _, ln := range strings.Split(strings.TrimRight(b.Shell, "\n"), "\n") {
			ui.say("  $ %s\n", ln)
		}
		if ui.Observe == nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := ui.Observe(cctx, b.Shell, &indentWriter{w: ui.Out, bol: true}); err != nil {
			ui.say("    (%v)\n", err)
		}
		cancel()
	}
}

// indentWriter prefixes every line written with four spaces.
type indentWriter struct {
	w   io.Writer
	bol bool
}

func (iw *indentWriter) Write(p []byte) (int, error) {
	var b strings.Builder
	for _, c := range string(p) {
		if iw.bol {
			b.WriteString("    ")
		}
		b.WriteRune(c)
		iw.bol = c == '\n'
	}
	if _, err := io.WriteString(iw.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// byHandAgain says how to do lab l by hand once it is done: reset to its
// snapshot, or, on a cluster built by khw up (no snapshot from before l:
// CanReset), make a cluster for the labs and start at lab 01.
func (c *Course) byHandAgain(l Lab) string {
	if c.CanReset(l) == nil {
		return fmt.Sprintf("  To do it by hand again: khw lab reset %s (back to before it), then khw lab %s --by-hand.\n", l.ID, l.ID)
	}
	return fmt.Sprintf("  This cluster was built without khw lab, so there is no snapshot from before %s to go back to.\n"+
		"  To do the labs by hand, make a cluster for them and start at lab 01:\n"+
		"    khw init --name lab --provider %s && khw lab 01 --cluster lab\n", l.ID, c.S.Config.Provider)
}
