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
	"strings"
	"sync"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/labid"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/steps"
)

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
	// Extras are node state that is neither a file nor a unit (kernel
	// settings, imported images).
	Extras []NodeExtra
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
	return d, false
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
		var stale, replaced []string
		for _, dep := range u.Deps {
			if fst, ok := st.Files[dep]; ok && fst.Present && !got.Started.IsZero() && fst.MTime.After(got.Started) {
				stale = append(stale, dep)
			} else if changing[dep] {
				replaced = append(replaced, dep)
			}
		}
		if len(stale) > 0 {
			diffs = append(diffs, steps.Diff{Node: node, Subject: u.Name,
				What: fmt.Sprintf("%s runs with an old %s (changed after it started)", u.Name, strings.Join(stale, ", ")),
				Fix:  "systemctl restart " + u.Name})
		} else if len(replaced) > 0 {
			diffs = append(diffs, steps.Diff{Kind: steps.DiffFollows, Node: node, Subject: u.Name,
				What: fmt.Sprintf("%s must restart to read khw's %s", u.Name, strings.Join(replaced, ", ")),
				Fix:  "systemctl restart " + u.Name})
		}
	}
	return diffs
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
		diffs = append(diffs, steps.Diff{Node: w.Node.Name, What: "package " + p + " is not installed", Fix: fix})
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
	diffs = append(diffs, unitDiffs(w, st, changing)...)
	return diffs, st, nil
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

// restarted is a unit Apply (re)started and the start time it had before.
type restarted struct {
	Node config.Node
	Unit string
	Was  time.Time
}

// ApplyNode installs the files that differ, reloads systemd when a unit file
// changed, enables units and restarts (without waiting: --no-block, so the
// members of a cluster such as etcd start together) those that are not
// running or run with an old dep. It logs every action to the node's log and
// returns the units it restarted.
func ApplyNode(ctx context.Context, env *steps.Env, m *Machines, stepID string, w *NodeWant) ([]restarted, error) {
	log := env.NodeLog(w.Node.Name)
	logf := func(format string, args ...any) {
		fmt.Fprintf(log, "%s %s: %s\n", time.Now().Format(time.RFC3339), stepID, fmt.Sprintf(format, args...))
	}
	cl, err := m.Pool.Get(ctx, RemoteNode(w.Node))
	if err != nil {
		return nil, err
	}
	st, err := Probe(ctx, cl, allPaths(w), w.unitNames())
	if err != nil {
		return nil, err
	}
	if pkgs := w.missingPackages(st); len(pkgs) > 0 {
		if err := m.installPackages(ctx, cl, w, pkgs, logf); err != nil {
			return nil, err
		}
	}
	reload := false
	var installed []*wantFile
	for _, f := range w.Files {
		if _, ok := fileDiff(w.Node.Name, f, st.Files[f.Path]); ok {
			continue
		}
		if err := f.ensureData(); err != nil {
			return nil, err
		}
		res, err := cl.Install(ctx, f.File)
		if err != nil {
			return nil, err
		}
		installed = append(installed, f)
		logf("installed %s (%s; uploaded=%v)", f.Path, f.What, res.Uploaded)
		if strings.HasPrefix(f.Path, "/etc/systemd/system/") {
			reload = true
		}
	}
	if len(installed) > 0 {
		if _, _, err := cl.Run(ctx, recordSumsScript(installed), remote.RunOptions{Sudo: true}); err != nil {
			return nil, fmt.Errorf("record the installed files' SHA-256 in %s: %w", sumCache, err)
		}
	}
	if err := fixExtras(ctx, env, m, w, false); err != nil {
		return nil, err
	}
	if len(w.Units) == 0 {
		return nil, nil
	}
	st, err = Probe(ctx, cl, allPaths(w), w.unitNames())
	if err != nil {
		return nil, err
	}
	for _, u := range w.Units {
		if g := st.Units[u.Name]; g.NeedReload || g.Load != "loaded" {
			reload = true
		}
	}
	if reload {
		if _, _, err := cl.Run(ctx, "systemctl daemon-reload", remote.RunOptions{Sudo: true}); err != nil {
			return nil, err
		}
		logf("systemctl daemon-reload")
		if st, err = Probe(ctx, cl, allPaths(w), w.unitNames()); err != nil {
			return nil, err
		}
	}
	var enable, restart []string
	var out []restarted
	for _, u := range w.Units {
		g := st.Units[u.Name]
		if g.Enabled != "enabled" {
			enable = append(enable, u.Name)
		}
		if starting(g) && !g.Started.IsZero() {
			// On its way up: wait for it instead of restarting it.
			out = append(out, restarted{Node: w.Node, Unit: u.Name})
			continue
		}
		need := g.Active != "active"
		for _, dep := range u.Deps {
			if fst, ok := st.Files[dep]; ok && fst.Present && (g.Started.IsZero() || fst.MTime.After(g.Started)) {
				need = true
			}
		}
		if need {
			restart = append(restart, u.Name)
			out = append(out, restarted{Node: w.Node, Unit: u.Name, Was: g.Started})
		}
	}
	if len(enable) > 0 {
		if _, _, err := cl.Run(ctx, "systemctl enable --quiet "+strings.Join(enable, " "), remote.RunOptions{Sudo: true}); err != nil {
			return nil, err
		}
		logf("systemctl enable %s", strings.Join(enable, " "))
	}
	if len(restart) > 0 {
		if _, _, err := cl.Run(ctx, "systemctl restart --no-block "+strings.Join(restart, " "), remote.RunOptions{Sudo: true}); err != nil {
			return nil, err
		}
		logf("systemctl restart --no-block %s", strings.Join(restart, " "))
	}
	return out, nil
}

