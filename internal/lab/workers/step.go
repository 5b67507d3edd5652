// Package workers is lab 07-workers: the step that prepares every
// worker's host (kernel modules, sysctls, no swap) and container runtime
// (containerd, runc, CNI, the images), runs the kubelet and kube-proxy on
// the workers with pre-issued certs and waits for their Nodes to be Ready
// (step.go), and its grading (grade.go: host settings, runtime and CNI
// config, cluster DNS, each node's identity and kubeconfigs).
//
// Lab 10-tls-bootstrap builds on this package's worker spec and detectors.
//
// Text: labs/07-workers.md. Templates: templates/node/worker/.
package workers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/kube"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/steps"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// workerBinaries are the catalog artifacts every worker runs.
var workerBinaries = []string{"containerd", "runc", "cni-plugins", "crictl", "kubelet", "kube-proxy"}

// workerRendered are the worker files of render.Node for the cluster's CNI.
func workerRendered(c *config.Cluster) []string {
	files := []string{
		"/etc/modules-load.d/k8s.conf", "/etc/sysctl.d/k8s.conf",
		"/etc/containerd/config.toml", "/etc/systemd/system/containerd.service",
		"/etc/systemd/system/kubelet.service", "/var/lib/kubelet/kubelet-config.yaml",
		"/var/lib/kube-proxy/kube-proxy-config.yaml", "/etc/systemd/system/kube-proxy.service",
	}
	if c.Kubernetes.CNI == config.CNIMyBridge {
		return append(files, "/etc/cni/net.d/10-mybridge.conf", "/etc/cni/net.d/99-myloopback.conf",
			"/opt/cni/bin/mybridge", "/opt/cni/bin/myloopback")
	}
	return append(files, "/etc/cni/net.d/10-bridge.conf", "/etc/cni/net.d/99-loopback.conf")
}

// KubeletSide reports whether node path p belongs to the kubelet or
// kube-proxy (their binaries, units, configs, certs and kubeconfigs) rather
// than to the host and its container runtime.
func KubeletSide(p string) bool {
	switch p {
	case "/usr/local/bin/kubelet", "/usr/local/bin/kube-proxy",
		"/etc/systemd/system/kubelet.service", "/etc/systemd/system/kube-proxy.service":
		return true
	}
	for _, d := range []string{"/var/lib/kubelet/", "/var/lib/kube-proxy/", "/var/lib/kubernetes/"} {
		if strings.HasPrefix(p, d) {
			return true
		}
	}
	return false
}

// WorkerUnits are the units of a worker and what each reads at start. A
// TLS-bootstrap worker's kubelet reads a bootstrap kubeconfig only until it
// has its own cert, so that file is not a restart reason.
func WorkerUnits(n config.Node) []nodeplan.WantUnit {
	kubelet := []string{"/usr/local/bin/kubelet", "/etc/systemd/system/kubelet.service",
		"/var/lib/kubelet/kubelet-config.yaml", "/var/lib/kubernetes/ca.pem"}
	if !n.TLSBootstrap {
		kubelet = append(kubelet, "/var/lib/kubelet/kubelet.pem", "/var/lib/kubelet/kubelet-key.pem", "/var/lib/kubelet/kubeconfig")
	}
	return []nodeplan.WantUnit{
		{Name: "containerd.service", Deps: []string{"/usr/local/bin/containerd", "/usr/local/bin/containerd-shim-runc-v2",
			"/etc/systemd/system/containerd.service", "/etc/containerd/config.toml"}},
		{Name: "kubelet.service", Deps: kubelet},
		{Name: "kube-proxy.service", Deps: []string{"/usr/local/bin/kube-proxy", "/etc/systemd/system/kube-proxy.service",
			"/var/lib/kube-proxy/kube-proxy-config.yaml", "/var/lib/kube-proxy/kubeconfig"}},
	}
}

// WorkerPackages are the distribution tools the worker components exec:
// iptables for kube-proxy's iptables mode (kube-proxy-config.yaml) and for
// the CNI plugins' masquerade rule (bridge with ipMasq; mybridge), and jq for
// the mybridge CNI plugin (templates/files/mybridge). Not needed: conntrack,
// since kube-proxy deletes stale conntrack entries over netlink
// (kubernetes/kubernetes#126847, v1.32), and socat, since containerd's CRI
// port-forward dials the pod's port from inside its network namespace in Go
// (containerd internal/cri/server/sandbox_portforward_linux.go, v2.x).
// iproute2 comes with 08-pod-network (podnet.go).
func WorkerPackages(c *config.Cluster) []nodeplan.WantPackage {
	p := []nodeplan.WantPackage{{Name: "iptables", Path: "/usr/sbin/iptables"}}
	if c.Kubernetes.CNI == config.CNIMyBridge {
		p = append(p, nodeplan.WantPackage{Name: "jq", Path: "/usr/bin/jq"})
	}
	return p
}

