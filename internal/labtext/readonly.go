package labtext

import "fmt"

// CheckReadOnly reports whether shell may run as an Observe block: it must
// be, byte for byte, one of observeAllowlist, the blocks of the embedded lab
// texts, each reviewed as read-only and quick. Anything else, however
// harmless it looks, is refused (nil means allowed).
//
// Observe blocks come only from the lab texts compiled into khw (labs/*.md,
// package github.com/khw-dev/khw/labs), so there is a fixed set of them, and
// an exact list is a check no quoting, substitution ($(…), `…`), option
// (sed 'e', ssh -o ProxyCommand=…, find -exec, awk system()) or redirect
// can get around, which a lexical check of shell text could not promise.
// TestObserveAllowlistMatchesLabs keeps the list and the texts equal: a lab
// change to an Observe block fails it until the new block is reviewed and
// put here.
func CheckReadOnly(shell string) error {
	if observeAllowed[shell] {
		return nil
	}
	return fmt.Errorf("not a reviewed read-only lab command: %q is not in the Observe allowlist (internal/labtext/readonly.go: observeAllowlist lists, exactly, the Observe blocks of the embedded lab texts)", clip(shell, 120))
}

// clip returns s cut to at most n runes, marked with "…" when cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

var observeAllowed = func() map[string]bool {
	m := make(map[string]bool, len(observeAllowlist))
	for _, s := range observeAllowlist {
		m[s] = true
	}
	return m
}()

