#!/usr/bin/env bash
# make e2e: a real cluster on systemd-nspawn nodes, built offline, with the
# wall time of every phase. Phases: build khw, build or reuse the offline
# mirror, khw init --provider nspawn, khw up (the first run on a machine also
# builds the node image with debootstrap), khw status, khw up again (must be
# a no-op: every step clean), khw down; then it checks that nothing is left
# (network namespace, nspawn processes, node roots). It cleans up on failure
# and Ctrl-C too. Needs root (nspawn) and a Debian/Ubuntu host.
#
# Env: MIRROR_DIR (default ~/.cache/khw/mirror), E2E_ONLY (mirror components
# to build, default all), E2E_CNI=mybridge (the seed's teaching CNI plugin
# instead of the standard bridge), E2E_KEEP=1 keeps the cluster up at the
# end (tear it down with the printed khw down).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=hack/e2e-lib.sh
. hack/e2e-lib.sh

noop_check() {
  local out
  out=$("$KHW" up)
  echo "$out"
  if [ "$(grep -vc '(clean' <<<"$out")" != 0 ]; then
    echo "e2e: the second khw up was not a no-op (every line must say clean)" >&2
    return 1
  fi
}

# Independent witnesses of the TLS bootstrap and the workers: kubectl (not
# khw's client-go code) and openssl on w3 itself.
witness() {
  "$KHW" kubectl get nodes -o wide
  local ready
  ready=$("$KHW" kubectl get nodes --no-headers | awk '$2 == "Ready" { n++ } END { print n + 0 }')
  if [ "$ready" != 3 ]; then
    echo "e2e: $ready Ready nodes, want 3" >&2
    return 1
  fi
  local csrs
  csrs=$("$KHW" kubectl get csr)
  echo "$csrs"
  # (captured first: grep -q in a pipe would end kubectl with SIGPIPE under pipefail)
  grep -q 'kube-apiserver-client-kubelet.*system:bootstrap:.*Approved,Issued' <<<"$csrs" || {
    echo "e2e: no client CSR of w3 requested with a bootstrap token and issued" >&2; return 1; }
  local subject
  # shellcheck disable=SC2016 # expanded by the inner shell, where khw shell sets it
  subject=$("$KHW" shell -- sh -c 'ssh -F "$KHW_SSH_CONFIG" w3 sudo openssl x509 -noout -subject -in /var/lib/kubelet/pki/kubelet-client-current.pem')
  echo "w3 client cert: $subject"
  case "$subject" in
    *"O = system:nodes, CN = system:node:w3"*) ;;
    *) echo "e2e: w3's client cert subject is not O=system:nodes, CN=system:node:w3" >&2; return 1 ;;
  esac
  etcd_witness
}

# etcd_refuses DESC CMD...: CMD (a curl to etcd) must fail. Whether curl
# reads etcd's TLS alert (bad certificate) before the connection closes is a
# race, so the reason is read from etcd's journal afterwards (etcd_witness).
etcd_refuses() {
  local desc=$1 out
  shift
  if out=$("$@" 2>&1); then
    echo "e2e: etcd answered $desc: $out" >&2
    return 1
  fi
  echo "etcd refuses $desc: $out"
}

# etcd_refusals prints the lines of cp1's etcd journal that log a client
# cert refused by the allowlist (embed/config_logging.go: "rejected
# connection on client endpoint", error "client certificate authentication
# failed").
etcd_refusals() {
  # shellcheck disable=SC2016 # expanded by the inner shell, where khw shell sets it
  "$KHW" shell -- sh -c 'ssh -F "$KHW_SSH_CONFIG" cp1 sudo journalctl -u etcd --no-pager -o cat' | grep 'client certificate authentication failed' || true
}

