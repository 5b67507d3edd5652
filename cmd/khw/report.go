package main

import (
	"fmt"
	"text/tabwriter"

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
		Args: exactArgs(0),
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
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.ID, e.Kind, e.Verdict, took, e.What)
			}
			return tw.Flush()
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "open [ID]",
		Short: "Print the path of a report's page (report.html), the newest without ID",
		Long:  help("report-open"),
		Args:  cobra.MaximumNArgs(1),
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
			if err != nil && id != "" {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			path, err := e.HTML()
			if err != nil {
				return err
			}
			fmt.Fprintf(a.errOut, "%s %s (%s): open this file in a browser\n", e.Kind, e.ID, e.Verdict)
			fmt.Fprintln(a.out, path)
			return nil
		},
	})
	return cmd
}
