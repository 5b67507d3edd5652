package nodeplan

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/components"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/steps"
)

// Distribution packages (the packages a step wants) are installed in one
// of two ways:
//
//   - online (no mirror): the node's own apt, after `apt-get update` once per
//     node and run, since a fresh cloud image has empty /var/lib/apt/lists
//     ("Unable to locate package") and an older node's lists go stale;
//   - offline (a mirror is set): khw reads the node's OS from /etc/os-release
//     and its installed packages from dpkg, takes the dependency closure of
//     the missing packages from the mirror's copy of the distribution archive
//     (components.Fetcher.DebIndex, verified through the pinned manifest),
//     uploads those .debs to NodeDebDir and installs them with apt-get with
//     every source list switched off, so apt cannot reach for the network.

// NodeDebDir is where offline installs put the .debs on a node.
const NodeDebDir = "/var/cache/khw/debs"

// aptOffline makes apt-get see no package source at all: it installs the
// .deb files named on its command line, resolving their dependencies
// among them and what dpkg has installed, and fails instead of
// downloading. apt-get (rather than dpkg -i) orders Pre-Depends and
// configures the packages in dependency order. Not --no-download: with
// local .deb files apt 2.6 (Debian 12) then fails with "Internal Error,
// Pathname to install is not absolute".
const aptOffline = "-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=" + NodeDebDir + "/no-sources.d"

// nodeOSProbe prints the node's os-release ID and VERSION_CODENAME, its
// dpkg architecture, then components.DpkgInstalledQuery's lines.
const nodeOSProbe = `. /etc/os-release && printf '%s\n%s\n' "$ID" "${VERSION_CODENAME:-}" && dpkg --print-architecture && ` + components.DpkgInstalledQuery

// DebPlan is what an offline install puts on one node.
type DebPlan struct {
	Archive components.DebArchive
	Arch    string
	// Debs are the packages to install: the missing ones and the
	// dependencies the node lacks.
	Debs []components.DebPackage
	// index is the verified archive index Debs were worked out from; its
	// FetchDebs reads them through the mirror.
	index *components.DebIndex
}

// packageFetcher is the Fetcher whose mirror (if any) node packages come
// from: the artifacts' one, else the environment's.
func (m *Machines) packageFetcher() *components.Fetcher {
	if m.Art.Fetcher != nil {
		return m.Art.Fetcher
	}
	f := components.EnvFetcher()
	return &f
}

// offlinePackages reports whether node packages come from the mirror.
func (m *Machines) offlinePackages() bool { return m.packageFetcher().Mirror != "" }

// debIndex reads the mirror's index of archive a for arch once per run.
func (m *Machines) debIndex(ctx context.Context, a components.DebArchive, arch string) (*components.DebIndex, error) {
	key := a.URL + " " + arch
	m.debMu.Lock()
	defer m.debMu.Unlock()
	if ix, ok := m.debIdx[key]; ok {
		return ix, nil
	}
	ix, err := m.packageFetcher().DebIndex(ctx, a, arch)
	if err != nil {
		return nil, fmt.Errorf("node packages from the mirror: %w", err)
	}
	if m.debIdx == nil {
		m.debIdx = map[string]*components.DebIndex{}
	}
	m.debIdx[key] = ix
	return ix, nil
}

// planDebs works out the offline install of names on w's node: its OS and
// arch, the archive for them, and the closure of names against what dpkg
// has installed there (names themselves count as missing: their probe
// path is). The plan is kept for Commands.
func (m *Machines) planDebs(ctx context.Context, cl *remote.Client, w *NodeWant, names []string) (*DebPlan, error) {
	out, _, err := cl.Run(ctx, nodeOSProbe, remoteRunNoSudo)
	if err != nil {
		return nil, fmt.Errorf("read the node's OS and packages (/etc/os-release, dpkg-query): %w", err)
	}
	id, code, arch, installed, err := parseNodeOS(out)
	if err != nil {
		return nil, err
	}
	a, err := components.FindDebArchive(id, code, arch)
	if err != nil {
		return nil, err
	}
	ix, err := m.debIndex(ctx, a, arch)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		delete(installed, n)
	}
	debs, err := ix.Closure(names, installed)
	if err != nil {
		return nil, err
	}
	p := &DebPlan{Archive: a, Arch: arch, Debs: debs, index: ix}
	m.debMu.Lock()
	if m.DebPlans == nil {
		m.DebPlans = map[string]*DebPlan{}
	}
	m.DebPlans[PlanKey(w)] = p
	m.debMu.Unlock()
	return p, nil
}

