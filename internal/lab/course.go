package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/vm"
)

// Course is the labs of one open cluster: what khw lab list, run, check and
// reset work on. The caller owns the session and the step environment and
// closes them (Close, for a Course from Open).
type Course struct {
	S   *cluster.Session
	Env *steps.Env
	// Steps are khw up's steps (Steps) working through S.
	Steps []steps.Step
}

// NewCourse returns the course of session s with step environment env.
func NewCourse(s *cluster.Session, env *steps.Env) *Course {
	return &Course{S: s, Env: env, Steps: Steps(nodeplan.New(s), s.Config)}
}

// Open opens the course of cluster c (state d): its step environment
// (the nodes' logs under <state>/logs) and its session with access
// (cluster.ReadOnly for khw lab list: no SSH key is made when there is
// none yet). Close it when done.
func Open(c *config.Cluster, d state.Dir, access cluster.Access) (*Course, error) {
	env := steps.NewEnv(c, d)
	s, err := cluster.Open(c, d, access, env.NodeLog(""))
	if err != nil {
		env.Close()
		return nil, err
	}
	return NewCourse(s, env), nil
}

// Close closes the step environment and the session.
func (c *Course) Close() {
	c.Env.Close()
	c.S.Close()
}

// List is every lab's live status (List).
//
// A lab with an open hint ladder (khw lab check --hints found mistakes)
// shows how many, not the differences: those would be the answer.
func (c *Course) List(ctx context.Context) ([]LabStatus, error) {
	rows, err := List(ctx, c.Steps, c.Env, c.S.Dir)
	for i, r := range rows {
		if r.Status == Done {
			continue
		}
		if n, ok := openHints(c.S.Dir, r.ID); ok {
			l, _ := Lookup(r.ID)
			rows[i].Detail = fmt.Sprintf("%d %s to find (khw lab hint %02d gives the next hint; khw lab check %02d shows them all)", n, steps.Plural(n, "mistake", "mistakes"), l.Number(), l.Number())
		}
	}
	return rows, err
}

// step is the step of lab l. Errors: l is a Drill.
func (c *Course) step(l Lab) (steps.Step, error) {
	return steps.Lookup(c.Steps, l.ID)
}

// Status checks lab l's step (StepStatus) and returns its status and the
// differences its Check found. Errors: the progress file cannot be read,
// or l is a Drill.
func (c *Course) Status(ctx context.Context, l Lab) (LabStatus, []steps.Diff, error) {
	prog, err := LoadProgress(c.S.Dir)
	if err != nil {
		return LabStatus{}, nil, err
	}
	s, err := c.step(l)
	if err != nil {
		return LabStatus{}, nil, err
	}
	st, diffs := StepStatus(ctx, s, c.Env, prog)
	if st.Status == Done {
		// A later khw up need not run this check again (steps.SkipWhenUnchanged).
		_ = c.Env.Passed(s)
	}
	return st, diffs, nil
}

// EarlierNotDone returns the labs before l that are not done (their step's
// Check finds differences or fails, or, for a Test, no pass is recorded);
// a drifted lab counts as done. Unless all, it stops at the first one: the
// state the later ones read was not made yet.
func (c *Course) EarlierNotDone(ctx context.Context, l Lab, all bool) ([]string, error) {
	prog, err := LoadProgress(c.S.Dir)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, s := range c.Steps {
		if s.ID() >= l.ID {
			break
		}
		if byID(s.ID()).Kind == Test {
			if _, ok := prog[s.ID()]; !ok {
				missing = append(missing, s.ID())
			}
			continue
		}
		st, _ := StepStatus(ctx, s, c.Env, prog)
		if st.Status == NotDone || st.Status == Unknown {
			missing = append(missing, s.ID())
			if !all {
				break
			}
		}
	}
	return missing, nil
}

// Apply runs lab l's step through khw up's runner (Check, Apply, Check),
// printing its step line to out.
func (c *Course) Apply(ctx context.Context, l Lab, out io.Writer) error {
	_, err := steps.NewRunner(c.Env, out).Run(ctx, c.Steps, steps.Options{From: l.ID, Until: l.ID})
	return err
}

