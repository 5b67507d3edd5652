# phase LABEL CMD...: run CMD, echo it first, and keep its wall time in
# PHASES for the summary. Sourced by hack/e2e-lib.sh and hack/e2e-libvirt.sh.
# shellcheck shell=bash
declare -a PHASES=()
phase() {
  local label=$1; shift
  echo "=== $label: $*"
  local t0 t1 ds
  t0=$(date +%s%N)
  "$@"
  t1=$(date +%s%N)
  ds=$(( (t1 - t0) / 100000000 ))
  PHASES+=("$(printf '%-22s %5d.%d s' "$label" $((ds / 10)) $((ds % 10)))")
}
