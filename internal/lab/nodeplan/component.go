package nodeplan

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/vm"
)

// facts returns the measured render.NodeFacts of node n (render.FactsProbe
// over SSH), once per run.
func (m *Machines) facts(ctx context.Context, n config.Node) (render.NodeFacts, error) {
	m.factsMu.Lock()
	if f, ok := m.factsCache[n.Name]; ok {
		m.factsMu.Unlock()
		return f, nil
	}
	m.factsMu.Unlock()
	cl, err := m.Pool.Get(ctx, RemoteNode(n))
	if err != nil {
		return render.NodeFacts{}, err
	}
	return m.MeasureFacts(ctx, cl, n.Name)
}

// MeasureFacts measures the facts of the node called name through cl
// (render.FactsProbe, which needs no root) and keeps them for the rest of
// the run. 01-machines asks each running node this rather than `true`:
// one round trip proves SSH and saves each later step its own. Errors: the
// command failed (the node cannot be reached), or its output does not
// parse.
func (m *Machines) MeasureFacts(ctx context.Context, cl *remote.Client, name string) (render.NodeFacts, error) {
	out, _, err := cl.Run(ctx, render.FactsProbe, remoteRunNoSudo)
	if err != nil {
		return render.NodeFacts{}, fmt.Errorf("measure node facts: %w", err)
	}
	f, err := render.ParseFacts(out)
	if err != nil {
		return f, err
	}
	m.factsMu.Lock()
	if m.factsCache == nil {
		m.factsCache = map[string]render.NodeFacts{}
	}
	m.factsCache[name] = f
	m.factsMu.Unlock()
	return f, nil
}

// ForgetFacts drops the facts measured so far: after 01-machines made or
// booted nodes, they are measured again.
func (m *Machines) ForgetFacts() {
	m.factsMu.Lock()
	m.factsCache = nil
	m.factsMu.Unlock()
}

// cachedFacts returns facts measured earlier in this run, else the
// provider's defaults (render.DefaultFacts); it never contacts the node.
func (m *Machines) cachedFacts(c *config.Cluster, n config.Node) (render.NodeFacts, error) {
	m.factsMu.Lock()
	f, ok := m.factsCache[n.Name]
	m.factsMu.Unlock()
	if ok {
		return f, nil
	}
	return render.DefaultFacts(c.Provider)
}

// allFacts measures every node's facts in parallel.
func (m *Machines) allFacts(ctx context.Context, c *config.Cluster) (map[string]render.NodeFacts, error) {
	facts := make([]render.NodeFacts, len(c.Nodes))
	errs := steps.Parallel(len(c.Nodes), func(i int) error {
		f, err := m.facts(ctx, c.Nodes[i])
		facts[i] = f
		return steps.OnNode(c.Nodes[i].Name, err)
	})
	out := map[string]render.NodeFacts{}
	for i, n := range c.Nodes {
		if errs[i] == nil {
			out[n.Name] = facts[i]
		}
	}
	return out, FirstErr(errs)
}

// ComponentSpec describes a step that runs systemd services on the nodes of
// one role: binaries from the catalog, rendered files, input files from the
// state directory, and units with the files each one reads at start.
type ComponentSpec struct {
	ID, Title string
	Role      string
	// binaries are catalog artifact names.
	Binaries []string
	// rendered are node paths of render.Node files.
	Rendered []string
	// inputs keeps the render.Inputs the step installs (nil: none).
	Inputs func(render.Input) bool
	Units  []WantUnit
	// packages are apt packages the role needs.
	Packages []WantPackage
	// only, when set, selects the nodes of the role the step handles (e.g.
	// the workers without TLS bootstrap).
	Only func(config.Node) bool
	// extras builds node state checked by commands (kernel settings,
	// images) for one node; nil for none.
	Extras func(n config.Node) []NodeExtra
	// unitsFor, when set, replaces units for one node.
	UnitsFor func(n config.Node) []WantUnit
	// keepFile, when set, chooses which of the files above node n gets
	// (by node path).
	KeepFile func(n config.Node, path string) bool
}