// Commands are the shell commands that stand for applying diffs of lab l's
// step (nil for a Drill).
func (c *Course) Commands(l Lab, diffs []steps.Diff) []steps.Command {
	s, err := c.step(l)
	if err != nil {
		return nil
	}
	return s.Commands(c.Env, diffs)
}

// Snapshot is what TakeSnapshot took.
type Snapshot struct {
	// Name is the snapshot's name, "before-<lab id>".
	Name string
	// Nodes is true when every node was snapshotted too (not only the
	// state directory).
	Nodes bool
	// NoNodeSupport is true when the provider cannot snapshot nodes: khw
	// lab reset will not be possible.
	NoNodeSupport bool
	// Freeze is how long the nodes were paused for the final pass (0 when
	// the provider does not pause them).
	Freeze time.Duration
	// Took is the wall time of the whole snapshot.
	Took time.Duration
}

// TakeSnapshot snapshots every node (unless l makes the nodes, or the
// provider cannot) and the state directory before lab l changes anything.
func (c *Course) TakeSnapshot(ctx context.Context, l Lab) (Snapshot, error) {
	snap := Snapshot{Name: SnapshotName(l.ID), Nodes: !l.MakesNodes}
	t0 := time.Now()
	if snap.Nodes {
		err := c.S.Provider.Snapshot(ctx, snap.Name)
		switch {
		case errors.Is(err, vm.ErrNotSupported):
			snap.Nodes, snap.NoNodeSupport = false, true
		case err != nil:
			return snap, fmt.Errorf("snapshot before lab %s: %w", l.ID, err)
		}
	}
	if err := SnapshotState(ctx, c.S.Dir, l.ID); err != nil {
		return snap, fmt.Errorf("snapshot of the state directory before lab %s: %w", l.ID, err)
	}
	if f, ok := c.S.Provider.(interface{ LastFreeze() time.Duration }); ok && snap.Nodes {
		snap.Freeze = f.LastFreeze()
	}
	snap.Took = time.Since(t0)
	return snap, nil
}

// Grade is what khw lab check found for one lab.
type Grade struct {
	// Status is the step's own Check (Unknown when it failed).
	Status LabStatus
	// Mistakes are the step's unit-state differences (a unit not running
	// is a mistake whatever the files say), the settings of the step's
	// files that break, weaken or disagree (grade.Judge) and the detectors'
	// findings, sorted by lab.
	Mistakes []labcheck.Mistake
	// Variants are the settings in which the step's files differ from
	// khw's reference in a way a rule knows to work, each with what the
	// setting does and why the change is harmless: information.
	Variants []grade.Finding
	// NotJudged are the other settings that differ, which no rule knows:
	// each with what the setting does; the lab's live tryout decides.
	NotJudged []grade.Finding
	// Differences are the step's other differences from khw's reference
	// (a binary, a file's mode): information when the lab has detectors (a
	// hand-made variant may differ), the problems themselves when it has
	// none.
	Differences []steps.Diff
	// Detectors is how many detectors ran.
	Detectors int
	// Warnings are what could not be checked (no API client, a detector
	// that failed), one line each.
	Warnings []string
}

// dropJudgedVariants leaves out the variants and the settings not judged
// whose setting a mistake is about (same node and Subject): a setting is
// either a mistake or not, never both.
func (g *Grade) dropJudgedVariants() {
	judged := map[[2]string]bool{}
	for _, m := range g.Mistakes {
		if m.Subject != "" {
			judged[[2]string{m.Node, m.Subject}] = true
		}
	}
	drop := func(v grade.Finding) bool { return judged[[2]string{v.Node, v.Subject}] }
	g.Variants = slices.DeleteFunc(g.Variants, drop)
	g.NotJudged = slices.DeleteFunc(g.NotJudged, drop)
}

