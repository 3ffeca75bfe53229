#!/usr/bin/env bash
# Creates a kind cluster for DRA: one control plane and two workers (kind-worker,
# kind-worker2), containerd CDI on. Does nothing if the cluster exists.
#   structured (default, node image kindest/node:v1.34.0): Kubernetes 1.34+ serve
#     resource.k8s.io/v1, DRA on by default, nothing to enable; 1.32 and 1.33 get the
#     feature gate DynamicResourceAllocation and runtime-config resource.k8s.io/v1beta1=true.
#   classic (default image kindest/node:v1.30.8): Kubernetes 1.27-1.30, feature gate
#     DynamicResourceAllocation and runtime-config resource.k8s.io/v1alpha2=true.
#   1.31 is supported by neither (classic DRA was removed, structured is v1alpha3 only).
# Usage: hack/kind-up.sh [--mode structured|classic] [--image kindest/node:vX.Y.Z] [--name NAME]
#   The mode follows from the image's version when only --image is given.
#   Tested images: kindest/node:v1.34.0, v1.33.4, v1.32.8 (kind v0.30.0); v1.30.8, v1.29.12.
# Env: CLUSTER_NAME (default kind), KIND_NODE_IMAGE, DRA_MODE (as --mode).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
NODE_IMAGE="${KIND_NODE_IMAGE:-}"
MODE="${DRA_MODE:-}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --image) NODE_IMAGE="${2:?--image needs a value}"; shift 2 ;;
    --mode) MODE="${2:?--mode needs a value}"; shift 2 ;;
    --name) CLUSTER_NAME="${2:?--name needs a value}"; shift 2 ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
case "$MODE" in
  ""|auto|structured|classic) ;;
  *) die "unknown mode '$MODE' (structured or classic)" ;;
esac
[[ "$MODE" == auto ]] && MODE=""
if [[ -z "$NODE_IMAGE" ]]; then
  if [[ "$MODE" == classic ]]; then NODE_IMAGE=kindest/node:v1.30.8; else NODE_IMAGE=kindest/node:v1.34.0; fi
fi

# The Kubernetes minor version decides what the cluster needs.
tag="${NODE_IMAGE##*:}"
[[ "$NODE_IMAGE" == *@* ]] && { tag="${NODE_IMAGE%%@*}"; tag="${tag##*:}"; }
minor="$(sed -nE 's/^v1\.([0-9]+)\..*/\1/p' <<<"$tag")"
if [[ -z "$minor" ]]; then
  [[ -n "$MODE" ]] || die "cannot read the Kubernetes version from $NODE_IMAGE; say --mode structured (1.34+) or --mode classic (1.27-1.30)"
  echo "warning: cannot read the Kubernetes version from $NODE_IMAGE; assuming ${MODE} DRA as in $([[ $MODE == classic ]] && echo 1.30 || echo 1.34+)" >&2
  if [[ "$MODE" == classic ]]; then minor=30; else minor=34; fi
fi
if (( minor < 27 )); then
  die "node image $NODE_IMAGE is Kubernetes 1.$minor, which has no DRA; use 1.27-1.30 (classic) or 1.32+ (structured), e.g. --image kindest/node:v1.34.0"
elif (( minor == 31 )); then
  die "node image $NODE_IMAGE is Kubernetes 1.31, which this driver does not support (classic DRA removed, structured only as v1alpha3); use kindest/node:v1.34.0 (structured) or kindest/node:v1.30.8 (classic)"
elif (( minor <= 30 )); then
  [[ "$MODE" != structured ]] || die "node image $NODE_IMAGE is Kubernetes 1.$minor: structured DRA needs 1.32+ (e.g. --image kindest/node:v1.34.0); 1.27-1.30 are --mode classic"
  MODE=classic
else
  [[ "$MODE" != classic ]] || die "node image $NODE_IMAGE is Kubernetes 1.$minor: classic DRA (resource.k8s.io/v1alpha2) needs 1.27-1.30 (e.g. --image kindest/node:v1.30.8); 1.32+ is --mode structured"
  MODE=structured
fi

need kind "kind (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
need kubectl "kubectl (https://kubernetes.io/docs/tasks/tools/)"
engine >/dev/null

clusters="$(kind get clusters 2>&1)" || die "kind get clusters failed: $clusters"
if contains_line "$clusters" "$CLUSTER_NAME"; then
  echo "kind cluster $CLUSTER_NAME exists; nothing to do"
  exit 0
fi

# What the API server needs: 1.27-1.30 classic v1alpha2, 1.32/1.33 structured v1beta1 (both
# behind the gate); 1.34+ nothing (v1, DRA GA and on by default; the gate is locked there).
api=""
if [[ "$MODE" == classic ]]; then api=resource.k8s.io/v1alpha2
elif (( minor < 34 )); then api=resource.k8s.io/v1beta1
fi
config="$(mktemp)"
trap 'rm -f "$config"' EXIT
{
  echo "kind: Cluster"
  echo "apiVersion: kind.x-k8s.io/v1alpha4"
  if [[ -n "$api" ]]; then
    echo "featureGates:"
    echo "  DynamicResourceAllocation: true"
    echo "runtimeConfig:"
    echo "  $api: \"true\""
  fi
  cat <<'YAML'
containerdConfigPatches:
  - |-
    [plugins."io.containerd.grpc.v1.cri"]
      enable_cdi = true
nodes:
  - role: control-plane
  - role: worker
  - role: worker
YAML
} >"$config"
echo "creating kind cluster $CLUSTER_NAME: $NODE_IMAGE, $MODE DRA${api:+ ($api with the DynamicResourceAllocation gate)}"
if ! kind create cluster --name "$CLUSTER_NAME" --image "$NODE_IMAGE" --config "$config" --wait 120s; then
  die "kind create cluster failed; a node image without DRA support (not 1.27-1.30 or 1.32+) fails here"
fi
resources="$(kubectl --context "kind-$CLUSTER_NAME" api-resources --api-group=resource.k8s.io -o name)"
if [[ "$MODE" == classic ]]; then
  grep -q '^resourceclasses' <<<"$resources" \
    || die "the cluster does not serve resource.k8s.io/v1alpha2 resourceclasses: node image $NODE_IMAGE lacks classic DRA"
else
  { grep -q '^resourceslices' <<<"$resources" && grep -q '^deviceclasses' <<<"$resources"; } \
    || die "the cluster serves no resourceslices/deviceclasses: node image $NODE_IMAGE lacks structured DRA"
fi
echo "kind cluster $CLUSTER_NAME is up (context kind-$CLUSTER_NAME, $MODE DRA); next: hack/deploy.sh $MODE"
