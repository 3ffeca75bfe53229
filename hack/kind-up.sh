#!/usr/bin/env bash
# Creates a kind cluster for DRA: one control plane and two workers (kind-worker,
# kind-worker2), containerd CDI on; waits until every node is Ready. Does nothing if the
# cluster exists (and says so when it serves another DRA mode than asked).
#   structured (default): the node image hack/kind-node-image.sh builds here, Kubernetes
#     1.37 (resource.k8s.io/v1, DRA on by default, nothing to enable); it is built first
#     when missing (offline, cached; --no-build refuses instead). Published images work
#     too: --image kindest/node:v1.34.0 (pulled by the engine); 1.32 and 1.33 get the
#     feature gate DynamicResourceAllocation and runtime-config resource.k8s.io/v1beta1=true.
#   classic: hack/kind-node-image.sh --mode classic (Kubernetes 1.30), or a published
#     1.27-1.30 image; feature gate DynamicResourceAllocation and runtime-config
#     resource.k8s.io/v1alpha2=true.
#   1.31 is supported by neither (classic DRA was removed, structured is v1alpha3 only).
# Refuses to start while hack/local-cluster.sh's cluster runs (kind's network adds host
# firewall rules; the two share ports and /var/lib/kubelet). On cgroup v1 hosts, kubelets
# 1.31+ get failCgroupV1: false. Uses docker or podman, whichever answers (CONTAINER_ENGINE
# picks), and kind from PATH or built here (hack/kube/kind/go.mod).
# Usage: hack/kind-up.sh [--mode structured|classic] [--image IMAGE] [--name NAME] [--no-build]
#   The mode follows from the image's version when only --image is given.
#   Tested: our images (v1.37.2, v1.30.14); published kindest/node:v1.34.0, v1.33.4, v1.32.8
#   (kind v0.30.0), v1.30.8, v1.29.12.
# A cluster that kind creates but that does not work (nodes not Ready, no DRA API) is
# deleted again (KIND_KEEP_FAILED=1 keeps it).
# Env: CLUSTER_NAME (default kind), KIND_NODE_IMAGE, DRA_MODE (as --mode), CONTAINER_ENGINE.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
NODE_IMAGE="${KIND_NODE_IMAGE:-}"
MODE="${DRA_MODE:-}"
build=true
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --image) NODE_IMAGE="${2:?--image needs a value}"; shift 2 ;;
    --mode) MODE="${2:?--mode needs a value}"; shift 2 ;;
    --name) CLUSTER_NAME="${2:?--name needs a value}"; shift 2 ;;
    --no-build) build=false; shift ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
case "$MODE" in
  ""|auto|structured|classic) ;;
  *) die "unknown mode '$MODE' (structured or classic)" ;;
esac
[[ "$MODE" == auto ]] && MODE=""
ours=false
if [[ -z "$NODE_IMAGE" ]]; then
  NODE_IMAGE="$("$ROOT/hack/kind-node-image.sh" --mode "${MODE:-structured}" --print-image)"
  ours=true
fi

# The Kubernetes minor version decides what the cluster needs.
tag="${NODE_IMAGE##*:}"
[[ "$NODE_IMAGE" == *@* ]] && { tag="${NODE_IMAGE%%@*}"; tag="${tag##*:}"; }
minor="$(sed -nE 's/^v1\.([0-9]+)\..*/\1/p' <<<"$tag")"
if [[ -z "$minor" ]]; then
  [[ -n "$MODE" ]] || die "cannot read the Kubernetes version from $NODE_IMAGE; say --mode structured (1.32+) or --mode classic (1.27-1.30)"
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

need kubectl "kubectl (https://kubernetes.io/docs/tasks/tools/)"
if local_cluster_up; then
  die "hack/local-cluster.sh's cluster runs; kind must not run beside it (kind's network adds host firewall rules, and both use the kubelet's ports): stop it first (hack/local-cluster.sh down)"
fi
kind_setup
clusters="$(kind_clusters)"
if contains_line "$clusters" "$CLUSTER_NAME"; then
  have="$(cluster_mode_of "kind-$CLUSTER_NAME" 2>&1)" || have="unknown ($have)"
  if [[ "$have" != "$MODE" ]]; then
    die "kind cluster $CLUSTER_NAME exists and serves $have DRA, not $MODE: delete it first (hack/kind-down.sh${CLUSTER_NAME:+ --name $CLUSTER_NAME}), or use another --name"
  fi
  echo "kind cluster $CLUSTER_NAME exists ($MODE DRA, context kind-$CLUSTER_NAME); nothing to do. Next: hack/build-image.sh, hack/kind-load.sh, hack/deploy.sh $MODE (or hack/kind-down.sh to start over)"
  exit 0
fi

