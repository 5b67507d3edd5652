package nodeplan

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/steps"
)

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
		if err := m.installPackages(ctx, cl, w, pkgs, logf, env.Notef); err != nil {
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
			if fst, ok := st.Files[dep]; ok && fst.Present && (g.Started.IsZero() || g.runsOld(fst)) {
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

// downloadWhy explains the download commands of binaries (newBinaryFile).
const downloadWhy = "download the release binaries and check each against the SHA-256 in the command: the one khw verified when it fetched the file, or the one the pinned mirror manifest lists (khw-mirror.json, whose digest is $KHW_MIRROR_DIGEST); " +
	"without a mirror, the project's checksum file over HTTPS. Never a checksum file the mirror serves: whoever can change the mirror can change those too"

// fileCommands is the shell a learner types to put w's files and units in
// place: copy each file from the jumpbox, install it with mode and owner,
// then reload, enable and restart the units. With only != nil, only the
// files named true, the packages when one of them is named true
// (PackageSubject) and the units are shown. A download line in fetched
// (an earlier node's) is not repeated; fileCommands adds its own.
func fileCommands(w *NodeWant, only, fetched map[string]bool) []steps.Command {
	var cmds []steps.Command
	node := w.Node.Name
	if len(w.Packages) > 0 && (only == nil || slices.ContainsFunc(w.Packages, func(p WantPackage) bool { return only[PackageSubject(p.Name)] })) {
		cmds = append(cmds, PackageCommands(w)...)
	}
	var copies, installs, fetches, copied []string
	bases := map[string]int{}
	for _, f := range w.Files {
		if only == nil || only[f.Path] {
			bases[path.Base(f.Path)]++
		}
	}
	for _, f := range w.Files {
		if only != nil && !only[f.Path] {
			continue
		}
		src := f.Src
		if f.Fetch != "" {
			lines := strings.Split(f.Fetch, "\n")
			if w.Downloads != "" {
				lines = append([]string{"mkdir -p " + steps.Quote(w.Downloads), "cd " + steps.Quote(w.Downloads)}, lines...)
				src = path.Join(w.Downloads, f.Src)
			}
			for _, l := range lines {
				if !fetched[l] {
					fetched[l] = true
					fetches = append(fetches, l)
				}
			}
		}
		// Two targets with one base name (/var/lib/kubelet/kubeconfig,
		// /var/lib/kube-proxy/kubeconfig) must not overwrite each other in
		// the home directory they are copied to.
		base := path.Base(f.Path)
		if bases[base] > 1 {
			base = strings.ReplaceAll(strings.TrimPrefix(f.Path, "/"), "/", "_")
		}
		copies = append(copies, fmt.Sprintf(`scp -F "$KHW_SSH_CONFIG" %s %s:%s`, steps.Quote(src), node, steps.Quote(base)))
		installs = append(installs, fmt.Sprintf("sudo install -D -m %04o -o %s -g %s %s %s", fileMode(f.Mode), steps.Quote(orRoot(f.Owner)), steps.Quote(orRoot(f.Group)), steps.Quote(base), steps.Quote(f.Path)))
		copied = append(copied, steps.Quote(base))
	}
	if len(copied) > 0 {
		// The copies in the SSH user's home would outlive the lab there,
		// private keys among them, readable by whoever logs in as it.
		installs = append(installs, "rm -f "+strings.Join(copied, " "))
	}
	if len(fetches) > 0 {
		sh := strings.Join(fetches, "\n")
		cmds = append(cmds, steps.Command{Why: downloadWhy + MirrorCredentialsNote(sh), Shell: sh})
	}
	if len(copies) > 0 {
		cmds = append(cmds,
			steps.Command{Why: fmt.Sprintf("copy %d file(s) to %s", len(copies), node), Shell: strings.Join(copies, "\n")},
			steps.Command{Node: node, Why: "put each file in place with its mode and owner, then remove the copies from your home directory", Shell: strings.Join(installs, "\n")})
	}
	for _, x := range w.Extras {
		if x.Commands != nil && !x.AfterUnits {
			cmds = append(cmds, x.Commands(w)...)
		}
	}
	if len(w.Units) > 0 {
		var wait, together []string
		for _, u := range w.Units {
			if u.Together {
				together = append(together, u.Name)
			} else {
				wait = append(wait, u.Name)
			}
		}
		why := "(re)load the units, enable them at boot and (re)start them"
		sh := "sudo systemctl daemon-reload\nsudo systemctl enable " + strings.Join(w.unitNames(), " ")
		if len(wait) > 0 {
			sh += "\nsudo systemctl restart " + strings.Join(wait, " ")
		}
		if len(together) > 0 {
			why += "; " + strings.Join(together, ", ") + " without waiting (--no-block): it starts only once its peers on the other nodes run too (systemctl status shows when)"
			sh += "\nsudo systemctl restart --no-block " + strings.Join(together, " ")
		}
		cmds = append(cmds, steps.Command{Node: node, Why: why, Shell: sh})
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
	fetched := map[string]bool{}
	for _, w := range wants {
		if diffs == nil {
			cmds = append(cmds, fileCommands(w, nil, fetched)...)
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
			if strings.HasPrefix(d.Subject, PackageSubject("")) {
				only[d.Subject] = true
			}
		}
		if touched {
			cmds = append(cmds, fileCommands(w, only, fetched)...)
		}
	}
	return cmds
}

// RestartIfStartedBefore restarts unit on node when its main process
// started before t (or it is not active), then waits at most timeout for it
// to be active again (waitActive). It reports whether it restarted the
// unit. For a program that reads, once at its start, something that only
// came to be at t (kube-proxy and its Node: it waits at most 30 s for the
// Node's IPs, then exits when they appear, k8s.io/kubernetes
// pkg/proxy/node.go "NodeIPs changed", and systemd restarts it seconds
// later): restarted now, it starts with it, and no later check meets it
// between its exit and its restart. Errors: the node cannot be read, the
// restart fails, or the unit is not active in time (with its journal).
func RestartIfStartedBefore(ctx context.Context, m *Machines, node config.Node, unit string, t time.Time, timeout time.Duration) (bool, error) {
	cl, err := m.Pool.Get(ctx, RemoteNode(node))
	if err != nil {
		return false, err
	}
	st, err := Probe(ctx, cl, nil, []string{unit})
	if err != nil {
		return false, err
	}
	u := st.Units[unit]
	if u.Active == "active" && !u.Started.Before(t) {
		return false, nil
	}
	if _, _, err := cl.Run(ctx, "systemctl restart --no-block "+unit, remote.RunOptions{Sudo: true}); err != nil {
		return false, err
	}
	return true, waitActive(ctx, m, []restarted{{Node: node, Unit: unit, Was: u.Started}}, timeout)
}
