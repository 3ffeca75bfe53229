#!/usr/bin/env bash
# Fails when the CRD YAML differs from what the Rust types generate (crdgen), in both places
# it lives: deploy/crds/*.yaml (the kustomize tree; deploy/crds/Kustomization lists them) and
# deploy/helm/fake-dra/files/crds/*.yaml (the chart's copy, so the chart stands alone).
# Usage: hack/check-crds.sh [--write]   (--write regenerates the files instead, and then
#   deploy/rendered with hack/render-deploy.sh --write, which holds the CRDs too)
set -euo pipefail
cd "$(dirname "$0")/.."
dirs=(deploy/crds deploy/helm/fake-dra/files/crds)
case "${1:-}" in
  -h|--help) sed -n 2,6p "$0" | sed 's/^# //'; exit 0 ;;
  --write) args=() ;;
  "") args=(--check) ;;
  *) echo "unknown argument: $1 (try --help)" >&2; exit 2 ;;
esac
source hack/lib.sh
# crdgen as `cargo test --workspace` builds it (after that command, nothing to build).
crdgen="$(workspace_artifact api crdgen)"
status=0
for d in "${dirs[@]}"; do
  "$crdgen" "${args[@]}" --out-dir "$d" || status=1
done
if [[ "${args[*]}" == --check && "$status" != 0 ]]; then
  echo "run hack/check-crds.sh --write" >&2
fi
(( status == 0 )) || exit "$status"
if [[ "${args[*]}" != --check ]]; then
  exec hack/render-deploy.sh --write
fi
