package drill

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/state"
)

// Record is the persisted state of one drill: <state>/drills/<id>/drill.json.
type Record struct {
	// ID is "<UTC time>-<kind>[-<count>]", e.g. 20261129-231501-etcd-2; it is
	// also the drill's directory name.
	ID      string   `json:"id"`
	Cluster string   `json:"cluster"`
	Spec    Spec     `json:"spec"`
	Actions []Action `json:"actions"`
	// Applied counts the actions that were performed (a break that failed
	// half-way heals only those).
	Applied int `json:"applied"`
	// ControlPlanes and LB are the node names of cluster.yaml at the time.
	ControlPlanes []string `json:"controlPlanes"`
	LB            string   `json:"lb"`
	Facts         Facts    `json:"facts"`
	// StartedAt: sampling began (a few seconds of baseline); BrokeAt: the
	// break was issued; BreakTook: until every action had returned.
	StartedAt time.Time     `json:"startedAt"`
	BrokeAt   time.Time     `json:"brokeAt"`
	BreakTook time.Duration `json:"breakTookNs"`
	// HealedAt: the heal was issued (nil: still broken); EndedAt: sampling
	// stopped and the report was written.
	HealedAt *time.Time `json:"healedAt,omitempty"`
	EndedAt  *time.Time `json:"endedAt,omitempty"`
	// WatcherPID is the khw process sampling this drill right now (0:
	// none). `khw heal` leaves the report to a live watcher.
	WatcherPID int `json:"watcherPID,omitempty"`
	// Interrupted is true when Ctrl-C cut the drill short (it was healed
	// without watching the recovery).
	Interrupted bool `json:"interrupted,omitempty"`
	// NodePort is the web Service's node port used by the workload signal.
	NodePort int `json:"nodePort,omitempty"`
}

// Store keeps drills under Dir (<state>/drills, 0700):
//
//	Dir/active              the ID of the drill that is broken or being watched
//	Dir/<id>/drill.json     its Record
//	Dir/<id>/samples.jsonl  every sample (JSON lines)
//	Dir/<id>/report.md      the report, for people
//	Dir/<id>/report.json    the report, for scripts
//	Dir/<id>/report.html    the report with its timeline drawn, for a browser
type Store struct{ Dir string }

// ErrNoActive is returned by Active when no drill is active.
var ErrNoActive = errors.New("no drill is active")

func (s Store) dir(id string) string { return filepath.Join(s.Dir, id) }

// SamplesPath is the samples file of drill id.
func (s Store) SamplesPath(id string) string { return filepath.Join(s.dir(id), "samples.jsonl") }

// ReportPaths are the Markdown and JSON report files of drill id.
func (s Store) ReportPaths(id string) (md, js string) {
	return filepath.Join(s.dir(id), "report.md"), filepath.Join(s.dir(id), "report.json")
}

// Save writes rec atomically (0600) into its directory, making it (0700).
func (s Store) Save(rec *Record) error {
	if err := fsutil.EnsureDir(s.dir(rec.ID)); err != nil {
		return err
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(s.dir(rec.ID), "drill.json"), append(data, '\n'), fsutil.SecretMode)
}

// Load reads drill id's Record. Errors: the file cannot be read, is not a
// Record's JSON, or holds one another drill's ID or an Applied outside
// 0..len(Actions) (heal takes Actions[:Applied]); each names the file.
func (s Store) Load(id string) (*Record, error) {
	p := filepath.Join(s.dir(id), "drill.json")
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if rec.ID != id {
		return nil, fmt.Errorf("%s is damaged: it holds drill %s, not %s", p, quoteClip(rec.ID), id)
	}
	if rec.Applied < 0 || rec.Applied > len(rec.Actions) {
		return nil, fmt.Errorf("%s is damaged: applied is %d, not 0 to its %d actions", p, rec.Applied, len(rec.Actions))
	}
	return &rec, nil
}

// MaxIDLen is the longest drill or operation ID, in bytes: the time, the
// kind and a node name (at most 63) fit well below it.
const MaxIDLen = 128

// CheckID says what is wrong with id as a drill's or an operation's ID,
// nil when nothing is. NewID and StartWatch make "<UTC time
// 20060102-150405>-<rest>", the rest of lowercase letters, digits and '-'
// (a kind, a count, a node name, an operation's words), beginning and
// ending with a letter or digit, at most MaxIDLen bytes in all. So an ID
// is one path element of the store: never '/', "..", or anything else
// that would name a file outside it.
func CheckID(id string) error {
	if len(id) > MaxIDLen {
		return fmt.Errorf("is %d bytes, over the %d of an ID", len(id), MaxIDLen)
	}
	if !idRE.MatchString(id) {
		return errors.New("is not an ID khw makes (YYYYMMDD-HHMMSS-kind…: digits, lowercase letters and '-' only)")
	}
	return nil
}

