package upgrade

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/khw-dev/khw/internal/cluster"
	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/controlplane"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/lab/workers"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// Lab 15-upgrade is the rolling upgrade as a lab: it starts from a cluster
// at an older release (config.PreviousKubernetes, made with khw init
// --kubernetes-version) and upgrades it to LabTarget, by khw (khw upgrade,
// with the prober's report) or by hand (ByHandCommands); its check (Grade)
// reads every component's version on every node.
//
// Text: labs/15-upgrade.md.

// LabTarget is the release lab 15 upgrades to: the one this khw installs.
var LabTarget = config.DefaultVersions.Kubernetes

// Start is what lab 15 recorded when it began.
type Start struct {
	At time.Time `json:"at"`
	// From is the oldest kube-apiserver's release then, To the release the
	// lab upgrades to (LabTarget then).
	From string `json:"from"`
	To   string `json:"to"`
	// Cordoned are the Nodes already cordoned then: the check does not ask
	// to uncordon them.
	Cordoned []string `json:"cordoned,omitempty"`
}

// LoadStart reads lab 15's start record; ok is false when it has not begun.
func LoadStart(d state.Dir) (s Start, ok bool, err error) {
	ok, err = labcheck.LoadStart(d, labid.Upgrade, &s)
	return s, ok, err
}

// Begin records the versions lab 15 upgrades from and to (unless again
// and a record exists: a try after an unfinished one keeps the first).
// Errors: the cluster cannot be read, it already runs LabTarget (the
// error says how to build one at config.PreviousKubernetes), or the
// version-skew policy does not allow the upgrade (*SkewError).
func Begin(ctx context.Context, s *cluster.Session, again bool) (Start, error) {
	if st, ok, err := LoadStart(s.Dir); err != nil || (ok && again) {
		return st, err
	}
	env := steps.NewEnv(s.Config, s.Dir)
	defer env.Close()
	running, err := Observe(ctx, nodeplan.New(s), env)
	if err != nil {
		return Start{}, err
	}
	if AllAt(running, LabTarget) {
		return Start{}, fmt.Errorf("this cluster already runs %s, the release lab %s upgrades to: the lab starts from a cluster at the minor before it. Build one with khw down, then khw init --force --kubernetes-version %s (add the --name you use; the provider and arch are kept), then khw up; khw lab %s then upgrades it",
			LabTarget, labid.Upgrade, config.PreviousKubernetes, labid.Upgrade)
	}
	oldest, err := Check(running, LabTarget)
	if err != nil {
		return Start{}, fmt.Errorf("lab %s cannot upgrade this cluster to %s: %w", labid.Upgrade, LabTarget, err)
	}
	st := Start{At: time.Now().UTC(), From: "v" + oldest.String(), To: LabTarget}
	nodes, err := health.KubeNodes(ctx, s.Target(), s.AdminKubeconfig())
	if err != nil {
		return Start{}, err
	}
	for _, n := range nodes {
		if n.Unschedulable {
			st.Cordoned = append(st.Cordoned, n.Name)
		}
	}
	return st, labcheck.SaveStart(s.Dir, labid.Upgrade, st)
}

// AllAt reports whether every apiserver and every kubelet of r reports v
// (and at least one apiserver answered).
func AllAt(r Running, v string) bool {
	for _, m := range []map[string]string{r.APIServers, r.Kubelets} {
		for _, got := range m {
			if got != v {
				return false
			}
		}
	}
	return len(r.APIServers) > 0
}

// ByHandCommands is lab 15 as the student types it in khw shell: ByHand
// from the start record's versions, the binaries downloaded under the
// state directory, each checked against the digest the pinned mirror
// manifest lists (read with ctx) or, without a mirror, its project's.
func ByHandCommands(ctx context.Context, c *config.Cluster, d state.Dir) []steps.Command {
	to := LabTarget
	if st, ok, err := LoadStart(d); err == nil && ok {
		to = st.To
	}
	cmds, err := ByHand(ctx, &nodeplan.Machines{}, c, to, `"$KHW_STATE_DIR/$KHW_CLUSTER"/downloads/`+to, "")
	if err != nil {
		return []steps.Command{{Why: "khw cannot write the commands: " + err.Error(), Shell: "khw upgrade --to " + to + " --dry-run"}}
	}
	return cmds
}

// Binary is one Kubernetes binary on a node as the check found it.
type Binary struct {
	Node, Name string
	// Version is what the file says it is (--version), "" when it could
	// not be run (Err says why).
	Version string
	// Unit runs the binary ("" for kubectl); MTime is when the file was
	// written and Started when the unit last started (zero when unknown).
	Unit           string
	MTime, Started time.Time
	Err            string
}

