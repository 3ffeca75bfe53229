#!/usr/bin/env bash
# Fails when deploy/crds/*.yaml differs from what the Rust types generate.
# Usage: hack/check-crds.sh [--write]   (--write regenerates the files instead)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h|--help) sed -n 2,3p "$0" | sed 's/^# //'; exit 0 ;;
  --write) exec cargo run -q -p fake-dra-crds --bin crdgen ;;
  "") exec cargo run -q -p fake-dra-crds --bin crdgen -- --check ;;
  *) echo "unknown argument: $1 (try --help)" >&2; exit 2 ;;
esac
