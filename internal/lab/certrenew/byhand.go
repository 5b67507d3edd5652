package certrenew

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/kubeconfig"
	"github.com/khw-dev/khw/internal/lab/etcd"
	"github.com/khw-dev/khw/internal/pki"
	"github.com/khw-dev/khw/internal/state"
	"github.com/khw-dev/khw/internal/steps"
)

// ByHandCommands are lab 14 typed in khw shell: the certs' days left as
// the nodes have them; the renewal in the pki directory for the keys
// already there; the kubelet kubeconfigs written again; then each control
// plane and each static worker one at a time (etcd's leadership handed
// away first, the copies, the restarts, a wait until it serves again);
// last, the TLS-bootstrap workers' new serving CSRs, checked and approved.
func ByHandCommands(c *config.Cluster, d state.Dir) []steps.Command {
	st := "$KHW_STATE_DIR/$KHW_CLUSTER"
	specs := map[string]pki.Spec{}
	for _, s := range pki.Specs(c) {
		specs[s.Name] = s
	}
	renewed := Renewed(c)
	var recipes []string
	for _, name := range renewed {
		recipes = append(recipes, specs[name].RenewRecipe(false))
	}
	cmds := []steps.Command{
		{Why: "part 1: how long each certificate has left, as the file on each node has it (not the jumpbox's copy)",
			Shell: "khw status --certs"},
		{Why: "part 2: renew " + strings.Join(renewed, ", ") + " in the pki directory, each for the key it has (a CSR from the key, signed with ca-config.json: valid for pki.certValidity from now)",
			Shell: "cd \"" + st + "/pki\"\n" + strings.Join(recipes, "\n") + "\n" +
				"for c in " + strings.Join(renewed, " ") + "; do openssl x509 -noout -serial -enddate -in $c.pem; done"},
	}
	kcs := map[string]kubeconfig.Spec{}
	for _, s := range kubeconfig.Specs(c) {
		kcs[s.File] = s
	}
	var sets []string
	for _, w := range renewed[1:] {
		sp := kcs[w+".kubeconfig"]
		sets = append(sets, fmt.Sprintf("kubectl config set-credentials %s --client-certificate=pki/%s.pem --client-key=pki/%s-key.pem --embed-certs=true --kubeconfig=%s/%s",
			sp.User, w, w, kubeconfig.DirName, sp.File))
	}
	if len(sets) > 0 {
		cmds = append(cmds, steps.Command{Why: "part 2: the kubelet kubeconfigs embed the client cert (lab 03): write it in again",
			Shell: "cd \"" + st + "\"\n" + strings.Join(sets, "\n")})
	}
	ctl := "sudo etcdctl --endpoints=https://127.0.0.1:2379" + etcd.EtcdctlTLS
	for _, n := range c.ControlPlanes() {
		cmds = append(cmds,
			steps.Command{Why: "part 3: " + n.Name + ", while the others serve: the renewed cert to it",
				Shell: "scp -F \"$KHW_SSH_CONFIG\" \"" + st + "/pki/kubernetes.pem\" " + n.Name + ":"},
			steps.Command{Node: n.Name, Why: "part 3: if this member leads etcd, hand the leadership to another member first, while it still serves; then the new cert in place, etcd restarted and waited for, kube-apiserver restarted and waited for",
				Shell: "st=$(" + ctl + " endpoint status -w json)\n" +
					"if [ \"$(" + ctl + " member list | wc -l)\" -gt 1 ] && [ \"$(echo \"$st\" | grep -o '\"member_id\":[0-9]*')\" = \"$(echo \"$st\" | grep -o '\"leader\":[0-9]*' | sed s/leader/member_id/)\" ]; then\n" +
					"  " + ctl + " move-leader \"$(" + ctl + " member list | grep -v ', " + n.Name + ",' | head -n 1 | cut -d, -f1)\"\n" +
					"fi\n" +
					"sudo install -m 0644 kubernetes.pem /etc/etcd/kubernetes.pem\n" +
					"sudo install -m 0644 kubernetes.pem /var/lib/kubernetes/kubernetes.pem\n" +
					"rm kubernetes.pem\n" +
					"sudo systemctl restart etcd\n" +
					steps.WaitLoop(60, 1, ctl+" endpoint health") + "\n" +
					ctl + " endpoint health || { echo 'etcd on " + n.Name + " is not healthy: stop here and read sudo journalctl -u etcd'; exit 1; }\n" +
					"sudo systemctl restart kube-apiserver\n" +
					steps.WaitLoop(60, 1, "curl -fsS --cacert /var/lib/kubernetes/ca.pem https://127.0.0.1:6443/readyz") + "\n" +
					"curl -fsS --cacert /var/lib/kubernetes/ca.pem https://127.0.0.1:6443/readyz || { echo 'kube-apiserver on " + n.Name + " is not ready: stop here and read sudo journalctl -u kube-apiserver'; exit 1; }\n" +
					"openssl s_client -connect 127.0.0.1:6443 </dev/null 2>/dev/null | openssl x509 -noout -serial"})
	}
	for _, w := range renewed[1:] {
		n, _ := c.Node(w)
		cmds = append(cmds,
			steps.Command{Why: "part 4: " + w + ": its renewed cert and kubeconfig to it",
				Shell: "scp -F \"$KHW_SSH_CONFIG\" \"" + st + "/pki/" + w + ".pem\" \"" + st + "/" + kubeconfig.DirName + "/" + w + ".kubeconfig\" " + w + ":"},
			steps.Command{Node: w, Why: "part 4: in place, the kubelet restarted (its pods keep running)",
				Shell: "sudo install -m 0644 " + w + ".pem /var/lib/kubelet/kubelet.pem\n" +
					"sudo install -m 0600 " + w + ".kubeconfig " + KubeletKubeconfig + "\n" +
					"rm " + w + ".pem " + w + ".kubeconfig\n" +
					"sudo systemctl restart kubelet\n" +
					"# the new kubelet answers its health endpoint (127.0.0.1:10248, the default) once it runs\n" +
					steps.WaitLoop(60, 1, "curl -fsS http://127.0.0.1:10248/healthz")},
			steps.Command{Why: "part 4: the kubelet serves the renewed cert (the same serial as the pki directory's) and its Node is Ready",
				Shell: steps.WaitLoop(60, 2, "kubectl wait --for=condition=Ready node/"+w+" --timeout=2s") + "\n" +
					"openssl s_client -connect " + n.IP + ":" + strconv.Itoa(KubeletPort) + " </dev/null 2>/dev/null | openssl x509 -noout -serial\n" +
					"openssl x509 -noout -serial -in \"" + st + "/pki/" + w + ".pem\""})
	}
	for _, n := range c.Workers() {
		if !n.TLSBootstrap {
			continue
		}
		cmds = append(cmds,
			steps.Command{Node: n.Name, Why: "part 5: " + n.Name + "'s kubelet renews its own certs; make it ask for a new serving cert now (it would at 70-90% of the cert's life)",
				Shell: "sudo rm /var/lib/kubelet/pki/kubelet-server-current.pem\nsudo systemctl restart kubelet"},
			steps.Command{Why: "part 5: its kubelet-serving CSR waits (the newest of " + n.Name + "'s serving CSRs without a condition): check it as in lab 10 (requested by system:node:" + n.Name + ", only its own name and IP), then approve it",
				Shell: "CSR=\nfor i in $(seq 30); do CSR=$(kubectl get csr --field-selector spec.signerName=kubernetes.io/kubelet-serving --sort-by=.metadata.creationTimestamp " +
					"-o jsonpath='{range .items[?(@.spec.username==\"system:node:" + n.Name + "\")]}{.metadata.name} {.status.conditions[*].type}{\"\\n\"}{end}' | awk 'NF == 1 { print $1 }' | tail -n 1); [ -n \"$CSR\" ] && break; sleep 2; done\n" +
					"kubectl get csr \"$CSR\" -o jsonpath='{.spec.username}{\"\\n\"}'\n" +
					"kubectl get csr \"$CSR\" -o jsonpath='{.spec.request}' | base64 -d | openssl req -noout -text | grep -E -A1 'Subject:|Alternative Name'\n" +
					"kubectl certificate approve \"$CSR\""})
	}
	return append(cmds, steps.Command{Why: "every certificate as the nodes have it now; then khw lab check 14", Shell: "khw status --certs | sed -n '/^CERTIFICATES/,$p'"})
}
