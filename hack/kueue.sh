#!/usr/bin/env bash
# Kueue v0.17.0 queues Jobs whose pods ask for fake devices, on the local real cluster
# (hack/local-cluster.sh; docs/kueue.md). Builds what it needs: Kueue's manager
# (hack/kube-build.sh kueue: sigs.k8s.io/kueue/cmd/kueue at the version
# hack/kube/kueue/go.mod pins, cached in target/kube/kueue), its image made locally as ours
# are (an OCI archive of the static binary, no engine, no registry: target/kueue/kueue.tar,
# loaded with hack/local-cluster.sh load; not in IMAGES_DIR, so other clusters do not load
# it at up), the Kubernetes components, our images and the
# scenario test. Then it starts a fresh cluster (structured DRA, the newest release),
# deploys fake-dra (hack/deploy.sh structured: 8 devices on the node) and Kueue in the
# cluster: Kueue's own config/default (CRDs, RBAC, webhook configurations, Service,
# Deployment) rendered at run time with kubectl kustomize from the sigs.k8s.io/kueue module
# in the Go module cache (nothing of Kueue's is copied into this repository), with our
# Configuration (hack/kueue/controller_manager_config.yaml: the DynamicResourceAllocation
# gate, DeviceClass fake.3-shake.com mapped to the quota resource fake.3-shake.com/devices)
# and image (hack/kueue/manager-patch.yaml). Runs the scenario e2e/tests/it/kueue.rs (a
# ClusterQueue of 8 devices, three Jobs of 4: two admitted and running, the third waits
# and runs when one finishes; a quota smaller than one request; a direct ResourceClaim),
# tears the cluster down, also on failure, and prints a short report. Needs root (the
# cluster); run it under the cluster lock:
#   flock /tmp/fake-dra-cluster.lock hack/kueue.sh
# Usage: hack/kueue.sh [--cargo-profile dev|release]
#   --cargo-profile   dev (default: the binaries cargo test builds) or release
# Env: KUBE_OUT, IMAGES_DIR (as hack/local-cluster.sh), CARGO_TARGET_DIR, KUEUE_LOGS (where
#      the build and scenario logs, Kueue's log and the control plane's logs go; default
#      target/kueue).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/hack/kube/lib.sh"
profile=dev
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --cargo-profile) profile="${2:-}"; shift 2 ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
[[ "$(id -u)" == 0 ]] || die "must run as root (hack/local-cluster.sh mounts and makes network interfaces)"
cd "$ROOT"
case "$profile" in
  dev) cargo_flags=() ;;
  release) cargo_flags=(--release) ;;
  *) die "--cargo-profile: dev or release, not $profile" ;;
esac
logs="${KUEUE_LOGS:-$ROOT/target/kueue}"
mkdir -p "$logs"
KUEUE_VERSION="$(go_mod_version "$KUBE_MODULES/kueue" sigs.k8s.io/kueue)"
KUEUE_IMAGE="fake-dra.local/kueue:$KUEUE_VERSION"

t0=$SECONDS
echo "== building: Kueue $KUEUE_VERSION (hack/kube-build.sh kueue), the Kubernetes components, our images, the scenario test"
KUBE_OUT="$ROOT/target/kube/kueue" "$ROOT/hack/kube-build.sh" kueue >"$logs/build.log" 2>&1 \
  || { show_output "$(cat "$logs/build.log")" >&2; die "building Kueue failed (log: $logs/build.log)"; }
kueue_bin="$ROOT/target/kube/kueue/bin/kueue"
"$ROOT/hack/kube-build.sh" >>"$logs/build.log" 2>&1 \
  || { show_output "$(cat "$logs/build.log")" >&2; die "building the Kubernetes components failed (log: $logs/build.log)"; }
IMAGES_DIR="${IMAGES_DIR:-$ROOT/target/kube/images}"
export IMAGES_DIR
# fake-dra:dev (the binaries of this checkout), busybox and pause.
"$ROOT/hack/build-image-local.sh" --cargo-profile "$profile" >>"$logs/build.log" 2>&1 \
  || { show_output "$(cat "$logs/build.log")" >&2; die "hack/build-image-local.sh failed (log: $logs/build.log)"; }
# Kueue's image, as ours: the static manager at /manager (the Deployment's command), user
# 65532 (the Deployment runs as non-root, which needs a numeric user), nothing else.
rootfs="$logs/kueue-rootfs"
rm -rf "$rootfs"; mkdir -p "$rootfs/etc" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"
cp "$kueue_bin" "$rootfs/manager"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
kueue_tar="$logs/kueue.tar"
"$KUBE_BIN/ociarchive" -rootfs "$rootfs" -name "$KUEUE_IMAGE" -o "$kueue_tar" \
  -entrypoint /manager -user 65532:65532 >>"$logs/build.log" 2>&1 \
  || { show_output "$(tail -n 20 "$logs/build.log")" >&2; die "packing Kueue's image failed"; }
