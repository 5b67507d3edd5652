package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/render"
)

func newRenderCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "render",
		Short: "Render the node files and manifests from templates",
		Long:  help("render"),
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, c, unlock, err := a.loadForWrite()
			if err != nil {
				return err
			}
			defer unlock()
			rep, err := render.All(c, nil, d.Root)
			if err != nil {
				return err
			}
			for _, p := range rep.Written {
				a.logf(2, "  wrote %s", p)
			}
			for _, p := range rep.Removed {
				fmt.Fprintf(a.out, "  removed %s (no longer rendered)\n", p)
			}
			fmt.Fprintf(a.out, "Rendered into %s: %d files written, %d unchanged, %d removed\n",
				d.Root, len(rep.Written), len(rep.Unchanged), len(rep.Removed))
			return nil
		},
	}
}
