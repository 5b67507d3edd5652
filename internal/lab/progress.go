// Lab progress and snapshots: which labs were completed and when
// (<state>/labs/progress.json), which tells "drifted" (completed once, its
// check now finds differences) from "not done"; and the snapshots taken
// before a lab runs (the provider snapshots every node "before-<lab id>",
// the state directory is copied to <state>/labs/snapshots/before-<lab id>/),
// which khw lab reset restores.
package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/khw-dev/khw/internal/drill"
	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/termtext"
	"github.com/khw-dev/khw/internal/vm"
)

// Status of a lab in `khw lab list`.
type Status string

const (
	Done    Status = "done"
	NotDone Status = "not done"
	Drifted Status = "drifted" // completed once, its check now finds differences
	Unknown Status = "unknown" // the check itself failed (node unreachable, API down)
)

// LabStatus is one row of `khw lab list`.
type LabStatus struct {
	ID     string     `json:"id"`
	Title  string     `json:"title"`
	Status Status     `json:"status"`
	Detail string     `json:"detail,omitempty"`
	DoneAt *time.Time `json:"doneAt,omitempty"`
}

// Progress is <state>/labs/progress.json: lab id → when it was completed.
type Progress map[string]time.Time

func progressPath(d state.Dir) string { return filepath.Join(d.Root, "labs", "progress.json") }

// LoadProgress reads the progress file (empty when missing). Errors,
// naming the file and saying to delete it: it is not a JSON object of lab
// IDs to times (a JSON null too, which would leave no map to record in).
func LoadProgress(d state.Dir) (Progress, error) {
	data, err := os.ReadFile(progressPath(d))
	if errors.Is(err, fs.ErrNotExist) {
		return Progress{}, nil
	}
	if err != nil {
		return nil, err
	}
	p := Progress{}
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%s: %w (delete it to start the progress over)", progressPath(d), err)
	}
	if p == nil {
		return nil, fmt.Errorf("%s holds null, not the labs done and when (delete it to start the progress over)", progressPath(d))
	}
	return p, nil
}

// Save writes the progress file atomically (0600, directory 0700).
func (p Progress) Save(d state.Dir) error {
	if err := fsutil.EnsureDir(filepath.Dir(progressPath(d))); err != nil {
		return err
	}
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(progressPath(d), append(data, '\n'), fsutil.SecretMode)
}

// MarkDone records lab id as completed now.
func MarkDone(d state.Dir, id string) error {
	p, err := LoadProgress(d)
	if err != nil {
		return err
	}
	p[id] = time.Now().UTC()
	return p.Save(d)
}

// SnapshotName is the provider snapshot taken before lab id.
func SnapshotName(id string) string { return "before-" + id }

func stateSnapshotDir(d state.Dir, id string) string {
	return filepath.Join(d.Root, "labs", "snapshots", SnapshotName(id))
}

// stateExcludes are the parts of the state directory a lab snapshot does not
// copy: the node roots and provider data (snapshotted by the provider), the
// lab snapshots and progress themselves, drill reports, logs, the kubectl
// binary, and the cluster lock file: khw lab reset holds the lock while it
// restores, and an rsync that replaced .lock (a new inode) would let another
// khw take a fresh lock in the middle of the restore.
var stateExcludes = []string{"/nspawn", "/libvirt", "/labs", "/drills", "/logs", "/bin", "/" + state.LockFile}

// SnapshotState copies the state directory (certificates, kubeconfigs,
// encryption config, rendered files, cluster.yaml, SSH keys) to
// <state>/labs/snapshots/before-<id>/ with rsync, keeping modes (0600 keys
// stay 0600). The copy is made beside it and renamed into place, so a copy
// cut short (Ctrl-C, a crash) never replaces a whole one: RestoreState,
// which deletes what the copy lacks, only ever reads a whole copy.
func SnapshotState(ctx context.Context, d state.Dir, id string) error {
	return snapshotStateAt(ctx, d, stateSnapshotDir(d, id))
}

