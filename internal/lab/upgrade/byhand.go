package upgrade

import (
	"context"
	"fmt"
	"strings"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/steps"
)

// ByHand is the upgrade of cluster c (as cluster.yaml has it now) to
// release to, as a person types it, node by node in the policy's order,
// each node waited for before the next: the new binaries downloaded into
// dir on the jumpbox and each checked against the digest khw trusts for it
// (Machines.DownloadCommands: the one m verified if it fetched them, else
// the pinned mirror manifest's), then
// kube-apiserver on each control plane (until its /readyz is ok), then
// kube-controller-manager, kube-scheduler and kubectl on each control
// plane (until both answer /healthz, then until both Leases are renewed),
// then each worker drained, kubelet and kube-proxy, Ready,
// uncordoned; last, versions.kubernetes in cluster.yaml, so that khw up
// keeps the new release instead of putting the old one back. dir is a
// shell word as it goes into the commands: a path through steps.Quote, or
// one built of variables in double quotes. kubeconfig is the admin
// kubeconfig's path ("": kubectl's own, as in khw shell). Errors:
// DownloadCommands'.
func ByHand(ctx context.Context, m *nodeplan.Machines, c *config.Cluster, to, dir, kubeconfig string) ([]steps.Command, error) {
	target := *c
	target.Versions.Kubernetes = to
	download, err := m.DownloadCommands(ctx, &target, Binaries...)
	if err != nil {
		return nil, err
	}
	kubectl := "kubectl"
	if kubeconfig != "" {
		kubectl += " --kubeconfig " + steps.Quote(kubeconfig)
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
	cmds := []steps.Command{{Why: "the " + to + " binaries in " + dir + ", each checked against the SHA-256 in the command, the one khw verified or the pinned mirror manifest lists (sha256sum -c must say OK for every file); never a checksum file the mirror serves, which whoever can change the mirror can change too" + nodeplan.MirrorCredentialsNote(download),
		Shell: "mkdir -p " + dir + " && cd " + dir + "\n" + download}}
	// A wait that runs out fails (false: set -e stops the by-hand script
	// and the node's commands there; typed by hand, it only prints why and
	// closes no shell): the next node must not change while this one is
	// not healthy.
	waitOr := func(tries int, probe, stop string) string {
		return steps.WaitLoop(tries, 1, probe) + "\nif ! " + probe + " >/dev/null; then echo '" + stop + "' >&2; false; fi"
	}
	for _, n := range c.ControlPlanes() {
		cmds = append(cmds, install(n.Name, "kube-apiserver")...)
		cmds = append(cmds, steps.Command{Node: n.Name, Why: "wait until this apiserver is ready before the next one (the others serve meanwhile)",
			Shell: waitOr(120, "curl -fsS --cacert /var/lib/kubernetes/ca.pem https://127.0.0.1:6443/readyz",
				"the new kube-apiserver on "+n.Name+" is not ready: stop here and read sudo journalctl -u kube-apiserver -n 30")})
	}
	for _, n := range c.ControlPlanes() {
		cmds = append(cmds, install(n.Name, "kube-controller-manager", "kube-scheduler", "kubectl")...)
		// Both serve /healthz on localhost with a self-signed cert (no
		// --tls-cert-file), which is all curl -k trusts here.
		cmds = append(cmds, steps.Command{Node: n.Name, Why: "wait until both answer /healthz before the next control plane (the other two hold or take the Leases meanwhile)",
			Shell: waitOr(60, "curl -fsSk https://127.0.0.1:10257/healthz", "the new kube-controller-manager on "+n.Name+" is not healthy: stop here and read sudo journalctl -u kube-controller-manager -n 30") + "\n" +
				waitOr(60, "curl -fsSk https://127.0.0.1:10259/healthz", "the new kube-scheduler on "+n.Name+" is not healthy: stop here and read sudo journalctl -u kube-scheduler -n 30")})
	}
	renewed := func(lease string) string {
		get := kubectl + " -n kube-system get lease " + lease + " -o jsonpath='{.spec.renewTime}'"
		return "T=$(" + get + ")\n" + waitOr(30, `[ "$(`+get+`)" != "$T" ]`, "nobody renews the Lease "+lease+": no leader; read the journal of "+lease+" on each control plane")
	}
	cmds = append(cmds, steps.Command{Why: "one controller-manager and one scheduler lead again: a leader renews its Lease every few seconds",
		Shell: renewed("kube-controller-manager") + "\n" + renewed("kube-scheduler") + "\n" + kubectl + " -n kube-system get lease kube-controller-manager kube-scheduler"})
	for _, n := range c.Workers() {
		cmds = append(cmds, steps.Command{Why: "cordon " + n.Name + " and evict its pods: DaemonSet pods stay, and emptyDir volumes go with their pods (--delete-emptydir-data says that is fine)",
			Shell: kubectl + " drain " + n.Name + " --ignore-daemonsets --delete-emptydir-data --timeout=5m"})
		cmds = append(cmds, install(n.Name, "kubelet", "kube-proxy")...)
		cmds = append(cmds, steps.Command{Why: "the new kubelet has posted its release and " + n.Name + " is Ready (until then the Node shows the old kubelet's status); then new pods may go to it again, and the evicted ones run elsewhere before the next worker",
			Shell: waitOr(180, kubectl+" get node "+n.Name+" -o jsonpath='{.status.nodeInfo.kubeletVersion}' | grep -qx "+to,
				"the kubelet on "+n.Name+" does not report "+to+": stop here and read sudo journalctl -u kubelet -n 30 on "+n.Name) + "\n" +
				kubectl + " wait --for=condition=Ready node/" + n.Name + " --timeout=180s\n" + kubectl + " uncordon " + n.Name + "\n" +
				kubectl + " wait --for=condition=Available deployment --all --all-namespaces --timeout=180s"})
	}
	cmds = append(cmds, steps.Command{Why: "every Node at " + to, Shell: kubectl + " get nodes"})
	yamlPath := `"$KHW_STATE_DIR/$KHW_CLUSTER/cluster.yaml"`
	return append(cmds, steps.Command{Why: "tell khw: cluster.yaml's versions.kubernetes is " + to + " now (khw up would put " + c.Versions.Kubernetes + " back otherwise)",
		Shell: `sed -i 's/^\(  kubernetes:\) *` + strings.ReplaceAll(c.Versions.Kubernetes, ".", `\.`) + `$/\1 ` + to + `/' ` + yamlPath + "\n" +
			"if ! grep -q '^  kubernetes: " + to + "$' " + yamlPath + "; then echo 'versions.kubernetes is not " + to + ": edit cluster.yaml by hand' >&2; false; fi\n" +
			"khw config validate"}), nil
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
