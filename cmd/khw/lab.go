package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/jumpbox"
	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/lab/challenge"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/upgrade"
	"github.com/khw-dev/khw/internal/labtext"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/termtext"
)

type labOpts struct {
	yes, force, plain, hints, byHand bool
	lang                             string
	show                             bool // show the lab's text before opening the cluster

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
		Args:              labArg,
		ValidArgsFunction: completeLab,
		RunE:              func(cmd *cobra.Command, args []string) error { return runLab(cmd.Context(), a, args[0], o) },
	}
	for _, c := range []*cobra.Command{cmd, runCmd} {
		c.Flags().BoolVarP(&o.yes, "yes", "y", false, "apply every change without asking")
		c.Flags().BoolVar(&o.force, "force", false, "run even if an earlier lab is not done, or while a challenge is under way (it ends as not solved)")
		c.Flags().BoolVar(&o.plain, "plain", false, "plain Markdown text, no terminal styling (the lab still runs)")
		c.Flags().BoolVar(&o.byHand, "by-hand", false, "show the changes for you to type in khw shell, wait, then grade them with hints")
	}
	cmd.PersistentFlags().StringVar(&o.lang, "lang", "", "language of the lab texts: en or ko (default: $KHW_LANG, else ko in a Korean locale, else en)")
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
		Args:              labArg,
		ValidArgsFunction: completeLab,
		RunE: func(cmd *cobra.Command, args []string) error {
			return labCheck(cmd.Context(), a, args[0], o.hints, o.lang)
		},
	}
	checkCmd.Flags().BoolVar(&o.hints, "hints", false, "say only where to look for each mistake; khw lab hint LAB gives more")
	hintCmd := &cobra.Command{
		Use:               "hint LAB",
		Short:             "The next hint for a mistake that khw lab check --hints found",
		Long:              help("lab-hint"),
		Args:              labArg,
		ValidArgsFunction: completeLab,
		RunE:              func(cmd *cobra.Command, args []string) error { return labHint(a, args[0], o.lang) },
	}
	quizCmd := &cobra.Command{
		Use:               "quiz LAB",
		Short:             "Answer the lab's questions: graded, each answer explained",
		Long:              help("lab-quiz"),
		Args:              labArg,
		ValidArgsFunction: completeLab,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, t, err := lookupLab(a, args[0], o.lang)
			if err == nil {
				if err = lab.Quiz(t, lab.UI{Out: a.out, In: os.Stdin}); errors.Is(err, lab.ErrQuizNoAnswer) {
					err = usageError{err}
				}
			}
			return err
		},
	}
	var resetYes, resetForce bool
	resetCmd := &cobra.Command{
		Use:               "reset LAB",
		Short:             "Put the nodes and the state dir back to before LAB",
		Long:              help("lab-reset"),
		Args:              labArg,
		ValidArgsFunction: completeLab,
		RunE: func(cmd *cobra.Command, args []string) error {
			return labReset(cmd.Context(), a, args[0], resetYes, resetForce)
		},
	}
	resetCmd.Flags().BoolVarP(&resetYes, "yes", "y", false, "do not ask for confirmation")
	resetCmd.Flags().BoolVar(&resetForce, "force", false, "reset even while a challenge is under way (it ends as not solved)")
	cmd.AddCommand(runCmd, listCmd, checkCmd, hintCmd, quizCmd, resetCmd)
	return cmd
}

// labArg requires exactly one LAB argument (usage error, exit 2), and
// says what one looks like.
func labArg(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usagef("%s takes one lab, e.g. `%s %s` (its ID, number or name; khw lab list shows them)", cmd.CommandPath(), cmd.CommandPath(), labid.Etcd)
	}
	return nil
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
	e.course.Close()
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
		if err := upgrade.RefuseDuring(d); err != nil {
			unlock()
			return nil, err
		}
	}
	access := cluster.ReadWrite
	if !write {
		access = cluster.ReadOnly
	}
	course, err := lab.Open(c, d, access)
	if err != nil {
		unlock()
		return nil, err
	}
	return &labEnv{d: d, c: c, course: course, unlock: unlock}, nil
}

// lookupLab resolves a lab argument and a language (an unknown one is a
// usage error) and reads its text, warning when it is in English for want
// of a translation.
func lookupLab(a *app, arg, langFlag string) (lab.Lab, labtext.Lab, error) {
	l, err := lab.Lookup(arg)
	if err != nil {
		return lab.Lab{}, labtext.Lab{}, usageError{err}
	}
	lang, err := lab.Language(langFlag, os.Getenv)
	if err != nil {
		return l, labtext.Lab{}, usageError{err}
	}
	t, fellBack, err := l.TextIn(lang)
	if fellBack {
		fmt.Fprintf(a.errOut, "Note: lab %s has no %s text yet; showing the English one.\n", l.ID, lang)
	}
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
	return lab.WriteList(a.out, rows, output == "json")
}

