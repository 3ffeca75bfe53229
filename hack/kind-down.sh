#!/usr/bin/env bash
# Deletes the kind cluster (nothing to do if it does not exist).
# Usage: hack/kind-down.sh [--name NAME]   Env: CLUSTER_NAME (default kind)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --name) CLUSTER_NAME="${2:?--name needs a value}"; shift 2 ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
need kind "kind (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
clusters="$(kind get clusters 2>&1)" || die "kind get clusters failed: $clusters"
if contains_line "$clusters" "$CLUSTER_NAME"; then
  kind delete cluster --name "$CLUSTER_NAME"
else
  echo "kind cluster $CLUSTER_NAME does not exist; nothing to do"
fi