// applyNodes runs applyNode on every node named in diffs, in parallel, and
// returns every restarted unit.
func applyNodes(ctx context.Context, env *steps.Env, m *Machines, stepID string, wants []*NodeWant, diffs []steps.Diff) ([]restarted, error) {
	named := map[string]bool{}
	for _, d := range diffs {
		named[d.Node] = true
	}
	var sel []*NodeWant
	for _, w := range wants {
		if named[w.Node.Name] {
			sel = append(sel, w)
		}
	}
	res := make([][]restarted, len(sel))
	errs := steps.Parallel(len(sel), func(i int) error {
		r, err := ApplyNode(ctx, env, m, stepID, sel[i])
		res[i] = r
		return steps.OnNode(sel[i].Node.Name, err)
	})
	if err := FirstErr(errs); err != nil {
		return nil, err
	}
	var all []restarted
	for _, r := range res {
		all = append(all, r...)
	}
	return all, nil
}

// waitActive waits until every restarted unit is active with a new main
// process, polling each node twice a second, at most timeout. On timeout or
// when a unit fails, the error names node and unit and carries the last
// lines of its journal.
func waitActive(ctx context.Context, m *Machines, rs []restarted, timeout time.Duration) error {
	if len(rs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	byNode := map[string][]restarted{}
	var order []string
	for _, r := range rs {
		if _, ok := byNode[r.Node.Name]; !ok {
			order = append(order, r.Node.Name)
		}
		byNode[r.Node.Name] = append(byNode[r.Node.Name], r)
	}
	return FirstErr(steps.Parallel(len(order), func(i int) error {
		return steps.OnNode(order[i], waitNodeActive(ctx, m, byNode[order[i]], timeout))
	}))
}

func waitNodeActive(ctx context.Context, m *Machines, rs []restarted, timeout time.Duration) error {
	node := rs[0].Node
	units := make([]string, len(rs))
	for i, r := range rs {
		units[i] = r.Unit
	}
	var last nodeState
	for {
		cl, err := m.Pool.Get(ctx, RemoteNode(node))
		if err == nil {
			last, err = Probe(ctx, cl, nil, units)
		}
		if err == nil {
			pending := 0
			for _, r := range rs {
				g := last.Units[r.Unit]
				if g.Active == "failed" && g.Started.After(r.Was) {
					return fmt.Errorf("%s failed after its restart: %s", r.Unit, journalTail(ctx, m, node, r.Unit))
				}
				if g.Active != "active" || !g.Started.After(r.Was) {
					pending++
				}
			}
			if pending == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			var states []string
			for _, r := range rs {
				g := last.Units[r.Unit]
				states = append(states, fmt.Sprintf("%s %s/%s", r.Unit, g.Active, g.Sub))
				if g.Active != "active" {
					states[len(states)-1] += ": " + journalTail(context.Background(), m, node, r.Unit)
				}
			}
			return fmt.Errorf("units not active within %v: %s", timeout, strings.Join(states, "; "))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// journalTail returns the last lines of the unit's journal on node, for
// error messages ("" when they cannot be read).
func journalTail(ctx context.Context, m *Machines, node config.Node, unit string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := m.Pool.Get(ctx, RemoteNode(node))
	if err != nil {
		return ""
	}
	out, _, _ := cl.Run(ctx, "journalctl -u "+quote(unit)+" -n 12 --no-pager -o cat", remote.RunOptions{Sudo: true})
	s := strings.TrimSpace(string(out))
	if s == "" {
		return "(its journal is empty)"
	}
	return "journalctl -u " + unit + " says:\n" + s
}

// fileCommands is the shell a learner types to put w's files and units in
// place: copy each file from the jumpbox, install it with mode and owner,
// then reload, enable and restart the units. With only != nil, only the
// files named true and the units are shown.
func fileCommands(w *NodeWant, only map[string]bool) []steps.Command {
	var cmds []steps.Command
	node := w.Node.Name
	if len(w.Packages) > 0 {
		cmds = append(cmds, PackageCommands(w)...)
	}
	var copies, installs, fetches []string
	for _, f := range w.Files {
		if only != nil && !only[f.Path] {
			continue
		}
		if f.Fetch != "" && !slices.Contains(fetches, f.Fetch) {
			fetches = append(fetches, f.Fetch)
		}
		base := path.Base(f.Path)
		copies = append(copies, fmt.Sprintf(`scp -F "$KHW_SSH_CONFIG" %s %s:%s`, f.Src, node, base))
		installs = append(installs, fmt.Sprintf("sudo install -D -m %04o -o %s -g %s %s %s", fileMode(f.Mode), orRoot(f.Owner), orRoot(f.Group), base, f.Path))
	}
	if len(fetches) > 0 {
		cmds = append(cmds, steps.Command{Why: "download the release binaries (khw takes them from its cache or $KHW_MIRROR, checked against the published SHA-256)", Shell: strings.Join(fetches, "\n")})
	}
	if len(copies) > 0 {
		cmds = append(cmds,
			steps.Command{Why: fmt.Sprintf("copy %d file(s) to %s", len(copies), node), Shell: strings.Join(copies, "\n")},
			steps.Command{Node: node, Why: "put each file in place with its mode and owner", Shell: strings.Join(installs, "\n")})
	}
	for _, x := range w.Extras {
		if x.Commands != nil && !x.AfterUnits {
			cmds = append(cmds, x.Commands(w)...)
		}
	}
	if len(w.Units) > 0 {
		names := strings.Join(w.unitNames(), " ")
		cmds = append(cmds, steps.Command{Node: node, Why: "(re)load the units, enable them at boot and (re)start them",
			Shell: "sudo systemctl daemon-reload\nsudo systemctl enable " + names + "\nsudo systemctl restart " + names})
	}
	for _, x := range w.Extras {
		if x.Commands != nil && x.AfterUnits {
			cmds = append(cmds, x.Commands(w)...)
		}
	}
	return cmds
}

// DiffCommands is fileCommands for the nodes and files named in diffs (nil:
// everything).
func DiffCommands(wants []*NodeWant, diffs []steps.Diff) []steps.Command {
	var cmds []steps.Command
	for _, w := range wants {
		if diffs == nil {
			cmds = append(cmds, fileCommands(w, nil)...)
			continue
		}
		only := map[string]bool{}
		touched := false
		for _, d := range diffs {
			if d.Node != w.Node.Name {
				continue
			}
			touched = true
			for _, f := range w.Files {
				if d.Subject == f.Path {
					only[f.Path] = true
				}
			}
		}
		if touched {
			cmds = append(cmds, fileCommands(w, only)...)
		}
	}
	return cmds
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