// wants builds what spec wants on each node of its role.
//
// offline builds them without touching the network or the nodes, for
// Commands: binaries without content (unless already fetched in this run)
// and files rendered with facts measured earlier in the run or the
// provider's defaults.
func (m *Machines) ComponentWants(ctx context.Context, env *steps.Env, spec *ComponentSpec, offline bool) ([]*NodeWant, error) {
	c := env.Cluster
	var bins []*wantFile
	var err error
	if !offline {
		// Fail now for a stopped node: measuring its facts over SSH
		// would retry until the connect timeout.
		var mine []*NodeWant
		for _, n := range c.Nodes {
			if n.Role == spec.Role && (spec.Only == nil || spec.Only(n)) {
				mine = append(mine, &NodeWant{Node: n})
			}
		}
		if err := requireRunning(ctx, m, mine); err != nil {
			return nil, err
		}
		// Measure the facts of every node at once; the loop below reads them
		// from the run's cache.
		if len(spec.Rendered) > 0 {
			errs := steps.Parallel(len(mine), func(i int) error {
				_, err := m.facts(ctx, mine[i].Node)
				return steps.OnNode(mine[i].Node.Name, err)
			})
			if err := FirstErr(errs); err != nil {
				return nil, err
			}
		}
	}
	if offline {
		bins, err = m.Art.describe(ctx, env.Cluster, spec.Binaries...)
	} else {
		bins, err = m.Art.binaries(ctx, env, spec.Binaries...)
	}
	if err != nil {
		return nil, err
	}
	var wants []*NodeWant
	for _, n := range c.Nodes {
		if n.Role != spec.Role || (spec.Only != nil && !spec.Only(n)) {
			continue
		}
		w := &NodeWant{Node: n, Units: spec.Units, Packages: spec.Packages, Downloads: filepath.Join(env.State.Root, "downloads")}
		if len(w.Packages) > 0 && m.offlinePackages() {
			w.OfflineDebs = true
			w.DebMirror = m.packageFetcher().Mirror
			m.debMu.Lock()
			w.Debs = m.DebPlans[PlanKey(w)]
			m.debMu.Unlock()
		}
		if spec.UnitsFor != nil {
			w.Units = spec.UnitsFor(n)
		}
		if spec.Extras != nil {
			w.Extras = spec.Extras(n)
		}
		w.Files = append(w.Files, bins...)
		if len(spec.Rendered) > 0 {
			var f render.NodeFacts
			if offline {
				f, err = m.cachedFacts(c, n)
			} else {
				f, err = m.facts(ctx, n)
			}
			if err != nil {
				return nil, steps.OnNode(n.Name, err)
			}
			files, err := render.Node(c, n.Name, f)
			if err != nil {
				return nil, err
			}
			for _, p := range spec.Rendered {
				var found *render.File
				for i := range files {
					if files[i].Path == p {
						found = &files[i]
					}
				}
				if found == nil {
					return nil, fmt.Errorf("%s: render produced no %s (a khw bug)", n.Name, p)
				}
				wf := &wantFile{What: "the file rendered from " + found.Source, Src: filepath.Join(env.State.NodesDir(), n.Name, filepath.FromSlash(p)), origin: fromTemplate}
				wf.Path, wf.Data, wf.Mode = found.Path, found.Data, found.Mode
				w.Files = append(w.Files, wf)
			}
		}
		if spec.Inputs != nil {
			ins, err := render.Inputs(c, n.Name)
			if err != nil {
				return nil, err
			}
			for _, in := range ins {
				if !spec.Inputs(in) {
					continue
				}
				wf, ok, err := StateFile(env.State, in.Source, in.Path, in.Mode, in.What)
				if err != nil {
					return nil, err
				}
				if !ok && offline {
					continue
				}
				if !ok {
					return nil, steps.OnNode(n.Name, fmt.Errorf("%s is missing on the jumpbox (%s): run steps "+labid.PKI+" and "+labid.Kubeconfig+" first (khw up --from 02)", in.Source, in.What))
				}
				w.Files = append(w.Files, wf)
			}
		}
		if spec.KeepFile != nil {
			kept := w.Files[:0:0]
			for _, f := range w.Files {
				if spec.KeepFile(n, f.Path) {
					kept = append(kept, f)
				}
			}
			w.Files = kept
		}
		wants = append(wants, w)
	}
	return wants, nil
}