// withLab resolves the lab id (a usage error when unknown), takes the
// cluster lock, opens the machines and the step environment, and runs fn
// with a context that Ctrl-C and SIGTERM cancel and the terminal's UI.
func withLab(parent context.Context, a *app, id string, o labOpts, fn func(ctx context.Context, l lab.Lab, t labtext.Lab, e *labEnv, ui lab.UI) error) error {
	l, t, err := lookupLab(a, id, o.lang)
	if err != nil {
		return err
	}
	if o.show {
		t.Render(a.out, o.plain)
		if err := challenge.WriteLabChallenges(a.out, l.ID, t.Lang); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, err := openLab(a, true)
	if err != nil {
		return err
	}
	defer e.close()
	ui := lab.UI{Out: a.out, Err: a.errOut, In: os.Stdin, Yes: o.yes, Force: o.force, Plain: o.plain, Hints: o.hints, ByHand: o.byHand, Lang: t.Lang,
		Observe: func(ctx context.Context, shell string, w io.Writer) error {
			return jumpbox.ObserveInShell(ctx, e.d, e.c.Name, shell, w)
		},
		Drill: func(ctx context.Context) error {
			return runBreak(ctx, a, drill.Spec{Kind: drill.KindEtcd, Count: 1, For: 20 * time.Second}, false)
		},
		Operate: func(ctx context.Context, l lab.Lab) error { return operate(ctx, a, e, l) },
	}
	return fn(ctx, l, t, e, ui)
}

func runLab(parent context.Context, a *app, id string, o labOpts) error {
	if l, err := lab.Lookup(id); err == nil && o.byHand && o.yes && !l.MakesNodes {
		return usageError{fmt.Errorf("--yes does nothing with --by-hand: khw changes nothing, you type the commands (only lab %s asks, as khw makes the machines)", labid.Machines)}
	}
	// Refused before the lab's text is shown, not after it.
	if d, err := a.dir(); err == nil {
		if err := challenge.StoreOf(d).RefuseDuring("khw lab "+id, o.force, a.errOut, time.Now()); err != nil {
			return err
		}
	}
	o.show = true
	return withLab(parent, a, id, o, func(ctx context.Context, l lab.Lab, t labtext.Lab, e *labEnv, ui lab.UI) error {
		// A step of khw up run by khw installs cluster.yaml's release
		// like khw up does, so it is refused as khw up is.
		if l.HasStep() && !o.byHand {
			if err := lab.RefuseReleaseChange(ctx, e.d, e.c, e.course.S); err != nil {
				return err
			}
		}
		return e.course.Run(ctx, l, t, ui)
	})
}

// labHint gives lab id's next hint, under the lock (it records it).
func labHint(a *app, id, langFlag string) error {
	l, err := lab.Lookup(id)
	if err != nil {
		return usageError{err}
	}
	lang, err := lab.Language(langFlag, os.Getenv)
	if err != nil {
		return usageError{err}
	}
	d, _, unlock, err := a.loadForWrite()
	if err != nil {
		return err
	}
	defer unlock()
	if err := challenge.StoreOf(d).Peek("khw lab hint "+l.ID, a.errOut); err != nil {
		return err
	}
	// The hint quotes a finding read on the nodes.
	return lab.NextHint(termtext.NewWriter(a.out), d, l, lang)
}

func labCheck(parent context.Context, a *app, id string, hints bool, lang string) error {
	return withLab(parent, a, id, labOpts{hints: hints, lang: lang}, func(ctx context.Context, l lab.Lab, _ labtext.Lab, e *labEnv, ui lab.UI) error {
		if !hints {
			if err := challenge.StoreOf(e.d).Peek("khw lab check "+l.ID, a.errOut); err != nil {
				return err
			}
		}
		return e.course.Check(ctx, l, ui)
	})
}

func labReset(parent context.Context, a *app, id string, yes, force bool) error {
	return withLab(parent, a, id, labOpts{yes: yes}, func(ctx context.Context, l lab.Lab, _ labtext.Lab, e *labEnv, ui lab.UI) error {
		// A reset that cannot run must not end the challenge first.
		if err := e.course.CanReset(l); err != nil {
			return err
		}
		if err := challenge.StoreOf(e.d).RefuseDuring("khw lab reset", force, a.errOut, time.Now()); err != nil {
			return err
		}
		err := e.course.ResetAsked(ctx, l, ui)
		if errors.Is(err, lab.ErrNoAnswer) {
			return usageError{err}
		}
		return err
	})
}
