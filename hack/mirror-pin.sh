#!/usr/bin/env bash
# Print the pin of a mirror that this machine built (hack/build-mirror.sh):
# sha256:<hex> of MIRROR_DIR/khw-mirror.json, what khw takes as
# KHW_MIRROR_DIGEST. Whoever runs this vouches for the mirror: use it only on
# a mirror you built or exported yourself, never on one you were handed.
set -euo pipefail
dir=${1:?usage: hack/mirror-pin.sh MIRROR_DIR}
manifest=$dir/khw-mirror.json
if [[ ! -f $manifest ]]; then
	echo "mirror-pin.sh: $manifest is missing (fix: hack/build-mirror.sh --out $dir writes it)" >&2
	exit 2
fi
sum=$(sha256sum "$manifest")
echo "sha256:${sum%% *}"