// RenderState writes D/nodes and D/manifests (render.All) with the measured
// facts, so the files a learner copies by hand are the ones khw installs.
func (m *Machines) RenderState(ctx context.Context, env *steps.Env) error {
	facts, err := m.allFacts(ctx, env.Cluster)
	if err != nil {
		return err
	}
	_, err = render.All(env.Cluster, facts, env.State.Root)
	return err
}

// InputUnder keeps render.Inputs whose node path is under one of dirs.
func InputUnder(dirs ...string) func(render.Input) bool {
	return func(in render.Input) bool {
		for _, d := range dirs {
			if strings.HasPrefix(in.Path, d) {
				return true
			}
		}
		return false
	}
}

// healthCheck is a step's cluster-level check, run once the files and
// units are right: it returns one diff per problem.
type healthCheck func(ctx context.Context, env *steps.Env) ([]steps.Diff, error)

// ComponentStep runs a componentSpec: Check = node files and units, then
// the health check; Apply = install, restart, wait for the units and the
// health check (bounded by wait).
type ComponentStep struct {
	M      *Machines
	Spec   *ComponentSpec
	Health healthCheck
	// wait bounds Apply's wait for the units and the health check.
	Wait time.Duration
	// rolling: when the health check passes before Apply (the cluster is
	// serving), nodes are changed one at a time, each waited for until the
	// whole check passes, so a quorum (etcd) or a ready apiserver behind
	// the load balancer remains. On a cluster that is not serving yet (the
	// first bring-up: etcd members must start together) all nodes change
	// at once.
	Rolling bool
	// BeforeNode, when set, runs in a rolling apply before each node is
	// changed (e.g. hand the etcd leadership to another member); an error
	// stops the apply before that node.
	BeforeNode func(ctx context.Context, env *steps.Env, n config.Node) error
	// AfterNode, when set, runs in a rolling apply once a changed node has
	// passed the whole check (e.g. uncordon a drained worker); an error
	// stops the apply there.
	AfterNode func(ctx context.Context, env *steps.Env, n config.Node) error
	// RollingOnly refuses to change nodes at all when the health check
	// fails before Apply, instead of changing them all at once (an upgrade
	// must never restart every apiserver together, nor a kubelet
	// undrained).
	RollingOnly bool
	// after runs in Apply once the units are active and before the health
	// wait (e.g. apply the RBAC manifest); nil for none.
	After func(ctx context.Context, env *steps.Env) error
	// extraCommands are appended to the shell equivalents.
	ExtraCommands func(env *steps.Env) []steps.Command
}

// Render writes the files the step's commands copy (steps.Renderer).
func (s *ComponentStep) Render(ctx context.Context, env *steps.Env) error {
	return s.M.RenderState(ctx, env)
}

func (s *ComponentStep) ID() string { return s.Spec.ID }

func (s *ComponentStep) Title() string { return s.Spec.Title }

func (s *ComponentStep) Check(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
	wants, err := s.M.ComponentWants(ctx, env, s.Spec, false)
	if err != nil {
		return nil, err
	}
	diffs, err := CheckNodes(ctx, s.M, wants)
	if err != nil || len(diffs) > 0 || s.Health == nil {
		return diffs, err
	}
	return s.Health(ctx, env)
}

// References returns the rendered and copied files of the step on each of
// its nodes (not the binaries).
func (s *ComponentStep) References(ctx context.Context, env *steps.Env) ([]steps.Reference, error) {
	wants, err := s.M.ComponentWants(ctx, env, s.Spec, false)
	if err != nil {
		return nil, err
	}
	return references(wants), nil
}