if ! "$ENGINE" image inspect "$NODE_IMAGE" >/dev/null 2>&1; then
  if $ours; then
    $build || die "node image $NODE_IMAGE is not in $ENGINE; build it: hack/kind-node-image.sh --mode $MODE (offline, cached), or run without --no-build"
    echo "node image $NODE_IMAGE is not in $ENGINE: building it (hack/kind-node-image.sh --mode $MODE)"
    "$ROOT/hack/kind-node-image.sh" --mode "$MODE" || die "hack/kind-node-image.sh --mode $MODE failed; no cluster was created"
  else
    echo "node image $NODE_IMAGE is not in $ENGINE: pulling it"
    "$ENGINE" pull "$NODE_IMAGE" \
      || die "cannot pull node image $NODE_IMAGE; without a registry, build ours (hack/kind-node-image.sh --mode $MODE) and run hack/kind-up.sh without --image; no cluster was created"
  fi
fi
# kind always mounts /lib/modules from the host.
[[ -d /lib/modules ]] || mkdir -p /lib/modules 2>/dev/null \
  || die "/lib/modules does not exist and cannot be created (kind mounts it into every node); create it as root: mkdir -p /lib/modules"

# What the API server needs: 1.27-1.30 classic v1alpha2, 1.32/1.33 structured v1beta1 (both
# behind the gate); 1.34+ nothing (v1, DRA GA and on by default; the gate is locked there).
api=""
if [[ "$MODE" == classic ]]; then api=resource.k8s.io/v1alpha2
elif (( minor < 34 )); then api=resource.k8s.io/v1beta1
fi
# Kubelets 1.31+ refuse cgroup v1 unless told (1.35+ by default).
cgroup_v1=false
[[ -f /sys/fs/cgroup/cgroup.controllers ]] || cgroup_v1=true
# Without CAP_SYS_RESOURCE (some sandboxes, this CI's machine) nothing in the node can lower
# an oom_score_adj, and runc fails every pod sandbox ("can't get final child's PID from
# pipe"); containerd then keeps each container's at least at its own, as for rootless kind.
restrict_oom=false
can_raise_limits || restrict_oom=true
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
  if $cgroup_v1 && (( minor >= 31 )); then
    cat <<'YAML'
kubeadmConfigPatches:
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
YAML
  fi
  echo "containerdConfigPatches:"
  echo "  - |-"
  echo "    [plugins.\"io.containerd.grpc.v1.cri\"]"
  echo "      enable_cdi = true"
  if $restrict_oom; then echo "      restrict_oom_score_adj = true"; fi
  cat <<'YAML'
nodes:
  - role: control-plane
  - role: worker
  - role: worker
YAML
} >"$config"
echo "creating kind cluster $CLUSTER_NAME with $ENGINE: $NODE_IMAGE, $MODE DRA${api:+ ($api with the DynamicResourceAllocation gate)}"
if ! "$KIND" create cluster --name "$CLUSTER_NAME" --image "$NODE_IMAGE" --config "$config" --wait 180s; then
  # kind deletes what it created when create fails; make sure.
  "$KIND" delete cluster --name "$CLUSTER_NAME" >/dev/null 2>&1 || true
  die "kind create cluster failed (above); no cluster was left. A node image without DRA support (not 1.27-1.30 or 1.32+) fails here"
fi
ctx="kind-$CLUSTER_NAME"
# failed <message>: after create, a cluster that does not work is shown and deleted (set
# KIND_KEEP_FAILED=1 to keep it for a look).
failed() {
  show_output "$(kubectl --context "$ctx" get nodes -o wide 2>&1; kubectl --context "$ctx" get pods -A -o wide 2>&1)" >&2
  if [[ "${KIND_KEEP_FAILED:-}" == 1 ]]; then
    die "$1; the cluster is kept (KIND_KEEP_FAILED=1): hack/kind-down.sh deletes it"
  fi
  "$KIND" delete cluster --name "$CLUSTER_NAME" >/dev/null 2>&1 || true
  die "$1; the cluster was deleted (KIND_KEEP_FAILED=1 keeps it)"
}
nodes_ready() {
  local out
  out="$(kubectl --context "$ctx" get nodes --no-headers 2>&1)" || { echo "$out"; return 1; }
  echo "$out"
  [[ -n "$out" && "$out" != *NotReady* ]]
}
wait_for "every node of $CLUSTER_NAME Ready" 180 nodes_ready \
  || failed "the nodes of kind cluster $CLUSTER_NAME are not Ready (above)"
resources="$(kubectl --context "$ctx" api-resources --api-group=resource.k8s.io -o name 2>&1)" \
  || failed "kubectl api-resources on $ctx failed: $resources"
if [[ "$MODE" == classic ]]; then
  contains_line "$resources" resourceclasses.resource.k8s.io \
    || failed "the cluster does not serve resource.k8s.io/v1alpha2 resourceclasses: node image $NODE_IMAGE lacks classic DRA (it serves: ${resources:-nothing})"
else
  { contains_line "$resources" resourceslices.resource.k8s.io && contains_line "$resources" deviceclasses.resource.k8s.io; } \
    || failed "the cluster serves no resourceslices/deviceclasses: node image $NODE_IMAGE lacks structured DRA (it serves: ${resources:-nothing})"
fi
kubectl --context "$ctx" get nodes -o wide
echo "kind cluster $CLUSTER_NAME is up (context $ctx, $MODE DRA); next: hack/build-image.sh, hack/kind-load.sh, hack/deploy.sh $MODE"
