#!/usr/bin/env bash
# The nspawn end-to-end runs (make e2e, e2e-drills, e2e-labs, e2e-nspawn): a
# real cluster on systemd-nspawn nodes, built offline, with the wall time of
# every phase. One cluster serves every check, so CI builds it once:
#
#   build khw, build or reuse the offline mirror, khw init --provider nspawn;
#   the cluster: `khw up` + `khw smoke`, or with E2E_LABS=1 the labs in
#     order, by hand: `khw lab 01 --by-hand --yes` (khw makes the machines),
#     then for 02-10 each lab's commands as `khw lab NN --by-hand` shows
#     them, run in khw shell, and `khw lab check NN --hints` (06 first with
#     the HAProxy restart left out, which the hints must lead to; 11 has
#     nothing left to change; 12 is a drill run by hand); `khw lab list`
#     all done;
#   witnesses from outside khw (kubectl, openssl, curl against etcd), khw
#     status, khw up again (must be a no-op: every step clean — after the
#     labs this also shows that the typed commands built what khw up
#     builds; it runs after the restore below), khw etcd snapshot save (its
#     revision read back by etcdutl snapshot status), khw etcd restore (a
#     ConfigMap deleted after the snapshot back, one made after it gone,
#     every member in one new cluster at the bumped revision);
#   E2E_DRILLS=1: three failover drills, each must pass its verdict;
#   E2E_LABS=1: mistakes made by hand the way a student would, each on one
#     node, which `khw lab check` must name with their lab, evidence and fix
#     (and one, a wrong port in HAProxy's config, also by hints: where to
#     look, then what is wrong, then the fix: khw lab check --hints, khw lab
#     hint) (net.ipv4.ip_forward=0 on w1: 07-workers; on cp1 an apiserver
#     certificate without the lb SAN, made with openssl and signed by the
#     cluster CA: 02-pki; --authorization-mode=AlwaysAllow on cp2; etcd on
#     cp3 listening for clients on 127.0.0.1 only; another
#     --initial-cluster-token on cp2; the kubelet on w2 allowing anonymous
#     requests), a correct variant that must pass (HAProxy's timeout connect
#     on lb); then `khw lab reset 10-tls-bootstrap` must leave 01-09 done
#     and 10-13 not done (the mistakes undone with the nodes' snapshots),
#     and `khw lab NN --yes` does 10 and 11 again, a drill that passes
#     marks 12 done (E2E_DRILLS; else khw lab 12 --yes), khw lab 13 --yes
#     restores etcd from its snapshot and passes its check, which must then
#     name a ConfigMap made after the snapshot, khw lab 14 --yes renews
#     certificates while the cluster serves and passes its check; `khw lab
#     list` all done and `khw up` a no-op again;
#   E2E_CHALLENGES=all|ID,…|rotate:N: the troubleshooting challenges'
#     proof (function challenges below) on the built cluster;
#   khw down, and a check that nothing is left (network namespace, nspawn
#     processes, node roots). It cleans up on failure and Ctrl-C too.
#
# The first run on a machine also builds the node image with debootstrap.
# Needs root (nspawn) and a Debian/Ubuntu host.
#
# Env: MIRROR_DIR (default ~/.cache/khw/mirror), E2E_ONLY (mirror components
# to build, default all), E2E_CNI=mybridge (the seed's teaching CNI plugin
# instead of the standard bridge), E2E_LABS=1, E2E_DRILLS=1,
# E2E_CHALLENGES (above),
# E2E_KEEP=1 keeps the cluster up at the end (tear it down with the printed
# khw down).
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
# etcd_restore: khw etcd restore takes the cluster back to a snapshot: a
# ConfigMap deleted after it is back, one made after it is gone; every
# member (asked by etcdctl on cp1) in one new cluster, at the snapshot's
# revision plus the bump; the report written; khw up clean afterwards.
etcd_restore() {
  local snap=$STATE/before-restore.db rev ids revs out
  "$KHW" kubectl -n default create configmap e2e-before --from-literal=made=before
  rev=$("$KHW" etcd snapshot save "$snap" -o json | jq -r .revision)
  "$KHW" kubectl -n default delete configmap e2e-before
  "$KHW" kubectl -n default create configmap e2e-after --from-literal=made=after
  "$KHW" etcd restore "$snap" --yes >"$STATE/restore.log" 2>&1 || { tail -40 "$STATE/restore.log"; return 1; }
  grep -E '^\[[0-9]+/[0-9]+\]|^  [✓✗]|^etcd restore|^  [a-z-]+ +failed|^Report:|^  revision after' "$STATE/restore.log"
  [ "$("$KHW" kubectl -n default get configmap e2e-before -o jsonpath='{.data.made}')" = before ] || {
    echo "e2e: the ConfigMap deleted after the snapshot is not back" >&2; return 1; }
  if "$KHW" kubectl -n default get configmap e2e-after >/dev/null 2>&1; then
    echo "e2e: the ConfigMap made after the snapshot survived the restore" >&2; return 1
  fi
  etcd_restored "$rev"
  "$KHW" kubectl -n default delete configmap e2e-before
}

# etcd_restored REV: etcdctl on cp1 (a witness outside khw) sees three
# members in one cluster, each at a revision past the snapshot's REV plus
# the bump.
etcd_restored() {
  local out ids revs
  # shellcheck disable=SC2016 # expanded on cp1
  out=$("$KHW" shell -- sh -c 'ssh -F "$KHW_SSH_CONFIG" cp1 sudo etcdctl --endpoints=https://192.168.122.11:2379,https://192.168.122.12:2379,https://192.168.122.13:2379 --cacert=/etc/etcd/ca.pem --cert=/etc/etcd/kubernetes.pem --key=/etc/etcd/kubernetes-key.pem endpoint status -w json')
  ids=$(grep -o '"cluster_id":[0-9]*' <<<"$out" | sort -u | wc -l)
  revs=$(jq -r '[.[].Status.header.revision] | min' <<<"$out")
  echo "etcdctl endpoint status: $out"
  if [ "$(jq length <<<"$out")" != 3 ] || [ "$ids" != 1 ]; then
    echo "e2e: want 3 members in one cluster, got $out" >&2; return 1
  fi
  [ "$revs" -ge $(($1 + 1000000000)) ] || { echo "e2e: revision $revs is below the snapshot's $1 + 1000000000" >&2; return 1; }
}