func references(wants []*NodeWant) []steps.Reference {
	var out []steps.Reference
	for _, w := range wants {
		for _, f := range w.Files {
			if f.origin == fromCatalog || f.Data == nil {
				continue
			}
			out = append(out, steps.Reference{Node: w.Node.Name, Path: f.Path, Input: f.origin == fromState, Data: f.Data, Source: f.Src})
		}
	}
	return out
}

func (s *ComponentStep) Apply(ctx context.Context, env *steps.Env, diffs []steps.Diff) error {
	if err := s.M.RenderState(ctx, env); err != nil {
		return err
	}
	wants, err := s.M.ComponentWants(ctx, env, s.Spec, false)
	if err != nil {
		return err
	}
	nd, err := CheckNodes(ctx, s.M, wants)
	if err != nil {
		return err
	}
	if s.Rolling && s.Health != nil && len(nd) > 0 {
		roll, err := s.rollReady(ctx, env, s.Wait*vm.Slowdown(s.M.Provider))
		if err != nil {
			return err
		}
		if roll {
			// The cluster is serving: change one node at a time, each
			// checked healthy before the next, so it keeps serving.
			return s.rollingApply(ctx, env, wants, nd)
		}
	}
	rs, err := applyNodes(ctx, env, s.M, s.ID(), wants, nd)
	if err != nil {
		return err
	}
	if err := waitActive(ctx, s.M, rs, s.Wait*vm.Slowdown(s.M.Provider)); err != nil {
		return err
	}
	if err := s.fixAfterUnits(ctx, env, wants); err != nil {
		return err
	}
	if s.After != nil {
		if err := s.After(ctx, env); err != nil {
			return err
		}
	}
	// Wait for the whole Check to pass at once: a unit that was active a
	// moment ago may be crash-looping (a controller-manager that started
	// before its apiserver answered), and the health check alone would not
	// see it.
	return WaitHealthy(ctx, env, func(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
		d, err := CheckNodes(ctx, s.M, wants)
		if err != nil || len(d) > 0 || s.Health == nil {
			return d, err
		}
		return s.Health(ctx, env)
	}, s.Wait*vm.Slowdown(s.M.Provider))
}

// WaitProgressEvery is how often a wait that is still going says what it
// waits for (a TCG VM's node may take minutes to turn Ready).
const WaitProgressEvery = 30 * time.Second