// Pass reports whether the lab passes: no mistake, the step's Check ran,
// and for a lab without detectors no unexplained difference either.
func (g *Grade) Pass() bool {
	return len(g.Mistakes) == 0 && g.Status.Status != Unknown && (g.Detectors > 0 || len(g.Differences) == 0)
}

// Grade grades lab l on the live cluster: the step's own Check; the
// step's files that differ from khw's reference, read from the nodes and
// judged setting by setting (grade.Judge); then the lab's detectors over
// SSH and the API. It records the lab as done when it passes. Errors: a
// node is not running (except for the lab that makes the nodes, whose
// grading is exactly that: nothing on a node can be read, and waiting for
// SSH would take minutes per node); l is a Drill (see DrillDone); the
// progress file cannot be read or written.
func (c *Course) Grade(ctx context.Context, l Lab) (*Grade, error) {
	if !l.MakesNodes {
		if err := c.nodesRunning(ctx, l); err != nil {
			return nil, err
		}
	}
	st, diffs, err := c.Status(ctx, l)
	if err != nil {
		return nil, err
	}
	g := &Grade{Status: st}
	src := Source{Pool: c.S.Pool, Nodes: map[string]remote.Node{}, State: c.S.Dir}
	for _, n := range c.S.Config.Nodes {
		src.Nodes[n.Name] = remote.Node{Name: n.Name, Addr: n.IP}
	}
	diffs, err = c.judgeFiles(ctx, l, diffs, src, g)
	if err != nil {
		g.Warnings = append(g.Warnings, "the step's files could not be compared setting by setting: "+err.Error())
	}
	diffs, err = applyExcuses(ctx, l, diffs, src, g)
	if err != nil {
		g.Warnings = append(g.Warnings, "a required node setting could not be judged: "+err.Error())
	}
	detectors := l.Detectors()
	g.Detectors = len(detectors)
	if len(detectors) > 0 {
		// Before the load balancer's lab, the API is asked on the first
		// control plane directly: there is no lb to go through yet.
		server := ""
		if cps := c.S.Config.ControlPlanes(); l.ID < labid.LB && len(cps) > 0 {
			port := c.S.Config.Kubernetes.APIServerPort
			if port == 0 {
				port = health.DefaultAPIServerPort
			}
			server = "https://" + net.JoinHostPort(cps[0].IP, strconv.Itoa(port))
		}
		cs, cerr := c.S.ClientsetVia(server)
		if cerr != nil {
			g.Warnings = append(g.Warnings, fmt.Sprintf("no API client (%v): the checks of API objects are skipped", cerr))
		}
		live := &labcheck.Live{Target: c.S.Target(), AdminKubeconfig: c.S.AdminKubeconfig(), DialFrom: c.S.DialFrom}
		if admin, aerr := c.S.AdminRESTConfigVia(server); aerr == nil {
			live.Admin = admin
		}
		ms, err := labcheck.CheckLive(ctx, detectors, c.S.Config, src, cs, live, time.Now())
		if err != nil {
			g.Warnings = append(g.Warnings, err.Error())
		}
		g.Mistakes = append(g.Mistakes, ms...)
	}
	g.addStepDiffs(l, diffs)
	g.dropJudgedVariants()
	if g.Pass() {
		if err := MarkDone(c.S.Dir, l.ID); err != nil {
			return g, err
		}
	}
	return g, nil
}

