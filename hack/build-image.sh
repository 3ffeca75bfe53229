#!/usr/bin/env bash
# Builds the image with both binaries from deploy/container/Dockerfile.
# Usage: hack/build-image.sh [--image NAME:TAG]
# Env: IMAGE (default fake-dra:dev), CONTAINER_ENGINE (docker or podman; default: whichever exists)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --image) IMAGE="${2:?--image needs a value}"; shift 2 ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
e="$(engine)"
"$e" build -f "$ROOT/deploy/container/Dockerfile" -t "$IMAGE" "$ROOT"
echo "built $IMAGE with $e"