// PlanKey names the plan of w's packages on w's node (steps 06, 07 and 08
// each have their own).
func PlanKey(w *NodeWant) string {
	k := w.Node.Name
	for _, p := range w.Packages {
		k += " " + p.Name
	}
	return k
}

// parseNodeOS reads nodeOSProbe's output.
func parseNodeOS(out []byte) (id, codename, arch string, installed map[string]bool, err error) {
	lines := strings.SplitN(string(out), "\n", 4)
	if len(lines) < 3 || strings.TrimSpace(lines[0]) == "" || strings.TrimSpace(lines[2]) == "" {
		return "", "", "", nil, fmt.Errorf("the node's /etc/os-release and dpkg gave no ID, VERSION_CODENAME and architecture (got %q)", lastLines(out, 3))
	}
	rest := ""
	if len(lines) == 4 {
		rest = lines[3]
	}
	return strings.TrimSpace(lines[0]), strings.TrimSpace(lines[1]), strings.TrimSpace(lines[2]), components.InstalledFromDpkg([]byte(rest)), nil
}

// installPackages installs the missing packages names on w's node, online
// or offline (see above), after waitForApt, and logs what it ran; note shows
// a line to the person running the step.
func (m *Machines) installPackages(ctx context.Context, cl *remote.Client, w *NodeWant, names []string, logf, note func(string, ...any)) error {
	node := w.Node.Name
	holders, err := waitForApt(ctx, cl, node, note)
	if err != nil {
		return fmt.Errorf("install packages %s: %w", strings.Join(names, " "), err)
	}
	for _, h := range holders {
		logf("apt waits: %s", h)
	}
	start := time.Now()
	waited := func() {
		if len(holders) > 0 {
			note("%s: the package manager was free again; installed %s after %v", node, strings.Join(names, " "), time.Since(start).Round(time.Second))
		}
	}
	if !m.offlinePackages() {
		m.debMu.Lock()
		updated := m.aptUpdated[node]
		m.debMu.Unlock()
		if !updated {
			if err := aptUpdate(ctx, cl, node, note); err != nil {
				return fmt.Errorf("refresh the package lists with the node's apt (apt-get update; the node needs a reachable package archive; offline, set %s to a mirror with the node packages): %w",
					components.EnvMirror, err)
			}
			logf("apt-get update -q")
			m.debMu.Lock()
			if m.aptUpdated == nil {
				m.aptUpdated = map[string]bool{}
			}
			m.aptUpdated[node] = true
			m.debMu.Unlock()
		}
		cmd := onlineInstallCommand(names)
		if _, _, err := cl.Run(ctx, cmd, remote.RunOptions{Sudo: true}); err != nil {
			return fmt.Errorf("install packages %s with the node's apt (the node needs a reachable package archive; offline, set %s to a mirror with the node packages): %w",
				strings.Join(names, " "), components.EnvMirror, err)
		}
		logf("%s", cmd)
		waited()
		return nil
	}
	plan, err := m.planDebs(ctx, cl, w, names)
	if err != nil {
		return fmt.Errorf("install packages %s offline: %w", strings.Join(names, " "), err)
	}
	files, err := plan.index.FetchDebs(ctx, plan.Debs)
	if err != nil {
		return fmt.Errorf("install packages %s offline: %w", strings.Join(names, " "), err)
	}
	var paths []string
	for _, f := range files {
		p := path.Join(NodeDebDir, f.Package.FileName())
		if _, err := cl.Install(ctx, remote.File{Path: p, Data: f.Data, Mode: 0o644}); err != nil {
			return err
		}
		paths = append(paths, quote(p))
	}
	cmd := offlineInstallCommand(paths)
	if out, _, err := cl.Run(ctx, cmd, remote.RunOptions{Sudo: true}); err != nil {
		return fmt.Errorf("install packages %s offline from %d .deb(s) of the mirror's %s %s archive: %w (apt said: %s)",
			strings.Join(names, " "), len(files), plan.Archive, plan.Arch, err, lastLines(out, 6))
	}
	logf("installed %s from the mirror (%s %s): %s", strings.Join(names, " "), plan.Archive, plan.Arch, strings.Join(debNames(plan.Debs), " "))
	waited()
	// The .debs served their purpose; a failed install leaves them for a look.
	_, _, _ = cl.Run(ctx, "rm -f "+strings.Join(paths, " "), remote.RunOptions{Sudo: true})
	return nil
}

