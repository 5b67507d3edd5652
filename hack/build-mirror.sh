#!/usr/bin/env bash
# Build the offline download mirror of khw's component catalog from source
# (test tooling, not part of khw). All flags go to hack/mkmirror; see
# hack/README.md. Prerequisites (Debian): `make mirror-deps` (amd64) and
# `make mirror-deps-arm64` (adds the arm64 cross toolchain).
#
#   hack/build-mirror.sh                      # amd64, default versions, ~/.cache/khw/mirror
#   hack/build-mirror.sh --arch amd64,arm64 --out /srv/mirror --config cluster.yaml
#   hack/build-mirror.sh --only etcd,runc -j 1
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
for tool in go gcc pkg-config strip apt-get dpkg-deb; do
	command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
	echo "build-mirror.sh: missing ${missing[*]} (fix: make mirror-deps)" >&2
	exit 2
fi
bin=$(mktemp -d)/mkmirror
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./hack/mkmirror
"$bin" "$@"
