#!/usr/bin/env bash
# kwok plays the kubelet of N nodes whose devices fleet mode publishes, on the local real
# control plane (hack/local-cluster.sh; docs/fleet.md "With kwok"). Builds what it needs
# (kwok from the Go module proxy at the version hack/kube/kwok/go.mod pins, cached in
# target/kube/kwok; the plugin binary and the scenario test), starts a fresh cluster, runs
# as host processes
#   kwok   --config hack/kwok-stages.yaml --manage-nodes-with-annotation-selector
#          kwok.x-k8s.io/node=fake (nodes Ready, their pods Running, deletions completed)
#   fake-dra-kubelet-plugin fleet --node-selector type=kwok (one pool per kwok node)
# then the scenario e2e/tests/it/kwok.rs: it creates the N nodes (annotated
# kwok.x-k8s.io/node=fake for kwok, labelled type=kwok for the fleet and the pods' node
# selector, tainted kwok.x-k8s.io/node=fake:NoSchedule so only pods that tolerate it land
# where no container runs), M pods with claims of 1 and 2 devices, deletes some nodes
# while pods are bound, then the pods, then the nodes, asserting at each step (devices
# distinct, claims freed, slices gone). Tears the cluster down, also on failure, and
# prints a short report. Needs root (the cluster); run it under the cluster lock:
#   flock /tmp/fake-dra-cluster.lock hack/kwok.sh --nodes 1000
# Usage: hack/kwok.sh [--nodes N] [--pods M] [--delete-nodes K] [--devices D] [--cargo-profile dev|release]
#   --nodes N         kwok nodes (default 1000)
#   --pods M          pods, every other one with a claim of 2 devices (default 500)
#   --delete-nodes K  nodes with bound pods deleted while the pods run (default 10)
#   --devices D       devices per node, the fleet's --num-devices (default 8)
#   --cargo-profile   dev (default: the binaries cargo test builds) or release
# Env: KUBE_OUT, IMAGES_DIR (as hack/local-cluster.sh), KUBE_API_QPS (the client rate
#      limit of kube-controller-manager and kube-scheduler; default 1000, as
#      hack/fleet-bench.sh: the defaults would make the claims' creation the bottleneck),
#      CARGO_TARGET_DIR, KWOK_LOGS (where kwok's and the fleet's logs go; default
#      target/kwok; the control plane's logs are copied to its cluster/ at the end),
#      KWOK_FLEET_PORT (the fleet's /healthz and /metrics on 127.0.0.1;
#      default 10371).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/hack/kube/lib.sh"
nodes=1000
pods=500
delete_nodes=10
devices=8
profile=dev
count() { [[ "$2" =~ ^[0-9]+$ ]] || die "$1 needs a count, not '$2'"; echo "$2"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --nodes) nodes="$(count "$1" "${2:-}")"; shift 2 ;;
    --pods) pods="$(count "$1" "${2:-}")"; shift 2 ;;
    --delete-nodes) delete_nodes="$(count "$1" "${2:-}")"; shift 2 ;;
    --devices) devices="$(count "$1" "${2:-}")"; shift 2 ;;
    --cargo-profile) profile="${2:-}"; shift 2 ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
((nodes > 0 && pods > 0 && devices > 0)) || die "--nodes, --pods and --devices must be at least 1"
((pods * 3 / 2 + 1 <= nodes * devices)) || die "$pods pods want about $((pods * 3 / 2)) devices; $nodes nodes of $devices have $((nodes * devices))"
[[ "$(id -u)" == 0 ]] || die "must run as root (hack/local-cluster.sh mounts and makes network interfaces)"
cd "$ROOT"
target="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$profile" in
  dev) cargo_flags=(); out=debug ;;
  release) cargo_flags=(--release); out=release ;;
  *) die "--cargo-profile: dev or release, not $profile" ;;
esac
logs="${KWOK_LOGS:-$ROOT/target/kwok}"
mkdir -p "$logs"

