#!/usr/bin/env bash
# The out-of-tree example driver (examples/fpga-driver, its own Cargo workspace on the
# dra-kubelet-plugin library).
#   lock  checks examples/fpga-driver/Cargo.lock still agrees with the workspace crates the
#         example uses by path (a dependency added to one of them changes it); fast, so CI
#         runs it before the long steps
#   test  lock, fmt check, clippy's lints and the unit tests in one build (hack/lib.sh
#         clippy_build_env), with CARGO_TARGET_DIR at the main target/ so the dependencies
#         the workspace built are used where their features agree
#   demo  on a fresh one-node cluster of hack/local-cluster.sh (root): the driver's image
#         (built here without an engine, as hack/build-image-local.sh builds ours), its
#         DaemonSet, a pod with the node's two cards; prints the pod's log (`ls -l /dev/fpga*`,
#         the bitstream loaded on each card and its FPGA_ variables) and checks /dev/fpga0
#         is a character device, FPGA_DEVICE_0=fpga0 and both loads; then plugs a third
#         card in (its config directory) and times its slice, marks one bad and waits for
#         its taint; tears the cluster down. Needs the busybox and pause images
#         of hack/build-image-local.sh in IMAGES_DIR (built when missing).
# Usage: hack/example-fpga.sh lock|test|demo [--keep]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
example="$ROOT/examples/fpga-driver"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
cmd="${1:-}"
keep=false
[[ "${2:-}" != --keep ]] || keep=true
check_lock() {
  local out
  if ! out=$(cd "$example" && cargo metadata --locked --format-version 1 2>&1 >/dev/null); then
    printf '%s\n' "$out" >&2
    die "examples/fpga-driver/Cargo.lock is out of date with the crates it uses (cargo's words above); update it with: (cd examples/fpga-driver && cargo metadata --offline --format-version 1 >/dev/null), then commit it"
  fi
}
case "$cmd" in
  -h|--help) usage; exit 0 ;;
  lock) check_lock; exit 0 ;;
  test)
    check_lock
    cd "$example"
    cargo fmt -- --check
    # Clippy's lints (-D warnings) in the same build as the tests (clippy_build_env): the
    # dependencies compile once.
    clippy_build_env
    cargo test --locked --all-targets --no-run
    cargo test --locked
    exit 0
    ;;
  demo) ;;
  *) die "unknown command '${cmd}' (lock, test or demo; try --help)" ;;
esac

source "$ROOT/hack/kube/lib.sh"
[[ "$(id -u)" == 0 ]] || die "demo must run as root (hack/local-cluster.sh mounts and makes network interfaces)"
t0=$SECONDS
"$ROOT/hack/kube-build.sh" tools >/dev/null
IMAGES_DIR="${IMAGES_DIR:-$ROOT/target/kube/images}"
[[ -f "$IMAGES_DIR/busybox.tar" && -f "$IMAGES_DIR/pause.tar" ]] || "$ROOT/hack/build-image-local.sh" --cargo-profile dev
(cd "$example" && cargo build --locked) || die "cargo build of examples/fpga-driver failed"
bin="$CARGO_TARGET_DIR/debug/fpga-driver"
r="$IMAGES_DIR/rootfs-fpga"
rm -rf "$r"; mkdir -p "$r/usr/bin" "$r/etc" "$r/tmp"
strip -o "$r/usr/bin/fpga-driver" "$bin"
ldd "$bin" | awk '/=> \// { print $3 } /^\t\// { print $1 }' | while read -r lib; do
  mkdir -p "$r$(dirname "$lib")"; cp -L "$lib" "$r$lib"