// judgeFiles reads from the nodes each file of l's step whose content the
// step's Check found different, judges the step's files with grade.Judge
// (the unchanged ones are their own reference), adds the findings to g,
// and returns the differences it did not explain. A step without
// references (steps.Referencer) or without such differences is left as
// it is.
func (c *Course) judgeFiles(ctx context.Context, l Lab, diffs []steps.Diff, src labcheck.Source, g *Grade) ([]steps.Diff, error) {
	key := func(node, p string) string { return node + "\x00" + p }
	differs := map[string]bool{}
	for _, d := range diffs {
		if d.Kind == steps.DiffContent && d.Node != "" && strings.HasPrefix(d.Subject, "/") {
			differs[key(d.Node, d.Subject)] = true
		}
	}
	s, err := c.step(l)
	if err != nil || len(differs) == 0 {
		return diffs, err
	}
	r, ok := s.(steps.Referencer)
	if !ok {
		return diffs, nil
	}
	refs, err := r.References(ctx, c.Env)
	if err != nil {
		return diffs, err
	}
	explained := map[string]bool{}
	var files []grade.File
	for _, ref := range refs {
		n, _ := c.S.Config.Node(ref.Node)
		f := grade.File{Lab: l.ID, Node: n, Path: ref.Path, Input: ref.Input, Ref: ref.Data, Got: ref.Data, Source: ref.Source}
		if k := key(ref.Node, ref.Path); differs[k] {
			data, err := src.ReadFile(ctx, ref.Node, ref.Path)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				f.Got, f.Missing = nil, true
			case err != nil:
				return diffs, err
			default:
				f.Got = data
			}
			// A file whose content is khw's differs in its mode or owner:
			// that difference stays as the step said it.
			explained[k] = f.Missing || !bytes.Equal(f.Got, f.Ref)
		}
		files = append(files, f)
	}
	found, err := grade.Judge(c.S.Config, files)
	if err != nil {
		return diffs, err
	}
	for _, f := range found {
		switch {
		case f.Mistake():
			g.Mistakes = append(g.Mistakes, f)
		case f.Kind == grade.NotJudged:
			g.NotJudged = append(g.NotJudged, f)
		default:
			g.Variants = append(g.Variants, f)
		}
	}
	var rest []steps.Diff
	for _, d := range diffs {
		if d.Kind != steps.DiffContent || !explained[key(d.Node, d.Subject)] {
			rest = append(rest, d)
		}
	}
	return rest, nil
}

// nodesRunning returns an error naming the nodes the provider reports as
// not running, and how to bring them up. A provider that cannot say is no
// error: the step's Check then names what it cannot reach.
func (c *Course) nodesRunning(ctx context.Context, l Lab) error {
	st, err := c.S.Provider.Status(ctx)
	if err != nil {
		return nil
	}
	var down, names []string
	absent := false
	for _, n := range st {
		if n.State != vm.StateRunning {
			down = append(down, n.Name+" is "+string(n.State))
			names = append(names, n.Name)
			absent = absent || n.State == vm.StateAbsent
		}
	}
	if len(down) == 0 {
		return nil
	}
	fix := "power them on: khw power on " + strings.Join(names, " ")
	if absent {
		for _, m := range catalogue {
			if m.MakesNodes {
				fix = "create them: khw lab " + m.ID + " (or khw up --until " + m.ID + ")"
			}
		}
	}
	return fmt.Errorf("lab %s cannot be graded while nodes are not running (%s): %s", l.ID, strings.Join(down, ", "), fix)
}