# lab_13: khw lab 13 --yes makes its objects, saves a snapshot, changes
# them and restores etcd, and its check passes; witnesses: the objects as
# in the snapshot, etcdctl's view of the members; then the check must name
# a ConfigMap made after the restore as one the snapshot did not have.
lab_13() {
  local log=$STATE/lab-13-etcd-backup.log rev
  lab 13-etcd-backup
  grep -E '^── |^\[[0-9]+/[0-9]+\]|^  [✓✗]|^  revision (after|[0-9])|^Report:|^  [a-z-]+ +failed' "$log"
  grep -qF "✓ lab 13-etcd-backup passes" "$log" || { echo "e2e: khw lab 13 did not pass its check" >&2; return 1; }
  rev=$(sed -n 's/^  revision \([0-9]*\) from cp[0-9].*/\1/p' "$log")
  [ -n "$rev" ] || { echo "e2e: khw lab 13 printed no snapshot revision" >&2; return 1; }
  [ "$("$KHW" kubectl -n khw-lab13 get configmap kept -o jsonpath='{.data.made}')" = "before the snapshot" ] || {
    echo "e2e: ConfigMap kept, deleted after the snapshot, is not back" >&2; return 1; }
  if "$KHW" kubectl -n khw-lab13 get configmap lost >/dev/null 2>&1; then
    echo "e2e: ConfigMap lost, made after the snapshot, survived the restore" >&2; return 1
  fi
  etcd_restored "$rev"
  "$KHW" kubectl -n khw-lab13 create configmap lost --from-literal=made=later
  expect_mistake 13 "[13-etcd-backup] cluster: ConfigMap khw-lab13/lost exists"
  "$KHW" kubectl -n khw-lab13 delete configmap lost
  "$KHW" lab check 13
}

# serving_serial ADDR: the serial of the certificate a TLS server serves at
# ADDR (host:port), read by openssl s_client inside the cluster's network.
serving_serial() {
  "$KHW" shell -- sh -c "openssl s_client -connect $1 </dev/null 2>/dev/null | openssl x509 -noout -serial" | cut -d= -f2
}

