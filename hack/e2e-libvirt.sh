#!/usr/bin/env bash
# make e2e-libvirt: `khw init --provider libvirt`, then `khw up` through
# 11-smoke on a reduced cluster of QEMU/TCG VMs: lb, cp1 (etcd and the
# control plane), w1 and w3 (which joins by TLS bootstrap), with the wall
# time of each phase and of each step.
#
# libvirtd must never run in the root network namespace (it would make
# virbr0 192.168.122.1 there), so this script starts virtlogd and libvirtd
# inside a network namespace of its own (khwlv-e2e-<pid>) and tells khw to
# dial the nodes from there (KHW_LIBVIRT_NETNS). The nodes boot from their
# own disk, made from the Ubuntu-like stand-in of hack/libvirt-cloud-image.sh
# (no haproxy or jq, empty apt lists, systemd-resolved, cgroup v2, user
# ubuntu), fetched through the catalog from the pinned offline mirror, which
# also carries the node .debs: no node reaches a package archive.
#
# The image's unattended-upgrades stand-in holds dpkg's locks for a minute
# after boot (checked right after 01), and again on lb while khw up runs
# 06-lb: khw must say that it waits for it and then install haproxy.
#
# After khw up: witnesses from outside khw (kubectl: w1 and w3 Ready, w3's
# client CSR issued through a bootstrap token; ssh: w1 and w3 prepared as
# workers, their kubelets on cgroup v2), a second khw up that must find every step clean, khw status, khw lab
# check 07 and 10, the load-balancer drill (it must pass its verdict), khw
# down. Everything is removed at the end, on failure and on Ctrl-C too: the
# cluster (khw down), the daemons, every process left in the namespace, the
# namespace.
#
# Env: MIRROR_DIR (default ~/.cache/khw/mirror), E2E_ARCH (the nodes' arch:
# this host's by default; arm64 on an amd64 host builds the images through
# qemu-user (hack/binfmt-arm64.sh) and emulates aarch64 virt machines with
# UEFI: make e2e-libvirt-arm64), E2E_UNTIL (last step, default 11-smoke, or
# 07-workers for arm64 emulated on another arch; the witnesses, lab check 10
# and drill need 11-smoke; before 10-tls-bootstrap w3 is left out, from
# 06-lb on lb's haproxy must have come from the mirror, from 07-workers on
# w1's host preparation is checked, and lab check 07 runs when the run stops before 11-smoke), E2E_KEEP=1 keeps
# cluster and libvirtd (prints how to stop).
set -euo pipefail
cd "$(dirname "$0")/.."

MIRROR_DIR=${MIRROR_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/khw/mirror}
HOSTARCH=$(go env GOARCH)
ARCH=${E2E_ARCH:-$HOSTARCH}
case "$ARCH" in
  amd64) UNAME_M=x86_64 ;;
  arm64) UNAME_M=aarch64 ;;
  *) echo "e2e-libvirt: E2E_ARCH=$ARCH: use amd64 or arm64" >&2; exit 2 ;;
