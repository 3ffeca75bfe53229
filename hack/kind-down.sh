#!/usr/bin/env bash
# Deletes the kind cluster (nothing to do if it does not exist): its nodes, their volumes,
# the kubeconfig context; kind's network stays for the next cluster.
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
kind_setup
clusters="$(kind_clusters)"
if contains_line "$clusters" "$CLUSTER_NAME"; then
  "$KIND" delete cluster --name "$CLUSTER_NAME"
else
  echo "kind cluster $CLUSTER_NAME does not exist; nothing to do"
fi