# pki_renew: khw pki renew --all renews every cert khw issued while the
# cluster serves. Witnesses (openssl, not khw): each key is the same file,
# each cert a new serial; what each server serves once it is done is the
# new cert (the apiserver and etcd on every control plane, the kubelet on
# w1).
pki_renew() {
  local log=$STATE/pki-renew.log pki=$STATE/$NAME/pki keysum oldser newser cp ip got n
  keysum=$(cat "$pki"/*-key.pem | sha256sum)
  oldser=$(openssl x509 -noout -serial -in "$pki/kubernetes.pem" | cut -d= -f2)
  "$KHW" pki renew --all --yes >"$log" 2>&1 || { tail -40 "$log"; return 1; }
  grep -E '^\[[0-9]+/[0-9]+\]|^[✓✗] |led etcd|^  [a-z-]+ +failed|no signal failed|took|^Report:' "$log"
  [ "$(cat "$pki"/*-key.pem | sha256sum)" = "$keysum" ] || { echo "e2e: khw pki renew changed a private key" >&2; return 1; }
  newser=$(openssl x509 -noout -serial -in "$pki/kubernetes.pem" | cut -d= -f2)
  [ "$newser" != "$oldser" ] || { echo "e2e: kubernetes.pem has its old serial $oldser" >&2; return 1; }
  n=1
  for cp in cp1 cp2 cp3; do
    ip=192.168.122.1$n; n=$((n + 1))
    for port in 6443 2379; do
      got=$(serving_serial "$ip:$port")
      echo "$cp :$port serves serial $got"
      [ "$got" = "$newser" ] || { echo "e2e: $cp :$port serves $got, not the renewed kubernetes.pem $newser" >&2; return 1; }
    done
  done
  got=$(serving_serial 192.168.122.21:10250)
  [ "$got" = "$(openssl x509 -noout -serial -in "$pki/w1.pem" | cut -d= -f2)" ] || {
    echo "e2e: w1's kubelet serves $got, not the renewed w1.pem" >&2; return 1; }
  # Client requests that failed are reported (the summary above), not
  # fatal: an apiserver stopping can still cut a request in flight (EOF).
}

# upgrade_witnesses: the cluster runs $E2E_TO, as witnesses outside khw
# see it — each control plane's binaries report it (--version over ssh),
# every Node's kubeletVersion is it and no Node is unschedulable (kubectl),
# <state>/upgrade.json is gone.
upgrade_witnesses() {
  local cp b got n
  for cp in cp1 cp2 cp3; do
    for b in kube-apiserver kube-controller-manager kube-scheduler; do
      got=$("$KHW" shell -- sh -c "ssh -F \"\$KHW_SSH_CONFIG\" $cp /usr/local/bin/$b --version" 2>/dev/null | awk '{print $NF}')
      [ "$got" = "$E2E_TO" ] || { echo "e2e: $b on $cp reports $got, want $E2E_TO" >&2; return 1; }
    done
  done
  echo "kube-apiserver, kube-controller-manager, kube-scheduler on cp1-cp3: $E2E_TO"
  got=$("$KHW" kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.status.nodeInfo.kubeletVersion},{.spec.unschedulable}{"\n"}{end}')
  echo "$got"
  n=$(grep -c "=$E2E_TO,\$" <<<"$got")
  [ "$n" -gt 0 ] && [ "$n" = "$(grep -c . <<<"$got")" ] || { echo "e2e: want every Node at $E2E_TO and schedulable" >&2; return 1; }
  [ ! -e "$STATE/$NAME/upgrade.json" ] || { echo "e2e: upgrade.json left behind" >&2; return 1; }
}

# lab_15: first khw up must refuse cluster.yaml edited to $E2E_TO; then
# lab 15 both ways on the cluster at $E2E_FROM. By hand: khw lab 15
# --by-hand records the start and writes the commands, which run in khw
# shell as a student would type them (kubectl drain, scp, systemctl, the
# sed on cluster.yaml); khw lab check 15 must pass and the witnesses agree.
# Then khw lab reset 15 takes every node back to $E2E_FROM (kubectl sees
# it), and khw lab 15 --yes runs khw upgrade under the prober: its check
# passes, the witnesses agree, and the report's failed client requests are
# printed (the goal is none).
lab_15() {
  local log=$STATE/lab-15-upgrade.log got js
  # khw up refuses a newer release edited into cluster.yaml by hand.
  sed -i -E "s/^(  kubernetes:) $E2E_FROM\$/\1 $E2E_TO/" "$STATE/$NAME/cluster.yaml"
  if "$KHW" up >"$STATE/up-refused.log" 2>&1 || ! grep -qF "Upgrade with khw upgrade --to $E2E_TO" "$STATE/up-refused.log"; then
    cat "$STATE/up-refused.log"; echo "e2e: khw up did not refuse versions.kubernetes $E2E_TO on a cluster at $E2E_FROM" >&2; return 1
  fi
  sed -i -E "s/^(  kubernetes:) $E2E_TO\$/\1 $E2E_FROM/" "$STATE/$NAME/cluster.yaml"
  echo "khw up refused versions.kubernetes: $E2E_TO edited by hand"
  "$KHW" lab 15-upgrade --by-hand --plain </dev/null >"$log" 2>&1 || { tail -40 "$log"; return 1; }
  local t0=$SECONDS
  "$KHW" shell -- bash "$STATE/$NAME/labs/by-hand-15-upgrade.sh" >"$STATE/lab-15-by-hand.log" 2>&1 ||
    { tail -40 "$STATE/lab-15-by-hand.log"; return 1; }
  echo "the by-hand commands ran in $((SECONDS - t0)) s"
  "$KHW" lab check 15-upgrade >>"$log" 2>&1 || { tail -40 "$log"; return 1; }
  grep -F '✓ lab 15-upgrade passes' "$log"
  upgrade_witnesses || return 1
  "$KHW" lab reset 15-upgrade --yes >>"$log" 2>&1 || { tail -40 "$log"; return 1; }
  got=$("$KHW" kubectl get nodes -o jsonpath='{range .items[*]}{.status.nodeInfo.kubeletVersion}{"\n"}{end}' | sort -u)
  [ "$got" = "$E2E_FROM" ] || { echo "e2e: after khw lab reset 15 the kubelets report $got, want $E2E_FROM" >&2; return 1; }
  echo "khw lab reset 15: every kubelet at $E2E_FROM again"
  lab 15-upgrade || return 1
  log=$STATE/lab-15-upgrade.log
  grep -E '^\[[0-9]+/[0-9]+\]|^[✓✗] |cordon|evicting|^  [a-z-]+ +failed|no signal failed|took|^Report:' "$log"
  grep -qF '✓ lab 15-upgrade passes' "$log" || { echo "e2e: khw lab 15 did not pass its check" >&2; return 1; }
  upgrade_witnesses || return 1
  js=$(ls -d "$STATE/$NAME"/operations/*-upgrade | tail -1)/report.json
  jq -r '"upgrade took \(.took) s; " + ([.signals[] | "\(.signal) failed \(.failed)/\(.samples), longest \(.longest) s"] | join("; "))' "$js"
  # Every failed client request, with when and why (the goal is none).
  jq -r '.signals[] | select(.signal == "api-read" or .signal == "api-write" or .signal == "workload") | .signal as $s |
    (.windows // [])[] | "  \($s) failed from +\(.from) s to +\(.to) s: \((.errors // []) | join("; "))"' "$js"
}

# lab_14: khw lab 14 --yes renews kubernetes, w1 and w2 for their keys and
# has w3 ask for a new serving cert, and its check passes. Witnesses
# (openssl, not khw): each apiserver serves the renewed kubernetes.pem, w3's
# kubelet a serving cert other than before. Then w3 is made to ask again
# without an approval: the check must name the pending CSR; khw up approves
# it and the check passes.
lab_14() {
  local log=$STATE/lab-14-cert-renewal.log pki=$STATE/$NAME/pki before after ser ip
  before=$(serving_serial 192.168.122.23:10250)
  lab 14-cert-renewal
  grep -E '^── |^\[[0-9]+/[0-9]+\]|^[✓✗] |led etcd|^  [a-z-]+ +failed|no signal failed|^Report:' "$log"
  grep -qF "✓ lab 14-cert-renewal passes" "$log" || { echo "e2e: khw lab 14 did not pass its check" >&2; return 1; }
  ser=$(openssl x509 -noout -serial -in "$pki/kubernetes.pem" | cut -d= -f2)
  for ip in 192.168.122.11 192.168.122.12 192.168.122.13; do
    [ "$(serving_serial $ip:6443)" = "$ser" ] || { echo "e2e: $ip:6443 does not serve the renewed kubernetes.pem $ser" >&2; return 1; }
  done
  after=$(serving_serial 192.168.122.23:10250)
  echo "w3 serving cert: serial $before → $after"
  [ -n "$after" ] && [ "$after" != "$before" ] || { echo "e2e: w3's kubelet serves its old serving cert" >&2; return 1; }
  # shellcheck disable=SC2016 # expanded by the inner shell, where khw shell sets it
  "$KHW" shell -- sh -c 'ssh -F "$KHW_SSH_CONFIG" w3 "sudo rm /var/lib/kubelet/pki/kubelet-server-current.pem && sudo systemctl restart kubelet"'
  for _ in $(seq 30); do
    "$KHW" kubectl get csr --field-selector spec.signerName=kubernetes.io/kubelet-serving | grep -q Pending && break
    sleep 2
  done
  expect_mistake 14 "a kubelet serving CSR waits for approval"
  # khw up approves it (10-tls-bootstrap) and, a change applied, runs the
  # smoke tests again.
  "$KHW" up
  "$KHW" lab check 14
}

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

# report_pages: every drill and operation of the run has its page
# (report.html, 0600, no script, a lane for the API reads and for etcd),
# khw report open finds it by ID, and khw report list lists them all.
report_pages() {
  local dir id n=0 all=0 out
  for dir in "$STATE/$NAME"/drills/*/ "$STATE/$NAME"/operations/*/; do
    [ -d "$dir" ] || continue
    all=$((all + 1))
    [ -f "$dir/report.json" ] || continue
    id=$(basename "$dir")
    n=$((n + 1))
    [ "$(stat -c %a "$dir/report.html")" = 600 ] || { echo "e2e: $dir/report.html is not 0600" >&2; return 1; }
    if grep -qi '<script' "$dir/report.html"; then echo "e2e: $dir/report.html has a script" >&2; return 1; fi
    for lane in api-read etcd; do
      grep -q ">$lane</text>" "$dir/report.html" || { echo "e2e: $dir/report.html has no $lane lane" >&2; return 1; }
    done
    out=$("$KHW" report open "$id" 2>/dev/null)
    [ "$out" = "${dir%/}/report.html" ] || { echo "e2e: khw report open $id printed $out" >&2; return 1; }
  done
  [ "$n" -gt 0 ] || { echo "e2e: no reports" >&2; return 1; }
  [ "$("$KHW" report list | tail -n +2 | wc -l)" = "$all" ] || { echo "e2e: khw report list does not list the $all drills and operations" >&2; "$KHW" report list >&2; return 1; }
  echo "$n report pages (drills and operations), each found by khw report open"
}

status_check() {
  "$KHW" status
  local js all want got
  js=$("$KHW" status -o json)
  grep -q '"quorum": true' <<<"$js"
  # The certificates as the files on the nodes are: cp1's apiserver cert
  # must be the jumpbox's (same expiry, read by openssl), and w3's client
  # certificate the one its kubelet got by TLS bootstrap.
  all=$("$KHW" status --certs)
  sed -n '/^CERTIFICATES/,$p' <<<"$all"
  want=$(date -u -d "$(openssl x509 -noout -enddate -in "$STATE/$NAME/pki/kubernetes.pem" | cut -d= -f2)" +%Y-%m-%dT%H:%M:%SZ)
  got=$(jq -r '.certs.cp1[] | select(.file == "/var/lib/kubernetes/kubernetes.pem") | .notAfter' <<<"$js")
  [ "$got" = "$want" ] || { echo "e2e: cp1's kubernetes.pem expires $got in khw status, $want by openssl" >&2; return 1; }
  jq -e '.certs.w3[] | select(.file == "/var/lib/kubelet/pki/kubelet-client-current.pem" and .subject == "CN=system:node:w3,O=system:nodes")' <<<"$js" >/dev/null || {
    echo "e2e: khw status does not show w3's rotated client certificate" >&2; return 1; }
  if grep -q "PRIVATE KEY" <<<"$js"; then echo "e2e: khw status -o json holds a private key" >&2; return 1; fi
}

# khw etcd snapshot save, the file read back by etcd's own etcdutl (from
# the mirror's etcd release): the same revision, the SHA-256 khw printed,
# mode 0600; a second save over it is refused without --force.
etcd_snapshot() {
  local js rev f out tmp tgz
  "$KHW" etcd snapshot save "$STATE/snap.db" | tee "$STATE/snap.txt"
  grep -q "^Snapshot of etcd from cp[0-9], the leader" "$STATE/snap.txt" || { echo "e2e: no snapshot line" >&2; return 1; }
  if "$KHW" etcd snapshot save "$STATE/snap.db" 2>/dev/null; then echo "e2e: a second save replaced the file" >&2; return 1; fi
  js=$("$KHW" etcd snapshot save -o json)
  echo "$js"
  rev=$(jq -r .revision <<<"$js")
  f=$(jq -r .path <<<"$js")
  [ "$(stat -c %a "$f")" = 600 ] || { echo "e2e: $f is not mode 0600" >&2; return 1; }
  [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$(jq -r .sha256 <<<"$js")" ] || { echo "e2e: the file's SHA-256 is not the one printed" >&2; return 1; }
  tgz=("$MIRROR_DIR"/github.com/etcd-io/etcd/releases/download/*/etcd-*-linux-"$(go env GOARCH)".tar.gz)
  tmp=$(mktemp -d)
  tar -xzf "${tgz[0]}" -C "$tmp" --strip-components=1 --wildcards '*/etcdutl'
  out=$("$tmp/etcdutl" snapshot status "$f" -w json)
  rm -rf "$tmp"
  echo "etcdutl snapshot status: $out"
  jq -e --argjson r "$rev" '.revision == $r' <<<"$out" >/dev/null || { echo "e2e: etcdutl reads another revision than $rev" >&2; return 1; }
}

