#!/usr/bin/env bash
# Fleet mode and kube-scheduler at scale on the local real control plane
# (hack/local-cluster.sh; docs/fleet.md, docs/performance.md). Builds what it needs
# (release binaries, the cached Kubernetes components, the images), starts a fresh cluster,
# runs kubelet-plugin/examples/fleet_bench.rs and tears the cluster down. Prints a markdown
# table: fleet publishing (time until every node's slice is present against creating the
# bare Nodes, API requests per node, peak memory) and scheduling at scheduler_perf's
# 5000pods_500nodes shape (pods/s with one-device claims against the same pods without
# claims on the same nodes): one fake device of 10 per node (fake), one whole GPU (gpu) and
# one MIG device (mig) of the nvidia profile's partitionable GPUs.
# Needs root. Takes about 30 minutes on 2 cores with warm caches.
# Usage: hack/fleet-bench.sh [--cargo-profile release|dev] [--publish 1000,5000] [--devices 8] [--sched-nodes 500]
#                            [--sched-init 2500] [--sched-pods 2500] [--sched-shapes fake,gpu,mig]
#                            [--nvidia-gpus A100-80GB:10:mig] [--mig-profile 1g.10gb]
#   (--sched-pods 0 skips the scheduling part; --publish "" the publishing part;
#   --nvidia-gpus is the nvidia nodes' GPUs, as the plugin's flag; --mig-profile the MIG
#   devices' profile attribute the mig claims select)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/hack/kube/lib.sh"
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
[[ "$(id -u)" == 0 ]] || die "must run as root (hack/local-cluster.sh mounts and makes network interfaces)"
cd "$ROOT"
# --cargo-profile dev measures the binaries `cargo test --workspace` left in target/debug
# (no release build); the default builds release ones. The controller is built too, since
# hack/build-image-local.sh packs it into the cluster's image.
profile=release
if [[ "${1:-}" == --cargo-profile ]]; then
  profile="${2:?--cargo-profile needs release or dev}"
  shift 2
fi
case "$profile" in
  release) cargo build -q --release -p fake-dra-kubelet-plugin --bin fake-dra-kubelet-plugin --example fleet_bench \
             -p fake-dra-controller --bin fake-dra-controller; out=release ;;
  dev) cargo build -q -p fake-dra-kubelet-plugin --bin fake-dra-kubelet-plugin --example fleet_bench \
         -p fake-dra-controller --bin fake-dra-controller; out=debug ;;
  *) die "--cargo-profile: release or dev, not $profile" ;;
esac
"$ROOT/hack/kube-build.sh" >/dev/null
"$ROOT/hack/build-image-local.sh" --cargo-profile "$profile" --skip-cargo >/dev/null
status="$("$ROOT/hack/local-cluster.sh" status 2>&1)" || die "hack/local-cluster.sh status failed: $status"
if [[ $'\n'"$status" == *$'\n'running* ]]; then
  die "a local cluster is already running (hack/local-cluster.sh down first): the benchmark needs a fresh one"
fi
trap '"$ROOT/hack/local-cluster.sh" down >/dev/null 2>&1 || true' EXIT
# scheduler_perf runs its components without client rate limits; the defaults (20
# requests/s for kube-controller-manager, which makes every pod's claim, and 50 for
# kube-scheduler) would be what is measured. KUBE_API_QPS= keeps them.
KUBE_API_QPS="${KUBE_API_QPS-1000}" "$ROOT/hack/local-cluster.sh" up >/dev/null
kubeconfig="$("$ROOT/hack/local-cluster.sh" kubeconfig)"
"$KUBE_BIN/kubectl" --kubeconfig "$kubeconfig" apply -f deploy/crds/devicefaults.yaml >/dev/null
echo "binaries: $profile profile; machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r); $("$KUBE_BIN/kubectl" --kubeconfig "$kubeconfig" version 2>/dev/null | grep 'Server Version')"
target="${CARGO_TARGET_DIR:-$ROOT/target}"
"$target/$out/examples/fleet_bench" --kubeconfig "$kubeconfig" \
  --plugin "$target/$out/fake-dra-kubelet-plugin" "$@"
