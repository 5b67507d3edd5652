package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/charmbracelet/glamour"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/client-go/kubernetes"

	"github.com/khw-dev/khw/internal/bringup"
	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/labcheck"
	"github.com/khw-dev/khw/internal/labs"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/vm"
)

var labLong = `Walk Kubernetes the Hard Way one lab at a time. The labs are the steps of
khw up, with their text:

` + lab.IDTable(6) + `

khw lab 04-etcd (= khw lab run 04-etcd; "04", "4" and "etcd" work too)
  1. shows the lab text: why the step exists, what khw does, what to observe,
     the mistakes people make (--plain: as plain Markdown);
  2. refuses if an earlier lab is not done, and names it (--force: go anyway);
  3. snapshots every node and the state directory ("before-04-etcd"), so that
     khw lab reset 04 can put everything back;
  4. shows each change as the shell commands it stands for, grouped by node,
     and asks before applying (--yes: do not ask). Say no, and you can type
     the commands yourself, then grade your work with khw lab check 04;
  5. checks the result, then runs the lab's read-only "observe" commands
     (the etcd member list, the Leases, the CSRs …) inside khw shell.

khw lab list           every lab: done, not done, or drifted (done once, now
                       differs, and how), from each step's own check
khw lab check 04       grade a step done by hand on the live nodes: each
                       mistake with its evidence, the fix and its lab
khw lab reset 04       put the nodes and the state directory back to what they
                       were before lab 04; labs 04-12 are then not done

Exit status: 0 success (check: no mistake), 1 a lab failed or check found
mistakes, 2 bad command line (unknown lab), 130 interrupted.`

type labOpts struct {
	yes, force, plain bool
}

func newLabCmd(a *app) *cobra.Command {
	var o labOpts
	cmd := &cobra.Command{
		Use:   "lab [LAB]",
		Short: "Do the hard way one lab at a time: text, commands, snapshot, check (list, run, check, reset)",
		Long:  labLong,
		Example: `  khw lab list
  khw lab 04-etcd
  khw lab run 05 --yes
  khw lab check 04-etcd
  khw lab reset 04-etcd`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeLab,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return runLab(cmd.Context(), a, args[0], o)
		},
	}
	runCmd := &cobra.Command{
		Use:               "run LAB",
		Short:             "Run one lab: its text, a snapshot, the changes (asking first), the check, what to observe",
		Args:              exactArgs(1),
		ValidArgsFunction: completeLab,
		RunE:              func(cmd *cobra.Command, args []string) error { return runLab(cmd.Context(), a, args[0], o) },
	}
	for _, c := range []*cobra.Command{cmd, runCmd} {
		c.Flags().BoolVarP(&o.yes, "yes", "y", false, "apply every change without asking")
		c.Flags().BoolVar(&o.force, "force", false, "run even if an earlier lab is not done")
		c.Flags().BoolVar(&o.plain, "plain", false, "show the lab text as plain Markdown, without terminal styling (the lab still runs)")
	}
	var listOut string
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List the labs with their live status: done, not done, drifted",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if listOut != "text" && listOut != "json" {
				return usagef("-o %q: use text or json", listOut)
			}
			return labList(cmd.Context(), a, listOut)
		},
	}
	listCmd.Flags().StringVarP(&listOut, "output", "o", "text", "output format: text or json")
	checkCmd := &cobra.Command{
		Use:   "check LAB",
		Short: "Grade a lab done by hand: each mistake with its evidence, the fix and its lab",
		Long: `Grade a step on the live nodes. khw reads what is really there (certificates,
unit files and their flags, kernel settings, the CNI config, routes, API
objects) and names each mistake with the evidence, the fix, and the lab it
belongs to. A hand-made file that differs from khw's own but is correct is
not a mistake: such differences are listed apart, for information.

` + detectorList(),
		Args:              exactArgs(1),
		ValidArgsFunction: completeLab,
		RunE:              func(cmd *cobra.Command, args []string) error { return labCheck(cmd.Context(), a, args[0]) },
	}
	var resetYes bool
	resetCmd := &cobra.Command{
		Use:   "reset LAB",
		Short: "Put the nodes and the state directory back to what they were before LAB",
		Long: `Put every node and the state directory back to the snapshot taken before LAB
ran (khw lab takes it), so that LAB and every later lab are not done again.
Everything done since on the nodes is lost. It asks first (--yes: do not ask).`,
		Args:              exactArgs(1),
		ValidArgsFunction: completeLab,
		RunE:              func(cmd *cobra.Command, args []string) error { return labReset(cmd.Context(), a, args[0], resetYes) },
	}
	resetCmd.Flags().BoolVarP(&resetYes, "yes", "y", false, "do not ask for confirmation")
	cmd.AddCommand(runCmd, listCmd, checkCmd, resetCmd)
	return cmd
}

