package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/vm"
)

// A checkpoint is a snapshot that belongs to no lab (khw challenge's,
// before it injects a fault): the nodes under the provider's snapshot
// name, the state directory under <state>/labs/snapshots/<name>. Lab
// snapshots are named "before-<ID>" (SnapshotName); a checkpoint's name
// must not start with that prefix.
func checkpointDir(d string, name string) string {
	return filepath.Join(d, "labs", "snapshots", name)
}

func checkName(name string) error {
	if name == "" || strings.HasPrefix(name, "before-") || strings.ContainsAny(name, "/.") {
		return fmt.Errorf("checkpoint name %q: a plain name, not a lab snapshot's (before-…)", name)
	}
	return nil
}

// Checkpoint snapshots every node and the state directory under name.
// Errors: the provider cannot snapshot nodes (vm.ErrNotSupported, wrapped:
// a checkpoint that cannot restore the nodes is no checkpoint), or the
// copy failed.
func (c *Course) Checkpoint(ctx context.Context, name string) (Snapshot, error) {
	snap := Snapshot{Name: name, Nodes: true}
	if err := checkName(name); err != nil {
		return snap, err
	}
	t0 := time.Now()
	if err := c.S.Provider.Snapshot(ctx, name); err != nil {
		if errors.Is(err, vm.ErrNotSupported) {
			return snap, fmt.Errorf("provider %s cannot snapshot the nodes: %w", c.S.Provider.Name(), err)
		}
		return snap, err
	}
	if err := snapshotStateAt(ctx, c.S.Dir, checkpointDir(c.S.Dir.Root, name)); err != nil {
		_ = c.S.Provider.DeleteSnapshot(ctx, name)
		return snap, fmt.Errorf("copy of the state directory: %w", err)
	}
	if f, ok := c.S.Provider.(interface{ LastFreeze() time.Duration }); ok {
		snap.Freeze = f.LastFreeze()
	}
	snap.Took = time.Since(t0)
	return snap, nil
}

// RevertCheckpoint puts every node and the state directory back to
// checkpoint name, as Reset does for a lab (the clocks of libvirt nodes
// are set again: the returned warning when that failed). Lab progress is
// left alone: a checkpoint is taken on a cluster whose labs are done.
func (c *Course) RevertCheckpoint(ctx context.Context, name string, say func(format string, args ...any)) (warning, err error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	src := checkpointDir(c.S.Dir.Root, name)
	if _, err := os.Stat(src); err != nil {
		return nil, fmt.Errorf("no copy of the state directory for checkpoint %s (%s)", name, src)
	}
	say("Reverting every node to snapshot %q…", name)
	if err := c.S.Provider.Revert(ctx, name); err != nil {
		return nil, err
	}
	if c.S.Provider.Name() == config.ProviderLibvirt {
		warning = c.syncClocks(ctx, say)
	}
	if err := rsync(ctx, src+"/", c.S.Dir.Root+"/"); err != nil {
		return warning, err
	}
	return warning, nil
}

// DropCheckpoint deletes checkpoint name (nodes and state copy); what is
// already gone is not an error.
func (c *Course) DropCheckpoint(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	err := c.S.Provider.DeleteSnapshot(ctx, name)
	if errors.Is(err, vm.ErrNotSupported) {
		err = nil
	}
	return errors.Join(err, os.RemoveAll(checkpointDir(c.S.Dir.Root, name)))
}