var idRE = regexp.MustCompile(`^[0-9]{8}-[0-9]{6}-[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// quoteClip is s quoted, cut to 80 bytes: an ID read from a damaged file
// may be anything.
func quoteClip(s string) string {
	if len(s) > 80 {
		return fmt.Sprintf("%q… (%d bytes)", s[:80], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// SetActive marks drill id as the active one.
func (s Store) SetActive(id string) error {
	if err := fsutil.EnsureDir(s.Dir); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(s.Dir, "active"), []byte(id+"\n"), fsutil.SecretMode)
}

// ClearActive removes the active mark (no error when there is none).
func (s Store) ClearActive() error {
	err := os.Remove(filepath.Join(s.Dir, "active"))
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

// Active returns the active drill's Record, or an error wrapping
// ErrNoActive. Errors: the active file holds what is not an ID (CheckID),
// which is never used as a path, or the drill's Record cannot be read
// (Load); both name the file and the fix.
func (s Store) Active() (*Record, error) {
	active := filepath.Join(s.Dir, "active")
	data, err := os.ReadFile(active)
	if os.IsNotExist(err) {
		return nil, ErrNoActive
	}
	if err != nil {
		return nil, err
	}
	id := strings.TrimSpace(string(data))
	if err := CheckID(id); err != nil {
		return nil, fmt.Errorf("%s holds %s, which %v: write the ID of the broken drill there (a directory name in %s), or remove it to forget the drill and check the cluster with khw status", active, quoteClip(id), err, s.Dir)
	}
	rec, err := s.Load(id)
	if err != nil {
		return nil, fmt.Errorf("the active drill %s cannot be read: %w (remove %s to forget it)", id, err, active)
	}
	return rec, nil
}

// HTMLPath is drill id's report as a page (report.html).
func (s Store) HTMLPath(id string) string { return filepath.Join(s.dir(id), "report.html") }

// WriteReport writes the Markdown, JSON and HTML reports of rep; samples
// are the drill's (for the HTML report's picture).
func (s Store) WriteReport(rep Report, samples []Sample) (md, js string, err error) {
	page, err := rep.HTML(samples)
	if err != nil {
		return "", "", err
	}
	return s.writeReports(rep.ID, rep, rep.Markdown(), page)
}

// writeReports writes v as id's report.json, markdown as its report.md
// and page as its report.html (each 0600, atomic) and returns the paths
// of the first two.
func (s Store) writeReports(id string, v any, markdown string, page []byte) (md, js string, err error) {
	md, js = s.ReportPaths(id)
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", "", err
	}
	if err := fsutil.WriteFileAtomic(js, append(data, '\n'), fsutil.SecretMode); err != nil {
		return "", "", err
	}
	if err := fsutil.WriteFileAtomic(md, []byte(markdown), fsutil.SecretMode); err != nil {
		return "", "", err
	}
	if err := fsutil.WriteFileAtomic(s.HTMLPath(id), page, fsutil.SecretMode); err != nil {
		return "", "", err
	}
	return md, js, nil
}

// NewID is the ID of a drill started at t.
func NewID(t time.Time, spec Spec, actions []Action) string {
	id := t.UTC().Format("20060102-150405") + "-" + string(spec.Kind)
	switch spec.Kind {
	case KindEtcd, KindAPIServer:
		id += fmt.Sprintf("-%d", len(actions))
	case KindLB:
	default:
		if len(actions) > 0 {
			id += "-" + actions[0].Node
		}
	}
	return id
}

// ProcessAlive reports whether pid is a running process (signal 0).
func ProcessAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// ExplainLocked adds to err, when it says that d's lock is held by the khw
// break watching the active drill, how to end that drill; other errors
// are returned as they are.
func ExplainLocked(d state.Dir, err error) error {
	var le *state.LockedError
	if !errors.As(err, &le) || le.PID == 0 {
		return err
	}
	if rec, aerr := StoreOf(d).Active(); aerr == nil && rec.WatcherPID == le.PID {
		return fmt.Errorf("%w; it is the khw break of drill %s (%s), watching the cluster until it is healed: end the drill with khw heal (from any shell) or Ctrl-C in its shell, then run this again", err, rec.ID, rec.Spec.CommandLine())
	}
	return err
}