t0=$SECONDS
echo "== building: kwok (hack/kube-build.sh kwok), the Kubernetes components, the plugin and the scenario test"
KUBE_OUT="$ROOT/target/kube/kwok" "$ROOT/hack/kube-build.sh" kwok >"$logs/build.log" 2>&1 \
  || { show_output "$(cat "$logs/build.log")" >&2; die "building kwok failed (log: $logs/build.log)"; }
kwok="$ROOT/target/kube/kwok/bin/kwok"
"$ROOT/hack/kube-build.sh" >>"$logs/build.log" 2>&1 \
  || { show_output "$(cat "$logs/build.log")" >&2; die "building the Kubernetes components failed (log: $logs/build.log)"; }
IMAGES_DIR="${IMAGES_DIR:-$ROOT/target/kube/images}"
# kwok's pods run no container; the cluster only needs its sandbox image to come up.
if [[ ! -f "$IMAGES_DIR/pause.tar" ]]; then
  "$ROOT/hack/build-image-local.sh" --cargo-profile "$profile" >>"$logs/build.log" 2>&1 \
    || { show_output "$(cat "$logs/build.log")" >&2; die "hack/build-image-local.sh failed (log: $logs/build.log)"; }
fi
export IMAGES_DIR
cargo build -q ${cargo_flags[@]+"${cargo_flags[@]}"} -p fake-dra-kubelet-plugin --bin fake-dra-kubelet-plugin
plugin="$target/$out/fake-dra-kubelet-plugin"
cargo test -q ${cargo_flags[@]+"${cargo_flags[@]}"} -p fake-dra-e2e --test it --no-run 2>"$logs/cargo-test-build.log" \
  || { show_output "$(cat "$logs/cargo-test-build.log")" >&2; die "building e2e/tests/it/kwok.rs failed"; }
built=$((SECONDS - t0))

status="$("$ROOT/hack/local-cluster.sh" status 2>&1)" || die "hack/local-cluster.sh status failed: $status"
if [[ $'\n'"$status" == *$'\n'running* ]] || local_cluster_up; then
  die "a local cluster is already running (someone else's, or left over: hack/local-cluster.sh down): the scenario needs a fresh one"
fi

