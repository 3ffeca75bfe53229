#!/usr/bin/env bash
# Builds promcheck (hack/promcheck: a /metrics scrape parsed by Prometheus' own parser,
# github.com/prometheus/prometheus/model/textparse, chosen by the Content-Type as
# Prometheus 3 chooses it) from the Go module proxy into target/promcheck/promcheck, unless
# it is already there (a stamp of go.mod, go.sum, main.go and the Go version), and prints
# its path on the last line of stdout. e2e/tests/it/metrics.rs scrapes both binaries with it:
#   "$(hack/promcheck.sh | tail -n 1)" http://127.0.0.1:8080/metrics
# Usage: hack/promcheck.sh [--force]   --force rebuilds even if the stamp matches
# Env: PROMCHECK_OUT (default target/promcheck), GOFLAGS, GOCACHE, GOMODCACHE as for go.
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
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
module="$ROOT/hack/promcheck"
out="${PROMCHECK_OUT:-$ROOT/target/promcheck}"
# Concurrent runs (.ci/run's background build and a test) take turns; the second finds
# the stamp up to date.
mkdir -p "$out"
exec {lock}>"$out/.lock"
flock "$lock"
key="$(cat "$module/go.mod" "$module/go.sum" "$module/main.go" | sha256sum | cut -d' ' -f1) $(go version) ${GO_BUILD_FLAGS[*]}"
if ! $force && [[ -x "$out/promcheck" && -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$key" ]]; then
  echo "$out/promcheck"
  exit 0
fi
mkdir -p "$out"
echo "== promcheck: building into $out" >&2
t0=$SECONDS
(cd "$module" && CGO_ENABLED=0 go build "${GO_BUILD_FLAGS[@]}" -o "$out/promcheck" .) >&2 \
  || die "go build of promcheck failed in $module (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"
echo "$key" >"$out/.stamp"
echo "== promcheck: built in $((SECONDS - t0)) s" >&2
echo "$out/promcheck"
