#!/usr/bin/env bash
# Builds fake-dra:dev (one image, both binaries) into the container engine (docker or
# podman, whichever answers), by one of two routes:
#   dockerfile     deploy/container/Dockerfile: builds the binaries in the Rust base image
#                  (RUST_IMAGE, pulled by the engine when missing)
#   from-binaries  hack/build-image-local.sh: our binaries built here, no base image, no
#                  registry; the OCI archives (fake-dra:dev, and busybox:1.36 that the
#                  examples run) are loaded into the engine, where hack/kind-load.sh finds them
# Default (auto): dockerfile when the base image is already in the engine or cargo is
# missing, otherwise from-binaries (nothing pulled).
# Usage: hack/build-image.sh [--image NAME:TAG] [--dockerfile|--from-binaries]
#                            [--cargo-profile release|dev] [--skip-cargo]
#   --cargo-profile, --skip-cargo: as hack/build-image-local.sh (from-binaries only)
# Env: IMAGE (default fake-dra:dev), CONTAINER_ENGINE (docker or podman),
#      RUST_IMAGE (the Dockerfile's builder; default its ARG)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
route=auto
local_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --image) IMAGE="${2:?--image needs a value}"; shift 2 ;;
    --dockerfile) route=dockerfile; shift ;;
    --from-binaries) route="from-binaries"; shift ;;
    --cargo-profile) local_args+=(--cargo-profile "${2:?--cargo-profile needs a value}"); shift 2 ;;
    --skip-cargo) local_args+=(--skip-cargo); shift ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
e="$(engine)"
dockerfile="$ROOT/deploy/container/Dockerfile"
rust_image="${RUST_IMAGE:-$(sed -nE 's/^ARG RUST_IMAGE=(.*)$/\1/p' "$dockerfile")}"
if [[ "$route" == auto ]]; then
  if "$e" image inspect "$rust_image" >/dev/null 2>&1 || ! command -v cargo >/dev/null 2>&1; then
    route=dockerfile
  else
    route="from-binaries"
    echo "the Dockerfile's base image $rust_image is not in $e: building $IMAGE from local binaries (hack/build-image-local.sh; --dockerfile pulls the base instead)"
  fi
fi
if [[ "$route" == dockerfile ]]; then
  "$e" build -f "$dockerfile" --build-arg "RUST_IMAGE=$rust_image" -t "$IMAGE" "$ROOT"
  echo "built $IMAGE with $e from $dockerfile"
  exit 0
fi
images_dir="${IMAGES_DIR:-$ROOT/target/kube/images}"
IMAGE="$IMAGE" IMAGES_DIR="$images_dir" "$ROOT/hack/build-image-local.sh" ${local_args[@]+"${local_args[@]}"}
for a in fake-dra busybox; do
  out="$("$e" load -i "$images_dir/$a.tar" 2>&1)" || die "$e load -i $images_dir/$a.tar failed: $out"
done
echo "built $IMAGE (and busybox:1.36) from local binaries, loaded into $e; next: hack/kind-load.sh"
