#!/usr/bin/env bash
# Differential allocation testing (docs/differential.md): seeded random DRA worlds through
# the emulated scheduler, each allocation and each unschedulable pod judged by the
# independent checker; every disagreement is shrunk and its reproducer written to --out
# (default target/differential/). Exits non-zero when a world disagrees.
# `cargo test` runs a fixed batch of 40 worlds (differential/tests/batch.rs); this is the
# long run.
# --real also runs every world on the real kube-scheduler of hack/local-cluster.sh (brought
# up for the run and down after it, unless one already runs; needs root and
# hack/kube-build.sh's binaries) and compares the two schedulers.
# Usage: hack/differential.sh [--seed N] [--worlds N] [--kubernetes-version 1.37] [--out DIR] [--real]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
seed="" worlds=200 version=1.37 out="$ROOT/target/differential" real=false
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --seed) seed="${2:?--seed needs a number}"; shift 2 ;;
    --worlds) worlds="${2:?--worlds needs a number}"; shift 2 ;;
    --kubernetes-version) version="${2:?--kubernetes-version needs 1.MINOR}"; shift 2 ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --real) real=true; shift ;;
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
args=(--seed "$seed" --worlds "$worlds" --kubernetes-version "$version" --out "$out")
replay="hack/differential.sh --seed $seed --worlds $worlds"
if $real; then
  [[ "$(id -u)" == 0 ]] || die "--real must run as root (hack/local-cluster.sh)"
  [[ "$version" == 1.37 ]] || die "--real runs hack/local-cluster.sh's Kubernetes 1.37; drop --kubernetes-version $version"
  eval "$("$ROOT/hack/local-cluster.sh" env)"
  kubeconfig="${KUBECONFIG:?hack/local-cluster.sh env gave no KUBECONFIG}"
  if "$KUBE_BIN/kubectl" --kubeconfig "$kubeconfig" get --raw /readyz >/dev/null 2>&1; then
    echo "== using the local cluster that already runs"
  else
    echo "== bringing up hack/local-cluster.sh (down again after the run)"
    "$ROOT/hack/local-cluster.sh" up >/dev/null
    trap '"$ROOT/hack/local-cluster.sh" down >/dev/null' EXIT
  fi
  args+=(--real-kubeconfig "$kubeconfig")
  replay+=" --real"
fi
echo "== seed $seed, $worlds worlds, Kubernetes $version (replay: $replay)"
"${CARGO_TARGET_DIR:-$ROOT/target}/debug/fake-dra-differential" "${args[@]}"