# challenges: the proof of the challenge catalogue on this cluster
# (TestCatalogueOnLiveCluster drives this khw binary: start, check fails,
# khw lab check names the cause, the text's fix in khw shell, check
# passes, khw up --dry-run clean); E2E_CHALLENGES says which faults: all,
# IDs, or rotate:N (N a day, the whole catalogue over the days). Its table
# is kept in $STATE/challenges.log and printed.
challenges() {
  local rc=0
  KHW_PROOF_BIN=$KHW KHW_PROOF_FAULTS=$E2E_CHALLENGES \
    go test -count=1 -timeout 3h -run '^TestCatalogueOnLiveCluster$' -v ./internal/lab/challenge/ >"$STATE/challenges.log" 2>&1 || rc=$?
  sed -n '/^Proving /p; /^Fault proof/,$p' "$STATE/challenges.log"
  if [ $rc != 0 ]; then tail -60 "$STATE/challenges.log"; return $rc; fi
}

# ---- the labs (E2E_LABS=1)

# lab runs one lab with its (long) output in $STATE/lab-<id>.log, shown only
# when it fails.
lab() {
  "$KHW" lab "$1" --yes --plain >"$STATE/lab-$1.log" 2>&1 || { tail -40 "$STATE/lab-$1.log"; return 1; }
  grep -E '^(✓|Snapshot|Lab )' "$STATE/lab-$1.log" || true
}