// addStepDiffs adds the differences the step's own Check found: what must
// run and does not (a machine, a unit), or runs with an old file it reads
// only at start, is a mistake whatever the files say; the rest are
// Differences. Mistakes end sorted by lab.
func (g *Grade) addStepDiffs(l Lab, diffs []steps.Diff) {
	var down []labcheck.Mistake // a machine or unit not running: the cause of the others, so first
	for _, d := range diffs {
		switch d.Kind {
		case steps.DiffFollows:
			continue
		case steps.DiffRequired:
			g.Mistakes = append(g.Mistakes, labcheck.Mistake{Lab: l.ID, Node: d.Node, Kind: grade.Breaks, Subject: d.Subject,
				What: d.What, Evidence: d.Evidence, Fix: d.Fix})
			continue
		case steps.DiffUnit:
			m := labcheck.Mistake{Lab: l.ID, Node: d.Node, What: d.What, Evidence: d.Evidence, Fix: d.Fix}
			if m.Evidence == "" {
				m.Evidence = "systemctl show " + d.Subject + " on " + d.Node + " (khw status shows every unit)"
			}
			if !strings.Contains(m.Fix, "journalctl") {
				m.Fix += " (and read why it stopped: journalctl -u " + d.Subject + " on the node)"
			}
			down = append(down, m)
			continue
		case steps.DiffCopy:
			g.Mistakes = append(g.Mistakes, labcheck.Mistake{Lab: l.ID, Node: d.Node, Subject: d.Subject, What: d.What,
				Evidence: "sha256sum " + d.Subject + " on " + d.Node + " and of the jumpbox's file", Fix: d.Fix})
			continue
		case steps.DiffStale:
			down = append(down, labcheck.Mistake{Lab: l.ID, Node: d.Node, What: d.What,
				Evidence: "systemctl show " + d.Subject + " on " + d.Node + ": it started (or was last reloaded) before the file's last change",
				Fix:      d.Fix})
			continue
		case steps.DiffMachineAbsent, steps.DiffMachineStopped:
			down = append(down, labcheck.Mistake{Lab: l.ID, Node: d.Node, What: d.What,
				Evidence: "the provider's state of " + d.Node + " (khw status, NODES)", Fix: d.Fix})
			continue
		}
		g.Differences = append(g.Differences, d)
	}
	g.Mistakes = append(down, g.Mistakes...)
	sort.SliceStable(g.Mistakes, func(i, j int) bool { return g.Mistakes[i].Lab < g.Mistakes[j].Lab })
}

// applyExcuses moves the step's required-setting differences that lab l excuses
// on their node (Lab.excuse) to g's variants, and returns the others.
func applyExcuses(ctx context.Context, l Lab, diffs []steps.Diff, src labcheck.Source, g *Grade) ([]steps.Diff, error) {
	if l.excuse == nil {
		return diffs, nil
	}
	var out []steps.Diff
	var errs []error
	for _, d := range diffs {
		if d.Kind == steps.DiffRequired {
			v, ok, err := l.excuse(ctx, d, src)
			if err != nil {
				errs = append(errs, err)
			}
			if ok {
				g.Variants = append(g.Variants, v)
				continue
			}
		}
		out = append(out, d)
	}
	return out, errors.Join(errs...)
}

// DrillDone reports whether a drill passed its verdict since the last reset
// (the progress record of a Drill lab).
func (c *Course) DrillDone(l Lab) (bool, error) {
	prog, err := LoadProgress(c.S.Dir)
	if err != nil {
		return false, err
	}
	_, done := prog[l.ID]
	return done, nil
}

// CanReset reports whether lab l has something to reset to: a Drill and
// the lab that makes the nodes always do; another lab only once khw lab ran
// it (its snapshot of the state directory exists). Otherwise the error says
// so and names the labs that can be reset.
func (c *Course) CanReset(l Lab) error {
	if l.Kind == Drill || l.MakesNodes {
		return nil
	}
	have := StateSnapshots(c.S.Dir)
	for _, id := range have {
		if id == l.ID {
			return nil
		}
	}
	can := "none yet (khw lab NN takes a snapshot before it changes anything)"
	if len(have) > 0 {
		can = strings.Join(have, ", ")
	}
	return fmt.Errorf("lab %s was never run with khw lab, so there is no snapshot from before it to go back to; labs that can be reset: %s", l.ID, can)
}