// workerSysctls are the kernel settings every worker needs
// (https://kubernetes.io/docs/setup/production-environment/container-runtimes/#prerequisite-ipv4-forwarding-optional
// and the bridge netfilter settings that let kube-proxy's iptables rules see
// traffic between pods on one bridge).
var workerSysctls = []string{"net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables", "net.ipv4.ip_forward"}

const hostPrepProbe = `[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] || echo "module br_netfilter"
grep -qw overlay /proc/filesystems || echo "module overlay"
for k in KEYS; do v=$(cat "/proc/sys/$(echo "$k" | tr . /)" 2>/dev/null); [ "$v" = 1 ] || echo "sysctl $k ${v:-missing}"; done
[ -z "$(swapon --noheadings --show 2>/dev/null)" ] || echo "swap on"
grep -Eq '^[^#]\S*\s+\S+\s+swap\s' /etc/fstab && echo "swap fstab"
true
`

// hostPrep is the kernel side of a worker: overlay and br_netfilter
// present, the three sysctls 1, swap off now and in /etc/fstab (the kubelet
// refuses to start with swap on unless told otherwise).
func hostPrep() nodeplan.NodeExtra {
	return nodeplan.NodeExtra{
		Check: func(ctx context.Context, cl *remote.Client, w *nodeplan.NodeWant) ([]steps.Diff, error) {
			out, _, err := cl.Run(ctx, strings.ReplaceAll(hostPrepProbe, "KEYS", strings.Join(workerSysctls, " ")), remote.RunOptions{})
			if err != nil {
				return nil, fmt.Errorf("check kernel settings: %w", err)
			}
			return hostPrepDiffs(w.Node.Name, string(out)), nil
		},
		Fix: func(ctx context.Context, env *steps.Env, cl *remote.Client, w *nodeplan.NodeWant) error {
			// modprobe fails on a system container and where the module is
			// built in; the check afterwards says whether it matters.
			script := "modprobe overlay 2>/dev/null; modprobe br_netfilter 2>/dev/null\n" +
				"sysctl -q -p /etc/sysctl.d/k8s.conf\n" +
				"swapoff -a\n" +
				`sed -i -E 's/^([^#]\S*\s+\S+\s+swap\s)/# khw: swap off for the kubelet: \1/' /etc/fstab` + "\n"
			if _, _, err := cl.Run(ctx, script, remote.RunOptions{Sudo: true}); err != nil {
				return fmt.Errorf("kernel settings: %w", err)
			}
			fmt.Fprintf(env.NodeLog(w.Node.Name), "%s worker: modules, sysctls, swap off\n", time.Now().Format(time.RFC3339))
			return nil
		},
		Commands: func(w *nodeplan.NodeWant) []steps.Command {
			return []steps.Command{{Node: w.Node.Name, Why: "kernel prerequisites, each loaded only when missing (a module built into the kernel, or a container's host, already has it): overlay (containerd's snapshots), br_netfilter + sysctls (bridged pod traffic through iptables, routing), no swap",
				Shell: "grep -qw overlay /proc/filesystems || sudo modprobe overlay\n" +
					"test -e /proc/sys/net/bridge/bridge-nf-call-iptables || sudo modprobe br_netfilter\n" +
					"sudo sysctl -p /etc/sysctl.d/k8s.conf\nsudo swapoff -a\nsudo sed -i '/^[^#].* swap / s/^/#/' /etc/fstab"}}
		},
	}
}

// Subjects of the kernel-settings differences (steps.DiffRequired).
const (
	SubjectSwap       = "swap"
	SubjectSwapFstab  = "swap in /etc/fstab"
	subjectModule     = "kernel module "
	subjectSysctl     = "sysctl "
	persistSysctlsFix = " now, and keep it = 1 in a file under /etc/sysctl.d/ (khw: k8s.conf) so it survives a reboot"
)