// WaitHealthy polls check twice a second until it returns no diff, at most
// timeout; then it fails with the diffs of the last round. While it waits it
// notes what is still missing, when that changes and every
// waitProgressEvery, with the time waited and the bound.
func WaitHealthy(ctx context.Context, env *steps.Env, check healthCheck, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last []steps.Diff
	var lastErr error
	start := time.Now()
	var said string
	var saidAt time.Time
	for {
		last, lastErr = check(ctx, env)
		if lastErr == nil && len(last) == 0 {
			return nil
		}
		if now := time.Since(start); now >= WaitProgressEvery/6 {
			what := waitingFor(last, lastErr)
			if what != said || time.Since(saidAt) >= WaitProgressEvery {
				env.Notef("waiting %s of at most %v for: %s", now.Round(time.Second), timeout, what)
				said, saidAt = what, time.Now()
			}
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("not healthy within %v: %w", timeout, lastErr)
			}
			var ss []string
			for _, d := range last {
				ss = append(ss, d.String())
			}
			return fmt.Errorf("not healthy within %v:\n  %s", timeout, strings.Join(ss, "\n  "))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitingFor is what waitHealthy still waits for: the diffs of the last
// round (the first three, then how many more) or its error.
func waitingFor(diffs []steps.Diff, err error) string {
	if err != nil {
		return err.Error()
	}
	var ss []string
	for i, d := range diffs {
		if i == 3 {
			ss = append(ss, fmt.Sprintf("and %d more", len(diffs)-3))
			break
		}
		ss = append(ss, d.String())
	}
	return strings.Join(ss, "; ")
}

func (s *ComponentStep) Commands(env *steps.Env, diffs []steps.Diff) []steps.Command {
	wants, err := s.M.ComponentWants(context.Background(), env, s.Spec, true)
	var cmds []steps.Command
	if err == nil {
		cmds = DiffCommands(wants, NodeOnly(diffs))
	} else {
		cmds = append(cmds, steps.Command{Shell: "# (shell equivalents unavailable: " + err.Error() + ")"})
	}
	if s.ExtraCommands != nil {
		cmds = append(cmds, s.ExtraCommands(env)...)
	}
	return cmds
}

// fixAfterUnits runs, on every node in parallel, the extras that need the
// units running (image imports).
func (s *ComponentStep) fixAfterUnits(ctx context.Context, env *steps.Env, wants []*NodeWant) error {
	return FirstErr(steps.Parallel(len(wants), func(i int) error {
		return steps.OnNode(wants[i].Node.Name, fixExtras(ctx, env, s.M, wants[i], true))
	}))
}

// rollingApply applies the nodes named in diffs one at a time: install,
// restart, wait for its units and for the whole check to pass.
// rollReady says how Apply changes the nodes of a Rolling step: true to
// roll, one node at a time, when the cluster is healthy; false to change
// them all at once when it is not serving anyway. A RollingOnly step never
// changes them all at once: it waits up to timeout for the cluster to be
// healthy, because the step before it may have just restarted a control
// plane, whose Lease holder then misses its renewals until another
// instance takes the Lease over (within the lease duration, 15 s
// upstream). Error: still not healthy at timeout, naming what is not.
func (s *ComponentStep) rollReady(ctx context.Context, env *steps.Env, timeout time.Duration) (bool, error) {
	hd, err := s.Health(ctx, env)
	if err == nil && len(hd) == 0 {
		return true, nil
	}
	if !s.RollingOnly {
		return false, nil
	}
	if err := WaitHealthy(ctx, env, s.Health, timeout); err != nil {
		return false, fmt.Errorf("the cluster is not healthy, and %s changes nodes only one at a time while it serves: %w", s.ID(), err)
	}
	return true, nil
}

func (s *ComponentStep) rollingApply(ctx context.Context, env *steps.Env, wants []*NodeWant, diffs []steps.Diff) error {
	for _, w := range wants {
		var mine []steps.Diff
		for _, d := range diffs {
			if d.Node == w.Node.Name {
				mine = append(mine, d)
			}
		}
		if len(mine) == 0 {
			continue
		}
		env.Notef("%s: rolling change, one node at a time (the cluster keeps serving)", w.Node.Name)
		if s.BeforeNode != nil {
			if err := s.BeforeNode(ctx, env, w.Node); err != nil {
				return steps.OnNode(w.Node.Name, err)
			}
		}
		rs, err := applyNodes(ctx, env, s.M, s.ID(), []*NodeWant{w}, mine)
		if err != nil {
			return err
		}
		if err := waitActive(ctx, s.M, rs, s.Wait*vm.Slowdown(s.M.Provider)); err != nil {
			return err
		}
		if err := fixExtras(ctx, env, s.M, w, true); err != nil {
			return steps.OnNode(w.Node.Name, err)
		}
		if err := WaitHealthy(ctx, env, func(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
			d, err := CheckNodes(ctx, s.M, []*NodeWant{w})
			if err != nil || len(d) > 0 {
				return d, err
			}
			return s.Health(ctx, env)
		}, s.Wait*vm.Slowdown(s.M.Provider)); err != nil {
			return steps.OnNode(w.Node.Name, err)
		}
		if s.AfterNode != nil {
			if err := s.AfterNode(ctx, env, w.Node); err != nil {
				return steps.OnNode(w.Node.Name, err)
			}
		}
	}
	return nil
}
