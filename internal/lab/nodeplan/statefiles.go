package nodeplan

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// StateFile reads a file of the state directory (src relative to it, or
// absolute for a pre-issued kubelet cert) as a wantFile for node path p.
// A missing file is reported with ok=false and no error.
func StateFile(d state.Dir, src, p string, mode fs.FileMode, what string) (*wantFile, bool, error) {
	local := statePath(d, src)
	data, err := os.ReadFile(local)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	wf := &wantFile{What: what, Src: local, origin: fromState}
	wf.Path, wf.Data, wf.Mode = p, data, mode
	return wf, true, nil
}

// statePath is src on the jumpbox: relative to the state directory, or
// absolute as it is.
func statePath(d state.Dir, src string) string {
	if filepath.IsAbs(src) {
		return src
	}
	return filepath.Join(d.Root, filepath.FromSlash(src))
}

// InputWants turns render.Inputs of every node, filtered by keep, into
// wants. A source file that does not exist yet (the workstation half of the
// step has not run) is skipped when skipMissing, else an error.
func InputWants(c *config.Cluster, d state.Dir, keep func(render.Input) bool, skipMissing bool) ([]*NodeWant, error) {
	return eachInput(c, keep, func(n config.Node, in render.Input) (*wantFile, error) {
		wf, ok, err := StateFile(d, in.Source, in.Path, in.Mode, in.What)
		switch {
		case err != nil:
			return nil, err
		case !ok && !skipMissing:
			return nil, fmt.Errorf("%s: %s is missing on the jumpbox (%s)", n.Name, in.Source, in.What)
		}
		return wf, nil
	})
}

// PlannedStateFile is StateFile for the commands of a step: the file need
// not exist yet, and its content is not read.
func PlannedStateFile(d state.Dir, src, p string, mode fs.FileMode, what string) *wantFile {
	wf := &wantFile{What: what, Src: statePath(d, src), origin: fromState}
	wf.Path, wf.Mode = p, mode
	return wf
}

// PlannedInputWants is InputWants for the commands of a step whose
// jumpbox half has not run: every input is kept, with its path on the
// jumpbox and on the node but no content, whether or not it exists yet.
func PlannedInputWants(c *config.Cluster, d state.Dir, keep func(render.Input) bool) ([]*NodeWant, error) {
	return eachInput(c, keep, func(_ config.Node, in render.Input) (*wantFile, error) {
		return PlannedStateFile(d, in.Source, in.Path, in.Mode, in.What), nil
	})
}

// eachInput is one want per node with file's result for each of its
// render.Inputs that keep accepts (a nil file is left out).
func eachInput(c *config.Cluster, keep func(render.Input) bool, file func(config.Node, render.Input) (*wantFile, error)) ([]*NodeWant, error) {
	var wants []*NodeWant
	for _, n := range c.Nodes {
		ins, err := render.Inputs(c, n.Name)
		if err != nil {
			return nil, err
		}
		w := &NodeWant{Node: n}
		for _, in := range ins {
			if !keep(in) {
				continue
			}
			wf, err := file(n, in)
			if err != nil {
				return nil, err
			}
			if wf != nil {
				w.Files = append(w.Files, wf)
			}
		}
		wants = append(wants, w)
	}
	return wants, nil
}

// NotChecked is one diff per node saying its copies of what were not
// compared, because the jumpbox's files are about to change (by cmd).
func NotChecked(c *config.Cluster, what, cmd string) []steps.Diff {
	var diffs []steps.Diff
	for _, n := range c.Nodes {
		diffs = append(diffs, steps.Diff{Node: n.Name, What: what + " not checked: the jumpbox's are about to change", Fix: "copy them after " + cmd})
	}
	return diffs
}

// CopyToNodes installs the wanted state files on every node where they
// differ (the node half of 02 and 03).
func CopyToNodes(ctx context.Context, env *steps.Env, m *Machines, id string, wants []*NodeWant) error {
	nd, err := CheckNodes(ctx, m, wants)
	if err != nil {
		return err
	}
	_, err = applyNodes(ctx, env, m, id, wants, nd)
	return err
}

// HasWorkstationDiff reports whether a diff is about the jumpbox's files.
func HasWorkstationDiff(diffs []steps.Diff) bool {
	for _, d := range diffs {
		if d.Node == "" {
			return true
		}
	}
	return false
}

// NodeOnly returns the node diffs (nil stays nil: the whole step).
func NodeOnly(diffs []steps.Diff) []steps.Diff {
	if diffs == nil {
		return nil
	}
	out := []steps.Diff{}
	for _, d := range diffs {
		if d.Node != "" {
			out = append(out, d)
		}
	}
	return out
}
