#!/usr/bin/env bash
# The seed demo: applies deploy/examples/5-count-4-split-2.yaml (count 4, split 2) and
# prints the FAKE_DEVICE_* lines the container sees (eight child ids).
# Usage: hack/demo.sh [--keep]   (--keep leaves namespace test5 in place)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
keep=false
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --keep) keep=true; shift ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
need kubectl "kubectl (https://kubernetes.io/docs/tasks/tools/)"
example="$ROOT/deploy/examples/5-count-4-split-2.yaml"
kubectl apply -f "$example"
kubectl -n test5 wait --for=condition=Ready pod/pod0 --timeout=120s \
  || { kubectl -n test5 describe pod pod0 >&2; die "pod test5/pod0 did not become Ready"; }
kubectl -n test5 logs pod0 | grep -E '(FAKE_|DRA_RESOURCE_DRIVER_NAME)' | sed 's/^/test5 pod0 ctr0 /'
if ! $keep; then kubectl delete -f "$example" --wait=false >/dev/null; fi