# all_done N: khw lab list shows N labs done.
all_done() {
  local out
  out=$("$KHW" lab list)
  echo "$out"
  if [ "$(awk 'NR > 1 && $2 == "done"' <<<"$out" | wc -l)" != "$1" ]; then
    echo "e2e: not every lab is done" >&2; return 1
  fi
}

# expect_mistake LAB PATTERN...: khw lab check LAB must fail and print every
# PATTERN (fixed strings).
expect_mistake() {
  local lab=$1; shift
  local out rc=0
  out=$("$KHW" lab check "$lab" 2>&1) || rc=$?
  echo "$out"
  if [ $rc = 0 ]; then echo "e2e: khw lab check $lab passed a broken cluster" >&2; return 1; fi
  local p
  for p in "$@"; do
    grep -qF -- "$p" <<<"$out" || { echo "e2e: khw lab check $lab does not say: $p" >&2; return 1; }
  done
}

# hint_ladder LAB WHERE LOOK ANSWER FIX: khw lab check LAB --hints says
# where to look for the first mistake (WHERE, LOOK) without the answer;
# khw lab hint LAB then names it (ANSWER), and the next hint is the fix.
hint_ladder() {
  local lab=$1 where=$2 look=$3 answer=$4 fix=$5 out rc=0
  out=$("$KHW" lab check "$lab" --hints 2>&1) || rc=$?
  echo "$out"
  if [ $rc != 1 ]; then echo "e2e: khw lab check $lab --hints exited $rc, want 1" >&2; return 1; fi
  if ! grep -qF -- "$where" <<<"$out" || ! grep -qF -- "$look" <<<"$out"; then
    echo "e2e: the first hint does not say where to look: $where, $look" >&2; return 1
  fi
  if grep -qF -- "$answer" <<<"$out"; then echo "e2e: the first hint gives the answer away: $answer" >&2; return 1; fi
  out=$("$KHW" lab hint "$lab")
  echo "$out"
  grep -qF -- "$answer" <<<"$out" || { echo "e2e: the second hint does not say: $answer" >&2; return 1; }
  out=$("$KHW" lab hint "$lab")
  echo "$out"
  grep -qF -- "$fix" <<<"$out" || { echo "e2e: the third hint is not the fix: $fix" >&2; return 1; }
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
  # Live: the clients that HAProxy sends to cp1 fail to verify it.
  expect_mistake 06 "[02-pki] cp1: the apiserver on cp1 serves a certificate that does not name lb"
}

# on NODE SHELL: run SHELL as root on NODE through khw shell (the script
# goes on stdin, so it needs no quoting for ssh).
on() {
  local node=$1; shift
  # shellcheck disable=SC2016 # expanded by the shell inside khw shell
  printf '%s\n' "$*" | "$KHW" shell -- sh -c 'ssh -F "$KHW_SSH_CONFIG" "$0" sudo sh' "$node"
}

# The kinds of mistake that khw lab check reads from the meaning of a
# setting, each made on one node only and restarted as a student would.
break_authorization() { # a security setting weakened
  on cp2 "sed -i 's/^  --authorization-mode=Node,RBAC /  --authorization-mode=AlwaysAllow /' /etc/systemd/system/kube-apiserver.service && systemctl daemon-reload && systemctl restart kube-apiserver"
  expect_mistake 05 "[05-control-plane] cp2: --authorization-mode in kube-apiserver.service is AlwaysAllow" \
    "on cp2: --authorization-mode=AlwaysAllow" "fix: set --authorization-mode=Node,RBAC"
  # Live: AlwaysAllow alone turns anonymous authentication off, so
  # HAProxy's anonymous health check of cp2 gets 401 and cp2 leaves the
  # rotation.
  expect_mistake 06 "[05-control-plane] cp2: HAProxy keeps cp2 out of rotation (DOWN): the apiserver on cp2 refuses HAProxy's anonymous health check with 401"
}

break_etcd_listener() { # a listener on the wrong address, and a flag that differs on one member
  on cp3 "sed -i 's|--listen-client-urls=https://[0-9.]*:2379,|--listen-client-urls=|' /etc/systemd/system/etcd.service && systemctl daemon-reload && systemctl restart etcd"
  on cp2 "sed -i 's/--initial-cluster-token=[^ ]*/--initial-cluster-token=mine/' /etc/systemd/system/etcd.service && systemctl daemon-reload && systemctl restart etcd"
  # The files, and the live tryout: a key stored in etcd is not readable
  # through cp3's member, whose cause is read from the members' status.
  expect_mistake 04 "[04-etcd] cp3: --listen-client-urls in etcd.service is https://127.0.0.1:2379: nothing listens on https://192.168.122.13:2379" \
    "[04-etcd] cp2: --initial-cluster-token in etcd.service is mine on cp2 but not on its peers" \
    "[04-etcd] cp3: a key just stored in etcd cannot be read back through the member on cp3" \
    "the member on cp3 does not answer its Status at https://192.168.122.13:2379"
}