func snapshotStateAt(ctx context.Context, d state.Dir, dst string) error {
	tmp := filepath.Join(filepath.Dir(dst), "partial-"+filepath.Base(dst))
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := fsutil.EnsureDir(tmp); err != nil {
		return err
	}
	if err := copyState(ctx, d.Root+"/", tmp+"/"); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// RestoreState puts the state directory back to the copy taken before lab
// id (files made since are removed; the excluded parts are left alone).
func RestoreState(ctx context.Context, d state.Dir, id string) error {
	src := stateSnapshotDir(d, id)
	if _, err := os.Stat(src); err != nil {
		return fmt.Errorf("no copy of the state directory from before lab %s (%s): was the lab run with khw lab?", id, src)
	}
	return rsync(ctx, src+"/", d.Root+"/")
}

// copyState makes a state snapshot's copy (a variable so that a test can
// cut it short).
var copyState = rsync

func rsync(ctx context.Context, src, dst string) error {
	args := []string{"-a", "--delete", "--modify-window=-1"}
	for _, e := range stateExcludes {
		args = append(args, "--exclude="+e)
	}
	return fsutil.Rsync(ctx, append(args, src, dst)...)
}

// DeleteStateSnapshot removes the state copy taken before lab id.
func DeleteStateSnapshot(d state.Dir, id string) error {
	return os.RemoveAll(stateSnapshotDir(d, id))
}

// StateSnapshots lists the labs that have a state copy, sorted.
func StateSnapshots(d state.Dir) []string {
	ents, _ := os.ReadDir(filepath.Join(d.Root, "labs", "snapshots"))
	var ids []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "before-") {
			ids = append(ids, strings.TrimPrefix(e.Name(), "before-"))
		}
	}
	sort.Strings(ids)
	return ids
}

// Source reads files and runs commands for labcheck: on the nodes over SSH
// (as root through sudo, so that 0600 keys and /proc files read right), and
// in the state directory for labcheck.Jumpbox.
type Source struct {
	Pool  *remote.Pool
	Nodes map[string]remote.Node
	State state.Dir
}

// errMissing is the exit status of the read command for a missing file.
const errMissing = 3

// ReadFile returns the file's bytes; a missing file is an error wrapping
// fs.ErrNotExist.
func (s Source) ReadFile(ctx context.Context, node, p string) ([]byte, error) {
	if node == labcheck.Jumpbox {
		clean := path.Clean("/" + p)
		return os.ReadFile(filepath.Join(s.State.Root, filepath.FromSlash(clean)))
	}
	cl, err := s.client(ctx, node)
	if err != nil {
		return nil, err
	}
	q := "'" + strings.ReplaceAll(p, "'", `'\''`) + "'"
	out, _, err := cl.Run(ctx, fmt.Sprintf("[ -e %s ] || exit %d; cat %s", q, errMissing, q), remote.RunOptions{Sudo: true})
	var ce *remote.CommandError
	if errors.As(err, &ce) && ce.ExitCode == errMissing {
		return nil, fmt.Errorf("%s: %s: %w", node, p, fs.ErrNotExist)
	}
	return out, err
}

// Run runs shell on node as root and returns its stdout.
func (s Source) Run(ctx context.Context, node, shell string) (string, error) {
	cl, err := s.client(ctx, node)
	if err != nil {
		return "", err
	}
	out, _, err := cl.Run(ctx, shell, remote.RunOptions{Sudo: true})
	return string(out), err
}

func (s Source) client(ctx context.Context, node string) (*remote.Client, error) {
	n, ok := s.Nodes[node]
	if !ok {
		return nil, fmt.Errorf("%q is not a node of this cluster", node)
	}
	return s.Pool.Get(ctx, n)
}

// RecordRun marks as done each lab whose step khw up found clean or
// applied in rep (khw lab list tells "drifted" from "not done" by it). A
// dry run's report records nothing.
func RecordRun(d state.Dir, rep *steps.Report, dryRun bool) error {
	if dryRun || rep == nil {
		return nil
	}
	for _, s := range rep.Steps {
		if s.Err == nil && s.Skipped == "" && (s.Clean || s.Applied) {
			if err := MarkDone(d, s.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

// Down destroys the cluster's machines (nodeplan.Down) and then what
// described them: the lab progress and snapshots (<state>/labs) and an
// active drill (its reports stay). It returns one line per thing removed,
// in the order removed; on an error from the machines nothing else is
// removed.
func Down(ctx context.Context, p vm.Provider, d state.Dir, clusterName string) ([]string, error) {
	removed, err := nodeplan.Down(ctx, p, d, clusterName)
	if err != nil {
		return removed, err
	}
	for _, stale := range []string{filepath.Join(d.Root, "labs"), filepath.Join(drill.StoreOf(d).Dir, "active")} {
		if _, serr := os.Stat(stale); serr == nil {
			if rerr := os.RemoveAll(stale); rerr != nil {
				return removed, rerr
			}
			removed = append(removed, stale)
		}
	}
	return removed, nil
}

// WriteList prints rows as khw lab list does: as JSON (indented), or as a
// table LAB, STATUS, DETAIL (DETAIL cut at 110 characters, control
// characters of the nodes' text escaped before the columns are measured).
func WriteList(w io.Writer, rows []LabStatus, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	t := termtext.NewWriter(tw)
	fmt.Fprintln(t, "LAB\tSTATUS\tDETAIL")
	for _, r := range rows {
		detail := r.Detail
		if len(detail) > 110 {
			detail = detail[:110] + "…"
		}
		fmt.Fprintf(t, "%s\t%s\t%s\n", r.ID, r.Status, detail)
	}
	return tw.Flush()
}
