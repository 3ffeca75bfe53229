#!/usr/bin/env bash
# The chaos soak on the real one-node cluster (docs/soak.md): brings up
# hack/local-cluster.sh's cluster with our images packed from target/debug, deploys
# deploy/structured, churns pods with claims (templates of 1-4 devices split 1-3, pods with
# several claims, standalone claims shared by 2-3 pods, a Deployment scaled up and down)
# while faults hit it at random points (plugin SIGKILL, also during a prepare batch and
# while it publishes its slices; plugin pod deleted; kubelet, kube-apiserver (also down
# longer than the plugin's backoff) and containerd restarted; /var/run/cdi wiped as a
# reboot would; the plugin aborting between a CDI write and its checkpoint write), checks
# the invariants as it goes and at the end, prints the report (also written to
# target/soak/report.txt) and takes the cluster down. Fails on any violation. Needs root.
# Runs the soak test executable that `cargo test --workspace` built (e2e/tests/it/soak.rs),
# as hack/ci-real-k8s.sh runs the real-cluster suite's; builds it when there is none.
# Usage: hack/soak.sh [--size N] [--duration D] [--seed N] [--devices N] [--concurrency N]
#                     [--faults LIST] [--fault-gap SECONDS] [--quiet SECONDS] [--report FILE]
#   --size N          pod lifecycles (pods that ran, printed their env and went); default 1000
#   --duration D      churn at least this long: 90s, 45m, 8h, or plain minutes; default 0
#                     (as long as the size takes: about 12 minutes here); the flag for longer
#   --seed N          the random choices (workload, fault order, pauses); default: from the
#                     clock, printed, so a run can be repeated with its seed
#   --devices N       parent devices on the node (16-128); default 96
#   --concurrency N   workload units under way at once; default 16
#   --faults LIST     comma-separated fault kinds, "all" (default) or "none"; kinds:
#                     plugin-sigkill plugin-sigkill-in-batch plugin-sigkill-while-publishing
#                     plugin-pod-delete kubelet-restart apiserver-restart apiserver-down-long
#                     containerd-restart cdi-wipe crash-prepare-after-spec
#                     crash-unprepare-after-spec
#   --fault-gap S     mean pause between a fault's recovery and the next; default 20
#   --quiet S         the churn goes on S seconds after the last fault; default 60
#   --fault-window S  faults start only in the first S seconds of the churn, whether or not
#                     every kind came; default 0 (no limit: every kind at least once)
#   --ci              the CI size: --size 100 --fault-window 120 --fault-gap 3 --quiet 20
#                     --seed <the commit's first 8 hex digits>: the faults the seed's order
#                     puts first (2-5 kinds), so successive commits cover every kind; flags
#                     after it override
# Env: CARGO_TARGET_DIR. Only one cluster fits on the machine: the soak skips nothing and
# fails if one already runs.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

size=1000 duration="" seed="" devices=96 concurrency=16 faults=all gap=20 quiet=60 window=0 report=""
minutes_or() {
  case "$1" in
    *h) echo $((${1%h} * 3600)) ;;
    *m) echo $((${1%m} * 60)) ;;
    *s) echo "${1%s}" ;;
    *) echo $(($1 * 60)) ;;
  esac
}
whole() { [[ "$2" =~ ^[0-9]+$ ]] || die "$1 takes a whole number, got '$2'"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --size) whole "$1" "${2:-}"; size="$2"; shift 2 ;;
    --duration)
      [[ "${2:-}" =~ ^[0-9]+[smh]?$ ]] || die "--duration takes 90s, 45m, 8h or minutes, got '${2:-}'"
      duration="$(minutes_or "$2")"; shift 2 ;;
    --seed) whole "$1" "${2:-}"; seed="$2"; shift 2 ;;
    --devices) whole "$1" "${2:-}"; devices="$2"; shift 2 ;;
    --concurrency) whole "$1" "${2:-}"; concurrency="$2"; shift 2 ;;
    --faults) faults="${2:?--faults needs a list}"; shift 2 ;;
    --fault-gap) whole "$1" "${2:-}"; gap="$2"; shift 2 ;;
    --quiet) whole "$1" "${2:-}"; quiet="$2"; shift 2 ;;
    --fault-window) whole "$1" "${2:-}"; window="$2"; shift 2 ;;
    --report) report="${2:?--report needs a file}"; shift 2 ;;
    --ci)
      size=100 window=120 gap=3 quiet=20
      # The commit picks the faults: reproducible per commit, all kinds over commits.
      if head="$(git -C "$ROOT" rev-parse --short=8 HEAD 2>/dev/null)" && [[ "$head" =~ ^[0-9a-f]{8}$ ]]; then
        seed=$((16#$head))
      fi
      shift ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
[[ "$(id -u)" == 0 ]] || die "must run as root (the cluster mounts, makes network interfaces and iptables rules)"
[[ -n "$seed" ]] || seed="$(date +%s)"

target="${CARGO_TARGET_DIR:-$ROOT/target}"
# The e2e test executable as `cargo test --workspace` built it (built here when missing),
# and the binaries it packs next to it.
exe="$(e2e_test_exe)"
[[ -x "$target/debug/fake-dra-kubelet-plugin" ]] || die "no $target/debug/fake-dra-kubelet-plugin after cargo test --workspace --no-run"

echo "soak: size $size, duration ${duration:-0} s, seed $seed, $devices devices, concurrency $concurrency, faults $faults (gap $gap s, window ${window} s, quiet $quiet s)"
echo "soak: $exe"
t0=$SECONDS
rc=0
(
  cd "$ROOT/e2e"
  env FAKE_DRA_SOAK=1 FAKE_DRA_SOAK_SIZE="$size" FAKE_DRA_SOAK_DURATION="${duration:-0}" \
    FAKE_DRA_SOAK_SEED="$seed" FAKE_DRA_SOAK_DEVICES="$devices" FAKE_DRA_SOAK_CONCURRENCY="$concurrency" \
    FAKE_DRA_SOAK_FAULTS="$faults" FAKE_DRA_SOAK_FAULT_GAP="$gap" FAKE_DRA_SOAK_QUIET="$quiet" \
    FAKE_DRA_SOAK_FAULT_WINDOW="$window" \
    ${report:+"FAKE_DRA_SOAK_REPORT=$report"} \
    "$exe" soak::soak_on_the_real_cluster --exact --nocapture --test-threads 1
) || rc=$?
echo "== soak: $((SECONDS - t0)) s (seed $seed, exit $rc)"
exit "$rc"