break_encryption_key() { # material that must be the same on every control plane, tried live
  # shellcheck disable=SC2016 # expanded by the node's shell
  on cp2 'k=$(head -c 32 /dev/urandom | base64); sed -i "0,/secret: .*/s||secret: $k|" /var/lib/kubernetes/encryption-config.yaml && systemctl restart kube-apiserver'
  local _
  for _ in $(seq 60); do
    "$KHW" kubectl --server=https://192.168.122.12:6443 get --raw /readyz >/dev/null 2>&1 && break
    sleep 2
  done
  expect_mistake 05 "[05-control-plane] cp2: a Secret stored through cp1's apiserver cannot be read back through cp2's" \
    "[05-control-plane] cp1: a Secret stored through cp2's apiserver cannot be read back through cp1's" \
    "cp1:/var/lib/kubernetes/encryption-config.yaml (sha256 "
}

break_kubelet_anonymous() { # a security setting weakened in a YAML config
  on w2 "sed -i '/^  anonymous:/{n;s/enabled: false/enabled: true/}' /var/lib/kubelet/kubelet-config.yaml && systemctl restart kubelet"
  expect_mistake 07 "[07-workers] w2: authentication.anonymous.enabled in kubelet-config.yaml is true, want false" \
    "fix: set authentication.anonymous.enabled: false in /var/lib/kubelet/kubelet-config.yaml"
}

variant_passes() { # a correct hand-made variant: a variant, not a mistake
  on lb "sed -i 's/timeout connect 1s/timeout connect 2s/' /etc/haproxy/haproxy.cfg && systemctl reload haproxy"
  local out
  out=$("$KHW" lab check 06 2>&1) || { echo "$out"; echo "e2e: a correct variant failed khw lab check 06" >&2; return 1; }
  echo "$out"
  grep -qF "~ lb: haproxy.cfg: defaults: timeout connect: 1s → 2s" <<<"$out" || { echo "e2e: khw lab check 06 does not list the variant as one a rule knows to work" >&2; return 1; }
  # systemctl reload made HAProxy read the file: it does not run an old one.
  if grep -qF "haproxy.service runs with an old" <<<"$out"; then echo "e2e: a reloaded HAProxy is said to run an old haproxy.cfg" >&2; return 1; fi
}

break_lb_server() { # a ready apiserver left out of rotation, tried live
  on lb "sed -i 's|^\(    server cp3 [0-9.]*\):6443 |\1:6444 |' /etc/haproxy/haproxy.cfg && systemctl reload haproxy"
  expect_mistake 06 "[06-lb] lb: server cp3 uses port 6444; the apiserver listens on 6443" \
    "[06-lb] lb: HAProxy sends no API request to cp3, whose apiserver is ready: its server cp3 points at 192.168.122.13:6444, not at 192.168.122.13:6443" \
    "fix: change server cp3's address to 192.168.122.13:6443"
  # The same mistake, graded for a student who does the lab by hand.
  hint_ladder 06 "Something is wrong on lb (lab 06-lb)" "journalctl -u haproxy" \
    "6444" "Fix: "
  on lb "sed -i 's|^\(    server cp3 [0-9.]*\):6444 |\1:6443 |' /etc/haproxy/haproxy.cfg && systemctl reload haproxy"
  sleep 3   # rise checks of the restored server
  "$KHW" lab check 06 --hints
  if "$KHW" lab hint 06; then echo "e2e: khw lab hint 06 gave a hint after the check passed" >&2; return 1; fi
}

# by_hand LAB: khw lab LAB --by-hand without input shows the commands,
# writes them to a script and stops; the script runs in khw shell, the
# commands exactly as a student would type them; khw lab check LAB --hints
# must then pass.
by_hand() {
  local l=$1 log=$STATE/by-hand-$1.log
  "$KHW" lab "$l" --by-hand --plain </dev/null >"$log" 2>&1 || { tail -30 "$log"; return 1; }
  grep -qF "No input: grade your work when it is done with khw lab check $l --hints" "$log" || {
    tail -30 "$log"; echo "e2e: khw lab $l --by-hand did not stop for want of input" >&2; return 1; }
  echo "$(grep -cvE '^(#|$)' "$STATE/$NAME/labs/by-hand-$l.sh") lines in $STATE/$NAME/labs/by-hand-$l.sh"
  "$KHW" shell -- bash "$STATE/$NAME/labs/by-hand-$l.sh" >"$STATE/by-hand-$l.run" 2>&1 || {
    tail -30 "$STATE/by-hand-$l.run"; echo "e2e: the commands of khw lab $l --by-hand failed" >&2; return 1; }
  "$KHW" lab check "$l" --hints
}

by_hand_lb() { # lab 06 by hand, with one of the shown commands left out
  local out rc=0 script=$STATE/$NAME/labs/by-hand-06-lb.sh
  out=$("$KHW" lab 06 --by-hand --plain </dev/null 2>&1) || rc=$?
  sed -n '/change(s) to make/,$p' <<<"$out"
  if [ $rc != 0 ]; then echo "$out" | tail -20; echo "e2e: khw lab 06 --by-hand without input exited $rc, want 0" >&2; return 1; fi
  grep -qF "No input: grade your work when it is done with khw lab check 06-lb --hints" <<<"$out" || { echo "e2e: --by-hand did not stop for want of input" >&2; return 1; }
  # shellcheck disable=SC2016 # the script's text, not expanded here
  if ! grep -qF 'scp -F "$KHW_SSH_CONFIG"' "$script" || ! grep -qF "sudo systemctl restart haproxy.service" "$script"; then
    cat "$script"; echo "e2e: $script lacks the copy or the restart of haproxy.cfg" >&2; return 1
  fi
  # The student types every command but the restart.
  grep -vF "systemctl restart haproxy.service" "$script" >"$STATE/by-hand-mistake.sh"
  "$KHW" shell -- bash "$STATE/by-hand-mistake.sh" || echo "(the commands ended in an error: HAProxy still runs its old config)"
  hint_ladder 06 "Something is wrong on lb (lab 06-lb)" "journalctl -u haproxy" \
    "haproxy.service runs with an old /etc/haproxy/haproxy.cfg" "Fix: systemctl restart haproxy.service"
  "$KHW" shell -- bash "$script"
  sleep 3   # rise checks of the restarted HAProxy
  "$KHW" lab check 06 --hints
}

