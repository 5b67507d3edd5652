package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/lab/challenge"
)

func newChallengeCmd(a *app) *cobra.Command {
	var lang, output string
	var plain bool
	var req challenge.Request
	cmd := &cobra.Command{Use: "challenge", Short: "Troubleshooting challenges: a fault on the live cluster to find and fix",
		Long: help("challenge"), Example: help("challenge.example"), Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() }}
	cmd.PersistentFlags().StringVar(&lang, "lang", "", "language of the texts: en or ko (default: $KHW_LANG, else ko in a Korean locale, else en)")
	cmd.PersistentFlags().BoolVar(&plain, "plain", false, "plain Markdown texts, no terminal styling")
	sub := func(use, short, long string, write bool, fn func(ctx context.Context, e *challenge.Env) error) *cobra.Command {
		c := &cobra.Command{Use: use, Short: short, Args: exactArgs(0), RunE: func(cmd *cobra.Command, args []string) error {
			return withChallenges(cmd.Context(), a, lang, plain, write, fn)
		}}
		if long != "" {
			c.Long = help(long)
		}
		return c
	}
	list := &cobra.Command{Use: "list", Short: "The challenges by lab and level, with what you solved and your best time", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := lab.Language(lang, os.Getenv)
			if output != "text" && output != "json" {
				err = usagef("--output %q: use text or json", output)
			}
			if err != nil {
				return usageError{err}
			}
			d, err := a.dir()
			if err != nil {
				return err
			}
			rows, err := challenge.Rows(challenge.StoreOf(d), l)
			if err != nil {
				return err
			}
			return challenge.WriteList(a.out, rows, output)
		}}
	list.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	start := &cobra.Command{Use: "start [ID]", Short: "Break the cluster for a challenge: snapshot, inject, show the symptom and the goal",
		Long: help("challenge-start"), Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("%s takes at most one challenge ID (khw challenge list shows them)", cmd.CommandPath())
			}
			return nil
		},
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			var ids []string
			for _, f := range challenge.Catalogue() {
				ids = append(ids, f.ID)
			}
			return ids, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				req.ID = args[0]
			}
			if cmd.Flags().Changed("level") && req.Level == 0 {
				return usagef("--level 0: use 1, 2 or 3 (or leave --level out for any level)")
			}
			return withChallenges(cmd.Context(), a, lang, plain, true, func(ctx context.Context, e *challenge.Env) error {
				f, err := challenge.Choose(e.Store, req)
				if err != nil {
					return err
				}
				return e.Start(ctx, f)
			})
		}}
	start.Flags().StringVar(&req.Lab, "lab", "", "a challenge of this lab (ID, number or name)")
	start.Flags().IntVar(&req.Level, "level", 0, "a challenge of this level: 1, 2 or 3")
	start.Flags().BoolVar(&req.Random, "random", false, "pick at random among those that match (default: the first not yet solved)")
	cmd.AddCommand(list, start,
		sub("check", "Grade the repair: the goal and the lab's check; where to look while something is wrong", "challenge-check", true,
			func(ctx context.Context, e *challenge.Env) error { return e.Check(ctx) }),
		sub("hint", "The next hint: where to look, what is wrong, the fix", "", true,
			func(_ context.Context, e *challenge.Env) error { return e.Hint() }),
		sub("give-up", "Show the cause and the fix, and put the cluster back as it was", "", true,
			func(ctx context.Context, e *challenge.Env) error { return e.GiveUp(ctx) }),
		sub("status", "The challenge under way: symptom, goal, time, hints; or the last results", "", false,
			func(_ context.Context, e *challenge.Env) error { return e.WriteStatus() }))
	return cmd
}

// withChallenges opens the cluster's challenges (with write, under the
// cluster lock, as khw lab check) and runs fn with a context that Ctrl-C
// and SIGTERM cancel. No challenge under way, and a request that names
// nothing, are usage errors.
func withChallenges(parent context.Context, a *app, langFlag string, plain, write bool, fn func(ctx context.Context, e *challenge.Env) error) error {
	lang, err := lab.Language(langFlag, os.Getenv)
	if err != nil {
		return usageError{err}
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, err := openLab(a, write)
	if err != nil {
		return err
	}
	defer e.close()
	err = fn(ctx, &challenge.Env{Course: e.course, Store: challenge.StoreOf(e.d), Lang: lang, Plain: plain, Out: a.out, Err: a.errOut})
	var re *challenge.RequestError
	if errors.Is(err, challenge.ErrNone) || errors.As(err, &re) {
		return usageError{err}
	}
	return err
}
