#!/usr/bin/env bash
# CI step "real Kubernetes": installs the Debian packages the local cluster needs, builds
# the components from the Go module proxy (cached: hack/kube-build.sh), builds our images
# from the dev-profile binaries that `cargo test --workspace` already left in target/debug
# (built here if they are missing), runs hack/real-k8s-demo.sh (a fresh one-node cluster,
# the structured overlay, the seed demo, teardown), then the real-cluster e2e suite
# (e2e/tests/real_cluster.rs, FAKE_DRA_REQUIRE_REAL_K8S=1: its own cluster, 16 scenarios,
# compared with the recorded protocol, teardown), then the chaos soak at its CI size
# (hack/soak.sh --ci, docs/soak.md: its own cluster, faults of every kind, teardown).
# Prints the time of each stage. Needs root.
# Run it after `cargo test --workspace`: it packs the binaries that left in target/debug
# (a separate `cargo build -p ... --bin ...` would recompile for 3.5 minutes, because the
# features unify differently without the test targets).
# Usage: hack/ci-real-k8s.sh [--cargo-profile dev|release] [--no-suite] [--no-soak]
#   --no-suite  the demo only (not the e2e suite, nor the soak)
#   --no-soak   not the chaos soak
# Cold (empty Go caches) the Go builds take about 18.5 minutes on 2 cores; warm, the demo
# takes under a minute and the suite about 5 minutes.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/hack/kube/lib.sh"
profile=dev
suite=true
soak=true
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --cargo-profile) profile="${2:?--cargo-profile needs a value}"; shift 2 ;;
    --no-suite) suite=false; soak=false; shift ;;
    --no-soak) soak=false; shift ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
[[ "$(id -u)" == 0 ]] || die "must run as root"
t0=$SECONDS
missing=()
for pkg in runc containernetworking-plugins iptables busybox-static openssl iproute2 binutils util-linux; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed"
fi
echo "== packages: $((SECONDS - t0)) s"

t1=$SECONDS
"$ROOT/hack/kube-build.sh"
echo "== kube-build: $((SECONDS - t1)) s"

t1=$SECONDS
dir=release; [[ "$profile" == release ]] || dir=debug
skip=()
if [[ -x "$ROOT/target/$dir/fake-dra-controller" && -x "$ROOT/target/$dir/fake-dra-kubelet-plugin" ]]; then
  skip=(--skip-cargo)
fi
"$ROOT/hack/build-image-local.sh" --cargo-profile "$profile" "${skip[@]}"
echo "== images: $((SECONDS - t1)) s"

t1=$SECONDS
"$ROOT/hack/real-k8s-demo.sh" --skip-build
echo "== real-k8s demo: $((SECONDS - t1)) s"

if $suite; then
  # The test executable `cargo test --workspace` just built, run as cargo runs it (from
  # the package's directory): any `cargo test --test real_cluster` selects fewer packages,
  # unifies features differently and recompiles part of the tree (about 2 minutes here).
  # The suite packs the binaries that sit next to its executable (target/debug) into its
  # images.
  t1=$SECONDS
  target="${CARGO_TARGET_DIR:-$ROOT/target}"
  # The newest, if an older build left another one.
  exes="$(find "$target/debug/deps" -maxdepth 1 -type f -executable -name 'real_cluster-*' -printf '%T@ %p\n' | sort -rn)"
  exe="${exes%%$'\n'*}"
  exe="${exe#* }"
  if [[ -n "$exe" ]]; then
    (cd "$ROOT/e2e" && FAKE_DRA_REQUIRE_REAL_K8S=1 "$exe" scenarios_on_the_real_cluster)
  else
    (cd "$ROOT" && FAKE_DRA_REQUIRE_REAL_K8S=1 cargo test --locked --workspace --test real_cluster -- scenarios_on_the_real_cluster)
  fi
  echo "== real-cluster e2e suite: $((SECONDS - t1)) s"
fi
if $soak; then
  # The soak test executable of the same `cargo test --workspace` (hack/soak.sh finds it);
  # its report also goes to target/soak/report.txt.
  t1=$SECONDS
  "$ROOT/hack/soak.sh" --ci
  echo "== chaos soak (hack/soak.sh --ci): $((SECONDS - t1)) s"
fi
echo "== ci-real-k8s: $((SECONDS - t0)) s"