by_hand_smoke() { # lab 11 by hand: nothing to change once 01-10 are; its check runs the smoke tests
  local out
  out=$("$KHW" lab 11 --by-hand --plain </dev/null 2>&1) || { echo "$out" | tail -20; return 1; }
  grep -F "11-smoke is already done" <<<"$out" || { echo "$out" | tail -20; echo "e2e: lab 11 has changes to make after 01-10 by hand" >&2; return 1; }
  "$KHW" lab check 11
}

by_hand_drill() { # lab 12 by hand: khw says to run a drill; a drill that passes passes the lab
  local out
  out=$("$KHW" lab 12 --by-hand --plain </dev/null 2>&1) || { echo "$out" | tail -20; return 1; }
  grep -F "run a drill yourself" <<<"$out" || { echo "e2e: lab 12 --by-hand does not say to run a drill" >&2; return 1; }
  "$KHW" break etcd --count 1 --for 15s >"$STATE/by-hand-12.log" 2>&1 || { tail -30 "$STATE/by-hand-12.log"; return 1; }
  "$KHW" lab check 12
}

break_forward_policy() { # what Docker does to a node: forwarded pod traffic dropped, tried live
  on w2 "iptables -P FORWARD DROP"
  expect_mistake 08 "[08-pod-network] w2: pod traffic fails on 4 paths between workers (w1 → w2, w2 → w1, w2 → w3, w3 → w2)" \
    "w2: iptables -S FORWARD: -P FORWARD DROP and no rule that accepts the pod network"
  on w2 "iptables -P FORWARD ACCEPT"
  "$KHW" lab check 08   # and with the policy back, every path works again
}

break_coredns_gone() { # the cluster DNS scaled away, tried live from a pod on every worker
  local n _
  n=$("$KHW" kubectl -n kube-system get deployment coredns -o jsonpath='{.spec.replicas}')
  "$KHW" kubectl -n kube-system scale deployment coredns --replicas=0
  for _ in $(seq 90); do
    [ -z "$("$KHW" kubectl -n kube-system get pods -l k8s-app=kube-dns -o name)" ] && break
    sleep 1
  done
  expect_mistake 09 "[09-coredns] cluster: pods on w1, w2, w3 cannot resolve kubernetes.default.svc.cluster.local" \
    "no CoreDNS pod (kube-system, k8s-app=kube-dns) is Ready"
  "$KHW" kubectl -n kube-system scale deployment coredns --replicas="$n"
  "$KHW" kubectl -n kube-system rollout status deployment coredns --timeout=120s
  "$KHW" lab check 09
}

lab_machines_by_hand() { # lab 01 by hand: khw makes the machines (the hypervisor's work)
  "$KHW" lab 01-machines --by-hand --yes --plain >"$STATE/lab-01-machines.log" 2>&1 || { tail -40 "$STATE/lab-01-machines.log"; return 1; }
  grep -F "making the machines is your hypervisor's work" "$STATE/lab-01-machines.log" || {
    echo "e2e: khw lab 01 --by-hand does not say who makes the machines" >&2; return 1; }
  grep -E '^(✓|Snapshot|Lab )' "$STATE/lab-01-machines.log" || true
}

# reset_10: khw lab reset 10-tls-bootstrap must leave 01-09 done and
# 10-13 not done (the nodes back to their snapshot from before lab 10,
# which also undoes the mistakes made since).
reset_10() {
  local out want got
  out=$("$KHW" lab reset 10-tls-bootstrap --yes 2>&1) || { echo "$out"; return 1; }
  echo "$out"
  # khw waits for the reverted nodes to boot and the earlier labs to check
  # done again before it says to go on.
  grep -q "^The labs before 10-tls-bootstrap check done again" <<<"$out" || {
    echo "e2e: khw lab reset did not wait for the earlier labs" >&2; return 1; }
  out=$("$KHW" lab list)
  echo "$out"
  want=$(printf '%s\n' "01-machines done" "02-pki done" "03-kubeconfig done" \
    "04-etcd done" "05-control-plane done" "06-lb done" "07-workers done" "08-pod-network done" \
    "09-coredns done" "10-tls-bootstrap not" "11-smoke not" "12-failover not" "13-etcd-backup not" "14-cert-renewal not" "15-upgrade not")
  got=$(awk 'NR > 1 { print $1, $2 }' <<<"$out")
  if [ "$got" != "$want" ]; then
    echo "e2e: after khw lab reset 10-tls-bootstrap, want 01-09 done and 10-15 not done" >&2; return 1
  fi
}

phase "build khw"       make -s build
phase "offline mirror"  hack/build-mirror.sh --out "$MIRROR_DIR" --arch "$(go env GOARCH)" ${E2E_ONLY:+--only "$E2E_ONLY"}
# This machine built the mirror, so it pins it (khw trusts a mirror only
# through its pin).
KHW_MIRROR_DIGEST=$(hack/mirror-pin.sh "$MIRROR_DIR")
export KHW_MIRROR_DIGEST
phase "khw init"        "$KHW" init --name "$NAME" --provider nspawn
if [ -n "${E2E_FROM:-}" ]; then
  # Start at E2E_FROM (the previous minor) to upgrade to the default
  # version at the end: the mirror gets E2E_FROM's Kubernetes too.
  E2E_TO=$(awk '$1 == "kubernetes:" && $2 ~ /^v/ {print $2; exit}' "$STATE/$NAME/cluster.yaml")
  phase "khw init $E2E_FROM" "$KHW" init --name "$NAME" --provider nspawn --force --kubernetes-version "$E2E_FROM"
  grep -q "^  kubernetes: $E2E_FROM\$" "$STATE/$NAME/cluster.yaml" || { echo "e2e: khw init --kubernetes-version did not set versions.kubernetes to $E2E_FROM" >&2; exit 1; }
  phase "mirror $E2E_FROM" hack/build-mirror.sh --out "$MIRROR_DIR" --arch "$(go env GOARCH)" --only kubernetes --config "$STATE/$NAME/cluster.yaml"
  KHW_MIRROR_DIGEST=$(hack/mirror-pin.sh "$MIRROR_DIR")
  echo "the cluster starts at $E2E_FROM and is upgraded to $E2E_TO at the end"
