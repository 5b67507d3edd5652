package upgrade

import (
	"fmt"
	"strings"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/steps"
)

// ByHand is the upgrade as a person types it, node by node in the
// policy's order, each node waited for before the next: kube-apiserver on
// each control plane (until its /readyz is ok), then kube-controller-manager,
// kube-scheduler and kubectl (until both Leases are held), then each worker
// drained, kubelet and kube-proxy, Ready, uncordoned. dir holds the new
// binaries on the jumpbox (downloaded and checked first, as khw fetch
// does); kubeconfig is the admin kubeconfig.
func ByHand(c *config.Cluster, to, dir, kubeconfig string) []steps.Command {
	kubectl := "kubectl --kubeconfig " + kubeconfig
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
	cmds := []steps.Command{{Why: "the " + to + " binaries, each checked against its .sha256 (khw fetch --help says where they come from), in " + dir,
		Shell: "ls " + dir}}
	for _, n := range c.ControlPlanes() {
		cmds = append(cmds, install(n.Name, "kube-apiserver")...)
		cmds = append(cmds, steps.Command{Node: n.Name, Why: "wait until this apiserver is ready before the next one (the others serve meanwhile)",
			Shell: steps.WaitLoop(120, 1, "curl -fsS --cacert /var/lib/kubernetes/ca.pem https://127.0.0.1:6443/readyz")})
	}
	for _, n := range c.ControlPlanes() {
		cmds = append(cmds, install(n.Name, "kube-controller-manager", "kube-scheduler", "kubectl")...)
	}
	cmds = append(cmds, steps.Command{Why: "one controller-manager and one scheduler lead again (their Leases are renewed)",
		Shell: kubectl + " -n kube-system get lease kube-controller-manager kube-scheduler"})
	for _, n := range c.Workers() {
		cmds = append(cmds, steps.Command{Why: "cordon " + n.Name + " and evict its pods (DaemonSet pods stay)",
			Shell: kubectl + " drain " + n.Name + " --ignore-daemonsets --delete-emptydir-data"})
		cmds = append(cmds, install(n.Name, "kubelet", "kube-proxy")...)
		cmds = append(cmds, steps.Command{Why: n.Name + " is Ready again with the new kubelet; then it takes pods again",
			Shell: kubectl + " wait --for=condition=Ready node/" + n.Name + " --timeout=180s\n" + kubectl + " uncordon " + n.Name})
	}
	return append(cmds, steps.Command{Why: "every Node at " + to, Shell: kubectl + " get nodes"})
}

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