rm -rf "$rootfs"
image_size="$(du -h "$kueue_tar" | cut -f1)"
cargo test -q ${cargo_flags[@]+"${cargo_flags[@]}"} -p fake-dra-e2e --test it --no-run 2>"$logs/cargo-test-build.log" \
  || { show_output "$(cat "$logs/cargo-test-build.log")" >&2; die "building e2e/tests/it/kueue.rs failed"; }
built=$((SECONDS - t0))

# Kueue's manifests: its config/default from the module cache (kustomize takes a relative
# path to it only), our image, Deployment patch and Configuration.
kueue_dir="$(cd "$KUBE_MODULES/kueue" && go mod download -json sigs.k8s.io/kueue@"$KUEUE_VERSION")" \
  || die "go mod download sigs.k8s.io/kueue@$KUEUE_VERSION failed: $kueue_dir"
kueue_dir="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$kueue_dir")"
[[ -d "$kueue_dir/config/default" ]] || die "no config/default in the Kueue module ($kueue_dir)"
render="$logs/manifests"
rm -rf "$render"; mkdir -p "$render"
cp "$ROOT/hack/kueue/controller_manager_config.yaml" "$ROOT/hack/kueue/manager-patch.yaml" "$render/"
cat >"$render/kustomization.yaml" <<EOF
# Written by hack/kueue.sh: Kueue's config/default from the Go module cache, with ours.
resources:
- $(realpath --relative-to="$render" "$kueue_dir/config/default")
images:
- name: us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue
  newName: ${KUEUE_IMAGE%:*}
  newTag: ${KUEUE_IMAGE##*:}
patches:
- path: manager-patch.yaml
configMapGenerator:
- name: kueue-manager-config
  namespace: kueue-system
  behavior: replace
  files:
  - controller_manager_config.yaml
  options:
    disableNameSuffixHash: true
EOF
"$KUBE_BIN/kubectl" kustomize "$render" >"$render/kueue.yaml" 2>"$render/kustomize.log" \
  || { show_output "$(cat "$render/kustomize.log")" >&2; die "kubectl kustomize $render failed"; }
rendered="$(cat "$render/kueue.yaml")"
[[ "$rendered" == *"image: $KUEUE_IMAGE"* && "$rendered" == *"DynamicResourceAllocation: true"* ]] \
  || die "the rendered Kueue manifests ($render/kueue.yaml) lack our image or Configuration"

status="$("$ROOT/hack/local-cluster.sh" status 2>&1)" || die "hack/local-cluster.sh status failed: $status"
if [[ $'\n'"$status" == *$'\n'running* ]] || local_cluster_up; then
  die "a local cluster is already running (someone else's, or left over: hack/local-cluster.sh down): the scenario needs a fresh one"
fi

KUBECONFIG="$("$ROOT/hack/local-cluster.sh" kubeconfig)"
export KUBECONFIG
export PATH="$KUBE_BIN:$PATH"   # our kubectl, the same version as the cluster (hack/deploy.sh)
cleanup() {
  local rc=$?
  if ((rc != 0)); then
    echo "== failed (exit $rc); what the cluster shows:" >&2
    kubectl get pods -A -o wide >&2 || true
    kubectl get workloads,clusterqueues,localqueues -A >&2 || true
    kubectl get resourceclaims -A >&2 || true
  fi
  kubectl -n kueue-system logs deployment/kueue-controller-manager >"$logs/kueue.log" 2>&1 || true
  if ((rc != 0)) && [[ -s "$logs/kueue.log" ]]; then
    echo "-- the last lines of Kueue's log ($logs/kueue.log)" >&2
    show_output "$(tail -n 30 "$logs/kueue.log")" >&2
  fi
  # Kueue out of the way before down: its Deployment would recreate the pod that down
  # deletes (down then waits 60 s for it in vain), and its webhooks (failurePolicy Fail)
  # would stand between the API server and every pod once it is gone.
  kubectl delete --request-timeout=20s --ignore-not-found \
    mutatingwebhookconfiguration/kueue-mutating-webhook-configuration \
    validatingwebhookconfiguration/kueue-validating-webhook-configuration >"$logs/kueue-down.log" 2>&1 || true
  kubectl -n kueue-system scale --request-timeout=20s deployment/kueue-controller-manager --replicas=0 \
    >>"$logs/kueue-down.log" 2>&1 || true
  # The control plane's logs of this run, before the next cluster appends to them.
  local cluster_logs
  cluster_logs="$("$ROOT/hack/local-cluster.sh" env 2>/dev/null | sed -n 's/^LOGS=//p')" || cluster_logs=""
  if [[ -n "$cluster_logs" && -d "$cluster_logs" ]]; then
    mkdir -p "$logs/cluster"
    cp -f "$cluster_logs"/*.log "$logs/cluster/" 2>/dev/null || true
  fi
  local t_down=$SECONDS
  "$ROOT/hack/local-cluster.sh" down >"$logs/down.log" 2>&1 \
    || echo "hack/local-cluster.sh down failed (log: $logs/down.log)" >&2
  echo "== teardown: $((SECONDS - t_down)) s"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t1=$SECONDS
echo "== hack/local-cluster.sh up"
"$ROOT/hack/local-cluster.sh" up >"$logs/up.log" 2>&1 \
  || { show_output "$(cat "$logs/up.log")" >&2; die "hack/local-cluster.sh up failed (log: $logs/up.log)"; }
loaded="$("$ROOT/hack/local-cluster.sh" load "$kueue_tar" 2>&1)" || die "loading Kueue's image failed: $loaded"
up=$((SECONDS - t1))
node="$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}')"

t1=$SECONDS
echo "== fake-dra: hack/deploy.sh structured"
"$ROOT/hack/deploy.sh" structured >"$logs/deploy.log" 2>&1 \
  || { show_output "$(cat "$logs/deploy.log")" >&2; die "hack/deploy.sh structured failed (log: $logs/deploy.log)"; }
published() {
  local out
  out="$(kubectl get resourceslices --field-selector "spec.nodeName=$node,spec.driver=fake.resource.3-shake.com" -o name 2>&1)" || true
  [[ "$out" == resourceslice* ]] || { echo "slices of node $node: ${out:-none}"; return 1; }
}
wait_for "the node's ResourceSlice" 120 published || die "the plugin published no ResourceSlice for node $node"
driver=$((SECONDS - t1))

t1=$SECONDS
echo "== Kueue $KUEUE_VERSION: $(grep -c '^kind:' "$render/kueue.yaml") objects of its config/default, our Configuration"
# Server-side: the CRDs are too big for kubectl's last-applied annotation.
applied="$(kubectl apply --server-side -f "$render/kueue.yaml" 2>&1)" \
  || die "kubectl apply of Kueue's manifests failed: $applied"
rollout="$(kubectl -n kueue-system rollout status deployment/kueue-controller-manager --timeout=300s 2>&1)" \
  || die "Kueue's Deployment did not become ready: $rollout; $(kubectl -n kueue-system describe pods 2>&1 | tail -n 30)"
# Ready is not enough: the API server must reach the webhook through its Service (kube-proxy's
# rules on the host) with the certificate Kueue made; a server-side dry run goes through
# Kueue's ResourceFlavor webhooks.
webhook_answers() {
  kubectl create --dry-run=server -f - <<'EOF'
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: webhook-probe
EOF
}
wait_for "Kueue's webhook to answer the API server" 180 webhook_answers \
  || die "Kueue's webhook does not answer (its log: kubectl -n kueue-system logs deployment/kueue-controller-manager)"
kueue_up=$((SECONDS - t1))

echo "== e2e/tests/it/kueue.rs"
t2=$SECONDS
report="$logs/report.txt"
rm -f "$report"
FAKE_DRA_KUEUE_KUBECONFIG="$KUBECONFIG" FAKE_DRA_REQUIRE_KUEUE=1 FAKE_DRA_KUEUE_REPORT="$report" \
  FAKE_DRA_KUEUE_KUBECTL="$KUBE_BIN/kubectl" \
  cargo test -q ${cargo_flags[@]+"${cargo_flags[@]}"} -p fake-dra-e2e --test it -- kueue:: --nocapture 2>&1 \
  | tee "$logs/scenario.log"
scenario=$((SECONDS - t2))
[[ -f "$report" ]] || die "the scenario wrote no report ($report); its output: $logs/scenario.log"
echo
echo "== Kueue report: Kueue $KUEUE_VERSION (image $KUEUE_IMAGE, archive $image_size), $(kubectl version 2>/dev/null | awk '/Server Version/ {print "Kubernetes " $3}'), $(nproc) cores"
cat "$report"
echo "times: build ${built} s, cluster up ${up} s, fake-dra deployed ${driver} s, Kueue deployed ${kueue_up} s, scenario ${scenario} s, total $((SECONDS - t0)) s (before teardown)"
