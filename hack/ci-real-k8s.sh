#!/usr/bin/env bash
# CI step "real Kubernetes": installs the Debian packages the local cluster needs, builds
# the components from the Go module proxy (cached: hack/kube-build.sh; .ci/run starts
# these builds in the background first, and this step waits for them), builds our images
# from the dev-profile binaries that `cargo test --workspace` already left in target/debug
# (built here if they are missing), runs hack/real-k8s-demo.sh (a fresh one-node cluster,
# the structured overlay, the seed demo, teardown) on the newest release and the classic
# seed demo on Kubernetes 1.30, hack/example-fpga.sh demo (the example driver on its own
# fresh cluster: a pod sees /dev/fpga0), then the real-cluster e2e suite on the newest
# release (e2e/tests/real_cluster.rs, FAKE_DRA_REQUIRE_REAL_K8S=1: its own cluster,
# compared with its recorded protocol, teardown), then the Helm chart on a fresh cluster
# (hack/helm-real-k8s.sh: install, seed demo, uninstall), then the chaos soak at its CI
# size (hack/soak.sh --ci, docs/soak.md: its own cluster, faults of every kind, teardown).
# The whole version matrix
# (hack/real-matrix.sh: every release line of hack/kube/, the suite on each structured one)
# runs instead of the suite on demand (--matrix always). It does not fit in CI's hour on a
# fresh machine (nine release builds, a suite of about 20 minutes per structured release),
# so by default (--matrix auto) this step only says loudly when the files of
# hack/kube/matrix-inputs changed since the matrix was last recorded
# (e2e/tests/real/observed/inputs.sha256). Prints the time of each stage. Needs root.
# Run it after `cargo test --workspace`: it packs the binaries that left in target/debug
# (a separate `cargo build -p ... --bin ...` would recompile for 3.5 minutes, because the
# features unify differently without the test targets).
# Usage: hack/ci-real-k8s.sh [--cargo-profile dev|release] [--no-suite] [--no-soak] [--matrix auto|always|never]
#   --no-suite  the demos only (not the e2e suite, not the matrix, not the soak)
#   --no-soak   not the chaos soak
#   --matrix    auto (default): the newest release's suite, and a note when the matrix's inputs
#               changed since it was recorded; always: the whole matrix; never: no note
# Env: FAKE_DRA_CI_MATRIX (as --matrix)
# Cold (empty Go caches) the Go builds take about 18.5 minutes on 2 cores for 1.37 and
# about 8 more for 1.30; warm, the demos take about a minute each and the suite about 5
# minutes; the whole matrix, warm, see docs/real-kubernetes.md#the-version-matrix.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/hack/kube/lib.sh"
profile=dev
suite=true
matrix="${FAKE_DRA_CI_MATRIX:-auto}"
soak=true
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --cargo-profile) profile="${2:?--cargo-profile needs a value}"; shift 2 ;;
    --no-suite) suite=false; soak=false; shift ;;
    --no-soak) soak=false; shift ;;
    --matrix) matrix="${2:?--matrix needs auto, always or never}"; shift 2 ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
case "$matrix" in auto|always|never) ;; *) die "--matrix: auto, always or never, not '$matrix'" ;; esac
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
KUBE_MODULE=kubernetes-1.30 "$ROOT/hack/kube-build.sh"
echo "== kube-build 1.30 (classic): $((SECONDS - t1)) s"

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
t1=$SECONDS
KUBE_MODULE=kubernetes-1.30 "$ROOT/hack/real-k8s-demo.sh" --skip-build
echo "== real-k8s demo, classic 1.30: $((SECONDS - t1)) s"

# The out-of-tree example driver (examples/fpga-driver) on its own fresh cluster: a pod
# sees /dev/fpga0 and its env.
t1=$SECONDS
"$ROOT/hack/example-fpga.sh" demo
echo "== fpga example driver demo: $((SECONDS - t1)) s"

if $suite && [[ "$matrix" == auto ]]; then
  recorded="$(cat "$ROOT/e2e/tests/real/observed/inputs.sha256" 2>/dev/null || true)"
  current="$(matrix_inputs_sha256)"
  if [[ "$recorded" != "$current" ]]; then
    echo "== NOTE: the version matrix's inputs (hack/kube/matrix-inputs) changed since it was"
    echo "   last recorded (${recorded:-never recorded}, now $current): the releases other than"
    echo "   the newest are not shown on this change; run hack/real-matrix.sh (or this step"
    echo "   with --matrix always) and commit what it writes."
  fi
fi
if $suite && [[ "$matrix" == always ]]; then
  t1=$SECONDS
  # Every release line, the newest one's suite included; the binaries are built above or
  # by hack/kube-build.sh in there.
  "$ROOT/hack/real-matrix.sh"
  echo "== version matrix: $((SECONDS - t1)) s"
elif $suite; then
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

# The Helm chart on a fresh cluster: install, the seed demo, uninstall leaves nothing.
t1=$SECONDS
"$ROOT/hack/helm-real-k8s.sh"
echo "== helm on the real cluster: $((SECONDS - t1)) s"

if $soak; then
  # The soak test executable of the same `cargo test --workspace` (hack/soak.sh finds it);
  # its report also goes to target/soak/report.txt.
  t1=$SECONDS
  "$ROOT/hack/soak.sh" --ci
  echo "== chaos soak (hack/soak.sh --ci): $((SECONDS - t1)) s"
fi
echo "== ci-real-k8s: $((SECONDS - t0)) s"
