package nodeplan

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/steps"
)

// WantFile is wantFile for the steps that build their own wants from
// StateFile and PlannedStateFile.
type WantFile = wantFile

// wantFile is one file a step puts on a node.
type wantFile struct {
	remote.File
	// What says what the file is and where it comes from, for diffs:
	// "etcd binary v3.7.3", "cluster CA certificate (D/pki/ca.pem)".
	What string
	// Src is the file on the jumpbox a learner would copy (shown by
	// Commands): a path under the state directory or the download cache.
	Src string
	// Fetch, if set, is the shell that puts Src on the jumpbox (a download
	// and an extraction), shown by Commands before the copy.
	Fetch string
	// origin says where the content comes from, for References.
	origin fileOrigin

	sum string // hex SHA-256 of the content, filled by sumOf
	// load reads the content when Data is nil (a large binary is read from
	// the download cache only when it must be uploaded).
	load func() ([]byte, error)
	mu   sync.Mutex
}

// fileOrigin is where a wantFile's content comes from.
type fileOrigin int

const (
	// fromCatalog: a binary or image of the catalog (the download cache).
	fromCatalog fileOrigin = iota
	// fromTemplate: rendered from templates/ for this node.
	fromTemplate
	// fromState: copied from the state directory (a certificate, a key, a
	// kubeconfig, the encryption config).
	fromState
)

// sumOf returns the hex SHA-256 of the content.
func (f *wantFile) sumOf() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sum == "" {
		s := sha256.Sum256(f.Data)
		f.sum = hex.EncodeToString(s[:])
	}
	return f.sum
}

// ensureData loads Data through load when it is not in memory yet.
func (f *wantFile) ensureData() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Data != nil || f.load == nil {
		return nil
	}
	data, err := f.load()
	if err != nil {
		return err
	}
	f.Data = data
	return nil
}

// WantUnit is one systemd unit a step runs on a node.
type WantUnit struct {
	// Name is the unit, e.g. "etcd.service".
	Name string
	// Deps are the node paths the unit's process reads at start (its binary,
	// unit file, certs, configs). A dep modified after the process started
	// means the process runs with old content: Check reports it and Apply
	// restarts the unit. This is how a crash between "install" and
	// "restart" is still repaired by the next run.
	Deps []string
	// Together marks a unit that cannot report started until its peers on
	// other nodes run (an etcd member of a new cluster): the commands shown
	// for a learner start it without waiting (--no-block). khw itself
	// starts every unit that way and then waits for its health.
	Together bool
}

// NodeWant is what a step wants on one node.
type NodeWant struct {
	Node  config.Node
	Files []*wantFile
	Units []WantUnit
	// Packages are distribution packages the node needs (apt).
	Packages []WantPackage
	// offlineDebs is set when Packages come from the mirror (debs.go);
	// debs is the install worked out for the node in this run, if any.
	OfflineDebs bool
	Debs        *DebPlan
	// DebMirror is the mirror the offline .debs come from (KHW_MIRROR:
	// a directory or an http(s) URL), for the by-hand commands.
	DebMirror string
	// Extras are node state that is neither a file nor a unit (kernel
	// settings, imported images).
	Extras []NodeExtra
	// Downloads is the directory on the jumpbox where the commands put
	// the binaries they download ("": the current directory).
	Downloads string
}

// NodeExtra is a piece of node state checked and fixed by commands.
type NodeExtra struct {
	// Check returns one diff per difference, for node w.Node.
	Check func(ctx context.Context, cl *remote.Client, w *NodeWant) ([]steps.Diff, error)
	// Fix makes the differences go away; it must be idempotent.
	Fix func(ctx context.Context, env *steps.Env, cl *remote.Client, w *NodeWant) error
	// AfterUnits runs Fix once the units are active (an image import needs
	// containerd running); otherwise Fix runs after the files are installed
	// and before the units are (re)started (kernel settings).
	AfterUnits bool
	// Commands is the shell equivalent of Fix.
	Commands func(w *NodeWant) []steps.Command
}

// WantPackage is a distribution package, present when Path exists.
type WantPackage struct {
	Name string // apt package name, e.g. "haproxy"
	Path string // a file it installs, e.g. "/usr/sbin/haproxy"
}

// missingPackages returns the packages whose Path the probe did not find.
func (w *NodeWant) missingPackages(st nodeState) []string {
	var out []string
	for _, p := range w.Packages {
		if !st.Files[p.Path].Present {
			out = append(out, p.Name)
		}
	}
	return out
}

func (w *NodeWant) paths() []string {
	ps := make([]string, 0, len(w.Files))
	for _, f := range w.Files {
		ps = append(ps, f.Path)
	}
	return ps
}

