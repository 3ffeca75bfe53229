#!/usr/bin/env bash
# Loads the driver's image (fake-dra:dev) and busybox:1.36, which every example runs, from
# the container engine into every node of the kind cluster (nothing is pulled there).
# Build them first: hack/build-image.sh.
# Usage: hack/kind-load.sh [--image NAME:TAG] [--name CLUSTER]
# Env: IMAGE (default fake-dra:dev), CLUSTER_NAME (default kind), CONTAINER_ENGINE
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
kind_setup
clusters="$(kind_clusters)"
contains_line "$clusters" "$CLUSTER_NAME" \
  || die "no kind cluster named $CLUSTER_NAME (kind has: ${clusters:-none}); create it first: hack/kind-up.sh"
images=("$IMAGE" busybox:1.36)
for i in "${images[@]}"; do
  if ! "$ENGINE" image inspect "$i" >/dev/null 2>&1; then
    if [[ "$i" == "$IMAGE" ]]; then
      opt=""; [[ "$IMAGE" == fake-dra:dev ]] || opt=" --image $IMAGE"
      die "image $i is not in $ENGINE; build it first: hack/build-image.sh$opt"
    fi
    die "image $i (what the examples run) is not in $ENGINE; hack/build-image.sh --from-binaries builds it, or $ENGINE pull $i"
  fi
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for i in "${images[@]}"; do
  # The name a pod's image resolves to (fake-dra:dev is docker.io/library/fake-dra:dev);
  # podman names its own builds localhost/..., which no pod asks for.
  full="$(full_name "$i")"
  if [[ "$ENGINE" == podman ]]; then
    "$ENGINE" tag "$i" "$full"
    archive="$tmp/${full//[\/:]/_}.tar"
    "$ENGINE" save -o "$archive" "$full" >/dev/null
    "$KIND" load image-archive "$archive" --name "$CLUSTER_NAME"
  else
    "$KIND" load docker-image "$i" --name "$CLUSTER_NAME"
  fi
  echo "loaded $i ($full) into kind cluster $CLUSTER_NAME"
done