done
printf 'root:x:0:0:root:/root:/sbin/nologin\n' >"$r/etc/passwd"
printf 'root:x:0:\n' >"$r/etc/group"
[[ ! -f /etc/ssl/certs/ca-certificates.crt ]] || { mkdir -p "$r/etc/ssl/certs"; cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/"; }
"$KUBE_BIN/ociarchive" -rootfs "$r" -name docker.io/library/fpga-driver:dev \
  -o "$IMAGES_DIR/fpga-driver.tar" -entrypoint /usr/bin/fpga-driver
rm -rf "$r"
echo "== build: $((SECONDS - t0)) s"

KUBECONFIG="$("$ROOT/hack/local-cluster.sh" kubeconfig)"
export KUBECONFIG PATH="$KUBE_BIN:$PATH"
"$ROOT/hack/local-cluster.sh" down >/dev/null 2>&1 || true
# The driver's config directory on the host (its DaemonSet's hostPath): the demo plugs a
# card in and marks one bad there, and removes both at the end.
config_dir=/var/lib/kubelet/plugins/fpga.example.com/config
rm -f "$config_dir/cards" "$config_dir/unhealthy"
finish() {
  local rc=$?
  rm -f "$config_dir/cards" "$config_dir/unhealthy"
  if ((rc != 0)); then
    kubectl get pods -A -o wide >&2 || true
    kubectl get resourceslices,resourceclaims -A >&2 || true
    # Every pod not running yet, with its conditions and Events, and kube-scheduler's
    # words on it (its log at --v=2 names each failed attempt).
    local pod
    for pod in $(kubectl get pods -A --field-selector status.phase=Pending -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}{" "}{end}' 2>/dev/null); do
      kubectl -n "${pod%%/*}" describe pod "${pod#*/}" >&2 || true
      echo "-- kube-scheduler on $pod:" >&2
      grep -F "pod=\"$pod\"" "${CLUSTER_DIR:-/var/lib/fake-dra-cluster}/logs/kube-scheduler.log" | tail -20 >&2 || true
    done
    kubectl -n fpga-driver logs daemonset/fpga-driver --tail=40 >&2 || true
  fi
  if $keep; then
    echo "cluster left running: export KUBECONFIG=$KUBECONFIG PATH=$KUBE_BIN:\$PATH; hack/local-cluster.sh down removes it"
  else
    # The driver goes first (its DaemonSet would bring its pod back while the cluster
    # waits for workload pods to go).
    kubectl delete -f "$example/deploy/fpga-driver.yaml" --wait=true --timeout=60s >/dev/null 2>&1 || true
    "$ROOT/hack/local-cluster.sh" down
  fi
  rm -f "$IMAGES_DIR/fpga-driver.tar"
  echo "== total: $((SECONDS - t0)) s"
  exit "$rc"
}
trap finish EXIT
"$ROOT/hack/local-cluster.sh" up
kubectl apply -f "$example/deploy/fpga-driver.yaml"
node="$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}')"
# published [DEVICES]: the node's slice lists exactly these devices ("fpga-0 fpga-1").
published() {
  local want="${1:-fpga-0 fpga-1}" out
  out="$(kubectl get resourceslices --field-selector "spec.nodeName=$node,spec.driver=fpga.example.com" -o jsonpath='{.items[*].spec.devices[*].name}' 2>&1)" || true
  [[ "$out" == "$want" ]] || { echo "devices of node $node: ${out:-none}, want $want"; return 1; }
}
wait_for "the driver's ResourceSlice" 90 published
# Ready: its cards published and the kubelet registered it (a pod started before the
# registration fails its prepare, and the kubelet retries it only at its resync, 60-90 s).
driver_ready() {
  local out
  out="$(kubectl -n fpga-driver get pods -o jsonpath='{.items[*].status.containerStatuses[*].ready}' 2>&1)" || true
  [[ "$out" == true ]] || { echo "driver containers ready: ${out:-none}"; return 1; }
}
wait_for "the driver Ready" 60 driver_ready
kubectl get resourceslices -o wide
kubectl apply -f "$example/deploy/demo-pod.yaml"
done_ok() {
  local phase
  phase="$(kubectl get pod fpga-demo -o jsonpath='{.status.phase}' 2>&1)" || true
  [[ "$phase" == Succeeded ]] || { echo "pod fpga-demo phase: ${phase:-none}"; return 1; }
}
wait_for "pod fpga-demo to succeed" 120 done_ok
log="$(kubectl logs fpga-demo)" || die "kubectl logs fpga-demo failed: $log"
echo "-- kubectl logs fpga-demo"
printf '%s\n' "$log"
node_line="$(grep ' /dev/fpga0$' <<<"$log" || true)"
[[ "$node_line" == c* ]] || die "the pod saw no character device /dev/fpga0; its log:"$'\n'"$log"
for v in FPGA_DEVICE_0=fpga0 FPGA_DEVICE_1=fpga1 FPGA_NODE_NAME="$node"; do
  contains_line "$log" "$v" || die "the pod has no $v; its log:"$'\n'"$log"
done
contains_line "$log" "FPGA_BITSTREAM=demo-v1.bit" || die "the pod has not the claim's bitstream; its log:"$'\n'"$log"
# The driver's device work: each card's bitstream loaded, the file mounted in the pod.
for i in 0 1; do
  contains_line "$log" "loaded /run/fpga/fpga$i.bitstream: demo-v1.bit" \
    || die "the pod did not see card $i's loaded bitstream; its log:"$'\n'"$log"
done
driver_log="$(kubectl -n fpga-driver logs daemonset/fpga-driver 2>&1)" || die "kubectl logs of the driver failed: $driver_log"
loads="$(grep -c 'bitstream loaded' <<<"$driver_log" || true)"
[[ "$loads" == 2 ]] || die "the driver logged $loads bitstream loads, expected 2; its log:"$'\n'"$driver_log"
kubectl delete pod fpga-demo --wait=true --timeout=120s
# Its claim goes after the pod (the resourceclaim controller deallocates it, the garbage
# collector deletes it). A pod created before then finds both cards taken, and
# kube-scheduler retries it on the claim's deallocation event; when that event is missed
# (kubernetes/kubernetes#140831 names the race) it waits for the 5-minute flush of
# unschedulable pods. Waiting here keeps the demo off that path.
no_claims() {
  local out
  out="$(kubectl get resourceclaims -o name 2>&1)" || true
  [[ -z "$out" ]] || { echo "claims left: $out"; return 1; }
}
wait_for "pod fpga-demo's claim to be deleted" 60 no_claims

# A pod with one card (the template one-fpga, used below too), kept running: what the
# driver reported of its card in the claim's status.devices (the API server drops it once
# the claim is deallocated, after the pod).
kubectl apply -f - >/dev/null <<'EOF'
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-fpga, namespace: default}
spec:
  spec:
    devices:
      requests:
        - name: fpga
          exactly: {deviceClassName: fpga.example.com}
