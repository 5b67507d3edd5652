package upgrade

import (
	"fmt"
	"strings"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/steps"
)

// ByHand is the upgrade of cluster c (as cluster.yaml has it now) to
// release to, as a person types it, node by node in the policy's order,
// each node waited for before the next: the new binaries downloaded into
// dir on the jumpbox and checked against their published digests, then
// kube-apiserver on each control plane (until its /readyz is ok), then
// kube-controller-manager, kube-scheduler and kubectl (until both Leases
// are held), then each worker drained, kubelet and kube-proxy, Ready,
// uncordoned; last, versions.kubernetes in cluster.yaml, so that khw up
// keeps the new release instead of putting the old one back. kubeconfig
// is the admin kubeconfig ("": kubectl's own, as in khw shell). Errors:
// DownloadCommands'.
func ByHand(c *config.Cluster, to, dir, kubeconfig string) ([]steps.Command, error) {
	target := *c
	target.Versions.Kubernetes = to
	download, err := nodeplan.DownloadCommands(&target, Binaries...)
	if err != nil {
		return nil, err
	}
	kubectl := "kubectl"
	if kubeconfig != "" {
		kubectl += " --kubeconfig " + kubeconfig
	}
	install := func(node string, bins ...string) []steps.Command {
		var paths []string
		for _, b := range bins {
			paths = append(paths, dir+"/"+b)
		}
		return []steps.Command{
			{Why: fmt.Sprintf("copy the %s binaries to %s", to, node), Shell: `scp -F "$KHW_SSH_CONFIG" ` + strings.Join(paths, " ") + " " + node + ":"},
			{Node: node, Why: "put them in place and restart what runs them",
				Shell: "sudo install -m 0755 -o root -g root " + strings.Join(bins, " ") + " /usr/local/bin/\nrm -f " + strings.Join(bins, " ") +
					"\nsudo systemctl restart " + strings.Join(units(bins), " ")},
		}
	}
	cmds := []steps.Command{{Why: "the " + to + " binaries in " + dir + ", each checked against the SHA-256 its project publishes (sha256sum -c must say OK for every file)",
		Shell: "mkdir -p " + dir + " && cd " + dir + "\n" + download}}
	for _, n := range c.ControlPlanes() {
		cmds = append(cmds, install(n.Name, "kube-apiserver")...)
		cmds = append(cmds, steps.Command{Node: n.Name, Why: "wait until this apiserver is ready before the next one (the others serve meanwhile)",
			Shell: steps.WaitLoop(120, 1, "curl -fsS --cacert /var/lib/kubernetes/ca.pem https://127.0.0.1:6443/readyz")})
	}
	for _, n := range c.ControlPlanes() {
		cmds = append(cmds, install(n.Name, "kube-controller-manager", "kube-scheduler", "kubectl")...)
	}
	held := func(lease string) string {
		return steps.WaitLoop(60, 1, kubectl+" -n kube-system get lease "+lease+" -o jsonpath='{.spec.holderIdentity}' | grep -q .")
	}
	cmds = append(cmds, steps.Command{Why: "one controller-manager and one scheduler lead again (each holds its Lease)",
		Shell: held("kube-controller-manager") + "\n" + held("kube-scheduler") + "\n" + kubectl + " -n kube-system get lease kube-controller-manager kube-scheduler"})
	for _, n := range c.Workers() {
		cmds = append(cmds, steps.Command{Why: "cordon " + n.Name + " and evict its pods (DaemonSet pods stay)",
			Shell: kubectl + " drain " + n.Name + " --ignore-daemonsets --delete-emptydir-data"})
		cmds = append(cmds, install(n.Name, "kubelet", "kube-proxy")...)
		cmds = append(cmds, steps.Command{Why: "the new kubelet has posted its release and " + n.Name + " is Ready (until then the Node shows the old kubelet's status); then it takes pods again, and the evicted pods run elsewhere before the next worker",
			Shell: steps.WaitLoop(180, 1, kubectl+" get node "+n.Name+" -o jsonpath='{.status.nodeInfo.kubeletVersion}' | grep -qx "+to) + "\n" +
				kubectl + " wait --for=condition=Ready node/" + n.Name + " --timeout=180s\n" + kubectl + " uncordon " + n.Name + "\n" +
				kubectl + " wait --for=condition=Available deployment --all --all-namespaces --timeout=180s"})
	}
	cmds = append(cmds, steps.Command{Why: "every Node at " + to, Shell: kubectl + " get nodes"})
	return append(cmds, steps.Command{Why: "tell khw: cluster.yaml's versions.kubernetes is " + to + " now (khw up would put " + c.Versions.Kubernetes + " back otherwise)",
		Shell: `sed -i 's/^\(  kubernetes:\) *` + strings.ReplaceAll(c.Versions.Kubernetes, ".", `\.`) + `$/\1 ` + to + `/' "$KHW_STATE_DIR/$KHW_CLUSTER/cluster.yaml"` + "\nkhw config validate"}), nil
}

// Binaries are the Kubernetes binaries an upgrade installs: every one
// khw installs on a node.
var Binaries = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet", "kube-proxy"}

// units are the systemd units that run bins (kubectl runs none).
func units(bins []string) []string {
	var out []string
	for _, b := range bins {
		if b != "kubectl" {
			out = append(out, b)
		}
	}
	return out
}