// Reset puts the nodes and the state directory back to the snapshot taken
// before lab l, deletes the later labs' snapshots and marks l and every
// later lab not done. For the lab that makes the nodes it destroys them; a
// Drill changes nothing on the nodes and is only marked not done. say
// receives one line per thing done (it may be nil). The returned
// warning, when not nil, is something that went wrong without failing the
// reset (the clocks of libvirt nodes could not be set).
func (c *Course) Reset(ctx context.Context, l Lab, say func(format string, args ...any)) (warning, err error) {
	if say == nil {
		say = func(string, ...any) {}
	}
	p := c.S.Provider
	switch {
	case l.Kind == Drill:
		say("Lab %d changes nothing on the nodes (every drill heals what it broke): it is only marked not done.", l.Number())
	case l.MakesNodes:
		say("Before lab %s there were no machines: removing them.", l.ID)
		if err := p.Destroy(ctx); err != nil {
			return nil, err
		}
	default:
		name := SnapshotName(l.ID)
		say("Reverting every node to snapshot %q…", name)
		if err := p.Revert(ctx, name); err != nil {
			if errors.Is(err, vm.ErrNotSupported) {
				return nil, fmt.Errorf("provider %s cannot revert nodes: %w", p.Name(), err)
			}
			return nil, fmt.Errorf("%w (a lab's snapshot is taken when khw lab runs it)", err)
		}
		if p.Name() == config.ProviderLibvirt {
			// A libvirt snapshot of a running VM holds its memory, so the
			// reverted guest's clock reads the snapshot's time. Certificates
			// issued from now on (backdated only 5 minutes) would be "not yet
			// valid" there, and leases and tokens would look too young.
			warning = c.syncClocks(ctx, say)
		}
	}
	if l.Kind != Drill {
		if err := RestoreState(ctx, c.S.Dir, l.ID); err != nil {
			return warning, err
		}
		// cluster.yaml is back to what it was (lab 15 changes its
		// Kubernetes release): the checks that follow read that one, and
		// new machines, whose artifact cache holds no other release.
		fresh, _, err := config.Load(c.S.Dir.ConfigPath())
		if err != nil {
			return warning, fmt.Errorf("the restored %s: %w", c.S.Dir.ConfigPath(), err)
		}
		*c.S.Config = *fresh
		c.Steps = Steps(nodeplan.New(c.S), c.S.Config)
	}
	// Later labs' snapshots describe a future that no longer exists.
	for _, later := range From(l.ID)[1:] {
		_ = p.DeleteSnapshot(ctx, SnapshotName(later.ID))
		_ = DeleteStateSnapshot(c.S.Dir, later.ID)
	}
	prog, err := LoadProgress(c.S.Dir)
	if err != nil {
		return warning, err
	}
	for k := range prog {
		if k >= l.ID {
			delete(prog, k)
		}
	}
	return warning, prog.Save(c.S.Dir)
}

// syncClocks sets the clock of every running node to the jumpbox's (UTC,
// whole seconds) over SSH with `date -u -s @<unix seconds>`, through a new
// SSH pool: connections opened before a revert are dead. Nodes that do not
// answer are named in the error; the others are set.
func (c *Course) syncClocks(ctx context.Context, say func(format string, args ...any)) error {
	s, err := cluster.Open(c.S.Config, c.S.Dir, cluster.ReadWrite, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := s.Provider.Status(ctx)
	if err != nil {
		return err
	}
	var nodes []remote.Node
	for _, n := range st {
		if n.State == vm.StateRunning {
			nodes = append(nodes, remote.Node{Name: n.Name, Addr: n.IP.String()})
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var behind []string
	err = s.Pool.ForEach(cctx, nodes, 0, func(ctx context.Context, cl *remote.Client) error {
		now := time.Now()
		o, _, err := cl.Run(ctx, fmt.Sprintf("date -u +%%s; date -u -s @%d >/dev/null", now.Unix()), remote.RunOptions{Sudo: true})
		if err != nil {
			return err
		}
		if was, perr := strconv.ParseInt(strings.TrimSpace(string(o)), 10, 64); perr == nil {
			mu.Lock()
			behind = append(behind, fmt.Sprintf("%s %s", cl.Node.Name, now.Sub(time.Unix(was, 0)).Round(time.Second)))
			mu.Unlock()
		}
		return nil
	})
	sort.Strings(behind)
	if len(behind) > 0 {
		say("Set the nodes' clocks to the jumpbox's (the snapshot had brought them back; they were behind by: %s).", strings.Join(behind, ", "))
	}
	if err != nil {
		return fmt.Errorf("set the clocks after the revert: %w (set them by hand: sudo date -u -s @$(date -u +%%s) on each node)", err)
	}
	return nil
}
