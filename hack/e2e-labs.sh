#!/usr/bin/env bash
# make e2e-labs: the classroom path on real nspawn nodes, offline. Runs the
# 12 labs in order with `khw lab NN --yes` (each snapshots the nodes first),
# checks `khw lab list` says all done, then breaks two things by hand the way
# a student would and checks that `khw lab check` names each one with its
# lab: net.ipv4.ip_forward=0 on w1 (07-workers) and, on cp1, an apiserver
# certificate without the lb SAN (made with openssl, signed by the cluster
# CA: 02-pki). Finally `khw lab reset 04-etcd` must leave 01-03 done and
# 04-12 not done. Cleans up like make e2e. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/e2e-lib.sh
. hack/e2e-lib.sh

# lab runs one lab with its (long) output in $STATE/lab-<id>.log, shown only
# when it fails.
lab() {
  "$KHW" lab "$1" --yes --plain >"$STATE/lab-$1.log" 2>&1 || { tail -40 "$STATE/lab-$1.log"; return 1; }
  grep -E '^(✓|Snapshot|Lab )' "$STATE/lab-$1.log" || true
}

all_done() {
  local out
  out=$("$KHW" lab list)
  echo "$out"
  if [ "$(awk 'NR > 1 && $2 == "done"' <<<"$out" | wc -l)" != 12 ]; then
    echo "e2e-labs: not every lab is done" >&2; return 1
  fi
}

# expect_mistake LAB PATTERN...: khw lab check LAB must fail and print every
# PATTERN (fixed strings).
expect_mistake() {
  local lab=$1; shift
  local out rc=0
  out=$("$KHW" lab check "$lab" 2>&1) || rc=$?
  echo "$out"
  if [ $rc = 0 ]; then echo "e2e-labs: khw lab check $lab passed a broken cluster" >&2; return 1; fi
  local p
  for p in "$@"; do
    grep -qF -- "$p" <<<"$out" || { echo "e2e-labs: khw lab check $lab does not say: $p" >&2; return 1; }
  done
}

break_ip_forward() {
  # shellcheck disable=SC2016 # expanded by the shell inside khw shell
  "$KHW" shell -- sh -c 'ssh -F "$KHW_SSH_CONFIG" w1 sudo sysctl -w net.ipv4.ip_forward=0'
  expect_mistake 07 "[07-workers] w1" "ip_forward"
  "$KHW" lab list | grep -E '^07-workers +drifted'
}

break_apiserver_cert() {
  local pki=$STATE/$NAME/pki tmp
  tmp=$(mktemp -d)
  openssl req -new -key "$pki/kubernetes-key.pem" -subj "/CN=kubernetes/O=Kubernetes" -out "$tmp/x.csr"
  printf '%s\n' \
    'subjectAltName=IP:10.32.0.1,IP:192.168.122.11,IP:192.168.122.12,IP:192.168.122.13,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local' \
    'extendedKeyUsage=serverAuth,clientAuth' 'keyUsage=digitalSignature,keyEncipherment' >"$tmp/ext"
  openssl x509 -req -in "$tmp/x.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca-key.pem" -CAcreateserial \
    -days 1 -extfile "$tmp/ext" -out "$tmp/bad.pem" 2>/dev/null
  # shellcheck disable=SC2016 # expanded by the shell inside khw shell
  "$KHW" shell -- sh -c 'ssh -F "$KHW_SSH_CONFIG" cp1 "sudo tee /var/lib/kubernetes/kubernetes.pem >/dev/null"' <"$tmp/bad.pem"
  rm -rf "$tmp"
  expect_mistake 05 "[02-pki] cp1" "lacks the SANs lb"
}

reset_04() {
  "$KHW" lab reset 04-etcd --yes
  local out
  out=$("$KHW" lab list)
  echo "$out"
  local want got
  want=$(printf '%s\n' "01-machines done" "02-pki done" "03-kubeconfig done" \
    "04-etcd not" "05-control-plane not" "06-lb not" "07-workers not" "08-pod-network not" \
    "09-coredns not" "10-tls-bootstrap not" "11-smoke not" "12-failover not")
  got=$(awk 'NR > 1 { print $1, $2 }' <<<"$out")
  if [ "$got" != "$want" ]; then
    echo "e2e-labs: after khw lab reset 04-etcd, want 01-03 done and 04-12 not done" >&2; return 1
  fi
}

phase "build khw"       make -s build
phase "offline mirror"  hack/build-mirror.sh --out "$MIRROR_DIR" --arch "$(go env GOARCH)" ${E2E_ONLY:+--only "$E2E_ONLY"}
# This machine built the mirror, so it pins it (khw trusts a mirror only
# through its pin).
KHW_MIRROR_DIGEST=$(hack/mirror-pin.sh "$MIRROR_DIR")
export KHW_MIRROR_DIGEST
phase "khw init"        "$KHW" init --name "$NAME" --provider nspawn
for l in 01-machines 02-pki 03-kubeconfig 04-etcd 05-control-plane 06-lb 07-workers \
         08-pod-network 09-coredns 10-tls-bootstrap 11-smoke 12-failover; do
  phase "lab $l"        lab "$l"
done
phase "lab list"        all_done
phase "w1 ip_forward=0" break_ip_forward
phase "cp1 cert no lb"  break_apiserver_cert
phase "lab reset 04"    reset_04
du -sh "$STATE/$NAME/nspawn/snapshots" | sed 's/^/snapshots on disk: /'
if [ "${E2E_KEEP:-}" != 1 ]; then
  phase "khw down"      "$KHW" down
fi
print_phases