# Independent witness of etcd's client allowlist (curl and etcd's own log,
# not khw's etcd client): every cert of the one CA but the apiserver's is
# refused on cp1's client port (192.168.122.11:2379, the default cluster),
# from the workers with their own certs and from the jumpbox, and cp1's
# journal says why for each; the kubernetes cert is answered, and every
# apiserver is ready (so it reaches etcd).
etcd_witness() {
  local pki="$STATE/$NAME/pki" etcd=https://192.168.122.11:2379 c out ip before after
  before=$(etcd_refusals | grep -c . || true)
  # shellcheck disable=SC2016 # expanded by the inner shell, where khw shell sets it
  etcd_refuses "w1's kubelet cert, from w1" "$KHW" shell -- sh -c 'ssh -F "$KHW_SSH_CONFIG" w1 sudo curl -sS --max-time 5 --cacert /var/lib/kubernetes/ca.pem --cert /var/lib/kubelet/kubelet.pem --key /var/lib/kubelet/kubelet-key.pem '"$etcd/version"
  # shellcheck disable=SC2016
  etcd_refuses "w3's bootstrap-issued client cert, from w3" "$KHW" shell -- sh -c 'ssh -F "$KHW_SSH_CONFIG" w3 sudo curl -sS --max-time 5 --cacert /var/lib/kubernetes/ca.pem --cert /var/lib/kubelet/pki/kubelet-client-current.pem --key /var/lib/kubelet/pki/kubelet-client-current.pem '"$etcd/version"
  for c in w1 kube-proxy admin; do
    etcd_refuses "$c.pem, from the jumpbox" "$KHW" shell -- curl -sS --max-time 5 --cacert "$pki/ca.pem" --cert "$pki/$c.pem" --key "$pki/$c-key.pem" "$etcd/version"
  done
  out=$(etcd_refusals)
  after=$(grep -c . <<<"$out" || true)
  if [ $((after - before)) -lt 5 ] || ! grep -q '"dns-names":\["w1"' <<<"$out"; then
    echo "e2e: cp1's etcd journal does not show the 5 refusals ($before before, $after after):" >&2
    echo "$out" >&2
    return 1
  fi
  echo "cp1's etcd journal: $((after - before)) connections refused with \"client certificate authentication failed\", e.g.:"
  grep -m1 '"dns-names":\["w1"' <<<"$out"
  out=$("$KHW" shell -- curl -sS --max-time 5 --cacert "$pki/ca.pem" --cert "$pki/kubernetes.pem" --key "$pki/kubernetes-key.pem" "$etcd/version")
  echo "etcd answers kubernetes.pem: $out"
  grep -q '"etcdserver":"3\.' <<<"$out" || { echo "e2e: etcd did not answer the apiserver's cert" >&2; return 1; }
  for ip in 192.168.122.11 192.168.122.12 192.168.122.13; do
    out=$("$KHW" shell -- curl -sS --max-time 5 --cacert "$pki/ca.pem" --cert "$pki/admin.pem" --key "$pki/admin-key.pem" "https://$ip:6443/readyz?verbose")
    if ! grep -q '^\[+\]etcd ok' <<<"$out" || ! grep -q 'readyz check passed' <<<"$out"; then
      echo "e2e: the apiserver at $ip is not ready with etcd:" >&2; echo "$out" >&2; return 1
    fi
    echo "apiserver $ip: etcd ok, readyz check passed"
  done
}

# drill_figures prints the measured numbers of every drill report (JSON).
drill_figures() {
  local f
  echo "drill figures:"
  for f in "$STATE/$NAME"/drills/*/report.json; do
    jq -r '"  \(.id): passed=\(.passed) broken \(.brokenFor) s, recovery \(.recovery // "n/a") s after heal; " +
      ([.signals[] | select(.signal == "api-read" or .signal == "api-write") |
        "\(.signal) failed \(.failed)/\(.samples), longest \(.longest) s, slowest \(.slowest) s"] | join("; ")) +
      "; haproxy down: " + ([.parts[] | select(.signal == "haproxy" and .downAfter != null) | "\(.part) +\(.downAfter) s"] | join(", ")) +
      "; raft term \(.etcd.termBefore)->\(.etcd.termAfter), quorum back \(.etcd.quorumBackAfterHeal // "n/a") s; leases: " +
      ([.leases[] | "\(.name) \(.holderBefore)->\(.holderAfter) (\(.transitionsBefore)->\(.transitionsAfter))"] | join(", "))' "$f"
  done
}

status_check() {
  "$KHW" status
  local js
  js=$("$KHW" status -o json)
  grep -q '"quorum": true' <<<"$js"
}

phase "build khw"       make -s build
phase "offline mirror"  hack/build-mirror.sh --out "$MIRROR_DIR" --arch "$(go env GOARCH)" ${E2E_ONLY:+--only "$E2E_ONLY"}
# This machine built the mirror, so it pins it (khw trusts a mirror only
# through its pin).
KHW_MIRROR_DIGEST=$(hack/mirror-pin.sh "$MIRROR_DIR")
export KHW_MIRROR_DIGEST
phase "khw init"        "$KHW" init --name "$NAME" --provider nspawn
if [ -n "${E2E_CNI:-}" ]; then
  # kubernetes.cni: bridge (default) or mybridge (the teaching plugin)
  sed -i -E "s/^(\s+cni:) .*/\1 $E2E_CNI/" "$STATE/$NAME/cluster.yaml"
  grep -E '^\s+cni:' "$STATE/$NAME/cluster.yaml"
fi
UP_T0=$(date +%s%N)
phase "khw up"          "$KHW" up
if "$KHW" smoke --help >/dev/null 2>&1; then
  phase "khw smoke"     "$KHW" smoke
fi
UP_T1=$(date +%s%N)
phase "witnesses"       witness
phase "khw status"      status_check
phase "khw up (no-op)"  noop_check
if [ "${E2E_DRILLS:-}" = 1 ]; then
  # The failover drills of issue #7, each must pass its verdict (exit 0):
  # one etcd member down (the leader: one election, API stays up), the
  # seed's power-off of cp2, and the seed's quorum loss (2 of 3 members).
  phase "drill etcd x1"     "$KHW" break etcd --count 1 --for 20s
  phase "drill cp2 off"     "$KHW" break node cp2 --for 30s
  phase "drill etcd x2"     "$KHW" break etcd --count 2 --for 30s
  drill_figures
fi
if [ "${E2E_KEEP:-}" != 1 ]; then
  phase "khw down"      "$KHW" down
fi

print_phases
ds=$(( (UP_T1 - UP_T0) / 100000000 ))
printf '  %-22s %5d.%d s\n' "up start → smoke green" $((ds / 10)) $((ds % 10))
