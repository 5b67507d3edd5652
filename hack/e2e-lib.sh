# Sourced by hack/e2e.sh: the
# environment of a throwaway cluster, phase() timing, and the cleanup that
# tears the cluster down and fails when anything is left behind.
# shellcheck shell=bash
MIRROR_DIR=${MIRROR_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/khw/mirror}
E2E_ONLY=${E2E_ONLY:-}
KHW=$PWD/bin/khw
STATE=$(mktemp -d /tmp/khw-e2e.XXXXXX)
NAME=e2e$$
export KHW_STATE_DIR=$STATE KHW_CLUSTER=$NAME KHW_MIRROR=$MIRROR_DIR

if [ "$(id -u)" != 0 ]; then
  echo "make e2e needs root: nspawn nodes need network namespaces and cgroups (sudo make e2e)" >&2
  exit 2
fi

# shellcheck source=hack/e2e-phase.sh
. hack/e2e-phase.sh

cleanup() {
  local rc=$?
  if [ "${E2E_KEEP:-}" = 1 ] && [ $rc = 0 ]; then
    echo "kept: KHW_STATE_DIR=$STATE KHW_CLUSTER=$NAME $KHW down"
    return
  fi
  "$KHW" down >/dev/null 2>&1 || "$KHW" down || true
  local left=
  [ -e "/run/netns/khw-$NAME" ] && left="$left netns khw-$NAME"
  pgrep -f "systemd-nspawn.* -M $NAME-" >/dev/null && left="$left nspawn-processes"
  [ -d "$STATE/$NAME/nspawn" ] && left="$left node-roots"
  rm -rf "$STATE"
  if [ -n "$left" ]; then
    echo "e2e: left behind:$left" >&2
    exit 1
  fi
  [ $rc = 0 ] && echo "e2e: nothing left behind"
  return $rc
}
trap cleanup EXIT

# print_phases prints the wall time of every phase so far.
print_phases() {
  echo
  echo "e2e wall times ($(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)):"
  printf '  %s\n' "${PHASES[@]}"
}
