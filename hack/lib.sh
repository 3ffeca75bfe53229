#!/usr/bin/env bash
# Helpers sourced by the hack/ scripts (not run on its own).
# shellcheck disable=SC2034  # variables are used by the sourcing scripts
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLUSTER_NAME="${CLUSTER_NAME:-kind}"
IMAGE="${IMAGE:-fake-dra:dev}"

die() { echo "error: $*" >&2; exit 1; }

# need <command> <what to install>
need() {
  command -v "$1" >/dev/null 2>&1 || die "$1 not found; install $2"
}

# The container engine: $CONTAINER_ENGINE, else docker, else podman.
engine() {
  if [[ -n "${CONTAINER_ENGINE:-}" ]]; then need "$CONTAINER_ENGINE" "$CONTAINER_ENGINE"; echo "$CONTAINER_ENGINE"; return; fi
  if command -v docker >/dev/null 2>&1; then echo docker; return; fi
  if command -v podman >/dev/null 2>&1; then echo podman; return; fi
  die "neither docker nor podman found; install Docker (https://docs.docker.com/engine/install/) or podman"
}

# Prints the usage block (the comment lines after the shebang) of the calling script.
usage() { sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; }

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  echo "hack/lib.sh: helpers sourced by the other hack/ scripts (die, need, engine, usage); nothing to run"
  exit 0
fi