// completeLab completes a lab argument with the catalogue's IDs.
func completeLab(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return lab.Complete(toComplete, false), cobra.ShellCompDirectiveNoFileComp
}

func detectorList() string {
	var b strings.Builder
	b.WriteString("What khw lab check looks for, per lab:\n")
	for _, l := range lab.All() {
		ds := l.Detectors()
		if len(ds) == 0 {
			continue
		}
		var names []string
		for _, d := range ds {
			names = append(names, d.Name)
		}
		fmt.Fprintf(&b, "  %-17s %s\n", l.ID, strings.Join(names, ", "))
	}
	return strings.TrimRight(b.String(), "\n")
}

// labEnv is what the lab commands work with.
type labEnv struct {
	d      state.Dir
	c      *config.Cluster
	s      *cluster.Session
	env    *steps.Env
	all    []steps.Step
	unlock func()
}

func (e *labEnv) close() {
	e.env.Close()
	e.s.Close()
	e.unlock()
}

// openLab loads the cluster and opens its machines. With write it takes the
// cluster lock first (released by close), for the lab commands that change
// the cluster or its state: run, check (it records progress) and reset.
// Without it (lab list) nothing in the state directory is created: an
// SSH key that does not exist yet is not made (cluster.ReadOnly).
func openLab(a *app, write bool) (*labEnv, error) {
	d, c, err := a.load()
	if err != nil {
		return nil, err
	}
	unlock := func() {}
	if write {
		if unlock, err = a.lock(d); err != nil {
			return nil, err
		}
	}
	env := steps.NewEnv(c, d)
	access := cluster.ReadWrite
	if !write {
		access = cluster.ReadOnly
	}
	s, err := cluster.Open(c, d, access, env.NodeLog(""))
	if err != nil {
		env.Close()
		unlock()
		return nil, err
	}
	return &labEnv{d: d, c: c, s: s, env: env, all: lab.Steps(bringup.New(s), c), unlock: unlock}, nil
}

// lookupLab resolves a lab argument (an unknown one is a usage error) and
// reads its text.
func lookupLab(arg string) (lab.Lab, labs.Lab, error) {
	l, err := lab.Lookup(arg)
	if err != nil {
		return lab.Lab{}, labs.Lab{}, usageError{err}
	}
	t, err := l.Text()
	return l, t, err
}