// Observed is what lab 15's check read.
type Observed struct {
	// Running: each kube-apiserver's /version and each Node's kubelet.
	Running Running
	// Binaries: kube-controller-manager, kube-scheduler and kubectl on each
	// control plane, kube-proxy on each worker.
	Binaries []Binary
	// Nodes as the API has them.
	Nodes []health.KubeNode
	// KubeletWritten is when each worker's /usr/local/bin/kubelet was
	// written.
	KubeletWritten map[string]time.Time
	// Pods are the running pods on the workers that a drain evicts (not
	// owned by a DaemonSet, not a node's static pod).
	Pods []PodOn
	// ConfigVersion is cluster.yaml's versions.kubernetes.
	ConfigVersion string
	// Problems are health problems, each a sentence: an apiserver not
	// ready, a Lease not held, a Node not Ready.
	Problems []string
}

// PodOn is a running pod on a worker.
type PodOn struct {
	Node, Namespace, Name string
	Created               time.Time
}

// nodeBinaries are the binaries the check runs --version of, by role: the
// apiserver's and kubelet's versions are read from the API instead.
var nodeBinaries = map[string][]string{
	config.RoleControlPlane: {"kube-controller-manager", "kube-scheduler", "kubectl"},
	config.RoleWorker:       {"kube-proxy"},
}

// versionRE finds a release in a binary's --version output ("Kubernetes
// v1.37.2", kubectl's "Client Version: v1.37.2").
var versionRE = regexp.MustCompile(`\bv\d+\.\d+\.\d+\S*`)