// sysctlWhy says what breaks when a worker sysctl is not 1.
var sysctlWhy = map[string]string{
	"net.bridge.bridge-nf-call-iptables":  "bridged pod traffic skips iptables, so Services (kube-proxy's rules) do not work for pods on the same node",
	"net.bridge.bridge-nf-call-ip6tables": "bridged IPv6 pod traffic skips ip6tables",
	"net.ipv4.ip_forward":                 "the node does not route packets between pods and the network, so pods on other nodes and Services are unreachable",
}

// hostPrepDiffs turns the lines of hostPrepProbe's output on node into
// differences (steps.DiffRequired), each with what breaks, the evidence
// read and the fix.
func hostPrepDiffs(node, out string) []steps.Diff {
	var diffs []steps.Diff
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		d := steps.Diff{Kind: steps.DiffRequired, Node: node}
		switch {
		case len(f) == 2 && f[0] == "module" && f[1] == "br_netfilter":
			d.Subject, d.What = subjectModule+f[1], "kernel module br_netfilter is not loaded: traffic between pods on one bridge skips iptables, so Services do not work for it"
			d.Evidence, d.Fix = "/proc/sys/net/bridge/bridge-nf-call-iptables does not exist", "sudo modprobe br_netfilter; keep br_netfilter in /etc/modules-load.d/k8s.conf"
		case len(f) == 2 && f[0] == "module":
			d.Subject, d.What = subjectModule+f[1], "kernel module "+f[1]+" is not loaded: containerd's overlayfs snapshotter needs it"
			d.Evidence, d.Fix = f[1]+" is not in /proc/filesystems", "sudo modprobe "+f[1]+"; keep "+f[1]+" in /etc/modules-load.d/k8s.conf"
		case len(f) == 3 && f[0] == "sysctl":
			d.Subject, d.What = subjectSysctl+f[1], fmt.Sprintf("%s is not 1: %s", f[1], sysctlWhy[f[1]])
			d.Evidence, d.Fix = "/proc/sys/"+strings.ReplaceAll(f[1], ".", "/")+" = "+f[2], "sudo sysctl -w "+f[1]+"=1"+persistSysctlsFix
		case line == "swap on":
			d.Subject, d.What = SubjectSwap, "swap is on: the kubelet refuses to start with swap (failSwapOn defaults to true)"
			d.Evidence, d.Fix = "swapon --show lists a swap area", "sudo swapoff -a"
		case line == "swap fstab":
			d.Subject, d.What = SubjectSwapFstab, "/etc/fstab turns swap on at boot: after a reboot the kubelet refuses to start"
			d.Evidence, d.Fix = "/etc/fstab has a swap line", "comment out its swap lines: sudo sed -i '/ swap / s/^/#/' /etc/fstab"
		default:
			continue
		}
		diffs = append(diffs, d)
	}
	return diffs
}

// WorkerSpec is the component spec of the workers chosen by only.
func WorkerSpec(m *nodeplan.Machines, c *config.Cluster, id, title string, only func(config.Node) bool, inputs func(render.Input) bool) *nodeplan.ComponentSpec {
	return &nodeplan.ComponentSpec{
		ID: id, Title: title,
		Role:     config.RoleWorker,
		Only:     only,
		Binaries: workerBinaries,
		Rendered: workerRendered(c),
		Inputs:   inputs,
		Packages: WorkerPackages(c),
		UnitsFor: WorkerUnits,
		Extras: func(n config.Node) []nodeplan.NodeExtra {
			return []nodeplan.NodeExtra{hostPrep(), m.ImagesExtra(c)}
		},
	}
}