esac
# An emulated aarch64 guest on an x86 host is slower again than TCG on its
# own arch: the default run stops after the first worker.
if [ "$ARCH" != "$HOSTARCH" ]; then UNTIL=${E2E_UNTIL:-07-workers}; else UNTIL=${E2E_UNTIL:-11-smoke}; fi
# The nodes: lb, cp1 and w1 always (a valid cluster needs a load balancer,
# a control plane and a worker); w3 too when the run reaches 10-tls-bootstrap.
STEP=$((10#${UNTIL%%-*}))
NODES="lb cp1 w1"
if [ "$STEP" -ge 10 ]; then NODES="$NODES w3"; fi
KHW=$PWD/bin/khw
STATE=$(mktemp -d /tmp/khw-e2e-libvirt.XXXXXX)
NAME=lve2e
NS=khwlv-e2e-$$
export KHW_STATE_DIR=$STATE KHW_CLUSTER=$NAME KHW_MIRROR=$MIRROR_DIR KHW_LIBVIRT_NETNS=/run/netns/$NS

if [ "$(id -u)" != 0 ]; then
  echo "make e2e-libvirt needs root (network namespace, system libvirtd)" >&2
  exit 2
fi
for d in libvirtd virtlogd virtqemud; do
  if pgrep -x "$d" >/dev/null; then
    echo "e2e-libvirt: $d already runs; only one libvirtd can own /var/run/libvirt, stop it first" >&2
    exit 2
  fi
done

# shellcheck source=hack/e2e-phase.sh
. hack/e2e-phase.sh

# remove_vms destroys and undefines every khw-$NAME-* domain and deletes
# their volumes; it prints the names it removed.
remove_vms() {
  local d v
  for d in $(virsh -c qemu:///system list --all --name 2>/dev/null | grep "^khw-$NAME-" || true); do
    echo "  removing domain $d"
    virsh -c qemu:///system destroy "$d" >/dev/null 2>&1 || true
    virsh -c qemu:///system undefine "$d" --nvram --snapshots-metadata >/dev/null 2>&1 || true
  done
  for v in $(virsh -c qemu:///system vol-list khw 2>/dev/null | awk -v p="khw-$NAME-" 'index($1, p) == 1 {print $1}'); do
    echo "  removing volume $v"
    virsh -c qemu:///system vol-delete "$v" --pool khw >/dev/null 2>&1 || true
  done
}

KVM_RESTORE=
BINFMT=
cleanup() {
  local rc=$?
  [ -z "$BINFMT" ] || hack/binfmt-arm64.sh --remove || true
  if [ "${E2E_KEEP:-}" = 1 ] && [ $rc = 0 ]; then
    echo "kept: KHW_STATE_DIR=$STATE KHW_CLUSTER=$NAME KHW_LIBVIRT_NETNS=$KHW_LIBVIRT_NETNS $KHW down; then kill the daemons in $NS, ip netns delete $NS${KVM_RESTORE:+, and restore /dev/kvm: $KVM_RESTORE}"
    return
  fi
  if ! "$KHW" down >/dev/null 2>&1 && ! "$KHW" down; then
    # khw down could not run (e.g. cluster.yaml broken): remove this run's
    # domains and volumes with virsh, so a later run does not find VMs of
    # another state directory under the same names.
    echo "e2e-libvirt: khw down failed; removing khw-$NAME-* with virsh" >&2
    remove_vms
    rc=1
  fi
  local left=
  if virsh -c qemu:///system list --all --name 2>/dev/null | grep -q "khw-$NAME-"; then left="$left domains"; fi
  if virsh -c qemu:///system net-list --all --name 2>/dev/null | grep -q "khw-$NAME"; then left="$left network"; fi
  if virsh -c qemu:///system vol-list khw 2>/dev/null | grep -q "khw-$NAME-"; then left="$left volumes"; fi
  # Stop what is still active, then every process in the namespace.
  for n in $(virsh -c qemu:///system net-list --name 2>/dev/null); do virsh -c qemu:///system net-destroy "$n" >/dev/null 2>&1 || true; done
  if [ -e "/run/netns/$NS" ]; then
    local i pids
    for i in $(seq 1 40); do
      pids=$(ip netns pids "$NS" 2>/dev/null || true)
      [ -z "$pids" ] && break
      # shellcheck disable=SC2086 # one pid per word
      if [ "$i" -lt 20 ]; then kill $pids 2>/dev/null || true; else kill -9 $pids 2>/dev/null || true; fi
      sleep 0.25
    done
    ip netns delete "$NS" || true
  fi
  [ -n "$KVM_RESTORE" ] && eval "$KVM_RESTORE"
  # A failed run keeps khw's logs (each step's differences are in _khw.log).
  if [ $rc != 0 ] && [ -d "$STATE/$NAME/logs" ]; then
    local keep
    keep=$(mktemp -d /tmp/khw-e2e-libvirt-logs.XXXXXX)
    cp -r "$STATE/$NAME/logs" "$STATE/up.log" "$keep/" 2>/dev/null || true
    echo "e2e-libvirt: khw's logs kept in $keep" >&2
  fi
  rm -rf "$STATE"
  if [ -n "$left" ]; then
    echo "e2e-libvirt: left behind:$left" >&2
    exit 1
  fi
  [ $rc = 0 ] && echo "e2e-libvirt: nothing left behind"
  return $rc
}
trap cleanup EXIT

start_libvirtd() {
  ip netns add "$NS"
  ip -n "$NS" link set lo up
  # A new namespace starts with bridge-nf-call-iptables = 1 once the host
  # has br_netfilter loaded (the nspawn tests load it): bridged pod traffic
  # between the VMs would then cross libvirt's FORWARD rules, which drop it.
  # Turned off here as khw's preflight (bridge-netfilter) tells a user to.
  if [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
    ip netns exec "$NS" sysctl -qw net.bridge.bridge-nf-call-iptables=0
  fi
  # As Debian's udev rule would (this host has no udev): libvirt's QEMU
  # user may open /dev/kvm. Without it libvirt 9.0 re-probes QEMU on every
  # call (~5 s each). khw's preflight still finds out whether KVM works.
  if [ -e /dev/kvm ] && getent group kvm >/dev/null; then
    KVM_RESTORE="chown $(stat -c %u:%g /dev/kvm) /dev/kvm; chmod $(stat -c %a /dev/kvm) /dev/kvm"
    chgrp kvm /dev/kvm && chmod 0660 /dev/kvm
  fi
  # A run killed before its cleanup leaves its namespace behind (no process
  # of it runs any more: libvirtd was checked above).
  local old
  for old in $(ip netns list | awk '$1 ~ /^khwlv-e2e-[0-9]+$/ {print $1}'); do
    if [ "$old" != "$NS" ] && [ -z "$(ip netns pids "$old" 2>/dev/null)" ]; then
      echo "  removing the network namespace $old of an earlier run"
      ip netns delete "$old" || true
    fi
  done
  nsenter --net="/run/netns/$NS" virtlogd -d
  nsenter --net="/run/netns/$NS" libvirtd -d
  local i
  for i in $(seq 1 100); do
    if [ -S /var/run/libvirt/libvirt-sock ] && virsh -c qemu:///system uri >/dev/null 2>&1; then
      # Its domains and volumes too: libvirtd keeps their definitions. No
      # other run can own them, since only one libvirtd may run.
      remove_vms
      return 0
    fi
    sleep 0.2
  done
  echo "e2e-libvirt: libvirtd did not come up" >&2
  return 1
}

write_cluster() {
  local y=$STATE/$NAME/cluster.yaml
  # $NODES of the default cluster: one control plane, a plain worker and
  # (to 10 and beyond) the worker that joins by TLS bootstrap.
  local n
  for n in cp2 cp3 w1 w2 w3; do
    [[ " $NODES " == *" $n "* ]] || sed -i -E "/name: $n,/d" "$y"
  done
  # HAProxy's https check (GET /readyz, `timeout check 2s` in haproxy.cfg)
  # does not finish in time on a TCG apiserver; a TCP check does. A KVM
  # host keeps the default.
  sed -i -E 's/^(\s+healthCheck:) https/\1 tcp/' "$y"
  # TCG, always: where /dev/kvm opens but nested virtualisation is broken,
  # khw's probe VM runs its firmware under KVM and the nodes then hang
  # before their kernel prints anything (khw says so when SSH times out).
  printf 'libvirt:\n  domainType: qemu\n' >>"$y"
  grep -E 'name: |healthCheck|libvirt|image' "$y"
  "$KHW" config validate
}

# in_ns CMD...: run CMD inside the test's network namespace, where the nodes
# are (khw itself dials through KHW_LIBVIRT_NETNS; kubectl and ssh need this).
in_ns() { nsenter --net="/run/netns/$NS" "$@"; }
# on NODE 'SHELL COMMAND': run it on NODE over ssh with khw's ssh config (an
# independent witness, not khw's SSH code).
on() {
  # shellcheck disable=SC2016 # expanded by the shell inside khw shell
  in_ns "$KHW" shell -- sh -c 'ssh -F "$KHW_SSH_CONFIG" "$0" "$1"' "$1" "$2"
}

# up_until STEP: khw up through STEP; its waits scale with the provider's slowdown
# (15x for TCG VMs, vm.Timing). Its step lines are kept for the step table.
up_until() {
  "$KHW" up --until "$1" 2>&1 | tee -a "$STATE/up.log"
  return "${PIPESTATUS[0]}"
}

# Independent witnesses (kubectl from the mirror, ssh): w1 and w3 Ready, a
# client CSR of w3 made with a bootstrap token and issued, and w3 prepared
# like w1 (worker_host: its kubelet on the unified cgroup v2 hierarchy among
# the rest).
witness() {
  in_ns "$KHW" kubectl get nodes -o wide
  local ready csrs
  ready=$(in_ns "$KHW" kubectl get nodes --no-headers | awk '$2 == "Ready" { print $1 }' | sort | tr '\n' ' ')
  if [ "$ready" != "w1 w3 " ]; then
    echo "e2e-libvirt: Ready nodes: '$ready', want w1 and w3" >&2; return 1
  fi
  csrs=$(in_ns "$KHW" kubectl get csr)
  echo "$csrs"
  grep -q 'kube-apiserver-client-kubelet.*system:bootstrap:.*Approved,Issued' <<<"$csrs" || {
    echo "e2e-libvirt: no client CSR of w3 requested with a bootstrap token and issued" >&2; return 1; }
  worker_host w3
}

# fresh_nodes: right after 01-machines every node is what cloud-init made
# of the Ubuntu-like image, checked over ssh (not khw's SSH code): booted by
# the disk's own GRUB (BOOT_IMAGE=, root by label), hostname and address
# from the seed, root grown to diskGiB, systemd-resolved with
# the stub in /etc/resolv.conf and the gateway behind it, cgroup v2,
# AppArmor on with its parser, user ubuntu with sudo NOPASSWD, none of
# haproxy/jq/conntrack/socat installed and empty apt lists (what 06 and 07
# install must come from the mirror's .debs; the namespace has no route out,
# so no archive is reachable either).
fresh_nodes() {
  local n ip gib want got
  # The mirror has no dated release: 01 fell back to the current one.
  grep -E '^ +base image: .*/releases/noble/release/ubuntu-24\.04-server-cloudimg-[a-z0-9]+\.img \(the current noble release' "$STATE/up.log" || {
    echo "e2e-libvirt: 01-machines does not say it used the current noble release" >&2; return 1; }
  # shellcheck disable=SC2016 # expanded on the node
  local probe='echo "host=$(hostname) ip=$(ip -4 -o addr show eth0 | awk "{print \$4}")"
echo "arch=$(uname -m) kernel=$(uname -r)"
echo "root>=$(( $(df -BG --output=size / | tail -1 | tr -dc 0-9) + 1 ))G"
echo "resolved=$(systemctl is-active systemd-resolved) link=$(readlink /etc/resolv.conf) $(grep -m1 ^nameserver /etc/resolv.conf) upstream=$(grep -m1 ^nameserver /run/systemd/resolve/resolv.conf | cut -d" " -f2)"
echo "cgroup=$(stat -fc %T /sys/fs/cgroup) apparmor=$(cat /sys/module/apparmor/parameters/enabled) parser=$(test -x /sbin/apparmor_parser && echo yes)"
echo "user=$(id -un) sudo=$(sudo -n -l | grep -c "NOPASSWD: ALL")"
echo "grub=$(grep -c "^BOOT_IMAGE=[^ ]* root=LABEL=cloudimg-rootfs " /proc/cmdline)"
echo "installed=$(for p in haproxy jq conntrack socat; do dpkg-query -W -f="\${db:Status-Status}" $p 2>/dev/null | grep -q ^installed && printf "%s," $p; done) lists=$(sudo find /var/lib/apt/lists -maxdepth 1 -type f ! -name lock | wc -l)"
echo "unattended-upgrades=$(sudo journalctl -b -q --no-pager -u khw-standin-unattended-upgrades.service | grep -c "holding /var/lib/dpkg/lock-frontend")"'
  for n in $NODES; do
    ip=$(awk -v n="$n" '$0 ~ "name: "n"," { sub(/.*ip: /, ""); sub(/,.*/, ""); print }' "$STATE/$NAME/cluster.yaml")
    gib=$(awk -v n="$n" '$0 ~ "name: "n"," { sub(/.*diskGiB: /, ""); sub(/}.*/, ""); print }' "$STATE/$NAME/cluster.yaml")
    got=$(on "$n" "$probe" 2>"$STATE/fresh-$n.err") || {
      echo "e2e-libvirt: ssh to $n failed right after 01-machines said it was up:" >&2; cat "$STATE/fresh-$n.err" >&2; return 1; }
    echo "$n: $(tr '\n' ' ' <<<"$got")"
    want="host=$n ip=$ip/24"
    grep -qxF "$want" <<<"$got" || { echo "e2e-libvirt: $n: want $want (cloud-init's hostname and address)" >&2; return 1; }
    grep -q "^arch=$UNAME_M " <<<"$got" || { echo "e2e-libvirt: $n: want arch=$UNAME_M (uname -m)" >&2; return 1; }
    # df rounds down and the file system keeps some blocks: grown when it
    # is within a GiB of diskGiB (the image's root is 3.5 GiB).
    [ "$(sed -n 's/^root>=\([0-9]*\)G$/\1/p' <<<"$got")" -ge "$gib" ] || { echo "e2e-libvirt: $n: root not grown to ${gib} GiB" >&2; return 1; }
    for want in "resolved=active link=../run/systemd/resolve/stub-resolv.conf nameserver 127.0.0.53 upstream=192.168.122.1" \
                "cgroup=cgroup2fs apparmor=Y parser=yes" "user=ubuntu sudo=1" "grub=1" "installed= lists=0" "unattended-upgrades=1"; do
      grep -qxF "$want" <<<"$got" || { echo "e2e-libvirt: $n is not like a fresh Ubuntu cloud image: want $want" >&2; return 1; }
    done
  done
}

# up_apt_busy STEP: khw up through STEP while lb's package manager is busy:
# the stand-in's unattended-upgrade (hack/standin/, as apt-daily-upgrade.timer
# starts it at any hour on Ubuntu) holds dpkg's locks on lb before khw up
# starts and lets go 10 s after khw says that it waits for them, so 06-lb's
# install of haproxy meets the lock whatever the speed of the steps before.
up_apt_busy() {
  local unit=khw-e2e-unattended-upgrade rc=0 i pid
  on lb "sudo systemd-run --quiet --collect --unit=$unit /usr/local/lib/khw-standin/unattended-upgrade 900"
  for i in $(seq 60); do
    if on lb "sudo journalctl -q --no-pager -u $unit | grep -q 'holding /var/lib/dpkg/lock-frontend'"; then break; fi
    [ "$i" -lt 60 ] || { echo "e2e-libvirt: the unattended-upgrade stand-in on lb did not take the dpkg lock within 60 s" >&2; return 1; }
    sleep 1
  done
  echo "lb: unattended-upgr holds the dpkg lock"
  up_until "$1" &
  pid=$!
  for i in $(seq 900); do
    grep -q "lb: waiting for the package manager" "$STATE/up.log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  sleep 10
  on lb "sudo systemctl stop $unit" || true
  wait "$pid" || rc=$?
  return "$rc"
}

# apt_waited: up_apt_busy's khw up said on lb that it waited for the
# package manager, naming the stand-in, and then installed haproxy.
apt_waited() {
  grep -E "lb: waiting for the package manager: /var/lib/dpkg/lock(-frontend)? is held by unattended-upgr \(pid [0-9]+\)" "$STATE/up.log" || {
    echo "e2e-libvirt: khw up did not say that it waited for unattended-upgrades' dpkg lock on lb" >&2; return 1; }
  grep -E "lb: the package manager was free again; installed haproxy after [0-9]+" "$STATE/up.log" || {
    echo "e2e-libvirt: khw up did not install haproxy on lb after the dpkg lock was released" >&2; return 1; }
}

# worker_host NODE: what 07-workers (or 10 for w3) prepared on NODE, seen over ssh and
# through the API: the kernel prerequisites (overlay, br_netfilter, the
# three sysctls 1, no swap), containerd, kubelet and kube-proxy active on
# cgroup v2, the binaries from the mirror running on the nodes' arch, and
# the Node Ready with that arch.
worker_host() {
  local n=$1 got want
  # shellcheck disable=SC2016 # expanded on the node
  # The sbin directories are not on a non-root ssh PATH on Debian's image
  # (Ubuntu's /etc/environment has them); name them so both answer alike.
  got=$(on "$n" 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
echo "arch=$(uname -m)"
echo "overlay=$(grep -cw overlay /proc/filesystems) br_netfilter=$(test -e /proc/sys/net/bridge/bridge-nf-call-iptables && echo loaded)"
echo "sysctl=$(sysctl -n net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables net.ipv4.ip_forward | tr "\n" " ")"
echo "swap=$(swapon --noheadings --show 2>&1 | wc -l)"
echo "units=$(systemctl is-active containerd kubelet kube-proxy | tr "\n" " ")"
echo "cgroup=$(stat -fc %T /sys/fs/cgroup) kubelet=$(cat /proc/$(pidof kubelet)/cgroup)"
echo "kubelet: $(/usr/local/bin/kubelet --version)"
echo "containerd: $(/usr/local/bin/containerd --version)"
echo "runc: $(runc --version | head -1)"
echo "iptables: $(iptables --version)"
echo "images: $(sudo ctr -n k8s.io images ls -q | grep -v ^sha256: | sort | tr "\n" " ")"' 2>/dev/null)
  printf '%s:\n%s\n' "$n" "$got"
  for want in "arch=$UNAME_M" "overlay=1 br_netfilter=loaded" "sysctl=1 1 1 " "swap=0" "units=active active active " \
              "cgroup=cgroup2fs kubelet=0::/system.slice/kubelet.service"; do
    grep -qxF "$want" <<<"$got" || { echo "e2e-libvirt: $n as a worker: want $want" >&2; return 1; }
  done
  for want in "kubelet: Kubernetes v" "containerd: containerd " "runc: runc version " "iptables: iptables v"; do
    grep -q "^$want" <<<"$got" || { echo "e2e-libvirt: $n as a worker: want a line starting $want" >&2; return 1; }
  done
  got=$(in_ns "$KHW" kubectl get node "$n" -o 'jsonpath={.status.nodeInfo.architecture} {.status.conditions[?(@.type=="Ready")].status} {.status.nodeInfo.kubeletVersion} {.status.nodeInfo.osImage}')
  echo "Node $n: $got"
  [[ "$got" == "$ARCH True "* ]] || { echo "e2e-libvirt: Node $n: want architecture $ARCH and Ready True" >&2; return 1; }
}

# offline_after NODE...: haproxy on lb and iptables on the workers are
# installed, and the apt lists are still empty: the packages came from the
# mirror.
offline_after() {
  local n out
  for n in "$@"; do
    # shellcheck disable=SC2016 # expanded on the node
    out=$(on "$n" 'dpkg-query -W -f="\${Package} \${Version} \${db:Status-Status}\n" haproxy iptables 2>/dev/null | grep " installed$"; sudo find /var/lib/apt/lists -maxdepth 1 -type f ! -name lock; ls /var/cache/khw/debs 2>/dev/null | head -3')
    printf '%s:\n%s\n' "$n" "$out"
    case "$n:$out" in
      lb:*haproxy*installed*|w?:*iptables*installed*) ;;
      *) echo "e2e-libvirt: $n lacks its package" >&2; return 1 ;;
    esac
    if grep -q '^/var/lib/apt/lists/' <<<"$out"; then
      echo "e2e-libvirt: $n has apt lists: something ran apt-get update" >&2; return 1
    fi
  done
}

# The second khw up must change nothing: every step line says clean.
noop_check() {
  local out
  out=$("$KHW" up --until "$UNTIL")
  echo "$out"
  if grep '^[✓✗•-] ' <<<"$out" | grep -v '(clean' ; then
    echo "e2e-libvirt: the second khw up was not a no-op (every step must say clean)" >&2
    return 1
  fi
}

# step_table prints each step of the first khw up and its time (the first
# line of each: the run to $UNTIL finds 01-machines clean again).
step_table() {
  echo "khw up per step ($ARCH nodes on $HOSTARCH, TCG, $(nproc) cores):"
  sed -n -E 's/^[✓✗] ([0-9]{2}-[a-z-]+) .*\((applied [0-9]+ changes?|failed in [a-z]+|clean), ([0-9hms.]+)\).*/  \1 \3  (\2)/p' "$STATE/up.log" | awk '!seen[$1]++'
}

phase "build khw"       make -s build
if [ "$ARCH" = arm64 ] && [ "$HOSTARCH" != arm64 ]; then
  # debootstrap and the chroots run arm64 programs through qemu-user.
  [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || BINFMT=1
  phase "binfmt arm64"  hack/binfmt-arm64.sh
fi
phase "test image"      env ARCH="$ARCH" hack/libvirt-test-image.sh
TESTIMG=$(ARCH=$ARCH hack/libvirt-test-image.sh | tail -1)
# The node image: the Ubuntu-like stand-in (no haproxy/jq, empty apt lists,
# systemd-resolved, cgroup v2, user ubuntu), booted from its own disk.
phase "cloud image"     env ARCH="$ARCH" hack/libvirt-cloud-image.sh "$TESTIMG"
IMG=$(ARCH=$ARCH hack/libvirt-cloud-image.sh "$TESTIMG" | tail -1)
# The mirror holds every catalog download, the stand-in where Ubuntu's
# current noble release lives (the dated release the catalog pins is not
# there, so 01-machines falls back and says so), and the .debs the nodes
# lack according to the image's manifest.
phase "offline mirror"  hack/build-mirror.sh --out "$MIRROR_DIR" --arch "$ARCH"
phase "mirror: image"   hack/build-mirror.sh --out "$MIRROR_DIR" --arch "$ARCH" --only ubuntu-cloud-image --vm-image "$IMG"
phase "mirror: debs"    hack/build-mirror.sh --out "$MIRROR_DIR" --arch "$ARCH" --node-debs "$IMG/manifest" --debs-only
# This machine built the mirror, so it pins it.
KHW_MIRROR_DIGEST=$(hack/mirror-pin.sh "$MIRROR_DIR")
export KHW_MIRROR_DIGEST
phase "libvirtd"        start_libvirtd
phase "khw init"        "$KHW" init --name "$NAME" --arch "$ARCH" --provider libvirt
phase "cluster.yaml"    write_cluster
UP_T0=$(date +%s%N)
phase "khw up →01"      up_until 01-machines
phase "fresh nodes"     fresh_nodes
if [ "$STEP" -ge 6 ]; then
  # lb's first package install (haproxy, 06-lb) meets a held dpkg lock.
  phase "khw up →05"      up_until 05-control-plane
  phase "khw up →$UNTIL"  up_apt_busy "$UNTIL"
else
  phase "khw up →$UNTIL"  up_until "$UNTIL"
fi
UP_T1=$(date +%s%N)
if [ "$STEP" -ge 6 ]; then
  phase "apt lock waited" apt_waited
fi
# What khw gave libvirt, left for the student in <state>/libvirt/<node>/.
node_files() {
  local n f
  for n in $NODES; do
    for f in user-data meta-data network-config disk-volume.xml domain.xml; do
      [ -s "$STATE/$NAME/libvirt/$n/$f" ] || { echo "missing $STATE/$NAME/libvirt/$n/$f" >&2; return 1; }
    done
  done
  grep -q "<name>khw-$NAME-cp1</name>" "$STATE/$NAME/libvirt/cp1/domain.xml"
}
phase "node files"      node_files
if [ "$STEP" -ge 7 ]; then
  phase "w1 host"         worker_host w1
fi
if [ "$UNTIL" = 11-smoke ]; then
  phase "witnesses"       witness
  phase "node packages"   offline_after lb w1 w3
elif [ "$STEP" -ge 7 ]; then
  phase "node packages"   offline_after lb w1
elif [ "$STEP" -ge 6 ]; then
  phase "node packages"   offline_after lb
fi
phase "khw up (no-op)"  noop_check
phase "khw status"      "$KHW" status
if [ "$STEP" -ge 7 ] && [ "$UNTIL" != 11-smoke ]; then
  phase "lab check 07"    "$KHW" lab check 07-workers
fi
if [ "$UNTIL" = 11-smoke ]; then
  # The whole path grades lab 10 (w3's CSRs and certificates on cgroup v2
  # nodes booted by cloud-init); 07's rules run in make e2e-nspawn.
  phase "lab check 10"    "$KHW" lab check 10-tls-bootstrap
  # One control plane: the drill that fits is the load balancer's.
  phase "drill lb"        "$KHW" break lb --for 20s
fi
if [ "${E2E_KEEP:-}" != 1 ]; then
  phase "khw down"      "$KHW" down
fi

echo
echo "e2e-libvirt wall times ($ARCH nodes on $HOSTARCH, $(nproc) cores, TCG, $(date -u +%Y-%m-%dT%H:%MZ)):"
printf '  %s\n' "${PHASES[@]}"
ds=$(( (UP_T1 - UP_T0) / 100000000 ))
printf '  %-22s %5d.%d s\n' "khw up start → $UNTIL" $((ds / 10)) $((ds % 10))
echo
step_table