kwok_pid=""
fleet_pid=""
# stop_pid <name> <pid>: SIGTERM, then SIGKILL after 15 s.
stop_pid() {
  local name="$1" p="$2" i
  [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null || return 0
  kill -TERM "$p" 2>/dev/null || true
  for ((i = 0; i < 30; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$p" 2>/dev/null; then echo "$name (pid $p) ignored SIGTERM: SIGKILL"; kill -KILL "$p" 2>/dev/null || true; fi
  wait "$p" 2>/dev/null || true
}
cleanup() {
  local rc=$?
  stop_pid fleet "$fleet_pid"
  stop_pid kwok "$kwok_pid"
  if ((rc != 0)); then
    echo "== failed (exit $rc); the last lines of kwok's and the fleet's logs:" >&2
    for f in kwok fleet; do
      [[ -f "$logs/$f.log" ]] || continue
      echo "-- $logs/$f.log" >&2
      show_output "$(tail -n 30 "$logs/$f.log")" >&2
    done
  fi
  # The control plane's logs of this run, before the next cluster appends to them.
  local cluster_logs
  cluster_logs="$("$ROOT/hack/local-cluster.sh" env 2>/dev/null | sed -n 's/^LOGS=//p')" || cluster_logs=""
  if [[ -n "$cluster_logs" && -d "$cluster_logs" ]]; then
    mkdir -p "$logs/cluster"
    cp -f "$cluster_logs"/kube-*.log "$logs/cluster/" 2>/dev/null || true
  fi
  "$ROOT/hack/local-cluster.sh" down >"$logs/down.log" 2>&1 \
    || echo "hack/local-cluster.sh down failed (log: $logs/down.log)" >&2
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t1=$SECONDS
echo "== hack/local-cluster.sh up"
KUBE_API_QPS="${KUBE_API_QPS-1000}" "$ROOT/hack/local-cluster.sh" up >"$logs/up.log" 2>&1 \
  || { show_output "$(cat "$logs/up.log")" >&2; die "hack/local-cluster.sh up failed (log: $logs/up.log)"; }
kubeconfig="$("$ROOT/hack/local-cluster.sh" kubeconfig)"
kctl() { "$KUBE_BIN/kubectl" --kubeconfig "$kubeconfig" "$@"; }
# The fleet watches DeviceFaults; the claims ask for the driver's DeviceClass.
applied="$(kctl apply -f deploy/crds/devicefaults.yaml -f deploy/structured/deviceclass.yaml 2>&1)" \
  || die "kubectl apply of the DeviceFault CRD and the DeviceClass failed: $applied"
up=$((SECONDS - t1))

# kwok reads ~/.kwok/kwok.yaml as well when there is one: a HOME of its own keeps it to
# our stages. Its client has no rate limit. It renews a Lease per node (the node lifecycle
# controller's heartbeat); the node stage only makes a node Ready once.
mkdir -p "$logs/kwok-home"
HOME="$logs/kwok-home" setsid "$kwok" --kubeconfig "$kubeconfig" --config "$ROOT/hack/kwok-stages.yaml" \
  --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --node-lease-duration-seconds 40 >"$logs/kwok.log" 2>&1 </dev/null &
kwok_pid=$!
port="${KWOK_FLEET_PORT:-10371}"
RUST_LOG=info setsid "$plugin" fleet --kubeconfig "$kubeconfig" --node-selector type=kwok \
  --num-devices "$devices" --http-address "127.0.0.1:$port" >"$logs/fleet.log" 2>&1 </dev/null &
fleet_pid=$!
kwok_watching() {
  kill -0 "$kwok_pid" 2>/dev/null || { echo "kwok (pid $kwok_pid) exited"; return 1; }
  local log
  log="$(cat "$logs/kwok.log")"
  [[ "$log" == *"Watch nodes"* ]] || { echo "kwok has not logged 'Watch nodes' yet; its log:"; echo "$log"; return 1; }
}
fleet_healthy() {
  kill -0 "$fleet_pid" 2>/dev/null || { echo "the fleet (pid $fleet_pid) exited"; return 1; }
  curl -sS --max-time 2 "http://127.0.0.1:$port/healthz"
}
wait_for "kwok watching its nodes" 60 kwok_watching
wait_for "the fleet's /healthz" 60 fleet_healthy

echo "== e2e/tests/it/kwok.rs: $nodes nodes, $pods pods, $delete_nodes nodes deleted under their pods, $devices devices a node"
t2=$SECONDS
report="$logs/report.txt"
rm -f "$report"
FAKE_DRA_KWOK_KUBECONFIG="$kubeconfig" FAKE_DRA_REQUIRE_KWOK=1 FAKE_DRA_KWOK_NODES="$nodes" \
  FAKE_DRA_KWOK_PODS="$pods" FAKE_DRA_KWOK_DELETE_NODES="$delete_nodes" FAKE_DRA_KWOK_REPORT="$report" \
  cargo test -q ${cargo_flags[@]+"${cargo_flags[@]}"} -p fake-dra-e2e --test it -- kwok:: --nocapture 2>&1 \
  | tee "$logs/scenario.log"
scenario=$((SECONDS - t2))
[[ -f "$report" ]] || die "the scenario wrote no report ($report); its output: $logs/scenario.log"
peak() { awk '/VmHWM/ {printf "%.0f MiB", $2 / 1024}' "/proc/$1/status" 2>/dev/null || echo "?"; }
kwok_mem="$(peak "$kwok_pid")"
fleet_mem="$(peak "$fleet_pid")"
metrics="$(curl -sS --max-time 5 "http://127.0.0.1:$port/metrics" || true)"
writes="$(awk '/^fake_dra_fleet_pool_writes_total/ {print $2}' <<<"$metrics")"
echo
echo "== kwok report: $("$kwok" --version 2>/dev/null | head -n 1), $(kctl version 2>/dev/null | awk '/Server Version/ {print "Kubernetes " $3}'), $(nproc) cores"
cat "$report"
echo "kwok peak memory $kwok_mem; fleet peak memory $fleet_mem, ${writes:-?} pool writes"
echo "times: build ${built} s, cluster up ${up} s, scenario ${scenario} s, total $((SECONDS - t0)) s (before teardown)"