EOF
# roll_pod NAME [COMMAND]: a pod roll-NAME with a one-card claim.
roll_pod() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: roll-$1, namespace: default}
spec:
  restartPolicy: Never
  resourceClaims: [{name: fpga, resourceClaimTemplateName: one-fpga}]
  containers:
    - name: ctr
      image: busybox:1.36
      command: ["sh", "-c", "${2:-cat /run/fpga/*.bitstream}"]
      resources: {claims: [{name: fpga}]}
EOF
}
roll_pod status "sleep 3600" | kubectl apply -f - >/dev/null
status_ok() {
  local out
  out="$(kubectl get resourceclaims -o jsonpath='{range .items[*].status.devices[*]}{.conditions[0].reason}:{.data.bitstream}{" "}{end}' 2>&1)" || true
  [[ "$out" == "BitstreamLoaded:blank " ]] || { echo "the claims' device status: ${out:-none}"; return 1; }
}
wait_for "the claim's device status" 60 status_ok
echo "-- the claim's status.devices"
kubectl get resourceclaims -o jsonpath='{range .items[*].status.devices[*]}{.device}{"\t"}{.conditions[0].type}={.conditions[0].status} {.conditions[0].reason}: {.conditions[0].message}{"\t"}{.data}{"\n"}{end}'
kubectl delete pod roll-status --grace-period=1 --wait=true --timeout=60s >/dev/null

# Devices that change: a card plugged in (its slice follows), then one gone bad (tainted).
mkdir -p "$config_dir"
t_plug=$(date +%s%N)
echo 3 >"$config_dir/cards"
# Polled every 0.1 s rather than wait_for's 1 s: the time is measured.
deadline=$((SECONDS + 30))
until seen="$(published "fpga-0 fpga-1 fpga-2")"; do
  ((SECONDS < deadline)) || die "card fpga-2 not in the slice after 30 s: $seen"
  sleep 0.1
