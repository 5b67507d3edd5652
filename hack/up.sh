#!/usr/bin/env bash
# make up: the README's main job. On a Debian/Ubuntu machine (root, for
# nspawn nodes), with nothing but Go and make: install the host packages,
# build khw, build or reuse the offline mirror, make the cluster's
# cluster.yaml if there is none (provider nspawn), run khw up, show khw
# status, and say how to use and remove the cluster. Re-running it is safe:
# khw up changes only what differs.
#
# Env: KHW_CLUSTER (default khw), KHW_STATE_DIR, MIRROR_DIR
# (default ~/.cache/khw/mirror), UP_ONLY (mirror components to build;
# default all of them).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "make up needs root: nspawn nodes need network namespaces and cgroups (run: sudo make up)" >&2
  exit 2
fi
MIRROR_DIR=${MIRROR_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/khw/mirror}
UP_ONLY=${UP_ONLY:-}
export KHW_MIRROR=${KHW_MIRROR:-$MIRROR_DIR}
export KHW_CLUSTER=${KHW_CLUSTER:-khw}
KHW=$PWD/bin/khw

echo "== offline mirror (${UP_ONLY:-every component}) in $MIRROR_DIR (first time: ~30 min on 2 cores; then seconds)"
hack/build-mirror.sh --out "$MIRROR_DIR" --arch "$(go env GOARCH)" ${UP_ONLY:+--only "$UP_ONLY"}
# The mirror built here is pinned here; a KHW_MIRROR of your own needs your
# KHW_MIRROR_DIGEST (khw trusts a mirror only through its pin).
if [ "$KHW_MIRROR" = "$MIRROR_DIR" ]; then
  KHW_MIRROR_DIGEST=$(hack/mirror-pin.sh "$MIRROR_DIR")
  export KHW_MIRROR_DIGEST
  echo "   mirror pin: $KHW_MIRROR_DIGEST"
fi

if ! "$KHW" config show >/dev/null 2>&1; then
  echo "== khw init --provider nspawn (cluster $KHW_CLUSTER)"
  "$KHW" init --provider nspawn
fi
# make build ran as root: give bin/ back to the user who ran sudo, or their
# next `make build` cannot replace bin/khw.
if [ -n "${SUDO_UID:-}" ] && [ -n "${SUDO_GID:-}" ]; then
  chown -R "$SUDO_UID:$SUDO_GID" bin
fi
echo "== khw up"
"$KHW" up
echo "== khw status"
"$KHW" status

# Under sudo, HOME is root's, so this cluster's state directory is under
# root's home while a later `sudo -E bin/khw` would look under the user's:
# print the variables that name it (and the mirror), which sudo -E keeps.
STATE_BASE=${KHW_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/khw}
cat <<MSG

The cluster $KHW_CLUSTER is up. Its nodes live in the network namespace khw-$KHW_CLUSTER.
Run this in your shell first, so that khw finds this cluster and its mirror (sudo -E keeps them):
  export KHW_STATE_DIR=$STATE_BASE KHW_CLUSTER=$KHW_CLUSTER KHW_MIRROR=$KHW_MIRROR${KHW_MIRROR_DIGEST:+ KHW_MIRROR_DIGEST=$KHW_MIRROR_DIGEST}
  sudo -E bin/khw kubectl get --raw /readyz      kubectl with the admin kubeconfig, through the load balancer
  sudo -E bin/khw shell                          a shell in the cluster network (KUBECONFIG set; ssh -F \$KHW_SSH_CONFIG cp1)
  sudo -E bin/khw status                         nodes, units, etcd members and leader, /readyz, Lease holders
  sudo -E bin/khw up --dry-run                   what differs from cluster.yaml (nothing, right now)
  sudo -E bin/khw power off cp2                  pull a node's plug; sudo -E bin/khw up brings it back
  sudo -E bin/khw down                           remove the nodes and the network (keeps certs and cluster.yaml)
MSG