// ObserveLab reads what lab 15's check judges: versions through the API
// (Observe), each node's binaries over SSH (--version, the file's mtime,
// its unit's start), the Nodes, cluster.yaml's version (the file) and the
// cluster's health. Errors: cluster.yaml does not load, the API or a node
// cannot be reached at all.
func ObserveLab(ctx context.Context, s *cluster.Session) (Observed, error) {
	env := steps.NewEnv(s.Config, s.Dir)
	defer env.Close()
	m := nodeplan.New(s)
	var o Observed
	// cluster.yaml as khw up will read it, not the copy loaded before the
	// upgrade changed it.
	onDisk, _, err := config.Load(s.Dir.ConfigPath())
	if err != nil {
		return o, err
	}
	o.ConfigVersion = onDisk.Versions.Kubernetes
	if o.Running, err = Observe(ctx, m, env); err != nil {
		return o, err
	}
	for _, n := range s.Config.Nodes {
		bins := nodeBinaries[n.Role]
		if len(bins) == 0 {
			continue
		}
		cl, err := s.Pool.Get(ctx, nodeplan.RemoteNode(n))
		if err != nil {
			return o, err
		}
		var paths, units []string
		for _, b := range bins {
			paths = append(paths, binDir+b)
			if b != "kubectl" {
				units = append(units, b+".service")
			}
		}
		if n.Role == config.RoleWorker {
			paths = append(paths, binDir+"kubelet")
		}
		probed, err := nodeplan.Probe(ctx, cl, paths, units)
		if err != nil {
			return o, fmt.Errorf("%s: %w", n.Name, err)
		}
		if n.Role == config.RoleWorker {
			if o.KubeletWritten == nil {
				o.KubeletWritten = map[string]time.Time{}
			}
			o.KubeletWritten[n.Name] = probed.Files[binDir+"kubelet"].MTime
		}
		for _, b := range bins {
			bin := Binary{Node: n.Name, Name: b, MTime: probed.Files[binDir+b].MTime}
			if b != "kubectl" {
				bin.Unit = b + ".service"
				bin.Started = probed.Units[bin.Unit].Started
			}
			cmd := binDir + b + " --version"
			if b == "kubectl" {
				cmd = binDir + "kubectl version --client"
			}
			out, _, err := cl.Run(ctx, cmd, remote.RunOptions{})
			if v := versionRE.FindString(string(out)); err == nil && v != "" {
				bin.Version = v
			} else if err != nil {
				bin.Err = err.Error()
			} else {
				bin.Err = "no version in the output of " + cmd
			}
			o.Binaries = append(o.Binaries, bin)
		}
	}
	if o.Nodes, err = health.KubeNodes(ctx, s.Target(), s.AdminKubeconfig()); err != nil {
		return o, err
	}
	cs, err := s.Clientset()
	if err != nil {
		return o, err
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Running"})
	if err != nil {
		return o, fmt.Errorf("list pods: %w", err)
	}
	onWorker := map[string]bool{}
	for _, w := range workerNames(s.Config) {
		onWorker[w] = true
	}
	for _, p := range pods.Items {
		if !onWorker[p.Spec.NodeName] || evictionSkips(p.OwnerReferences, p.Annotations) {
			continue
		}
		o.Pods = append(o.Pods, PodOn{Node: p.Spec.NodeName, Namespace: p.Namespace, Name: p.Name, Created: p.CreationTimestamp.Time})
	}
	diffs, server := controlplane.ReadyzDiffs(ctx, m, env, false)
	if server != "" {
		diffs = append(diffs, controlplane.LeaseDiffs(ctx, m, env, server)...)
	}
	nd, err := workers.NodesReady(ctx, m, env, workerNames(s.Config))
	if err != nil {
		o.Problems = append(o.Problems, "the Nodes cannot be read: "+err.Error())
	}
	for _, d := range append(diffs, nd...) {
		o.Problems = append(o.Problems, d.What)
	}
	return o, nil
}

// evictionSkips reports whether kubectl drain leaves a pod with these
// owners and annotations in place: a DaemonSet's pod (--ignore-daemonsets)
// or a static pod's mirror (kubernetes.io/config.mirror), which the
// kubelet runs from a file.
func evictionSkips(owners []metav1.OwnerReference, annotations map[string]string) bool {
	if _, ok := annotations["kubernetes.io/config.mirror"]; ok {
		return true
	}
	for _, o := range owners {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// binDir is where khw installs the Kubernetes binaries on a node.
const binDir = "/usr/local/bin/"

// Judge is lab 15's rules on what ObserveLab read, against the start:
//   - every kube-apiserver answers /version with To, and every Node's
//     kubelet reports To;
//   - kube-controller-manager, kube-scheduler and kubectl on each control
//     plane, kube-proxy on each worker, are To's binaries, and each unit
//     started after its binary was written (it runs the new one);
//   - no Node is left cordoned that was not cordoned at the start;
//   - every worker whose kubelet binary was replaced since the start was
//     drained: no pod a drain evicts runs there from before the new binary;
//   - cluster.yaml says To (else khw up would put From back);
//   - the cluster works: every apiserver ready, both Leases held, every
//     Node Ready.
func Judge(c *config.Cluster, start Start, o Observed) []grade.Finding {
	var out []grade.Finding
	add := func(node string, kind grade.Kind, subject, what, why, evidence, fix string) {
		out = append(out, grade.Finding{Lab: labid.Upgrade, Node: node, Kind: kind, Subject: subject, What: what, Why: why, Evidence: evidence, Fix: fix})
	}
	to := start.To
	install := func(node string, bins ...string) string {
		units := units(bins)
		fix := "copy the " + to + " " + strings.Join(bins, ", ") + " to " + node + ", sudo install -m 0755 " + strings.Join(bins, " ") + " /usr/local/bin/"
		if len(units) > 0 {
			fix += ", then sudo systemctl restart " + strings.Join(units, " ")
		}
		return fix + " (khw lab " + labid.Upgrade + " --by-hand lists the commands)"
	}
	for _, n := range c.ControlPlanes() {
		switch v, ok := o.Running.APIServers[n.Name]; {
		case !ok:
			add(n.Name, grade.NotRunning, "kube-apiserver", "the kube-apiserver on "+n.Name+" does not answer GET /version",
				"an upgrade goes one apiserver at a time, each ready again before the next", "", "sudo journalctl -u kube-apiserver -n 30 --no-pager on "+n.Name)
		case v != to:
			add(n.Name, grade.Wrong, "kube-apiserver", "the kube-apiserver on "+n.Name+" runs "+v+", not "+to,
				"the apiservers go first: no other component may be newer than the oldest apiserver (version-skew policy)", "GET /version on "+n.Name+": "+v, install(n.Name, "kube-apiserver"))
		}
	}
	for _, b := range o.Binaries {
		switch {
		case b.Err != "":
			add(b.Node, grade.Wrong, binDir+b.Name, binDir+b.Name+" on "+b.Node+" cannot tell its version", "", b.Err, install(b.Node, b.Name))
		case b.Version != to:
			add(b.Node, grade.Wrong, binDir+b.Name, b.Name+" on "+b.Node+" is "+b.Version+", not "+to, skewWhy(b.Name), b.Name+" --version: "+b.Version, install(b.Node, b.Name))
		case b.Unit != "" && !b.Started.IsZero() && b.Started.Before(b.MTime):
			add(b.Node, grade.Wrong, b.Unit, b.Unit+" on "+b.Node+" still runs the binary from before: it started before "+binDir+b.Name+" was replaced",
				"a process keeps running the file it started from; only a restart runs the new one",
				fmt.Sprintf("%s started %s, %s written %s", b.Unit, b.Started.UTC().Format(time.TimeOnly), binDir+b.Name, b.MTime.UTC().Format(time.TimeOnly)),
				"sudo systemctl restart "+b.Unit+" on "+b.Node)
		}
	}
	for _, n := range o.Nodes {
		if v := n.KubeletVersion; v != to && v != "" {
			add(n.Name, grade.Wrong, "kubelet", "the kubelet on "+n.Name+" runs "+v+", not "+to, skewWhy("kubelet"),
				"Node "+n.Name+" status.nodeInfo.kubeletVersion: "+v,
				"kubectl drain "+n.Name+" --ignore-daemonsets --delete-emptydir-data, then "+install(n.Name, "kubelet", "kube-proxy")+", then kubectl uncordon "+n.Name+" once it is Ready")
		}
		if n.Unschedulable && !slices.Contains(start.Cordoned, n.Name) {
			add(n.Name, grade.Wrong, "Node "+n.Name, "Node "+n.Name+" is still cordoned: no new pod is scheduled to it",
				"a drained worker takes pods again once it is upgraded and Ready", "Node "+n.Name+" spec.unschedulable: true", "kubectl uncordon "+n.Name)
		}
	}
	// A drain evicts every pod but a DaemonSet's, and the worker stays
	// cordoned until its new kubelet is Ready: a pod older than the
	// kubelet binary replaced during the lab still running there was never
	// evicted. (Pod times are whole seconds, hence the truncation.)
	for _, n := range c.Workers() {
		written := o.KubeletWritten[n.Name]
		if written.IsZero() || !written.After(start.At) {
			continue
		}
		var kept []string
		for _, p := range o.Pods {
			if p.Node == n.Name && p.Created.Before(written.Truncate(time.Second)) {
				kept = append(kept, p.Namespace+"/"+p.Name)
			}
		}
		if len(kept) > 0 {
			add(n.Name, grade.Wrong, "Node "+n.Name, "the kubelet on "+n.Name+" was replaced without a drain: "+strings.Join(kept, ", ")+" ran on it before and still does",
				"the version-skew policy says to drain a node before a minor kubelet upgrade: an in-place minor kubelet upgrade is not supported",
				fmt.Sprintf("/usr/local/bin/kubelet on %s written %s (the lab began %s)", n.Name, written.UTC().Format(time.TimeOnly), start.At.UTC().Format(time.TimeOnly)),
				"next time: kubectl drain "+n.Name+" --ignore-daemonsets --delete-emptydir-data before the new kubelet, kubectl uncordon "+n.Name+" after; now: khw lab reset 15 and upgrade again")
		}
	}
	if o.ConfigVersion != to {
		add("jumpbox", grade.Inconsistent, "cluster.yaml versions.kubernetes", "cluster.yaml still says versions.kubernetes: "+o.ConfigVersion,
			"khw up makes the nodes what cluster.yaml says: it would put "+o.ConfigVersion+" back on every node, all control-plane components together", "versions.kubernetes: "+o.ConfigVersion,
			"set versions.kubernetes: "+to+" in $KHW_STATE_DIR/$KHW_CLUSTER/cluster.yaml, then khw config validate")
	}
	for _, p := range o.Problems {
		add("", grade.Breaks, "", p, "the upgrade is done when the cluster serves as before", "", "khw status; khw lab check 05; khw lab check 07")
	}
	return out
}

// skewWhy says why a component must be at the apiservers' release.
func skewWhy(name string) string {
	switch name {
	case "kube-controller-manager", "kube-scheduler":
		return "they follow the apiservers; the version-skew policy lets them be one minor behind for a while, but the upgrade is not done until they are at the new release"
	case "kubectl":
		return "kubectl is supported within one minor of the apiservers; khw installs the cluster's release on each control plane"
	}
	return "the workers go last, one at a time (drained, upgraded, uncordoned); the policy lets a kubelet lag, but an upgrade is done when none does"
}

// Grade is lab 15's check: ObserveLab, then Judge against the start.
func Grade(ctx context.Context, s *cluster.Session) ([]grade.Finding, error) {
	start, ok, err := LoadStart(s.Dir)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("lab " + labid.Upgrade + " has not begun: khw lab 15 (or khw lab 15 --by-hand) records the release the cluster runs before the upgrade, which the check compares with")
	}
	o, err := ObserveLab(ctx, s)
	if err != nil {
		return nil, err
	}
	return Judge(s.Config, start, o), nil
}