done
echo "== hot-plug: card plugged in to slice published in $((($(date +%s%N) - t_plug) / 1000000)) ms"
echo "fpga-1 PCIe link down" >"$config_dir/unhealthy"
tainted() {
  local out
  out="$(kubectl get resourceslices --field-selector "spec.nodeName=$node,spec.driver=fpga.example.com" -o jsonpath='{range .items[*].spec.devices[*]}{.name}={.taints[*].key}:{.taints[*].effect}{" "}{end}' 2>&1)" || true
  [[ "$out" == *"fpga-1=fpga.example.com/unhealthy:NoSchedule "* ]] || { echo "devices and taints: ${out:-none}"; return 1; }
}
wait_for "card fpga-1 tainted" 30 tainted
kubectl get resourceslices -o jsonpath='{range .items[*].spec.devices[*]}{.name}{"\t"}{.taints}{"\n"}{end}'
rm -f "$config_dir/cards" "$config_dir/unhealthy"
wait_for "the slice back to two healthy cards" 30 published "fpga-0 fpga-1"

# A rolling update of the driver (maxSurge 1: the new instance registers beside the old)
# while pods with a one-card claim start and finish one after another: no prepare may
# fail, and the node's slice must never be missing.
roll_done() {
  local phase
  phase="$(kubectl get pod "roll-$1" -o jsonpath='{.status.phase}' 2>&1)" || true
  [[ "$phase" == Succeeded ]] || { echo "pod roll-$1 phase: ${phase:-none}"; return 1; }
}
slices_file="$(mktemp)"
# One sample every 0.1 s: a time and how many slices the node has.
( while :; do
    # A failed call is "?" (not counted either way), and never ends the loop.
    n="$(kubectl get resourceslices --field-selector "spec.nodeName=$node,spec.driver=fpga.example.com" -o name 2>/dev/null | wc -l)" || n="?"
    echo "$(date +%s%N) $n"; sleep 0.1
  done >"$slices_file" ) &
sampler=$!
t_roll=$SECONDS
kubectl -n fpga-driver rollout restart daemonset/fpga-driver >/dev/null
pods=0
while :; do
  pods=$((pods + 1))
  roll_pod "$pods" | kubectl apply -f - >/dev/null
  wait_for "pod roll-$pods to succeed" 60 roll_done "$pods"
  kubectl delete pod "roll-$pods" --wait=true --timeout=60s >/dev/null
  rolled="$(kubectl -n fpga-driver rollout status daemonset/fpga-driver --timeout=1s 2>&1)" || true
  [[ "$rolled" == *"successfully rolled out"* && $pods -ge 4 ]] && break
  ((SECONDS - t_roll < 180)) || die "the rollout did not finish in 180 s: $rolled"
done
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
failed="$(kubectl get events -o jsonpath='{range .items[?(@.reason=="FailedPrepareDynamicResources")]}{.involvedObject.name}{": "}{.message}{"\n"}{end}')"
# The longest run of samples without a slice, in ms (-1: still none at the end).
gap="$(awk '$2 == "?" { next } $2 == 0 { if (!start) start = $1 } $2 > 0 { if (start) { d = $1 - start; if (d > max) max = d; start = 0 } } END { if (start) max = -1; print int(max / 1000000) }' "$slices_file")"
samples="$(wc -l <"$slices_file")"
rm -f "$slices_file"
echo "== rolling update: $pods pods ran during it, failed prepares (whole demo): ${failed:-none}; longest time without the node's slice: ${gap} ms ($samples samples)"
[[ -z "$failed" ]] || die "prepares failed during the demo:"$'\n'"$failed"
[[ "$gap" == 0 ]] || die "the node's slice was missing for ${gap} ms during the rolling update (-1: at the end)"
echo "fpga example driver demo passed: Kubernetes $KUBE_VERSION, node $node"