func (w *NodeWant) unitNames() []string {
	us := make([]string, 0, len(w.Units))
	for _, u := range w.Units {
		us = append(us, u.Name)
	}
	return us
}

func (w *NodeWant) File(p string) *wantFile {
	for _, f := range w.Files {
		if f.Path == p {
			return f
		}
	}
	return nil
}

// The wording of the unit diffs (steps.DiffUnit).
const (
	unitNotKnown   = " is not known to systemd"
	unitNotEnabled = " is not enabled"
	unitNotRunning = " is not running"
	unitLoops      = " crash-loops"
)

func RemoteNode(n config.Node) remote.Node {
	return remote.Node{Name: n.Name, Addr: n.IP}
}

func fileMode(m fs.FileMode) uint32 {
	if m == 0 {
		m = 0o644
	}
	return uint32(m.Perm())
}

func orRoot(s string) string {
	if s == "" {
		return "root"
	}
	return s
}

// fileDiff compares one wanted file with what the probe found; ok is true
// when they match.
func fileDiff(node string, f *wantFile, got fileState) (steps.Diff, bool) {
	d := steps.Diff{Node: node, Subject: f.Path, Fix: "install " + f.Path}
	switch {
	case got.Other:
		d.What = f.Path + " is not a regular file (want " + f.What + ")"
		d.Fix = "remove it by hand, then run again"
	case !got.Present:
		d.What = f.Path + " is missing (" + f.What + ")"
	case got.SHA256 != f.sumOf():
		d.What = f.Path + " differs from " + f.What
	case got.Mode != fileMode(f.Mode) || got.Owner != orRoot(f.Owner) || got.Group != orRoot(f.Group):
		d.What = fmt.Sprintf("%s has mode %04o owner %s:%s, want %04o %s:%s", f.Path, got.Mode, got.Owner, got.Group,
			fileMode(f.Mode), orRoot(f.Owner), orRoot(f.Group))
		d.Fix = "chmod/chown " + f.Path
	default:
		return d, true
	}
	if f.origin == fromState && exactCopy(f.Path) && (got.Other || !got.Present || got.SHA256 != f.sumOf()) {
		d.Kind = steps.DiffCopy
		if f.Src != "" {
			d.Fix = fmt.Sprintf("copy %s to %s again (scp, then sudo install -m %04o)", f.Src, f.Path, fileMode(f.Mode))
		}
	}
	return d, false
}

// exactCopy reports whether a node file copied from the state directory
// must be byte for byte the jumpbox's: certificates, keys and the
// encryption config (one key on every control plane). A kubeconfig may be
// a correct variant (file paths instead of embedded certificates), so its
// meaning is graded instead.
func exactCopy(p string) bool {
	return strings.HasSuffix(p, ".pem") || strings.HasSuffix(p, "encryption-config.yaml")
}

