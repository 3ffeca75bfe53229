#!/usr/bin/env bash
# Rewrites structured-DRA manifests written for resource.k8s.io/v1 (Kubernetes 1.34+) to
# v1beta1 for Kubernetes 1.32/1.33: apiVersion, and each request's `exactly:` fields moved
# onto the request. Prints the result; apply it with kubectl.
# Usage: hack/v1beta1.sh FILE... | kubectl apply -f -     (no FILE: reads stdin)
# Example: hack/v1beta1.sh deploy/examples/structured/5-count-4-split-2.yaml | kubectl apply -f -
set -euo pipefail
source "$(dirname "$0")/lib.sh"
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
esac
if [[ $# -eq 0 ]]; then to_v1beta1; exit 0; fi
first=true
for f in "$@"; do
  [[ -f "$f" ]] || die "no such file: $f"
  $first || echo "---"
  first=false
  to_v1beta1 <"$f"
done
