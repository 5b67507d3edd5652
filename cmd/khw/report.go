package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/drill"
)

func newReportCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "report",
		Short: "List the reports of drills and day-2 operations; find one's page with its timeline drawn",
		Long:  help("report"),
		Example: `  khw report list
  khw report open                   # the newest report's page
  khw report open 20261205-101500   # by its ID or the start of it
  xdg-open "$(khw report open)"     # on a desktop: show it in the browser`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q (its commands: list, open)", args[0], cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the drills and day-2 operations of this cluster, oldest first",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, _, err := a.load()
			if err != nil {
				return err
			}
			all, err := drill.Entries(d)
			if err != nil {
				return err
			}
			return drill.WriteEntries(a.out, all)
		},
	})
	var print bool
	open := &cobra.Command{
		Use:   "open [ID]",
		Short: "Print the path of a report's page (report.html), the newest without ID; --print: the page itself",
		Long:  help("report-open"),
		Args:  maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, _, err := a.load()
			if err != nil {
				return err
			}
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			e, err := drill.Find(d, id)
			if err != nil && !errors.Is(err, drill.ErrNoReports) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			path, err := e.HTML()
			if err != nil {
				return err
			}
			if print {
				page, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				_, err = a.out.Write(page)
				return err
			}
			fmt.Fprintf(a.errOut, "%s %s (%s): open this file in a browser\n", e.Kind, e.ID, e.Verdict)
			fmt.Fprintln(a.out, path)
			return nil
		},
	}
	open.Flags().BoolVar(&print, "print", false, "write the page itself (HTML) to standard output, e.g. to keep a copy you own: sudo -E khw report open --print > drill.html")
	cmd.AddCommand(open)
	return cmd
}
