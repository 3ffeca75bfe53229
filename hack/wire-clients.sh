#!/usr/bin/env bash
# Builds the grpc-go wire clients (hack/wire-clients/go/current and go/classic, the upstream
# generated code of k8s.io/kubelet; hack/wire-clients/README.md) from the Go module proxy
# into target/wire-clients/ (wire-client-go, wire-client-go-classic) and prints that
# directory on the last line of stdout. kubelet-plugin/tests/it/wire_clients.rs runs it;
# .ci/run runs it in the background first, so the test finds Go's build cache warm. Go's
# build cache makes a second run quick; concurrent runs take turns (flock).
# Usage: hack/wire-clients.sh
# Env: WIRE_CLIENTS_OUT (default target/wire-clients), GOFLAGS, GOCACHE, GOMODCACHE as for go.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") ;;
  *) die "unknown argument: $1 (try --help)" ;;
esac
need go "Go 1.26 (https://go.dev/doc/install)"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
out="${WIRE_CLIENTS_OUT:-$ROOT/target/wire-clients}"
mkdir -p "$out"
exec {lock}>"$out/.lock"
flock "$lock"
t0=$SECONDS
for module in current classic; do
  bin=wire-client-go; [[ "$module" == current ]] || bin="wire-client-go-$module"
  (cd "$ROOT/hack/wire-clients/go/$module" && go build -buildvcs=false "${GO_BUILD_FLAGS[@]}" -o "$out/$bin" .) >&2 \
    || die "go build of hack/wire-clients/go/$module failed (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"
done
echo "== wire clients: built in $((SECONDS - t0)) s" >&2
echo "$out"
