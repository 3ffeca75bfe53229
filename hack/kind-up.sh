#!/usr/bin/env bash
# Creates a kind cluster for classic DRA: feature gate DynamicResourceAllocation,
# runtime-config resource.k8s.io/v1alpha2=true, containerd CDI on; one control plane and
# two workers (kind-worker, kind-worker2 style). Does nothing if the cluster exists.
# Usage: hack/kind-up.sh [--image kindest/node:v1.30.x] [--name NAME]
# Env: CLUSTER_NAME (default kind), KIND_NODE_IMAGE. Node images 1.27-1.30 only.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
NODE_IMAGE="${KIND_NODE_IMAGE:-kindest/node:v1.30.8}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --image) NODE_IMAGE="${2:?--image needs a value}"; shift 2 ;;
    --name) CLUSTER_NAME="${2:?--name needs a value}"; shift 2 ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
# Classic DRA (resource.k8s.io/v1alpha2) exists in 1.27-1.30 only.
tag="${NODE_IMAGE##*:}"; tag="${tag%%@*}"
minor="$(sed -nE 's/^v1\.([0-9]+)\..*/\1/p' <<<"$tag")"
if [[ -z "$minor" ]]; then
  echo "warning: cannot read the Kubernetes version from $NODE_IMAGE; classic DRA needs 1.27-1.30" >&2
elif (( minor < 27 || minor > 30 )); then
  die "node image $NODE_IMAGE is Kubernetes 1.$minor: classic DRA (resource.k8s.io/v1alpha2) needs 1.27-1.30 (e.g. --image kindest/node:v1.30.8)"
fi

need kind "kind (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
need kubectl "kubectl (https://kubernetes.io/docs/tasks/tools/)"
engine >/dev/null

if kind get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
  echo "kind cluster $CLUSTER_NAME exists; nothing to do"
  exit 0
fi

config="$(mktemp)"
trap 'rm -f "$config"' EXIT
cat >"$config" <<YAML
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
featureGates:
  DynamicResourceAllocation: true
runtimeConfig:
  resource.k8s.io/v1alpha2: "true"
containerdConfigPatches:
  - |-
    [plugins."io.containerd.grpc.v1.cri"]
      enable_cdi = true
nodes:
  - role: control-plane
  - role: worker
  - role: worker
YAML
if ! kind create cluster --name "$CLUSTER_NAME" --image "$NODE_IMAGE" --config "$config" --wait 120s; then
  die "kind create cluster failed; a node image without DRA support (not 1.27-1.30) fails here"
fi
if ! kubectl --context "kind-$CLUSTER_NAME" api-resources --api-group=resource.k8s.io -o name | grep -q '^resourceclasses'; then
  die "the cluster does not serve resource.k8s.io/v1alpha2 resourceclasses: node image $NODE_IMAGE lacks classic DRA"
fi
echo "kind cluster $CLUSTER_NAME is up (context kind-$CLUSTER_NAME)"