// unitDiffs compares the units with the probe. A unit whose dep file is about
// to be replaced (changing) is reported as needing a restart too.
func unitDiffs(w *NodeWant, st nodeState, changing map[string]bool) []steps.Diff {
	var diffs []steps.Diff
	node := w.Node.Name
	for _, u := range w.Units {
		got, ok := st.Units[u.Name]
		if !ok || got.Load == "not-found" || got.Load == "" {
			diffs = append(diffs, steps.Diff{Kind: steps.DiffUnit, Subject: u.Name, Node: node, What: u.Name + unitNotKnown, Fix: "systemctl daemon-reload, enable and start " + u.Name})
			continue
		}
		if got.NeedReload {
			diffs = append(diffs, steps.Diff{Node: node, What: "systemd has not reloaded the changed " + u.Name, Fix: "systemctl daemon-reload"})
		}
		if got.Enabled != "enabled" {
			diffs = append(diffs, steps.Diff{Kind: steps.DiffUnit, Subject: u.Name, Node: node, What: fmt.Sprintf("%s%s (%s)", u.Name, unitNotEnabled, orNone(got.Enabled)), Fix: "systemctl enable " + u.Name})
		}
		if starting(got) {
			diffs = append(diffs, steps.Diff{Node: node, What: fmt.Sprintf("%s is starting (%s/%s)", u.Name, got.Active, got.Sub), Fix: "wait for it"})
			continue
		}
		if got.Active != "active" {
			diffs = append(diffs, steps.Diff{Kind: steps.DiffUnit, Subject: u.Name, Node: node, What: fmt.Sprintf("%s%s (%s/%s)", u.Name, unitNotRunning, got.Active, got.Sub), Fix: "systemctl restart " + u.Name})
			continue
		}
		if crashLooping(got, st.Now) {
			diffs = append(diffs, steps.Diff{Kind: steps.DiffUnit, Subject: u.Name, Node: node,
				What:     fmt.Sprintf("%s%s: systemd restarted it %d times, the last %s ago (it%s; between two crashes it only looks running)", u.Name, unitNotRunning, got.Restarts, st.Now.Sub(got.Started).Round(time.Second), unitLoops),
				Evidence: "systemctl show " + u.Name + ": NRestarts=" + strconv.Itoa(got.Restarts),
				Fix:      "read why it exits: journalctl -u " + u.Name + " -n 30 --no-pager; fix that, then systemctl restart " + u.Name})
			continue
		}
		var stale, replaced []string
		for _, dep := range u.Deps {
			if fst, ok := st.Files[dep]; ok && got.runsOld(fst) {
				stale = append(stale, dep)
			} else if changing[dep] {
				replaced = append(replaced, dep)
			}
		}
		if len(stale) > 0 {
			d := steps.Diff{Node: node, Subject: u.Name,
				What: fmt.Sprintf("%s runs with an old %s (changed after it started or last reloaded)", u.Name, strings.Join(stale, ", ")),
				Fix:  "systemctl restart " + u.Name}
			if slices.ContainsFunc(stale, readOnlyAtStart) {
				d.Kind = steps.DiffStale
				d.What = fmt.Sprintf("%s runs with an old %s: it read the file when it started, and the change has no effect until it restarts", u.Name, strings.Join(stale, ", "))
			}
			diffs = append(diffs, d)
		} else if len(replaced) > 0 {
			diffs = append(diffs, steps.Diff{Kind: steps.DiffFollows, Node: node, Subject: u.Name,
				What: fmt.Sprintf("%s must restart to read khw's %s", u.Name, strings.Join(replaced, ", ")),
				Fix:  "systemctl restart " + u.Name})
		}
	}
	return diffs
}

// readOnlyAtStart reports whether a program reads the file at path only
// when it starts: a unit file (systemd applies ExecStart's flags at start),
// a config file. Certificates, keys and kubeconfigs are not: some programs
// reload them by themselves (the apiserver's serving certificate and
// client CA, https://kubernetes.io/docs/reference/command-line-tools-reference/kube-apiserver/
// --tls-cert-file; etcd reads its certificates at each handshake), so an
// old one in memory is not surely in use.
func readOnlyAtStart(p string) bool {
	base := path.Base(p)
	return !strings.HasSuffix(base, ".pem") && !strings.HasSuffix(base, "kubeconfig")
}

// crashLooping reports a unit that systemd keeps restarting: restarted
// by its Restart= setting at least twice since it was last started by
// hand, the last time within a minute of now (a unit that crashed twice
// long ago and has run since is not looping).
func crashLooping(u unitState, now time.Time) bool {
	return u.Restarts >= 2 && !u.Started.IsZero() && !now.IsZero() && now.Sub(u.Started) < time.Minute
}

