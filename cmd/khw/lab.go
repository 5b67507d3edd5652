package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/labs"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

type labOpts struct {
	yes, force, plain bool
}

func newLabCmd(a *app) *cobra.Command {
	var o labOpts
	cmd := &cobra.Command{
		Use:               "lab [LAB]",
		Short:             "The hard way one lab at a time: run, check, reset, list",
		Long:              help("lab"),
		Example:           help("lab.example"),
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
		Short:             "Run one lab: text, snapshot, changes (asking first), check",
		Long:              help("lab-run"),
		Example:           helpVars.Replace("  khw lab run {etcd}\n  khw lab run 5 --yes\n  khw lab run etcd --plain"),
		Args:              exactArgs(1),
		ValidArgsFunction: completeLab,
		RunE:              func(cmd *cobra.Command, args []string) error { return runLab(cmd.Context(), a, args[0], o) },
	}
	for _, c := range []*cobra.Command{cmd, runCmd} {
		c.Flags().BoolVarP(&o.yes, "yes", "y", false, "apply every change without asking")
		c.Flags().BoolVar(&o.force, "force", false, "run even if an earlier lab is not done")
		c.Flags().BoolVar(&o.plain, "plain", false, "plain Markdown text, no terminal styling (the lab still runs)")
	}
	var listOut string
	listCmd := &cobra.Command{
		Use:               "list",
		Short:             "List the labs with their live status: done, not done, drifted",
		Args:              exactArgs(0),
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if listOut != "text" && listOut != "json" {
				return usagef("-o %q: use text or json", listOut)
			}
			return labList(cmd.Context(), a, listOut)
		},
	}
	listCmd.Flags().StringVarP(&listOut, "output", "o", "text", "output format: text or json")
	checkCmd := &cobra.Command{
		Use:               "check LAB",
		Short:             "Grade a lab done by hand: each mistake, its evidence and fix",
		Long:              help("lab-check"),
		Args:              exactArgs(1),
		ValidArgsFunction: completeLab,
		RunE:              func(cmd *cobra.Command, args []string) error { return labCheck(cmd.Context(), a, args[0]) },
	}
	var resetYes bool
	resetCmd := &cobra.Command{
		Use:   "reset LAB",
		Short: "Put the nodes and the state dir back to before LAB",
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

// labEnv is what the lab commands work with.
type labEnv struct {
	d      state.Dir
	c      *config.Cluster
	course *lab.Course
	unlock func()
}

func (e *labEnv) close() {
	e.course.Env.Close()
	e.course.S.Close()
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
	return &labEnv{d: d, c: c, course: lab.NewCourse(s, env), unlock: unlock}, nil
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
	rows, err := e.course.List(ctx)
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
	// The text first, so it can be read ahead; then the earlier labs (a
	// drifted one does not block: it was done, and khw lab check says
	// whether the drift is a mistake).
	t.Render(a.out, o.plain)
	missing, err := e.course.EarlierNotDone(ctx, l, o.force)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		if !o.force {
			return fmt.Errorf("lab %s comes after %s, which is not done: run khw lab %s first (khw lab list shows every lab; --force runs this one anyway)", l.ID, missing[0], missing[0])
		}
		fmt.Fprintf(a.errOut, "Warning: earlier labs not done (%s); going on because of --force\n", strings.Join(missing, ", "))
	}

	if l.Kind == lab.Drill {
		return runFailoverLab(ctx, a, l, e)
	}
	fmt.Fprintf(a.out, "\n── %s: checking what is already there…\n", l.ID)
	st, diffs, err := e.course.Status(ctx, l)
	if err != nil {
		return err
	}
	if st.Status == lab.Unknown {
		return fmt.Errorf("lab %s: the check failed: %s", l.ID, st.Detail)
	}
	if len(diffs) == 0 {
		fmt.Fprintf(a.out, "✓ %s is already done: nothing to change.\n", l.ID)
	} else {
		snap, err := e.course.TakeSnapshot(ctx, l)
		if err != nil {
			return err
		}
		printSnapshot(a, e, l, snap)
		if err := confirmChanges(ctx, a, e, l, diffs, o.yes); err != nil {
			return err
		}
		fmt.Fprintln(a.out)
		if err := e.course.Apply(ctx, l, a.out); err != nil {
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

// printSnapshot says what the snapshot before lab l holds.
func printSnapshot(a *app, e *labEnv, l lab.Lab, snap lab.Snapshot) {
	if snap.NoNodeSupport {
		fmt.Fprintf(a.errOut, "Warning: provider %s cannot snapshot nodes; khw lab reset %s will not be possible\n", e.course.S.Provider.Name(), l.ID)
	}
	what := "the state directory"
	if snap.Nodes {
		what = "every node and the state directory"
		if snap.Freeze > 0 {
			what += fmt.Sprintf(" (nodes paused %s for the final pass)", snap.Freeze.Round(100*time.Millisecond))
		}
	}
	fmt.Fprintf(a.out, "Snapshot %q taken in %s of %s: khw lab reset %s goes back to it.\n", snap.Name, snap.Took.Round(100*time.Millisecond), what, l.ID)
}

// confirmChanges shows the diffs and their shell commands, grouped by node,
// and asks before each group unless yes.
func confirmChanges(ctx context.Context, a *app, e *labEnv, l lab.Lab, diffs []steps.Diff, yes bool) error {
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
		cmds := e.course.Commands(l, groups[node])
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
				return fmt.Errorf("stopped before applying: do the changes by hand (the commands above), then grade them with khw lab check %s", l.ID)
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
	if l.Kind == lab.Drill {
		done, err := e.course.DrillDone(l)
		if err != nil {
			return err
		}
		if done {
			fmt.Fprintf(a.out, "✓ %s: a drill passed its verdict since the last reset\n", l.ID)
			return nil
		}
		return fmt.Errorf("%s: no drill has passed its verdict since the last reset: run khw lab %d or khw break etcd --count 1 --for 20s", l.ID, l.Number())
	}
	fmt.Fprintf(a.out, "Checking lab %s on the live nodes…\n", l.ID)
	g, err := e.course.Grade(ctx, l)
	if err != nil {
		return err
	}
	if g.Status.Status == lab.Unknown {
		fmt.Fprintf(a.out, "! the step's own check failed: %s\n", g.Status.Detail)
	}
	for _, w := range g.Warnings {
		fmt.Fprintf(a.out, "! %s\n", w)
	}
	for _, m := range g.Mistakes {
		fmt.Fprintf(a.out, "✗ %s\n", m.String())
	}
	if len(g.Variants) > 0 {
		fmt.Fprintf(a.out, "Variants of khw's reference (information: they work as they are):\n")
		for _, v := range g.Variants {
			fmt.Fprintf(a.out, "  ~ %s: %s\n", v.Node, v.What)
			if v.Why != "" {
				fmt.Fprintf(a.out, "      what it does: %s\n", v.Why)
			}
		}
	}
	if len(g.Differences) > 0 {
		label := "Differences from khw's reference (information; a correct hand-made variant may differ)"
		if g.Detectors == 0 {
			label = "What is missing or different"
		}
		fmt.Fprintf(a.out, "%s:\n", label)
		for i, d := range g.Differences {
			if i == 12 {
				fmt.Fprintf(a.out, "  … and %d more (khw up --dry-run --from %s --until %s lists them all)\n", len(g.Differences)-12, l.ID, l.ID)
				break
			}
			fmt.Fprintf(a.out, "  - %s\n", d.String())
		}
	}
	if !g.Pass() && len(g.Mistakes) == 0 && len(g.Differences) == 0 {
		return fmt.Errorf("lab %s could not be checked: %s", l.ID, g.Status.Detail)
	}
	if !g.Pass() {
		n := len(g.Mistakes)
		if n == 0 {
			n = len(g.Differences)
		}
		return fmt.Errorf("lab %s: %d problem(s); fix them and run khw lab check %s again", l.ID, n, l.ID)
	}
	fmt.Fprintf(a.out, "✓ lab %s passes: no mistake found (%d checks)\n", l.ID, g.Detectors)
	return nil
}

func labReset(parent context.Context, a *app, id string, yes bool) error {
	return withLab(parent, a, id, func(ctx context.Context, l lab.Lab, _ labs.Lab, e *labEnv) error {
		return labResetIn(ctx, a, l, e, yes)
	})
}

func labResetIn(ctx context.Context, a *app, l lab.Lab, e *labEnv, yes bool) error {
	if err := e.course.CanReset(l); err != nil {
		return err
	}
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
	t0 := time.Now()
	warning, err := e.course.Reset(ctx, l, func(format string, args ...any) { fmt.Fprintf(a.out, format+"\n", args...) })
	if warning != nil {
		fmt.Fprintf(a.errOut, "Warning: %v\n", warning)
	}
	if err != nil {
		return err
	}
	all := lab.From(l.ID)
	fmt.Fprintf(a.out, "Back to before lab %s (%s). Labs %s to %s are not done; continue with khw lab %s.\n", l.ID, time.Since(t0).Round(100*time.Millisecond), l.ID, all[len(all)-1].ID, l.ID)
	return nil
}
