#!/usr/bin/env bash
# make e2e-libvirt: `khw up --provider libvirt` through 06-lb on a reduced
# cluster (lb, cp1, w1) of QEMU/TCG VMs, with the wall time of each phase.
#
# libvirtd must never run in the root network namespace (it would make
# virbr0 192.168.122.1 there), so this script starts virtlogd and libvirtd
# inside a network namespace of its own (khwlv-e2e-<pid>) and tells khw to
# dial the nodes from there (KHW_LIBVIRT_NETNS). The node image is the
# debootstrap test image of hack/libvirt-test-image.sh (no cloud image
# download here), booted by direct kernel boot. Everything is removed at the
# end, on failure and on Ctrl-C too: the cluster (khw down), the daemons,
# every process left in the namespace, the namespace.
#
# Env: MIRROR_DIR (default ~/.cache/khw/mirror), E2E_UNTIL (last step,
# default 06-lb), E2E_KEEP=1 keeps cluster and libvirtd (prints how to stop).
set -euo pipefail
cd "$(dirname "$0")/.."

MIRROR_DIR=${MIRROR_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/khw/mirror}
UNTIL=${E2E_UNTIL:-06-lb}
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

KVM_RESTORE=
cleanup() {
  local rc=$?
  if [ "${E2E_KEEP:-}" = 1 ] && [ $rc = 0 ]; then
    echo "kept: KHW_STATE_DIR=$STATE KHW_CLUSTER=$NAME KHW_LIBVIRT_NETNS=$KHW_LIBVIRT_NETNS $KHW down; then kill the daemons in $NS, ip netns delete $NS${KVM_RESTORE:+, and restore /dev/kvm: $KVM_RESTORE}"
    return
  fi
  if ! "$KHW" down >/dev/null 2>&1 && ! "$KHW" down; then
    # khw down could not run (e.g. cluster.yaml broken): remove this run's
    # domains and volumes with virsh, so a later run does not find VMs of
    # another state directory under the same names.
    echo "e2e-libvirt: khw down failed; removing khw-$NAME-* with virsh" >&2
    local d v
    for d in $(virsh -c qemu:///system list --all --name 2>/dev/null | grep "^khw-$NAME-" || true); do
      virsh -c qemu:///system destroy "$d" >/dev/null 2>&1 || true
      virsh -c qemu:///system undefine "$d" --nvram --snapshots-metadata >/dev/null 2>&1 || true
    done
    for v in $(virsh -c qemu:///system vol-list khw 2>/dev/null | awk -v p="khw-$NAME-" 'index($1, p) == 1 {print $1}'); do
      virsh -c qemu:///system vol-delete "$v" --pool khw >/dev/null 2>&1 || true
    done
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
  # As Debian's udev rule would (this host has no udev): libvirt's QEMU
  # user may open /dev/kvm. Without it libvirt 9.0 re-probes QEMU on every
  # call (~5 s each). khw's preflight still finds out whether KVM works.
  if [ -e /dev/kvm ] && getent group kvm >/dev/null; then
    KVM_RESTORE="chown $(stat -c %u:%g /dev/kvm) /dev/kvm; chmod $(stat -c %a /dev/kvm) /dev/kvm"
    chgrp kvm /dev/kvm && chmod 0660 /dev/kvm
  fi
  nsenter --net="/run/netns/$NS" virtlogd -d
  nsenter --net="/run/netns/$NS" libvirtd -d
  local i
  for i in $(seq 1 100); do
    [ -S /var/run/libvirt/libvirt-sock ] && virsh -c qemu:///system uri >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "e2e-libvirt: libvirtd did not come up" >&2
  return 1
}

write_cluster() {
  local y=$STATE/$NAME/cluster.yaml
  # lb + cp1 + w1 only; w1 is a plain worker.
  sed -i -E '/name: (cp2|cp3|w2|w3),/d' "$y"
  sed -i -E 's/(name: cp1, .*memoryMiB: )[0-9]+/\12048/' "$y"
  cat >>"$y" <<EOF
libvirt:
  image: $IMG/disk.qcow2
  kernel: $IMG/vmlinuz
  initrd: $IMG/initrd.img
  cmdline: $(cat "$IMG/cmdline")
EOF
  grep -E 'name: |libvirt|image|kernel' "$y"
  "$KHW" config validate
}

# khw up, once: its waits scale with the provider's slowdown (15x for TCG
# VMs, vm.Timing). It must reach $UNTIL in one run; the figure is the time.
up_until() {
  "$KHW" up --until "$UNTIL"
}

phase "build khw"       make -s build
phase "test image"      hack/libvirt-test-image.sh
IMG=$(hack/libvirt-test-image.sh | tail -1)
phase "offline mirror"  hack/build-mirror.sh --out "$MIRROR_DIR" --arch "$(go env GOARCH)" --only kubernetes,etcd
# This machine built the mirror, so it pins it.
KHW_MIRROR_DIGEST=$(hack/mirror-pin.sh "$MIRROR_DIR")
export KHW_MIRROR_DIGEST
phase "libvirtd"        start_libvirtd
phase "khw init"        "$KHW" init --name "$NAME" --arch "$(go env GOARCH)" --provider libvirt
phase "cluster.yaml"    write_cluster
phase "khw up →$UNTIL"  up_until
# What khw gave libvirt, left for the student in <state>/libvirt/<node>/.
node_files() {
  local n f
  for n in lb cp1 w1; do
    for f in user-data meta-data network-config disk-volume.xml domain.xml; do
      [ -s "$STATE/$NAME/libvirt/$n/$f" ] || { echo "missing $STATE/$NAME/libvirt/$n/$f" >&2; return 1; }
    done
  done
  grep -q "<name>khw-$NAME-cp1</name>" "$STATE/$NAME/libvirt/cp1/domain.xml"
}
phase "node files"      node_files
# -v: a step that still finds something to fix names it (under TCG a
# control-plane component may have restarted: it exits when it cannot renew
# its leader Lease in time).
phase "khw up (no-op)"  "$KHW" up -v --until "$UNTIL"
phase "khw status"      "$KHW" status
if [ "${E2E_KEEP:-}" != 1 ]; then
  phase "khw down"      "$KHW" down
fi

echo
echo "e2e-libvirt wall times ($(nproc) cores, TCG, $(date -u +%Y-%m-%dT%H:%MZ)):"
printf '  %s\n' "${PHASES[@]}"