// starting reports a unit on its way up (after a boot or a power-on):
// restarting it would only delay it. A unit waiting to be restarted after
// a crash (auto-restart) is not starting.
func starting(u unitState) bool {
	return u.Active == "activating" && u.Sub != "auto-restart"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// CheckNode probes one node and returns its diffs, files first.
func CheckNode(ctx context.Context, m *Machines, w *NodeWant) ([]steps.Diff, nodeState, error) {
	cl, err := m.Pool.Get(ctx, RemoteNode(w.Node))
	if err != nil {
		return nil, nodeState{}, err
	}
	st, err := Probe(ctx, cl, allPaths(w), w.unitNames())
	if err != nil {
		return nil, st, err
	}
	var diffs []steps.Diff
	missing := w.missingPackages(st)
	var planErr error
	if len(missing) > 0 && w.OfflineDebs {
		// Work out the offline install now: the dry-run shows its .debs,
		// and a mirror without them is reported before anything changes.
		_, planErr = m.planDebs(ctx, cl, w, missing)
	}
	for _, p := range missing {
		fix := "apt-get update && apt-get install -y " + p
		switch {
		case planErr != nil:
			fix = planErr.Error()
		case w.OfflineDebs:
			fix = "install " + p + " and the dependencies the node lacks from the mirror's .debs"
		}
		diffs = append(diffs, steps.Diff{Node: w.Node.Name, Subject: PackageSubject(p), What: "package " + p + " is not installed", Fix: fix})
	}
	changing := map[string]bool{}
	for _, f := range w.Files {
		if d, ok := fileDiff(w.Node.Name, f, st.Files[f.Path]); !ok {
			diffs = append(diffs, d)
			// Only new content makes a unit restart; a mode or owner fix
			// does not change what the process read.
			if got := st.Files[f.Path]; !got.Present || got.SHA256 != f.sumOf() {
				changing[f.Path] = true
			}
		}
	}
	for _, x := range w.Extras {
		d, err := x.Check(ctx, cl, w)
		if err != nil {
			return nil, st, err
		}
		diffs = append(diffs, d...)
	}
	for _, d := range unitDiffs(w, st, changing) {
		if d.Kind == steps.DiffUnit && strings.Contains(d.What, unitLoops) {
			// The evidence of a crash loop is why the process exits.
			if last := lastError(ctx, cl, d.Subject); last != "" {
				d.Evidence += "; its journal's last error: " + last
			}
		}
		diffs = append(diffs, d)
	}
	return diffs, st, nil
}

// lastError returns the last line of unit's journal (its last 50 lines)
// that reports an error, "" when none does or it cannot be read.
func lastError(ctx context.Context, cl *remote.Client, unit string) string {
	out, _, err := cl.Run(ctx, "journalctl -u "+quote(unit)+" -n 50 --no-pager -o cat | grep -iE 'error|fail|fatal|invalid|unknown' | tail -n 1", remote.RunOptions{Sudo: true})
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// fixExtras runs the Fix of every extra of w with AfterUnits == after whose
// Check reports a difference.
func fixExtras(ctx context.Context, env *steps.Env, m *Machines, w *NodeWant, after bool) error {
	if len(w.Extras) == 0 {
		return nil
	}
	cl, err := m.Pool.Get(ctx, RemoteNode(w.Node))
	if err != nil {
		return err
	}
	for _, x := range w.Extras {
		if x.AfterUnits != after {
			continue
		}
		d, err := x.Check(ctx, cl, w)
		if err != nil {
			return err
		}
		if len(d) == 0 {
			continue
		}
		if err := x.Fix(ctx, env, cl, w); err != nil {
			return err
		}
	}
	return nil
}

// allPaths is every wanted file plus every unit dep (deps are usually among
// the files; a dep installed by an earlier step is probed for its mtime).
func allPaths(w *NodeWant) []string {
	seen := map[string]bool{}
	var ps []string
	for _, p := range w.paths() {
		if !seen[p] {
			seen[p] = true
			ps = append(ps, p)
		}
	}
	for _, u := range w.Units {
		for _, d := range u.Deps {
			if !seen[d] {
				seen[d] = true
				ps = append(ps, d)
			}
		}
	}
	for _, p := range w.Packages {
		if !seen[p.Path] {
			seen[p.Path] = true
			ps = append(ps, p.Path)
		}
	}
	return ps
}

// CheckNodes runs checkNode on every node in parallel and returns the diffs
// in the order of wants.
func CheckNodes(ctx context.Context, m *Machines, wants []*NodeWant) ([]steps.Diff, error) {
	if err := requireRunning(ctx, m, wants); err != nil {
		return nil, err
	}
	res := make([][]steps.Diff, len(wants))
	errs := steps.Parallel(len(wants), func(i int) error {
		d, _, err := CheckNode(ctx, m, wants[i])
		res[i] = d
		return steps.OnNode(wants[i].Node.Name, err)
	})
	if err := FirstErr(errs); err != nil {
		return nil, err
	}
	var all []steps.Diff
	for _, d := range res {
		all = append(all, d...)
	}
	return all, nil
}

// requireRunning fails at once, naming the node and the fix, when the
// provider says a node of wants is not running: SSH to it would only retry
// until its connect timeout.
func requireRunning(ctx context.Context, m *Machines, wants []*NodeWant) error {
	if m.Provider == nil {
		return nil
	}
	st, err := m.Provider.Status(ctx)
	if err != nil {
		return err
	}
	state := map[string]string{}
	for _, n := range st {
		state[n.Name] = string(n.State)
	}
	for _, w := range wants {
		if s, ok := state[w.Node.Name]; ok && s != "running" {
			return steps.OnNode(w.Node.Name, fmt.Errorf("node %s is %s (provider %s): power it on with khw power on %s, or run khw up from "+labid.Machines, w.Node.Name, s, m.Provider.Name(), w.Node.Name))
		}
	}
	return nil
}

// FirstErr returns the only error (keeping its *NodeError type) or all of
// them joined.
func FirstErr(errs []error) error {
	var failed []error
	for _, e := range errs {
		if e != nil {
			failed = append(failed, e)
		}
	}
	if len(failed) == 1 {
		return failed[0]
	}
	return errors.Join(failed...)
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// PackageSubject is the Subject of the diff that says package name is not
// installed on a node: "package:<name>".
func PackageSubject(name string) string { return "package:" + name }
