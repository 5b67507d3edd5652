package components

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// MirrorExportOptions is where khw mirror export writes and prints.
type MirrorExportOptions struct {
	// Dir is the mirror directory; Keep the pin of the export already in
	// it whose other entries are kept (ExportKeeping).
	Dir, Keep string
	// Arches are the architectures exported, for the summary line.
	Arches []string
	// NodeDebs are the node packages to export too (PlanNodeDebs; none
	// without --node-debs).
	NodeDebs []NodeDebsPlan
	// Out gets the summary, the pin and how to use it; ErrOut the
	// entries of an earlier manifest left out (WriteDropped); Written,
	// when not nil, each file written (-vv).
	Out, ErrOut, Written io.Writer
}

// ExportMirror is khw mirror export: rs fetched (and verified) with f,
// then exported into o.Dir (ExportKeeping) with the node packages of
// o.NodeDebs, and the mirror's pin printed with the commands that use it
// on another machine. Nothing is exported when a fetch fails (the fetch
// table says which). Errors: the fetch's, the export's.
func (f *Fetcher) ExportMirror(ctx context.Context, rs []Resolved, o MirrorExportOptions) error {
	res, err := f.Fetch(ctx, rs)
	if err != nil {
		WriteFetched(o.Out, res)
		return fmt.Errorf("mirror export: nothing was exported because fetching failed: %w", err)
	}
	rep, err := ExportKeeping(ctx, res, o.Dir, o.Keep)
	if err != nil {
		return err
	}
	if o.Written != nil {
		for _, p := range rep.Written {
			fmt.Fprintf(o.Written, "  wrote %s\n", p)
		}
	}
	var total int64
	for _, r := range res {
		total += r.Size
	}
	fmt.Fprintf(o.Out, "Exported %d artifacts (%s, linux/%s) to %s: %d files written, %d unchanged\n",
		len(res), HumanBytes(total), strings.Join(o.Arches, ", linux/"), o.Dir, len(rep.Written), len(rep.Unchanged))
	WriteDropped(o.ErrOut, filepath.Join(o.Dir, MirrorManifestFile), rep.Dropped)
	if len(o.NodeDebs) > 0 {
		if rep.Digest, err = f.ExportNodeDebsPlans(ctx, o.Out, o.Dir, o.NodeDebs); err != nil {
			return err
		}
	}
	fmt.Fprintf(o.Out, "Mirror pin (the sha256 of %s): %s\n", MirrorManifestFile, rep.Digest)
	fmt.Fprintf(o.Out, "Use it on another machine:\n  khw fetch --mirror %s --mirror-digest %s\nor serve it:\n  khw mirror serve %s --listen 0.0.0.0:8080\n", o.Dir, rep.Digest, o.Dir)
	return nil
}
