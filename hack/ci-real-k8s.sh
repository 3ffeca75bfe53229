#!/usr/bin/env bash
# CI's real-Kubernetes steps, each a row of the CI table (hack/ci-lib.sh): installs the
# Debian packages the local cluster needs; waits for (or builds) the components from the Go
# module proxy (hack/kube-build.sh; .ci/run builds them in the background); packs our
# images from the dev-profile binaries `cargo test --workspace` left in target/debug
# (built here if missing); then, each on its own fresh one-node cluster, on the newest
# release: the seed demo (hack/real-k8s-demo.sh), the real-cluster e2e suite
# (e2e/tests/it/real_cluster.rs, FAKE_DRA_REQUIRE_REAL_K8S=1, compared with its recorded
# protocol), the Helm chart (hack/helm-real-k8s.sh: install, seed demo, uninstall), the
# chaos soak at its CI size (hack/soak.sh --ci, docs/soak.md), the out-of-tree example
# driver (hack/example-fpga.sh demo: a pod sees /dev/fpga0); last, the classic seed demo
# on Kubernetes 1.30 (built in the background meanwhile). The steps on a cluster are
# retried once on failure, and the table says so.
# The whole version matrix (hack/real-matrix.sh: every release line of hack/kube/, the
# suite on each structured one) runs instead of the suite on demand (--matrix always). It
# does not fit in CI's budget (nine release builds, a suite of about 20 minutes per
# structured release), so by default (--matrix auto) this only says loudly when the files
# of hack/kube/matrix-inputs changed since the matrix was last recorded
# (e2e/tests/it/real/observed/inputs.sha256). Needs root. Run it after
# `cargo test --workspace`: it packs the binaries that left in target/debug (a separate
# `cargo build -p ... --bin ...` would recompile, because the features unify differently
# without the test targets).
# Usage: hack/ci-real-k8s.sh [--cargo-profile dev|release] [--no-suite] [--no-soak] [--matrix auto|always|never]
#   --no-suite  the demos only (not the e2e suite, not the matrix, not the soak)
#   --no-soak   not the chaos soak
#   --matrix    auto (default): the newest release's suite, and a note when the matrix's inputs
#               changed since it was recorded; always: the whole matrix; never: no note
# Env: FAKE_DRA_CI_MATRIX (as --matrix)
# Times of each step, cold and warm: docs/ci.md; the whole matrix, warm:
# docs/real-kubernetes.md#the-version-matrix.
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
source "$ROOT/hack/ci-lib.sh"
ci_table_init
$CI_TABLE_OWNER && trap ci_table_print EXIT
# What a real-cluster step reads: everything but the prose; a step stopped at its time
# limit leaves its cluster up, so it is taken down before the retry or the next step.
cluster_down() { "$ROOT/hack/local-cluster.sh" down || true; }
real_inputs=(--after-overrun cluster_down --inputs . ':!docs' ':!*.md')

ci_step "real: packages" -- ci_apt_install runc containernetworking-plugins iptables busybox-static \
  openssl iproute2 binutils util-linux
# Built by .ci/run's background build (this waits for it) or here.
ci_step "real: Kubernetes 1.37 built" --go -- "$ROOT/hack/kube-build.sh"

dir=release; [[ "$profile" == release ]] || dir=debug
skip=()
if [[ -x "$ROOT/target/$dir/fake-dra-controller" && -x "$ROOT/target/$dir/fake-dra-kubelet-plugin" ]]; then
  skip=(--skip-cargo)
fi
ci_step "real: images" -- "$ROOT/hack/build-image-local.sh" --cargo-profile "$profile" "${skip[@]}"
ci_step "real: seed demo 1.37" --retry-once "${real_inputs[@]}" -- "$ROOT/hack/real-k8s-demo.sh" --skip-build

if $suite && [[ "$matrix" == auto ]]; then
  recorded="$(cat "$ROOT/e2e/tests/it/real/observed/inputs.sha256" 2>/dev/null || true)"
  current="$(matrix_inputs_sha256)"
  if [[ "$recorded" != "$current" ]]; then
    echo "== NOTE: the version matrix's inputs (hack/kube/matrix-inputs) changed since it was"
    echo "   last recorded (${recorded:-never recorded}, now $current): the releases other than"
    echo "   the newest are not shown on this change; run hack/real-matrix.sh (or this step"
    echo "   with --matrix always) and commit what it writes."
  fi
fi
# real_suite: the test executable `cargo test --workspace` just built (e2e_test_exe: the
# same selection, so nothing recompiles), run as cargo runs it (from the package's
# directory). The suite packs the binaries next to its executable (target/debug). Its
# output is not captured: each scenario's lines show as it runs, so a run that stops shows
# where.
real_suite() {
  local exe
  exe="$(e2e_test_exe)"
  (cd "$ROOT/e2e" && FAKE_DRA_REQUIRE_REAL_K8S=1 "$exe" --exact real_cluster::scenarios_on_the_real_cluster --nocapture)
}
if $suite && [[ "$matrix" == always ]]; then
  # Every release line, the newest one's suite included; the binaries are built above or
  # by hack/kube-build.sh in there.
  ci_step "real: version matrix" -- "$ROOT/hack/real-matrix.sh"
elif $suite; then
  ci_step "real: e2e suite 1.37" --retry-once --limit 1080 "${real_inputs[@]}" -- real_suite
fi

# The Helm chart on a fresh cluster: install, the seed demo, uninstall leaves nothing.
ci_step "real: Helm chart" --retry-once "${real_inputs[@]}" -- "$ROOT/hack/helm-real-k8s.sh"

if $soak; then
  # The soak test of the same executable (hack/soak.sh finds it); its report also goes to
  # target/soak/report.txt.
  ci_step "real: chaos soak" --retry-once "${real_inputs[@]}" -- "$ROOT/hack/soak.sh" --ci
fi

# The out-of-tree example driver (examples/fpga-driver) on its own fresh cluster: a pod
# sees /dev/fpga0 and its env.
ci_step "real: fpga example demo" --retry-once "${real_inputs[@]}" -- "$ROOT/hack/example-fpga.sh" demo

# Classic DRA last: its Kubernetes (1.30) builds in .ci/run's background while the steps
# above run.
ci_step "real: Kubernetes 1.30 built" --go -- env KUBE_MODULE=kubernetes-1.30 "$ROOT/hack/kube-build.sh"
ci_step "real: seed demo 1.30 (classic)" --retry-once "${real_inputs[@]}" \
  -- env KUBE_MODULE=kubernetes-1.30 "$ROOT/hack/real-k8s-demo.sh" --skip-build
