package main

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/termtext"
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
			if len(all) == 0 {
				fmt.Fprintln(a.out, "No reports yet: khw break, khw etcd restore and khw pki renew write them.")
				return nil
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tKIND\tVERDICT\tTOOK\tCOMMAND")
			for _, e := range all {
				took := "-"
				if e.Took > 0 {
					took = e.Took.String()
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", termtext.Escape(e.ID), termtext.Escape(e.Kind), termtext.Escape(e.Verdict), took, termtext.Escape(e.What))
			}
			return tw.Flush()
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
