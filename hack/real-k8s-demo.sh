#!/usr/bin/env bash
# The seed demo on a real Kubernetes cluster built here from source: builds (cached) the
# components (hack/kube-build.sh) and our images (hack/build-image-local.sh), starts a
# fresh one-node cluster (hack/local-cluster.sh up), deploys the structured overlay as it
# is (hack/deploy.sh structured: real DaemonSet, ServiceAccount, RBAC, admission policy),
# waits for the node's ResourceSlice, runs deploy/examples/structured/5-count-4-split-2.yaml
# (claim count 4 split 2, pod test5/pod0) and prints the server version and the
# FAKE_DEVICE_0..7 lines pod0 sees. Tears the cluster down at the end (also on failure).
# Exit 0 only if pod0 ran and saw eight distinct devices. Needs root.
# --mode classic does the same on Kubernetes 1.30 (KUBE_MODULE=kubernetes-1.30) with the
# classic overlay (controller + plugin, NodeAllocationState) and deploy/examples/.
# KUBE_MODULE=kubernetes-1.MINOR runs another release line of hack/kube/ (the mode follows
# from it: classic up to 1.30, structured from 1.32; 1.32/1.33 through v1beta1).
# Usage: hack/real-k8s-demo.sh [--mode structured|classic] [--keep] [--skip-build]
#   --keep        leave the cluster running (hack/local-cluster.sh down removes it)
#   --skip-build  use the binaries and images already built
set -euo pipefail
mode=""
keep=false
build=true
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    --mode) mode="${2:?--mode needs a value}"; shift 2 ;;
    --keep) keep=true; shift ;;
    --skip-build) build=false; shift ;;
    *) echo "error: unknown argument: $1 (try --help)" >&2; exit 1 ;;
  esac
done
case "$mode" in
  "") ;;
  structured) ;;
  classic) export KUBE_MODULE="${KUBE_MODULE:-kubernetes-1.30}" ;;
  *) echo "error: unknown mode '$mode' (structured or classic)" >&2; exit 1 ;;
esac
source "$(dirname "$0")/lib.sh"
source "$ROOT/hack/kube/lib.sh"
release_mode=structured
(($(kube_minor) > 30)) || release_mode=classic
[[ -n "$mode" ]] || mode="$release_mode"
[[ "$mode" == "$release_mode" ]] \
  || die "--mode $mode does not fit Kubernetes $KUBE_VERSION (KUBE_MODULE=$KUBE_MODULE): it has $release_mode DRA"
[[ "$(id -u)" == 0 ]] || die "must run as root (hack/local-cluster.sh mounts and makes network interfaces)"
NODE_NAME="${NODE_NAME:-fake-dra-node}"
export NODE_NAME
t0=$SECONDS
if $build; then
  "$ROOT/hack/kube-build.sh"
  "$ROOT/hack/build-image-local.sh"
fi
echo "== build: $((SECONDS - t0)) s"

KUBECONFIG="$("$ROOT/hack/local-cluster.sh" kubeconfig)"
export KUBECONFIG
export PATH="$KUBE_BIN:$PATH"   # our kubectl, the same version as the cluster
"$ROOT/hack/local-cluster.sh" down >/dev/null 2>&1 || true

diagnose() {
  echo "== diagnostics" >&2
  kubectl get nodes -o wide >&2 || true
  kubectl get pods -A -o wide >&2 || true
  if [[ "$mode" == structured ]]; then
    kubectl get resourceslices -o wide >&2 || true
  else
    kubectl -n fake-dra get nodeallocationstates -o yaml >&2 || true
    kubectl -n fake-dra logs deployment/fake-dra-controller --tail=40 >&2 || true
  fi
  kubectl get resourceclaims -A >&2 || true
  kubectl -n test5 describe pod pod0 >&2 || true
  local logs
  logs="$(dirname "$KUBECONFIG")/logs"
  echo "-- kubelet log, DRA and plugin lines (full logs in $logs)" >&2
  grep -i -E 'dra|plugin|registration|resourceclaim' "$logs/kubelet.log" | tail -40 >&2 || true
  # The plugin's own words last: CI shows the end of a failed step's output.
  echo "-- the plugin's log" >&2
  kubectl -n fake-dra logs daemonset/fake-dra-kubelet-plugin --tail=40 >&2 || true
}
finish() {
  local rc=$?
  if ((rc != 0)); then diagnose; fi
  if $keep; then
    echo "cluster left running: export KUBECONFIG=$KUBECONFIG PATH=$KUBE_BIN:\$PATH; hack/local-cluster.sh down removes it"
  else
    "$ROOT/hack/local-cluster.sh" down
  fi
  echo "== total: $((SECONDS - t0)) s"
  exit "$rc"
}
trap finish EXIT

t1=$SECONDS
"$ROOT/hack/local-cluster.sh" up
echo "== cluster up: $((SECONDS - t1)) s"
kubectl version | grep -E '^(Client|Server) Version:'

t1=$SECONDS
"$ROOT/hack/deploy.sh" "$mode"
# What the plugin publishes: structured, the node's ResourceSlice; classic, its
# NodeAllocationState (Ready).
# Each prints what it saw when it is not there yet (wait_for shows the last try).
published() {
  local out
  if [[ "$mode" == structured ]]; then
    out="$(kubectl get resourceslices --field-selector "spec.nodeName=$NODE_NAME,spec.driver=fake.resource.3-shake.com" -o name 2>&1)" || true
    [[ "$out" == resourceslice* ]] || { echo "slices of node $NODE_NAME: ${out:-none}"; return 1; }
  else
    out="$(kubectl -n fake-dra get nodeallocationstate "$NODE_NAME" -o jsonpath='{.status.phase}' 2>&1)" || true
    [[ "$out" == Ready ]] || { echo "NodeAllocationState $NODE_NAME phase: ${out:-none}"; return 1; }
  fi
}
if [[ "$mode" == structured ]]; then
  wait_for "the node's ResourceSlice" 60 published || die "the plugin published no ResourceSlice for node $NODE_NAME"
  kubectl get resourceslices -o wide
else
  wait_for "the node's NodeAllocationState to be Ready" 60 published || die "the plugin's NodeAllocationState $NODE_NAME is not Ready"
  kubectl -n fake-dra get nodeallocationstates
fi
echo "== driver deployed, inventory published: $((SECONDS - t1)) s"

t1=$SECONDS
"$ROOT/hack/demo.sh" --mode "$mode" --keep | tee "$(dirname "$KUBECONFIG")/logs/demo.out"
log="$(kubectl -n test5 logs pod0)" || die "kubectl logs test5/pod0 failed: $log"
devices="$(grep -oE "FAKE_DEVICE_[0-7]='[^']+'" <<<"$log" | sort -u || true)"
n="$(cut -d"'" -f2 <<<"$devices" | sort -u | grep -c . || true)"
[[ "$n" == 8 ]] || die "pod0 saw $n distinct devices, not 8; its log:"$'\n'"$log"
echo "== seed demo: pod0 ran with 8 distinct devices ($((SECONDS - t1)) s)"
# Delete the pod while the plugin runs, so the kubelet unprepares the claim.
kubectl delete namespace test5 --wait=true --timeout=120s
echo "real-k8s demo ($mode) passed: Kubernetes $KUBE_VERSION, node $NODE_NAME"