func labList(ctx context.Context, a *app, output string) error {
	e, err := openLab(a, false)
	if err != nil {
		return err
	}
	defer e.close()
	rows, err := lab.List(ctx, e.all, e.env, e.d)
	if err != nil {
		return err
	}
	if output == "json" {
		enc := json.NewEncoder(a.out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LAB\tSTATUS\tDETAIL")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.ID, r.Status, shortenText(r.Detail, 110))
	}
	return tw.Flush()
}

func shortenText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// renderLab prints the lab's text, rendered for a terminal unless plain or
// stdout is not one.
func renderLab(w io.Writer, l labs.Lab, plain bool) {
	md := l.Markdown()
	f, isFile := w.(*os.File)
	if plain || !isFile || !term.IsTerminal(int(f.Fd())) {
		fmt.Fprintln(w, md)
		return
	}
	width := 100
	if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 40 {
		width = min(cols-2, 110)
	}
	style := glamour.WithStandardStyle("dark")
	if p := os.Getenv("GLAMOUR_STYLE"); p != "" {
		style = glamour.WithStylePath(p)
	}
	r, err := glamour.NewTermRenderer(style, glamour.WithWordWrap(width))
	if err == nil {
		if out, err := r.Render(md); err == nil {
			fmt.Fprint(w, out)
			return
		}
	}
	fmt.Fprintln(w, md)
}

// withLab resolves the lab id (a usage error when unknown), takes the
// cluster lock, opens the machines and the step environment, and runs fn with a context that Ctrl-C
// and SIGTERM cancel.
func withLab(parent context.Context, a *app, id string, fn func(ctx context.Context, l lab.Lab, t labs.Lab, e *labEnv) error) error {
	l, t, err := lookupLab(id)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, err := openLab(a, true)
	if err != nil {
		return err
	}
	defer e.close()
	return fn(ctx, l, t, e)
}

func runLab(parent context.Context, a *app, id string, o labOpts) error {
	return withLab(parent, a, id, func(ctx context.Context, l lab.Lab, t labs.Lab, e *labEnv) error { return runLabIn(ctx, a, l, t, e, o) })
}

func runLabIn(ctx context.Context, a *app, l lab.Lab, t labs.Lab, e *labEnv, o labOpts) error {
	// Earlier labs first (a drifted one does not block: it was done, and
	// khw lab check says whether the drift is a mistake).
	prog, err := lab.LoadProgress(e.d)
	if err != nil {
		return err
	}
	var missing []string
	for _, s := range e.all {
		if s.ID() >= l.ID {
			break
		}
		if earlier, _ := lab.Lookup(s.ID()); earlier.Kind == lab.Test {
			if _, ok := prog[s.ID()]; !ok {
				missing = append(missing, s.ID())
			}
			continue
		}
		st, _ := lab.StepStatus(ctx, s, e.env, prog)
		if st.Status == lab.NotDone || st.Status == lab.Unknown {
			missing = append(missing, s.ID())
			if len(missing) == 1 && !o.force {
				break // one is enough to refuse; checking the rest would read a state not made yet
			}
		}
	}
	if len(missing) > 0 {
		if !o.force {
			return fmt.Errorf("lab %s comes after %s, which is not done: run khw lab %s first (khw lab list shows every lab; --force runs this one anyway)", l.ID, missing[0], missing[0])
		}
		fmt.Fprintf(a.errOut, "Warning: earlier labs not done (%s); going on because of --force\n", strings.Join(missing, ", "))
	}
	renderLab(a.out, t, o.plain)

	if l.Kind == lab.Drill {
		return runFailoverLab(ctx, a, l, e)
	}
	step, err := steps.Lookup(e.all, l.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "\n── %s: checking what is already there…\n", l.ID)
	st, diffs := lab.StepStatus(ctx, step, e.env, prog)
	if st.Status == lab.Unknown {
		return fmt.Errorf("lab %s: the check failed: %s", l.ID, st.Detail)
	}
	if len(diffs) == 0 {
		fmt.Fprintf(a.out, "✓ %s is already done: nothing to change.\n", l.ID)
	} else {
		if err := labSnapshot(ctx, a, e, l); err != nil {
			return err
		}
		if err := confirmChanges(ctx, a, e, step, diffs, o.yes); err != nil {
			return err
		}
		fmt.Fprintln(a.out)
		if _, err := steps.NewRunner(e.env, a.out).Run(ctx, e.all, steps.Options{From: l.ID, Until: l.ID}); err != nil {
			return err
		}
	}
	if err := lab.MarkDone(e.d, l.ID); err != nil {
		return err
	}
	observe(ctx, a, e, t)
	if next, ok := lab.Next(l.ID); ok {
		fmt.Fprintf(a.out, "\nLab %s done. Next: khw lab %s\n", l.ID, next.ID)
	} else {
		fmt.Fprintf(a.out, "\nLab %s done. That was the last lab.\n", l.ID)
	}
	return nil
}

// labSnapshot snapshots the nodes (when there are any and the provider can)
// and the state directory before lab l changes anything.
func labSnapshot(ctx context.Context, a *app, e *labEnv, l lab.Lab) error {
	id := l.ID
	name := lab.SnapshotName(id)
	t0 := time.Now()
	nodes := !l.MakesNodes
	if nodes {
		err := e.s.Provider.Snapshot(ctx, name)
		switch {
		case errors.Is(err, vm.ErrNotSupported):
			fmt.Fprintf(a.errOut, "Warning: provider %s cannot snapshot nodes; khw lab reset %s will not be possible\n", e.s.Provider.Name(), id)
			nodes = false
		case err != nil:
			return fmt.Errorf("snapshot before lab %s: %w", id, err)
		}
	}
	if err := lab.SnapshotState(ctx, e.d, id); err != nil {
		return fmt.Errorf("snapshot of the state directory before lab %s: %w", id, err)
	}
	what := "the state directory"
	if nodes {
		what = "every node and the state directory"
		if f, ok := e.s.Provider.(interface{ LastFreeze() time.Duration }); ok && f.LastFreeze() > 0 {
			what += fmt.Sprintf(" (nodes paused %s for the final pass)", f.LastFreeze().Round(100*time.Millisecond))
		}
	}
	fmt.Fprintf(a.out, "Snapshot %q taken in %s of %s: khw lab reset %s goes back to it.\n", name, time.Since(t0).Round(100*time.Millisecond), what, id)
	return nil
}

// confirmChanges shows the diffs and their shell commands, grouped by node,
// and asks before each group unless yes.
func confirmChanges(ctx context.Context, a *app, e *labEnv, step steps.Step, diffs []steps.Diff, yes bool) error {
	groups := map[string][]steps.Diff{}
	var order []string
	for _, d := range diffs {
		if _, ok := groups[d.Node]; !ok {
			order = append(order, d.Node)
		}
		groups[d.Node] = append(groups[d.Node], d)
	}
	fmt.Fprintf(a.out, "%d change(s) to make:\n", len(diffs))
	in := bufio.NewReader(os.Stdin)
	all := yes
	for _, node := range order {
		where := node
		if where == "" {
			where = "jumpbox / cluster"
		}
		fmt.Fprintf(a.out, "\n── on %s:\n", where)
		for _, d := range groups[node] {
			fmt.Fprintf(a.out, "  - %s\n", d.What)
		}
		cmds := step.Commands(e.env, groups[node])
		if len(cmds) > 0 {
			fmt.Fprintln(a.out, "  The shell commands this stands for:")
			for _, c := range cmds {
				for _, ln := range strings.Split(c.String(), "\n") {
					fmt.Fprintf(a.out, "    %s\n", ln)
				}
			}
		}
		if all {
			continue
		}
		for {
			fmt.Fprintf(a.out, "Go on? khw applies the step as a whole once every node is accepted. [y]es, next node / [a]ll, apply now / [n]o, stop and do it by hand: ")
			line, err := in.ReadString('\n')
			if err != nil {
				return fmt.Errorf("no answer (stdin closed): rerun with --yes to apply without asking")
			}
			switch strings.ToLower(strings.TrimSpace(line)) {
			case "y", "yes", "":
			case "a", "all":
				all = true
			case "n", "no", "q":
				return fmt.Errorf("stopped before applying: do the changes by hand (the commands above), then grade them with khw lab check %s", step.ID())
			default:
				continue
			}
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// observe runs the lab's read-only observe blocks inside khw shell.
func observe(ctx context.Context, a *app, e *labEnv, l labs.Lab) {
	if len(l.Observe) == 0 {
		return
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(a.errOut, "Warning: cannot run the observe commands: %v\n", err)
		return
	}
	fmt.Fprintf(a.out, "\n── What to look at now (read-only, run in khw shell):\n")
	for _, b := range l.Observe {
		if err := labs.CheckReadOnly(b.Shell); err != nil {
			fmt.Fprintf(a.errOut, "Warning: skipped an observe block that is not read-only: %v\n", err)
			continue
		}
		fmt.Fprintf(a.out, "\n%s\n", b.Intro)
		for _, ln := range strings.Split(strings.TrimRight(b.Shell, "\n"), "\n") {
			fmt.Fprintf(a.out, "  $ %s\n", ln)
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := exec.CommandContext(cctx, self, "--state-dir", filepath.Dir(e.d.Root), "--cluster", e.c.Name, "shell", "--", "sh", "-c", b.Shell)
		cmd.Stdout, cmd.Stderr = indent(a.out), indent(a.out)
		cmd.Env = append(os.Environ(), "KHW_LAB_OBSERVE=1")
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(a.out, "    (%v)\n", err)
		}
		cancel()
	}
}

// indent prefixes every line written with four spaces.
func indent(w io.Writer) io.Writer { return &indentWriter{w: w, bol: true} }

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

// runFailoverLab runs the lab's drill: one etcd member down for 20 s.
func runFailoverLab(ctx context.Context, a *app, l lab.Lab, e *labEnv) error {
	fmt.Fprintf(a.out, "\n── %s: khw break etcd --count 1 --for 20s (then try the others by hand: khw break --help)\n", l.ID)
	err := runBreak(ctx, a, drill.Spec{Kind: drill.KindEtcd, Count: 1, For: 20 * time.Second})
	if err != nil {
		return err
	}
	return lab.MarkDone(e.d, l.ID)
}

func labCheck(parent context.Context, a *app, id string) error {
	return withLab(parent, a, id, func(ctx context.Context, l lab.Lab, _ labs.Lab, e *labEnv) error { return labCheckIn(ctx, a, l, e) })
}

func labCheckIn(ctx context.Context, a *app, l lab.Lab, e *labEnv) error {
	prog, err := lab.LoadProgress(e.d)
	if err != nil {
		return err
	}
	if l.Kind == lab.Drill {
		if _, done := prog[l.ID]; done {
			fmt.Fprintf(a.out, "✓ %s: a drill passed its verdict since the last reset\n", l.ID)
			return nil
		}
		return fmt.Errorf("%s: no drill has passed its verdict since the last reset: run khw lab %d or khw break etcd --count 1 --for 20s", l.ID, l.Number())
	}
	step, err := steps.Lookup(e.all, l.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "Checking lab %s on the live nodes…\n", l.ID)
	st, diffs := lab.StepStatus(ctx, step, e.env, prog)
	if st.Status == lab.Unknown {
		fmt.Fprintf(a.out, "! the step's own check failed: %s\n", st.Detail)
	}

	var mistakes []labcheck.Mistake
	detectors := l.Detectors()
	if len(detectors) > 0 {
		src := lab.Source{Pool: e.s.Pool, Nodes: map[string]remote.Node{}, State: e.d}
		for _, n := range e.c.Nodes {
			src.Nodes[n.Name] = remote.Node{Name: n.Name, Addr: n.IP}
		}
		cs, cerr := labClientset(e)
		if cerr != nil {
			fmt.Fprintf(a.out, "! no API client (%v): the checks of API objects are skipped\n", cerr)
		}
		var err error
		mistakes, err = labcheck.Check(ctx, l.ID, e.c, src, cs)
		if err != nil {
			fmt.Fprintf(a.out, "! %v\n", err)
		}
	}
	// A unit that is not running (or a machine that is off) is a mistake
	// whatever the files say: the step's own check names it.
	var info []steps.Diff
	for _, d := range diffs {
		if bringup.IsUnitStateDiff(d) {
			mistakes = append(mistakes, labcheck.Mistake{Lab: l.ID, Node: d.Node, What: d.What,
				Evidence: "systemctl show on " + d.Node + " (khw status shows every unit)", Fix: d.Fix + " (and read why it stopped: journalctl -u <unit> on the node)"})
			continue
		}
		info = append(info, d)
	}
	diffs = info
	sort.SliceStable(mistakes, func(i, j int) bool { return mistakes[i].Lab < mistakes[j].Lab })
	for _, m := range mistakes {
		fmt.Fprintf(a.out, "✗ %s\n", m.String())
	}
	if len(diffs) > 0 {
		label := "Differences from khw's reference (information; a correct hand-made variant may differ)"
		if len(detectors) == 0 {
			label = "What is missing or different"
		}
		fmt.Fprintf(a.out, "%s:\n", label)
		for i, d := range diffs {
			if i == 12 {
				fmt.Fprintf(a.out, "  … and %d more (khw up --dry-run --from %s --until %s lists them all)\n", len(diffs)-12, l.ID, l.ID)
				break
			}
			fmt.Fprintf(a.out, "  - %s\n", d.String())
		}
	}
	pass := len(mistakes) == 0 && st.Status != lab.Unknown && (len(detectors) > 0 || len(diffs) == 0)
	if !pass {
		n := len(mistakes)
		if n == 0 {
			n = len(diffs)
		}
		return fmt.Errorf("lab %s: %d problem(s); fix them and run khw lab check %s again", l.ID, n, l.ID)
	}
	fmt.Fprintf(a.out, "✓ lab %s passes: no mistake found (%d checks)\n", l.ID, len(detectors))
	return lab.MarkDone(e.d, l.ID)
}

func labClientset(e *labEnv) (kubernetes.Interface, error) {
	return e.s.Clientset()
}

func labReset(parent context.Context, a *app, id string, yes bool) error {
	return withLab(parent, a, id, func(ctx context.Context, l lab.Lab, _ labs.Lab, e *labEnv) error {
		return labResetIn(ctx, a, l, e, yes)
	})
}

func labResetIn(ctx context.Context, a *app, l lab.Lab, e *labEnv, yes bool) error {
	if l.Kind != lab.Drill && !yes {
		fmt.Fprintf(a.out, "Revert every node and the state directory of cluster %s to before lab %s? Everything done since is lost. [y/N]: ", e.c.Name, l.ID)
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil {
			return usagef("no answer (stdin closed): add --yes to reset without asking")
		}
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			return fmt.Errorf("not reset")
		}
	}
	if l.Kind == lab.Drill {
		fmt.Fprintf(a.out, "Lab %d changes nothing on the nodes (every drill heals what it broke): it is only marked not done.\n", l.Number())
	}
	name := lab.SnapshotName(l.ID)
	t0 := time.Now()
	if l.MakesNodes {
		fmt.Fprintf(a.out, "Before lab %s there were no machines: removing them.\n", l.ID)
		if err := e.s.Provider.Destroy(ctx); err != nil {
			return err
		}
	} else if l.Kind != lab.Drill {
		fmt.Fprintf(a.out, "Reverting every node to snapshot %q…\n", name)
		if err := e.s.Provider.Revert(ctx, name); err != nil {
			if errors.Is(err, vm.ErrNotSupported) {
				return fmt.Errorf("provider %s cannot revert nodes: %w", e.s.Provider.Name(), err)
			}
			return fmt.Errorf("%w (a lab's snapshot is taken when khw lab runs it)", err)
		}
		if e.s.Provider.Name() == config.ProviderLibvirt {
			// A libvirt snapshot of a running VM holds its memory, so the
			// reverted guest's clock reads the snapshot's time. Certificates
			// issued from now on (backdated only 5 minutes) would be "not yet
			// valid" there, and leases and tokens would look too young.
			if err := syncClocks(ctx, e, a.out); err != nil {
				fmt.Fprintf(a.errOut, "Warning: %v\n", err)
			}
		}
	}
	if l.Kind != lab.Drill {
		if err := lab.RestoreState(ctx, e.d, l.ID); err != nil {
			return err
		}
	}
	// Later labs' snapshots describe a future that no longer exists.
	later := lab.From(l.ID)[1:]
	for _, ll := range later {
		_ = e.s.Provider.DeleteSnapshot(ctx, lab.SnapshotName(ll.ID))
		_ = lab.DeleteStateSnapshot(e.d, ll.ID)
	}
	prog, err := lab.LoadProgress(e.d)
	if err != nil {
		return err
	}
	for k := range prog {
		if k >= l.ID {
			delete(prog, k)
		}
	}
	if err := prog.Save(e.d); err != nil {
		return err
	}
	last := l.ID
	if len(later) > 0 {
		last = later[len(later)-1].ID
	}
	fmt.Fprintf(a.out, "Back to before lab %s (%s). Labs %s to %s are not done; continue with khw lab %s.\n", l.ID, time.Since(t0).Round(100*time.Millisecond), l.ID, last, l.ID)
	return nil
}

// syncClocks sets the clock of every running node to the jumpbox's (UTC,
// whole seconds) over SSH with `date -u -s @<unix seconds>`, through a new
// SSH pool: connections opened before a revert are dead. For libvirt VMs
// only: nspawn nodes share the host's clock. Nodes that do not answer are
// named in the error; the others are set.
func syncClocks(ctx context.Context, e *labEnv, out io.Writer) error {
	s, err := cluster.Open(e.c, e.d, cluster.ReadWrite, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := s.Provider.Status(ctx)
	if err != nil {
		return err
	}
	var nodes []remote.Node
	for _, n := range st {
		if n.State == vm.StateRunning {
			nodes = append(nodes, remote.Node{Name: n.Name, Addr: n.IP.String()})
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var behind []string
	err = s.Pool.ForEach(cctx, nodes, 0, func(ctx context.Context, c *remote.Client) error {
		now := time.Now()
		o, _, err := c.Run(ctx, fmt.Sprintf("date -u +%%s; date -u -s @%d >/dev/null", now.Unix()), remote.RunOptions{Sudo: true})
		if err != nil {
			return err
		}
		if was, perr := strconv.ParseInt(strings.TrimSpace(string(o)), 10, 64); perr == nil {
			mu.Lock()
			behind = append(behind, fmt.Sprintf("%s %s", c.Node.Name, now.Sub(time.Unix(was, 0)).Round(time.Second)))
			mu.Unlock()
		}
		return nil
	})
	sort.Strings(behind)
	if len(behind) > 0 {
		fmt.Fprintf(out, "Set the nodes' clocks to the jumpbox's (the snapshot had brought them back; they were behind by: %s).\n", strings.Join(behind, ", "))
	}
	if err != nil {
		return fmt.Errorf("set the clocks after the revert: %w (set them by hand: sudo date -u -s @$(date -u +%%s) on each node)", err)
	}
	return nil
}