fi
if [ -n "${E2E_CNI:-}" ]; then
  # kubernetes.cni: bridge (default) or mybridge (the teaching plugin)
  sed -i -E "s/^(\s+cni:) .*/\1 $E2E_CNI/" "$STATE/$NAME/cluster.yaml"
  grep -E '^\s+cni:' "$STATE/$NAME/cluster.yaml"
fi
UP_T0=$(date +%s%N)
if [ "${E2E_LABS:-}" = 1 ]; then
  # The cluster built by hand: each lab's commands as khw lab --by-hand
  # shows them, typed into khw shell; lab 06 first with its restart left
  # out, which the hints must lead to.
  GREEN="lab 01 start → lab 11 green (by hand)"
  phase "lab 01 by hand" lab_machines_by_hand
  for l in 02-pki 03-kubeconfig 04-etcd 05-control-plane; do
    phase "$l by hand"  by_hand "$l"
  done
  phase "06-lb by hand"   by_hand_lb
  for l in 07-workers 08-pod-network 09-coredns 10-tls-bootstrap; do
    phase "$l by hand"  by_hand "$l"
  done
  phase "11-smoke by hand" by_hand_smoke
  UP_T1=$(date +%s%N)
  phase "12 by hand"      by_hand_drill
  phase "lab list"        all_done 12
else
  GREEN="up start → smoke green"
  phase "khw up"        "$KHW" up
  phase "khw smoke"     "$KHW" smoke
  UP_T1=$(date +%s%N)
fi
phase "witnesses"       witness
phase "khw status"      status_check
phase "etcd snapshot"   etcd_snapshot
if [ "${E2E_LABS:-}" != 1 ]; then
  phase "etcd restore"  etcd_restore   # with E2E_LABS, lab 13 restores at the end
fi
phase "khw up (no-op)"  noop_check
if [ -n "${E2E_CHALLENGES:-}" ]; then
  phase "challenges"    challenges
fi
if [ "${E2E_DRILLS:-}" = 1 ]; then
  # The failover drills, each must pass its verdict (exit 0): one etcd
  # member down (the leader: one election, API stays up; with E2E_LABS
  # lab 12 has just run it), the seed's power-off of cp2, and the seed's
  # quorum loss (2 of 3 members).
  if [ "${E2E_LABS:-}" != 1 ]; then
    phase "drill etcd x1"   "$KHW" break etcd --count 1 --for 20s
  fi
  phase "drill cp2 off"     "$KHW" break node cp2 --for 30s
  # With E2E_LABS, the quorum loss runs after khw lab reset 10 and labs 10
  # and 11: a drill that passes is what marks 12-failover done.
  if [ "${E2E_LABS:-}" != 1 ]; then
    phase "drill etcd x2"   "$KHW" break etcd --count 2 --for 30s
    drill_figures
    phase "report pages"    report_pages
  fi
fi
if [ "${E2E_LABS:-}" = 1 ]; then
  # First the mistakes that are undone at once (each ends with a clean
  # check), then those that stay until khw lab reset 10.
  phase "lb variant"      variant_passes
  phase "lb cp3 :6444"    break_lb_server
  phase "w2 FORWARD DROP" break_forward_policy
  phase "no CoreDNS"      break_coredns_gone
  phase "w1 ip_forward=0" break_ip_forward
  phase "cp1 cert no lb"  break_apiserver_cert
  phase "cp2 AlwaysAllow" break_authorization
  phase "cp2 encryption"  break_encryption_key
  phase "cp3 etcd lo"     break_etcd_listener
  phase "w2 anonymous"    break_kubelet_anonymous
  # Back to before lab 10 (the mistakes that stayed go with it), then
  # labs 10 and 11 done by khw (khw lab NN --yes, each its step) and 12 by
  # a drill that passes: the seed's quorum loss (khw lab 12 --yes runs
  # khw break too; its by-hand path ran above).
  phase "lab reset 10"    reset_10
  for l in 10-tls-bootstrap 11-smoke; do
    phase "lab $l"      lab "$l"
  done
  if [ "${E2E_DRILLS:-}" = 1 ]; then
    phase "drill etcd x2"   "$KHW" break etcd --count 2 --for 30s
    drill_figures
  else
    phase "lab 12-failover" lab 12-failover
  fi
  phase "lab 13 (restore)" lab_13
  phase "lab 14 (renewal)" lab_14
  phase "report pages"    report_pages
  phase "lab list"        all_done 14
  phase "khw up (no-op)"  noop_check
  du -sh "$STATE/$NAME/nspawn/snapshots" | sed 's/^/snapshots on disk: /'
fi
if [ "${E2E_DAY2:-}" = 1 ]; then
  phase "pki renew --all" pki_renew
  phase "khw up (no-op)"  noop_check
fi
if [ -n "${E2E_FROM:-}" ]; then
  phase "lab 15 (upgrade)" lab_15
  phase "khw up (no-op)"  noop_check
  phase "report pages"    report_pages
fi
if [ "${E2E_KEEP:-}" != 1 ]; then
  phase "khw down"      "$KHW" down
fi

print_phases
ds=$(( (UP_T1 - UP_T0) / 100000000 ))
printf '  %-22s %5d.%d s\n' "$GREEN" $((ds / 10)) $((ds % 10))
