#!/usr/bin/env bash
# Applies an overlay of deploy/ (kubectl kustomize | kubectl apply) and waits until the
# driver is ready. The Helm chart deploy/helm/fake-dra installs the same objects.
#   classic     Kubernetes 1.27-1.30: CRDs, RBAC, controller, kubelet plugin, ResourceClass
#   structured  Kubernetes 1.32+: CRD, RBAC, kubelet plugin, DeviceClass, admission policy;
#               on 1.32/1.33 (resource.k8s.io/v1beta1 only) the DeviceClass is rewritten to
#               v1beta1 (hack/v1beta1.sh)
# Usage: hack/deploy.sh [OVERLAY] [--delete]   OVERLAY: structured (default) or classic
# Env: IMAGE (default fake-dra:dev) replaces the image in the manifests.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
overlay=structured
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
[[ " ${known[*]} " == *" $overlay "* ]] \
  || die "unknown overlay '$overlay'; known: ${known[*]}"
need kubectl "kubectl (https://kubernetes.io/docs/tasks/tools/)"
# Rendered first (not `kubectl apply -k`): the image and, on 1.32/1.33, the API version change.
rendered="$(kubectl kustomize "$ROOT/deploy/$overlay")"
rendered="${rendered//image: fake-dra:dev/image: $IMAGE}"
if [[ "$action" == delete ]]; then
  kubectl delete --ignore-not-found -f - <<<"$rendered"
  exit 0
fi
mode="$(cluster_mode)"
if [[ "$overlay" == structured ]]; then
  [[ "$mode" == structured ]] || die "the cluster has classic DRA only (Kubernetes 1.27-1.30): deploy the classic overlay (hack/deploy.sh classic)"
  if [[ "$(structured_api_version)" == v1beta1 ]]; then
    echo "the cluster serves resource.k8s.io/v1beta1, not v1 (Kubernetes 1.32/1.33): applying the DeviceClass as v1beta1"
    rendered="$(to_v1beta1 <<<"$rendered")"
  fi
elif [[ "$overlay" == classic && "$mode" != classic ]]; then
  die "the cluster has no classic DRA (resource.k8s.io/v1alpha2 needs Kubernetes 1.27-1.30): deploy the structured overlay (hack/deploy.sh structured)"
fi
kubectl apply --server-side -f - <<<"$rendered"
# The controller exists in the classic overlay only (structured: kube-scheduler allocates).
if grep -q '^kind: Deployment' <<<"$rendered"; then
  kubectl -n fake-dra rollout status deployment/fake-dra-controller --timeout=120s
fi
kubectl -n fake-dra rollout status daemonset/fake-dra-kubelet-plugin --timeout=120s
echo "fake-dra ($overlay) is deployed"