// observeAllowlist is every distinct Observe and "You should have" block of
// the embedded lab texts, exactly as Parse returns it (Block.Shell: the lines between the
// fences, surrounding blank space trimmed), each checked by hand to only
// read and to return within seconds; the comment names the labs using it.
// The blocks run on the jumpbox inside `khw shell`, where ssh reaches the
// nodes only through -F "$KHW_SSH_CONFIG".
var observeAllowlist = []string{
	// 01-machines (You should have)
	`grep -E "^(name|provider):" "$KHW_STATE_DIR/$KHW_CLUSTER/cluster.yaml"`,
	// 01-machines
	`getent hosts lb cp1 cp2 cp3 w1 w2 w3`,
	// 01-machines
	`for n in lb cp1 cp2 cp3 w1 w2 w3; do
  ssh -F "$KHW_SSH_CONFIG" "$n" 'printf "%-4s " "$(hostname)"; ip -4 -br addr show | grep -v "^lo"'
done`,
	// 01-machines
	`ssh -F "$KHW_SSH_CONFIG" cp1 'grep -v "^#" /etc/hosts'`,
	// 01-machines
	`grep -E "^Host |HostName|User|IdentityFile|UserKnownHostsFile" "$KHW_SSH_CONFIG"`,
	// 02-pki
	`ls -l "$KHW_STATE_DIR/$KHW_CLUSTER/pki"`,
	// 02-pki
	`D="$KHW_STATE_DIR/$KHW_CLUSTER/pki"
for c in admin kube-controller-manager kube-scheduler kube-proxy kubernetes service-account w1 w2; do
  printf "%-24s " "$c"; openssl x509 -in "$D/$c.pem" -noout -subject
done`,
	// 02-pki
	`openssl x509 -in "$KHW_STATE_DIR/$KHW_CLUSTER/pki/kubernetes.pem" -noout -ext subjectAltName,extendedKeyUsage`,
	// 02-pki
	`D="$KHW_STATE_DIR/$KHW_CLUSTER/pki"
openssl verify -CAfile "$D/ca.pem" "$D/kubernetes.pem" "$D/admin.pem" "$D/w1.pem" "$D/w2.pem"`,
	// 02-pki
	`for n in cp1 w1 w3; do
  echo "== $n"
  ssh -F "$KHW_SSH_CONFIG" "$n" 'sudo find /etc/etcd /var/lib/kubernetes /var/lib/kubelet -maxdepth 1 -name "*.pem" -printf "%m %u %p\n" 2>/dev/null | sort -k3'
done`,
	// 03-kubeconfig
	`for f in "$KHW_STATE_DIR/$KHW_CLUSTER"/kubeconfigs/*.kubeconfig; do
  printf "%-38s " "${f##*/}"
  kubectl config view --kubeconfig "$f" -o jsonpath='{.users[0].name}  {.clusters[0].cluster.server}'
  echo
done`,
	// 03-kubeconfig
	`kubectl config view --raw --kubeconfig "$KHW_STATE_DIR/$KHW_CLUSTER/kubeconfigs/kube-proxy.kubeconfig" \
  -o jsonpath='{.users[0].user.client-certificate-data}' | base64 -d | openssl x509 -noout -subject`,
	// 03-kubeconfig
	`kubectl config view --minify`,
	// 03-kubeconfig
	`E="$KHW_STATE_DIR/$KHW_CLUSTER/encryption-config.yaml"
sed 's/secret: .*/secret: (hidden)/' "$E"
grep 'secret:' "$E" | awk '{print $2}' | base64 -d | wc -c`,
	// 03-kubeconfig
	`ssh -F "$KHW_SSH_CONFIG" cp1 'sudo grep -H server: /etc/kubernetes/admin.kubeconfig /var/lib/kubernetes/*.kubeconfig; sudo ls -l /var/lib/kubernetes/encryption-config.yaml'
ssh -F "$KHW_SSH_CONFIG" w1 'sudo grep -H server: /var/lib/kubelet/kubeconfig /var/lib/kube-proxy/kubeconfig'`,
	// 04-etcd
	`ssh -F "$KHW_SSH_CONFIG" cp1 'sudo etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/etc/etcd/ca.pem --cert=/etc/etcd/kubernetes.pem --key=/etc/etcd/kubernetes-key.pem member list -w table'`,
	// 04-etcd
	`ssh -F "$KHW_SSH_CONFIG" cp1 'sudo etcdctl --endpoints=https://cp1:2379,https://cp2:2379,https://cp3:2379 --cacert=/etc/etcd/ca.pem --cert=/etc/etcd/kubernetes.pem --key=/etc/etcd/kubernetes-key.pem endpoint status -w table'`,
	// 04-etcd; 12-failover and 13-etcd-backup (You should have)
	`ssh -F "$KHW_SSH_CONFIG" cp1 'sudo etcdctl --endpoints=https://cp1:2379,https://cp2:2379,https://cp3:2379 --cacert=/etc/etcd/ca.pem --cert=/etc/etcd/kubernetes.pem --key=/etc/etcd/kubernetes-key.pem endpoint health'`,
	// 04-etcd
	`ssh -F "$KHW_SSH_CONFIG" cp1 'sudo ss -ltnp | grep etcd; sudo ls -ld /var/lib/etcd'`,
	// 04-etcd: a GET of /version from the jumpbox with four of khw's certs;
	// etcd answers only the apiserver's.
	`D="$KHW_STATE_DIR/$KHW_CLUSTER/pki"
for c in kubernetes w1 kube-proxy admin; do
  echo "$c: $(curl -sS --max-time 3 --cacert "$D/ca.pem" --cert "$D/$c.pem" --key "$D/$c-key.pem" https://cp1:2379/version 2>&1)"
done`,
	// 04-etcd
	`ssh -F "$KHW_SSH_CONFIG" cp1 'sudo journalctl -u etcd --no-pager | grep -iE "elected leader|became leader|became follower" | tail -n 5'`,
	// 05-control-plane
	`kubectl --server https://cp1:6443 get --raw '/readyz?verbose'`,
	// 05-control-plane
	`for n in cp1 cp2 cp3; do
  printf "%s: " "$n"; kubectl --server "https://$n:6443" get --raw /readyz
  printf " "; kubectl --server "https://$n:6443" get --raw /livez; echo
done`,
	// 05-control-plane
	`for n in cp1 cp2 cp3; do
  printf "%s: " "$n"; ssh -F "$KHW_SSH_CONFIG" "$n" 'systemctl is-active kube-apiserver kube-controller-manager kube-scheduler | tr "\n" " "'; echo
done`,
	// 05-control-plane
	`kubectl --server https://cp1:6443 -n kube-system get lease kube-controller-manager kube-scheduler \
  -o custom-columns=NAME:.metadata.name,HOLDER:.spec.holderIdentity,TRANSITIONS:.spec.leaseTransitions,RENEWED:.spec.renewTime`,
	// 05-control-plane
	`kubectl --server https://cp1:6443 get endpointslices -l kubernetes.io/service-name=kubernetes`,
	// 05-control-plane
	`kubectl --server https://cp1:6443 get clusterrolebinding system:kube-apiserver -o wide
kubectl --server https://cp1:6443 auth whoami`,
	// 06-lb
	`kubectl get --raw '/readyz?verbose'`,
	// 06-lb
	`openssl s_client -connect lb:6443 -servername lb </dev/null 2>/dev/null | openssl x509 -noout -subject -ext subjectAltName`,
	// 06-lb, 12-failover
	`ssh -F "$KHW_SSH_CONFIG" lb "curl -s 'http://127.0.0.1:8404/stats;csv'" |
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $1 == "kube-apiservers" { print $2, $(col["status"]), $(col["check_status"]), "lastchg=" $(col["lastchg"]) "s" }'`,
	// 06-lb
	`ssh -F "$KHW_SSH_CONFIG" lb 'grep -nE "mode tcp|balance|httpchk|http-check|default-server|server cp" /etc/haproxy/haproxy.cfg'`,
	// 06-lb
	`ssh -F "$KHW_SSH_CONFIG" lb 'sudo journalctl -u haproxy -n 15 --no-pager'`,
	// 07-workers, 10-tls-bootstrap
	`kubectl get nodes -o wide`,
	// 07-workers
	`for n in w1 w2; do
  printf "%s: " "$n"; ssh -F "$KHW_SSH_CONFIG" "$n" 'systemctl is-active containerd kubelet kube-proxy | tr "\n" " "'; echo
done`,
	// 07-workers
	`ssh -F "$KHW_SSH_CONFIG" w1 'sudo sysctl net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables net.ipv4.ip_forward; sudo swapon --show'`,
	// 07-workers
	`ssh -F "$KHW_SSH_CONFIG" w1 'grep -n SystemdCgroup /etc/containerd/config.toml; grep -n cgroupDriver /var/lib/kubelet/kubelet-config.yaml'`,
	// 07-workers
	`openssl x509 -in "$KHW_STATE_DIR/$KHW_CLUSTER/pki/w1.pem" -noout -subject -ext subjectAltName
ssh -F "$KHW_SSH_CONFIG" w1 'systemctl cat kubelet | grep -E "hostname-override|node-ip"'`,
	// 07-workers
	`ssh -F "$KHW_SSH_CONFIG" w1 'sudo crictl --runtime-endpoint unix:///var/run/containerd/containerd.sock images'`,
	// 07-workers
	`ssh -F "$KHW_SSH_CONFIG" w1 'sudo iptables -t nat -S KUBE-SERVICES | grep 10.32.0.1/32'`,
	// 08-pod-network
	`for n in w1 w2 w3; do
  echo "== $n"; ssh -F "$KHW_SSH_CONFIG" "$n" 'ip -4 route show'
done`,
	// 08-pod-network
	`ssh -F "$KHW_SSH_CONFIG" w1 'systemctl is-active khw-pod-routes; systemctl cat khw-pod-routes | grep ExecStart'`,
	// 08-pod-network
	`ssh -F "$KHW_SSH_CONFIG" w1 'ls /etc/cni/net.d; ls /opt/cni/bin | tr "\n" " "; echo; cat /etc/cni/net.d/10-*.conf'`,
	// 08-pod-network
	`ssh -F "$KHW_SSH_CONFIG" w1 'grep -n podCIDR /var/lib/kubelet/kubelet-config.yaml'
kubectl get nodes -o 'custom-columns=NAME:.metadata.name,SPEC_PODCIDR:.spec.podCIDR,INTERNAL_IP:.status.addresses[0].address'`,
	// 08-pod-network
	`kubectl get pods -A -o wide`,
	// 09-coredns
	`kubectl -n kube-system get deployment,pods,service -l k8s-app=kube-dns -o wide`,
	// 09-coredns
	`kubectl -n kube-system get endpointslices -l kubernetes.io/service-name=kube-dns`,
	// 09-coredns
	`ssh -F "$KHW_SSH_CONFIG" w1 'grep -A1 clusterDNS /var/lib/kubelet/kubelet-config.yaml'
kubectl -n kube-system get service kube-dns -o jsonpath='{.spec.clusterIP}{"\n"}'`,
	// 09-coredns
	`kubectl -n kube-system get configmap coredns -o jsonpath='{.data.Corefile}'`,
	// 09-coredns
	`ssh -F "$KHW_SSH_CONFIG" w1 'curl -s --max-time 3 http://10.32.0.10:9153/metrics | grep -E "^coredns_(build_info|dns_requests_total)" | head -n 5'`,
	// 09-coredns
	`kubectl -n kube-system logs deployment/coredns --tail=10`,
	// 10-tls-bootstrap
	`kubectl get csr -o 'custom-columns=NAME:.metadata.name,SIGNER:.spec.signerName,REQUESTOR:.spec.username,CONDITION:.status.conditions[*].type'`,
	// 10-tls-bootstrap
	`kubectl -n kube-system get secrets --field-selector type=bootstrap.kubernetes.io/token`,
	// 10-tls-bootstrap
	`kubectl get clusterrolebindings khw:kubelet-bootstrap khw:node-autoapprove-bootstrap khw:node-autoapprove-certificate-rotation -o wide`,
	// 10-tls-bootstrap
	`ssh -F "$KHW_SSH_CONFIG" w3 'sudo ls -l /var/lib/kubelet /var/lib/kubelet/pki'`,
	// 10-tls-bootstrap
	`ssh -F "$KHW_SSH_CONFIG" w3 "sudo sed -n '/BEGIN CERTIFICATE/,/END CERTIFICATE/p' /var/lib/kubelet/pki/kubelet-client-current.pem" |
  openssl x509 -noout -subject -issuer -enddate`,
	// 10-tls-bootstrap
	`openssl s_client -connect w3:10250 </dev/null 2>/dev/null | openssl x509 -noout -subject -issuer -ext subjectAltName`,
	// 11-smoke
	`kubectl get nodes
kubectl get pods -A -o wide`,
	// 11-smoke
	`for n in w1 w2 w3; do printf "%s: " "$n"; kubectl get --raw "/api/v1/nodes/$n/proxy/healthz"; echo; done`,
	// 11-smoke
	`ssh -F "$KHW_SSH_CONFIG" cp1 '
  C="--endpoints=https://127.0.0.1:2379 --cacert=/etc/etcd/ca.pem --cert=/etc/etcd/kubernetes.pem --key=/etc/etcd/kubernetes-key.pem"
  for k in $(sudo etcdctl $C get /registry/secrets --prefix --keys-only); do
    printf "%s  " "$k"; sudo etcdctl $C get "$k" --print-value-only | head -c 32 | tr -c "[:print:]" "."; echo
  done'`,
	// 11-smoke
	`for n in cp1 cp2 cp3; do
  printf "%s: " "$n"; ssh -F "$KHW_SSH_CONFIG" "$n" 'sudo grep -c khw-smoke /var/log/kubernetes/audit.log'
done`,
	// 11-smoke
	`ssh -F "$KHW_SSH_CONFIG" cp1 'systemctl cat kube-apiserver | grep -E "service-node-port-range|service-cluster-ip-range"'`,
	// 12-failover
	`ssh -F "$KHW_SSH_CONFIG" -o ConnectTimeout=3 cp1 'sudo etcdctl --endpoints=https://cp1:2379,https://cp2:2379,https://cp3:2379 --cacert=/etc/etcd/ca.pem --cert=/etc/etcd/kubernetes.pem --key=/etc/etcd/kubernetes-key.pem --dial-timeout=1s --command-timeout=1s endpoint status -w table 2>&1 | grep -v retry_interceptor'`,
	// 12-failover
	`ssh -F "$KHW_SSH_CONFIG" -o ConnectTimeout=3 cp1 'sudo etcdctl --endpoints=https://cp1:2379,https://cp2:2379,https://cp3:2379 --cacert=/etc/etcd/ca.pem --cert=/etc/etcd/kubernetes.pem --key=/etc/etcd/kubernetes-key.pem --dial-timeout=1s --command-timeout=2s endpoint health 2>&1 | grep -v retry_interceptor'`,
	// 12-failover
	`kubectl --request-timeout=2s -n kube-system get lease kube-controller-manager kube-scheduler \
  -o custom-columns=NAME:.metadata.name,HOLDER:.spec.holderIdentity,TRANSITIONS:.spec.leaseTransitions,RENEWED:.spec.renewTime`,
	// 12-failover
	`for n in cp1 cp2 cp3; do
  printf "%s: " "$n"; kubectl --request-timeout=1s --server "https://$n:6443" get --raw /readyz 2>&1 | tail -n 1; echo
done`,
	// 12-failover
	`ssh -F "$KHW_SSH_CONFIG" -o ConnectTimeout=3 cp1 'sudo journalctl -u etcd --no-pager | grep -aiE "elected leader|became (leader|follower|candidate|pre-candidate)|lost tcp streaming|prevote" | tail -n 8'`,
	// 12-failover
	`ssh -F "$KHW_SSH_CONFIG" -o ConnectTimeout=3 cp1 'sudo journalctl -u kube-controller-manager --no-pager | grep -aiE "leaderelection|acquired lease|lost" | tail -n 5'`,
	// 13-etcd-backup
	`ssh -F "$KHW_SSH_CONFIG" cp1 'sudo etcdctl --endpoints=https://cp1:2379,https://cp2:2379,https://cp3:2379 --cacert=/etc/etcd/ca.pem --cert=/etc/etcd/kubernetes.pem --key=/etc/etcd/kubernetes-key.pem endpoint status -w fields' | grep -E '^"(Endpoint|ClusterID|Revision)"'`,
	// 13-etcd-backup
	`kubectl -n khw-lab13 get configmaps`,
	// 13-etcd-backup
	`ssh -F "$KHW_SSH_CONFIG" cp1 'sudo etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/etc/etcd/ca.pem --cert=/etc/etcd/kubernetes.pem --key=/etc/etcd/kubernetes-key.pem get /registry/namespaces/khw-lab13 --rev=1000000000 --keys-only 2>&1'`,
	// 13-etcd-backup
	`ssh -F "$KHW_SSH_CONFIG" cp1 'sudo ls -ld /var/lib/etcd /var/lib/etcd.before-restore'`,
	// 13-etcd-backup
	`ls -l "$KHW_STATE_DIR/$KHW_CLUSTER/etcd-snapshots"`,
	// 14-cert-renewal (You should have)
	`khw status --certs | sed -n '/^CERTIFICATES/,$p' | grep -E '^(NODE|cp1|w1|w3) .*(FILE|kubernetes.pem|kubelet)'`,
	// 14-cert-renewal: a TLS handshake reads the served cert (no client cert is sent)
	`for ip in 192.168.122.11 192.168.122.12 192.168.122.13; do
  printf "%s " "$ip"; openssl s_client -connect "$ip:6443" </dev/null 2>/dev/null | openssl x509 -noout -serial
done
openssl x509 -noout -serial -in "$KHW_STATE_DIR/$KHW_CLUSTER/pki/kubernetes.pem"`,
	// 14-cert-renewal: the cert's public key, never the private key
	`D="$KHW_STATE_DIR/$KHW_CLUSTER/pki"
openssl x509 -noout -startdate -enddate -in "$D/kubernetes.pem"
openssl x509 -noout -pubkey -in "$D/kubernetes.pem" | sha256sum`,
	// 14-cert-renewal
	`kubectl get csr --sort-by=.metadata.creationTimestamp`,
	// 14-cert-renewal: awk prints only (no system(), no redirect)
	`R=$(ls -d "$KHW_STATE_DIR/$KHW_CLUSTER"/operations/*-pki-renew | tail -n 1)
sed -n '/^| signal/,/^$/p' "$R/report.md" |
  awk -F' [|] ' '$3 ~ / of / { sub(/^[|] /, "", $1); printf "%-10s failed %-12s longest %s\n", $1, $3, $5 }'`,
	// 15-upgrade (You should have, and after)
	`kubectl get nodes`,
	// 15-upgrade: each binary's --version only
	`for n in cp1 cp2 cp3; do
  ssh -F "$KHW_SSH_CONFIG" "$n" 'printf "%s" "$(hostname)"; for b in kube-apiserver kube-controller-manager kube-scheduler; do printf " %s %s" "$b" "$(/usr/local/bin/$b --version | cut -d" " -f2)"; done; echo'
done`,
	// 15-upgrade
	`kubectl get events --field-selector involvedObject.kind=Node --sort-by=.lastTimestamp | grep -E 'NodeNotSchedulable|NodeSchedulable|Starting kubelet' | tail -n 12`,
	// 15-upgrade: awk prints only (no system(), no redirect)
	`R=$(ls -d "$KHW_STATE_DIR/$KHW_CLUSTER"/operations/*-upgrade | tail -n 1)
sed -n '/^| signal/,/^$/p' "$R/report.md" |
  awk -F' [|] ' '$3 ~ / of / { sub(/^[|] /, "", $1); printf "%-10s failed %-12s longest %s\n", $1, $3, $5 }'`,
}
