#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v4/cmd/helm at the version pinned in hack/helm/go.mod) from the
# Go module proxy into target/helm/<version>/helm, unless it is already there (a stamp of
# go.mod, go.sum, the flags and the Go version; a second run does nothing), and prints its
# path on the last line of stdout (progress and timings go to stderr). The deploy checks
# (hack/ci-deploy-checks.sh) and e2e/tests/it/deploy.rs use it; so can you:
#   "$(hack/helm.sh)" template fake-dra deploy/helm/fake-dra
# Usage: hack/helm.sh [--force]   --force rebuilds even if the stamp matches
# Env: HELM_OUT (default target/helm/<version>), GOFLAGS, GOCACHE, GOMODCACHE as for go.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
force=false
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --force) force=true; shift ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
need go "Go 1.26 (https://go.dev/doc/install)"
# A Go newer than the machine's is never fetched behind our back.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
module="$ROOT/hack/helm"
version="$(awk '$1 == "helm.sh/helm/v4" { print $2; exit }' "$module/go.mod")"
[[ -n "$version" ]] || die "$module/go.mod does not require helm.sh/helm/v4"
out="${HELM_OUT:-$ROOT/target/helm/$version}"
ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$version"
# Concurrent runs (.ci/run's background build and a test) take turns; the second finds
# the stamp up to date.
mkdir -p "$out"
exec {lock}>"$out/.lock"
flock "$lock"
key="$(cat "$module/go.mod" "$module/go.sum" | sha256sum | cut -d' ' -f1) $(go version) CGO_ENABLED=0 ${GO_BUILD_FLAGS[*]} $ldflags"
if ! $force && [[ -x "$out/helm" && -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$key" ]]; then
  echo "$out/helm"
  exit 0
fi
mkdir -p "$out"
echo "== helm $version: building into $out" >&2
t0=$SECONDS
# The modules the helm command needs (not the test-only ones go.sum also lists).
(cd "$module" && go list -deps helm.sh/helm/v4/cmd/helm >/dev/null) >&2 \
  || die "go mod download failed in $module (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"
t1=$SECONDS
(cd "$module" && CGO_ENABLED=0 go build "${GO_BUILD_FLAGS[@]}" -ldflags "$ldflags" -o "$out/helm" helm.sh/helm/v4/cmd/helm) >&2 \
  || die "go build of helm failed in $module"
t2=$SECONDS
echo "$key" >"$out/.stamp"
echo "== helm $version: modules $((t1 - t0)) s, build $((t2 - t1)) s" >&2
echo "$out/helm"