// NewStep returns lab 07-workers: on every worker the kernel
// prerequisites, containerd, runc, the CNI plugins and config, crictl and
// the images imported; on the workers that do not join by TLS bootstrap
// (w1, w2) also kubelet and kube-proxy with their configs, certs and
// kubeconfigs, then each Node registered and Ready. The TLS-bootstrap
// workers (w3) get their kubelet in 10-tls-bootstrap, as a node gets
// `kubeadm join` once its runtime is installed.
func NewStep(m *nodeplan.Machines, c *config.Cluster) steps.Step {
	spec := WorkerSpec(m, c, labid.Workers, "Bootstrap the worker nodes",
		nil, func(in render.Input) bool { return !strings.HasSuffix(in.Path, "/bootstrap-kubeconfig") })
	spec.KeepFile = func(n config.Node, p string) bool { return !n.TLSBootstrap || !KubeletSide(p) }
	spec.UnitsFor = func(n config.Node) []nodeplan.WantUnit {
		us := WorkerUnits(n)
		if !n.TLSBootstrap {
			return us
		}
		var runtime []nodeplan.WantUnit
		for _, u := range us {
			if u.Name == "containerd.service" {
				runtime = append(runtime, u)
			}
		}
		return runtime
	}
	s := &nodeplan.ComponentStep{M: m, Spec: spec, Wait: nodeplan.WorkerWait, Rolling: true}
	s.Health = func(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
		var names []string
		for _, n := range env.Cluster.Workers() {
			if !n.TLSBootstrap {
				names = append(names, n.Name)
			}
		}
		return NodesReady(ctx, m, env, names)
	}
	s.ExtraCommands = func(env *steps.Env) []steps.Command {
		kubectl := "kubectl --kubeconfig " + steps.Quote(nodeplan.AdminKubeconfig(env))
		var nodes []string
		for _, n := range env.Cluster.Workers() {
			if !n.TLSBootstrap {
				nodes = append(nodes, "node/"+n.Name)
			}
		}
		return []steps.Command{{Why: "every worker registers itself and turns Ready (wait for it: at most 3 minutes; kubectl wait fails at once for a Node not registered yet, hence the loop)",
			Shell: steps.WaitLoop(90, 2, kubectl+" wait --for=condition=Ready "+strings.Join(nodes, " ")+" --timeout=2s") + "\n" +
				kubectl + " get nodes -o wide"}}
	}
	return s
}

// NodesReady returns one diff per node that is not registered or not Ready,
// with the kubelet's reason.
func NodesReady(ctx context.Context, m *nodeplan.Machines, env *steps.Env, names []string) ([]steps.Diff, error) {
	cfg, err := m.RestConfig(env, "")
	if err != nil {
		return nil, err
	}
	cs, err := kube.Clientset(cfg)
	if err != nil {
		return nil, err
	}
	var diffs []steps.Diff
	for _, name := range names {
		nd, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			diffs = append(diffs, steps.Diff{Node: name, What: "Node " + name + " is not registered", Fix: "start the kubelet; read journalctl -u kubelet"})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get Node %s: %w", name, err)
		}
		if ok, why := nodeReady(nd); !ok {
			diffs = append(diffs, steps.Diff{Node: name, What: "Node " + name + " is not Ready: " + why, Fix: "wait; read journalctl -u kubelet -u containerd"})
			continue
		}
		if d, err := readySinceStart(ctx, m, env, nd); err != nil || d != nil {
			if err != nil {
				return nil, steps.OnNode(name, err)
			}
			diffs = append(diffs, *d)
		}
	}
	return diffs, nil
}

// readySinceStart: a Node's Ready counts only when the running kubelet
// posted it. After a restart the Node keeps what the old process posted
// until the new one posts its first status, which is often NotReady for a
// few seconds ("PLEG is not healthy: pleg has yet to be successful"). A
// kubelet posts its status as soon as it starts (then on a change, or
// every nodeStatusReportFrequency), so the Ready condition's
// lastHeartbeatTime (whole seconds, the node's clock) must not be before
// the kubelet's start (systemd's ExecMainStartTimestamp, the same clock).
// It returns a Diff when it is, nil when not; err when the node cannot be
// asked.
func readySinceStart(ctx context.Context, m *nodeplan.Machines, env *steps.Env, nd *corev1.Node) (*steps.Diff, error) {
	n, ok := env.Cluster.Node(nd.Name)
	if !ok {
		return nil, nil
	}
	cl, err := m.Pool.Get(ctx, nodeplan.RemoteNode(n))
	if err != nil {
		return nil, err
	}
	st, err := nodeplan.Probe(ctx, cl, nil, []string{"kubelet.service"})
	if err != nil {
		return nil, err
	}
	started := st.Units["kubelet.service"].Started.Truncate(time.Second)
	for _, c := range nd.Status.Conditions {
		if c.Type == corev1.NodeReady && !started.IsZero() && c.LastHeartbeatTime.Time.Before(started) {
			return &steps.Diff{Node: n.Name, What: fmt.Sprintf("Node %s says Ready as of %s, before its kubelet started at %s: the new kubelet has not posted its status yet",
				n.Name, c.LastHeartbeatTime.UTC().Format(time.TimeOnly), started.UTC().Format(time.TimeOnly)), Fix: "wait; read journalctl -u kubelet"}, nil
		}
	}
	return nil, nil
}

func nodeReady(n *corev1.Node) (bool, string) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return true, ""
			}
			return false, strings.TrimSpace(c.Reason + " " + c.Message)
		}
	}
	return false, "no Ready condition yet"
}
