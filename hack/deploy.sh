#!/usr/bin/env bash
# Applies an overlay of deploy/ (CRDs, RBAC, controller, kubelet plugin, classes) and waits
# until the controller and the plugins are ready.
# Usage: hack/deploy.sh [OVERLAY] [--delete]   OVERLAY: classic (default)
# Env: IMAGE (default fake-dra:dev) replaces the image in the manifests.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
overlay=classic
action=apply
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --delete) action=delete; shift ;;
    -*) die "unknown argument: $1 (try --help)" ;;
    *) overlay="$1"; shift ;;
  esac
done
known=()
for d in "$ROOT"/deploy/*/; do
  d="${d%/}"; d="${d##*/}"
  [[ "$d" == base || ! -f "$ROOT/deploy/$d/kustomization.yaml" ]] || known+=("$d")
done
printf '%s\n' "${known[@]}" | grep -qx -- "$overlay" \
  || die "unknown overlay '$overlay'; known: ${known[*]}"
need kubectl "kubectl (https://kubernetes.io/docs/tasks/tools/)"
# The CRDs sit in deploy/crds, outside the base, hence the load restrictor flag.
rendered="$(kubectl kustomize --load-restrictor LoadRestrictionsNone "$ROOT/deploy/$overlay")"
rendered="${rendered//image: fake-dra:dev/image: $IMAGE}"
if [[ "$action" == delete ]]; then
  kubectl delete --ignore-not-found -f - <<<"$rendered"
  exit 0
fi
# CRDs first, so the objects of their kinds (none in the base today) can follow.
kubectl apply --server-side -f - <<<"$rendered"
kubectl -n fake-dra rollout status deployment/fake-dra-controller --timeout=120s
kubectl -n fake-dra rollout status daemonset/fake-dra-kubelet-plugin --timeout=120s
echo "fake-dra ($overlay) is deployed"
