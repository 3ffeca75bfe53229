#!/usr/bin/env bash
# Runs one fuzz target of e2e/tests/it/fuzz/ (or all of them) for a time, with a fresh
# seed, alone in the test process (so its memory limit means that target), and prints
# how many inputs each reached. A failure prints the input shrunk and the line that
# replays it; make it a regression test where the defect lives (docs/fuzzing.md).
# `cargo test` runs every target briefly from a fixed seed; this is the long run.
# Usage: hack/fuzz.sh TARGET|all [--time 30m|90s|1h] [--seed N]
#   targets: api_bodies api_patches api_queries cel_selectors plugin_inventory_files
#            plugin_opaque_configs pod_log_queries binary_flags
set -euo pipefail
source "$(dirname "$0")/lib.sh"
targets_all=(api_bodies api_patches api_queries cel_selectors plugin_inventory_files plugin_opaque_configs pod_log_queries binary_flags)
target="" time=10m seed=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --time) time="${2:?--time needs a value, e.g. 30m}"; shift 2 ;;
    --seed) seed="${2:?--seed needs a number}"; shift 2 ;;
    -*) die "unknown flag $1 (try --help)" ;;
    *) [[ -z "$target" ]] || die "one target at a time (or all), not '$target' and '$1'"; target="$1"; shift ;;
  esac
done
[[ -n "$target" ]] || die "which target? one of: ${targets_all[*]} all"
if [[ "$target" == all ]]; then
  targets=("${targets_all[@]}")
else
  [[ " ${targets_all[*]} " == *" $target "* ]] || die "unknown target '$target'; one of: ${targets_all[*]} all"
  targets=("$target")
fi
case "$time" in
  *h) seconds=$((${time%h} * 3600)) ;;
  *m) seconds=$((${time%m} * 60)) ;;
  *s) seconds="${time%s}" ;;
  *) seconds="$time" ;;
esac
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || ((seconds == 0)); then
  die "--time $time: give seconds, minutes or hours (90s, 30m, 1h)"
fi
[[ -n "$seed" ]] || seed="$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')"
[[ "$seed" =~ ^[0-9]+$ ]] || die "--seed $seed is not a whole number"

exe="$(e2e_test_exe)"
report="$(mktemp)"
trap 'rm -f "$report"' EXIT
rc=0
# The test of a target: fuzz::<module>::<target>.
test_of() {
  case "$1" in
    api_*) echo "fuzz::api::$1" ;;
    cel_*) echo "fuzz::cel::$1" ;;
    plugin_*) echo "fuzz::plugin::$1" ;;
    pod_log_*) echo "fuzz::logs::$1" ;;
    binary_*) echo "fuzz::flags::$1" ;;
  esac
}
for t in "${targets[@]}"; do
  echo "== fuzz $t for ${seconds} s, seed $seed"
  (cd "$ROOT/e2e" && FAKE_DRA_FUZZ_SECONDS="$seconds" FAKE_DRA_FUZZ_SEED="$seed" FAKE_DRA_FUZZ_REPORT="$report" \
    "$exe" --exact "$(test_of "$t")" --nocapture) || { rc=1; echo "== fuzz $t FOUND something (above)"; continue; }
  # A target that did not run at all (a renamed test) must not pass.
  grep -q "^fuzz $t: " "$report" || { rc=1; echo "== fuzz $t: no test $(test_of "$t") ran (the report has no line for it)"; }
done
echo "== fuzz report"
cat "$report"
exit "$rc"
