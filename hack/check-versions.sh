#!/usr/bin/env bash
# Compare each version line khw pins (config.DefaultVersions,
# config.PreviousKubernetes) with the newest patch of the same line that the
# Go module proxy serves, from which hack/build-mirror.sh builds the mirror.
# Prints one row per line and exits 1 when a newer patch is served (2 when
# the proxy cannot be asked), so the
# pins cannot go stale without anyone seeing it (docs/catalog.md "Versions"
# says when each line was last checked). Needs the Go module proxy.
#
#   hack/check-versions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

# pinned NAME: the version of a DefaultVersions field (or PreviousKubernetes).
pinned() {
  if [ "$1" = PreviousKubernetes ]; then
    sed -n 's/^const PreviousKubernetes = "\(v[0-9.]*\)"$/\1/p' "${DEFAULTS_GO:-internal/config/defaults.go}"
  else
    sed -n "s/^\t$1: *\"\(v[0-9.]*\)\",$/\1/p" "${DEFAULTS_GO:-internal/config/defaults.go}"
  fi
}

# newest MODULE VERSION: the newest vX.Y.Z of VERSION's X.Y line the proxy
# serves: the listed versions, then each next patch asked for by name (the
# list can leave recent tags out).
newest() {
  local mod=$1 v=$2 line best p list out
  line=${v%.*}
  list=$(go list -m -versions "$mod" 2>&1) || { echo "check-versions: go list -m -versions $mod: $list" >&2; exit 2; }
  best=$(tr ' ' '\n' <<<"$list" | grep -E "^${line//./\\.}\.[0-9]+$" | sort -V | tail -1)
  [ -n "$best" ] || best=$v
  p=${best##*.}
  while out=$(go list -m "$mod@$line.$((p + 1))" 2>&1); do p=$((p + 1)); done
  # Only the proxy's "no such version" ends the search; anything else
  # (no network, GOPROXY=off) is an error, not a "not served".
  grep -qE "not available|unknown revision|invalid version|404 Not Found|410 Gone" <<<"$out" ||
    { echo "check-versions: go list -m $mod@$line.$((p + 1)): $out" >&2; exit 2; }
  echo "$line.$p"
}

stale=0
printf '%-20s %-44s %-10s %-10s\n' PIN MODULE PINNED NEWEST
for row in \
  "Kubernetes k8s.io/kubernetes" \
  "PreviousKubernetes k8s.io/kubernetes" \
  "Etcd go.etcd.io/etcd/server/v3" \
  "Containerd github.com/containerd/containerd/v2" \
  "Runc github.com/opencontainers/runc" \
  "CNIPlugins github.com/containernetworking/plugins" \
  "Crictl sigs.k8s.io/cri-tools" \
  "CoreDNS github.com/coredns/coredns"; do
  read -r name mod <<<"$row"
  set -- "$name" "$mod"
  v=$(pinned "$1")
  [ -n "$v" ] || { echo "check-versions: no $1 in internal/config/defaults.go" >&2; exit 2; }
  n=$(newest "$2" "$v")
  mark=
  if [ "$n" != "$v" ]; then mark="  <- newer patch served"; stale=1; fi
  printf '%-20s %-44s %-10s %-10s%s\n' "$1" "$2" "$v" "$n" "$mark"
done
exit $stale