// onlineInstallCommand installs names with the node's apt, waiting for the
// dpkg lock (aptLockOpt).
func onlineInstallCommand(names []string) string {
	return "DEBIAN_FRONTEND=noninteractive apt-get install -y -q " + aptLockOpt + " " + strings.Join(names, " ")
}

// offlineInstallCommand installs the .debs at paths (quoted node paths
// under nodeDebDir) with apt-get and no package source.
func offlineInstallCommand(paths []string) string {
	return "mkdir -p " + NodeDebDir + "/no-sources.d && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends " + aptLockOpt + " " + aptOffline + " " + strings.Join(paths, " ")
}

// aptWaitCommand is the by-hand wait for cloud-init on node.
func aptWaitCommand(node string) steps.Command {
	return steps.Command{Node: node, Why: "a fresh cloud VM is still busy with its package manager: wait until cloud-init has finished (apt-get, below, then waits for unattended-upgrades' dpkg lock itself)",
		Shell: aptWaitShell}
}

func debNames(ps []components.DebPackage) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name + "=" + p.Version
	}
	return out
}

func lastLines(b []byte, n int) string {
	ls := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// PackageCommands is the shell a learner types for w's packages. Online:
// refresh the lists and install. Offline: copy the .debs from the mirror
// and install them with no network; the list is the plan khw worked out
// for the node in this run, else the wanted packages with a note that
// their missing dependencies come along.
func PackageCommands(w *NodeWant) []steps.Command {
	node := w.Node.Name
	var names []string
	for _, p := range w.Packages {
		names = append(names, p.Name)
	}
	if !w.OfflineDebs {
		return []steps.Command{
			aptWaitCommand(node),
			{Node: node, Why: "the distribution's packages: refresh the package lists first (a fresh cloud image has none; tried again when apt-daily holds the lists' lock), then install, waiting for the dpkg lock while unattended-upgrades holds it",
				Shell: aptUpdateShell + "\nsudo apt-get install -y " + aptLockOpt + " " + strings.Join(names, " ")}}
	}
	var get, files, dsts []string
	why := "get the packages' .debs from the mirror's copy of the node's distribution archive, each checked against the SHA-256 the archive's Packages index gives it, as khw read that index through the pinned mirror manifest (not a checksum file beside the .deb; a .deb that fails is removed), and copy them to the node"
	if p := w.Debs; p != nil {
		for _, d := range p.Debs {
			get = append(get, downloadCommand(w.DebMirror, p.Archive.URL+"/"+d.Filename), checkCommand(d.SHA256, d.FileName()))
			files = append(files, steps.Quote(d.FileName()))
			dsts = append(dsts, steps.Quote(NodeDebDir+"/"+d.FileName()))
		}
		why += fmt.Sprintf(" (%s %s: %s and the dependencies %s lacks, from the Packages index and `dpkg-query -W` on the node)", p.Archive, p.Arch, strings.Join(names, ", "), node)
	} else {
		for _, n := range names {
			f := n + "_<version>_<arch>.deb"
			files = append(files, "'"+f+"'")
			dsts = append(dsts, "'"+NodeDebDir+"/"+f+"'")
		}
		get = append(get, refuseCommand(strings.Join(names, "_")+"_<version>_<arch>.deb", "khw names the .debs and their SHA-256 once it has read the node (khw up --dry-run, or this lab after 01-machines)"))
		why += " (khw adds the dependencies the node lacks, from the Packages index for its /etc/os-release and `dpkg-query -W` on the node)"
	}
	if len(files) == 0 {
		return nil
	}
	if w.Downloads != "" {
		get = append([]string{"mkdir -p " + steps.Quote(w.Downloads), "cd " + steps.Quote(w.Downloads)}, get...)
	}
	get = append(get, fmt.Sprintf(`scp -F "$KHW_SSH_CONFIG" %s %s:`, strings.Join(files, " "), node))
	return []steps.Command{
		{Why: why + MirrorCredentialsNote(strings.Join(get, "\n")), Shell: strings.Join(get, "\n")},
		aptWaitCommand(node),
		{Node: node, Why: "install them with no network: apt sees no package source, only these files and what is installed; it waits for the dpkg lock while unattended-upgrades holds it",
			Shell: "sudo install -d " + NodeDebDir + "/no-sources.d && sudo mv " + strings.Join(files, " ") + " " + NodeDebDir + "/\n" +
				"sudo apt-get install -y --no-install-recommends " + aptLockOpt + " " + aptOffline + " " + strings.Join(dsts, " ")},
	}
}
