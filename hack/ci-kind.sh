#!/usr/bin/env bash
# CI step "kind": the README's kind path, end to end, with no image pulled. Installs what it
# needs (podman, runc, debootstrap, jq), builds the node image offline (hack/kind-node-image.sh:
# kubeadm, coredns and kind from the Go module proxy, a Debian rootfs; cached), then, under
# the cluster lock (/tmp/fake-dra-cluster.lock, as every cluster here):
#   hack/kind-up.sh                 control plane + kind-worker, kind-worker2 (Kubernetes 1.37)
#   hack/build-image.sh             fake-dra:dev and busybox:1.36 from the dev binaries that
#                                   `cargo test --workspace` left in target/debug (no base image)
#   hack/kind-load.sh
#   hack/deploy.sh structured
#   hack/demo.sh                    the seed demo: FAKE_DEVICE_0..7 from test5/pod0, which must
#                                   run on a kind worker
#   hack/e2e-kind.sh --no-setup     the seed scenarios with assertions
#   hack/kind-down.sh               (also when a step fails)
# Prints the time of each stage. Needs root. Run it after `cargo test --workspace`.
# Usage: hack/ci-kind.sh [--cargo-profile dev|release] [--keep] [--no-lock]
#   --keep     leave the cluster up (and the lock released); hack/kind-down.sh deletes it
#   --no-lock  the caller holds /tmp/fake-dra-cluster.lock already
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/hack/ci-lib.sh"
profile=dev
keep=false
lock=true
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --cargo-profile) profile="${2:?--cargo-profile needs a value}"; shift 2 ;;
    --keep) keep=true; shift ;;
    --no-lock) lock=false; shift ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
[[ "$(id -u)" == 0 ]] || die "must run as root"
H="$ROOT/hack"
t0=$SECONDS
# stage <name>: the time since the last stage; a sub-row of .ci/run's "kind" row.
stage() {
  echo "== $1: $((SECONDS - t_stage)) s"
  [[ -z "${FAKE_DRA_CI_TABLE:-}" ]] || ci_row "  $1" "$((SECONDS - t_stage))" - passed
  t_stage=$SECONDS
}
t_stage=$SECONDS

ci_apt_install podman runc debootstrap iptables jq
stage "kind: packages"

"$H/kind-node-image.sh"
stage "kind: node image"

dir=release; [[ "$profile" == release ]] || dir=debug
skip=()
[[ -x "$ROOT/target/$dir/fake-dra-controller" && -x "$ROOT/target/$dir/fake-dra-kubelet-plugin" ]] && skip=(--skip-cargo)
"$H/build-image.sh" --from-binaries --cargo-profile "$profile" "${skip[@]}"
stage "kind: build-image"

# The rest holds the cluster lock: hack/local-cluster.sh's cluster must not run beside kind.
if $lock; then
  exec 9>/tmp/fake-dra-cluster.lock
  flock 9
fi
cleanup() { $keep || "$H/kind-down.sh" || true; }
trap cleanup EXIT
"$H/kind-up.sh"
stage "kind: kind-up"
"$H/kind-load.sh"
"$H/deploy.sh" structured
stage "kind: kind-load + deploy"

demo="$("$H/demo.sh" --keep)" || { echo "$demo"; die "hack/demo.sh failed"; }
echo "$demo"
node="$(kubectl -n test5 get pod pod0 -o jsonpath='{.spec.nodeName}')"
[[ "$node" == kind-worker || "$node" == kind-worker2 ]] \
  || die "test5/pod0 ran on '$node', not on a kind worker (kind-worker, kind-worker2)"
for i in 0 1 2 3 4 5 6 7; do
  [[ "$demo" == *"FAKE_DEVICE_$i="* ]] || die "the demo's output has no FAKE_DEVICE_$i (above)"
done
echo "the seed demo ran on $node: FAKE_DEVICE_0 ... FAKE_DEVICE_7"
kubectl delete namespace test5 --wait=true --timeout=120s >/dev/null
stage "kind: demo"

"$H/e2e-kind.sh" --no-setup
stage "kind: e2e-kind"
if ! $keep; then
  trap - EXIT
  "$H/kind-down.sh"
  stage "kind: kind-down"
fi
echo "== ci-kind: $((SECONDS - t0)) s"
