#!/usr/bin/env bash
# Differential allocation testing (docs/differential.md): seeded random DRA worlds through
# the emulated scheduler, each allocation and each unschedulable pod judged by the
# independent checker; every disagreement is shrunk and its reproducer written to --out
# (default target/differential/). Exits non-zero when a world disagrees.
# `cargo test` runs a fixed batch of 40 worlds (differential/tests/batch.rs); this is the
# long run.
# Usage: hack/differential.sh [--seed N] [--worlds N] [--kubernetes-version 1.37] [--out DIR]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
seed="" worlds=200 version=1.37 out="$ROOT/target/differential"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --seed) seed="${2:?--seed needs a number}"; shift 2 ;;
    --worlds) worlds="${2:?--worlds needs a number}"; shift 2 ;;
    --kubernetes-version) version="${2:?--kubernetes-version needs 1.MINOR}"; shift 2 ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
[[ -n "$seed" ]] || seed="$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')"
[[ "$seed" =~ ^[0-9]+$ ]] || die "--seed $seed is not a whole number"
if ! [[ "$worlds" =~ ^[0-9]+$ ]] || ((worlds == 0)); then
  die "--worlds $worlds: give a positive whole number"
fi
echo "== building fake-dra-differential"
cargo build --quiet -p fake-dra-differential --bin fake-dra-differential
echo "== seed $seed, $worlds worlds, Kubernetes $version (replay: hack/differential.sh --seed $seed --worlds $worlds)"
exec "${CARGO_TARGET_DIR:-$ROOT/target}/debug/fake-dra-differential" \
  --seed "$seed" --worlds "$worlds" --kubernetes-version "$version" --out "$out"
