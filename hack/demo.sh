#!/usr/bin/env bash
# The seed demo: applies 5-count-4-split-2.yaml (count 4, split 2) and prints the
# FAKE_DEVICE_* lines the container sees (eight child ids). Structured clusters (1.32+) get
# deploy/examples/structured/ (rewritten to v1beta1 on 1.32/1.33), classic ones (1.27-1.30)
# deploy/examples/.
# Usage: hack/demo.sh [--mode auto|structured|classic] [--keep]
#   --mode: which examples (default auto: from the API the cluster serves)
#   --keep: leave namespace test5 in place
set -euo pipefail
source "$(dirname "$0")/lib.sh"
keep=false
mode=auto
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --keep) keep=true; shift ;;
    --mode) mode="${2:?--mode needs a value}"; shift 2 ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
case "$mode" in auto|structured|classic) ;; *) die "unknown mode '$mode' (auto, structured or classic)" ;; esac
need kubectl "kubectl (https://kubernetes.io/docs/tasks/tools/)"
[[ "$mode" != auto ]] || mode="$(cluster_mode)"
if [[ "$mode" == structured ]]; then
  manifest="$(structured_manifest "$ROOT/deploy/examples/structured/5-count-4-split-2.yaml")"
else
  manifest="$(cat "$ROOT/deploy/examples/5-count-4-split-2.yaml")"
fi
echo "applying the $mode seed demo (namespace test5)"
kubectl apply -f - <<<"$manifest"
kubectl -n test5 wait --for=condition=Ready pod/pod0 --timeout=120s \
  || { kubectl -n test5 describe pod pod0 >&2; die "pod test5/pod0 did not become Ready"; }
log="$(kubectl -n test5 logs pod0)" || die "kubectl logs test5/pod0 failed: $log"
env_lines="$(grep -E '(FAKE_|DRA_RESOURCE_DRIVER_NAME)' <<<"$log" || true)"
[[ -n "$env_lines" ]] || die "pod test5/pod0 printed no FAKE_* or DRA_RESOURCE_DRIVER_NAME line; its log:"$'\n'"${log:-<empty>}"
while IFS= read -r l; do echo "test5 pod0 ctr0 $l"; done <<<"$env_lines"
if ! $keep; then kubectl delete -f - --wait=false >/dev/null <<<"$manifest"; fi
