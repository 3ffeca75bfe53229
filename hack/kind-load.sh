#!/usr/bin/env bash
# Loads the image into the kind cluster's nodes.
# Usage: hack/kind-load.sh [--image NAME:TAG] [--name CLUSTER]
# Env: IMAGE (default fake-dra:dev), CLUSTER_NAME (default kind)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --image) IMAGE="${2:?--image needs a value}"; shift 2 ;;
    --name) CLUSTER_NAME="${2:?--name needs a value}"; shift 2 ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
need kind "kind (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
e="$(engine)"
if [[ "$e" == podman ]]; then
  archive="$(mktemp --suffix=.tar)"
  trap 'rm -f "$archive"' EXIT
  podman save -o "$archive" "$IMAGE"
  kind load image-archive "$archive" --name "$CLUSTER_NAME"
else
  kind load docker-image "$IMAGE" --name "$CLUSTER_NAME"
fi
echo "loaded $IMAGE into kind cluster $CLUSTER_NAME"
