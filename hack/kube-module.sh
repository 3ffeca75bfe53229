#!/usr/bin/env bash
# Writes the go.mod/go.sum of a Kubernetes release line for hack/kube-build.sh: a module
# that requires k8s.io/kubernetes at VERSION and replaces each staging module it names
# (k8s.io/api, k8s.io/client-go, ...: k8s.io/kubernetes's own go.mod points them at
# ./staging, which a dependency cannot use) by its published v0.MINOR.PATCH release, with
# the six binaries as tool directives; then `go mod tidy`. The module goes to
# hack/kube/kubernetes-1.MINOR (hack/kube/kubernetes, the default, holds the newest line).
# Prints what the Go module proxy answered when it does not serve VERSION.
# Usage: hack/kube-module.sh VERSION [DIR]      e.g. hack/kube-module.sh v1.35.4
set -euo pipefail
source "$(dirname "$0")/lib.sh"
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  v1.*.*) version="$1" ;;
  *) die "usage: hack/kube-module.sh VERSION [DIR] (e.g. v1.35.4; try --help)" ;;
esac
rest="${version#v1.}"
minor="${rest%%.*}"
patch="${rest#*.}"
[[ "$minor" =~ ^[0-9]+$ && "$patch" =~ ^[0-9]+$ ]] || die "not a release version: $version"
dir="${2:-$ROOT/hack/kube/kubernetes-1.$minor}"
need go "Go 1.26 (https://go.dev/doc/install)"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

info="$(cd /tmp && go mod download -json "k8s.io/kubernetes@$version" 2>&1)" \
  || die "the Go module proxy ($(go env GOPROXY)) does not serve k8s.io/kubernetes@$version:"$'\n'"$info"
gomod="$(sed -nE 's/^\s*"GoMod": "(.*)",?$/\1/p' <<<"$info")"
[[ -f "$gomod" ]] || die "go mod download named no go.mod for k8s.io/kubernetes@$version:"$'\n'"$info"
# The staging modules: the `k8s.io/X => ./staging/src/k8s.io/X` replacements.
mapfile -t staging < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$gomod" | sort -u)
[[ ${#staging[@]} -gt 0 ]] || die "$gomod replaces no staging module: not a k8s.io/kubernetes go.mod?"

mkdir -p "$dir"
{
  cat <<EOF
// Kubernetes $version for the local real cluster (hack/kube-build.sh, hack/local-cluster.sh,
// hack/real-matrix.sh), written by hack/kube-module.sh: k8s.io/kubernetes with each staging
// module it names replaced by its published v0.$minor.$patch release. go 1.24 for the tool
// directives (the k8s.io/kubernetes module asks for $(awk '$1 == "go" { print $2; exit }' "$gomod")).
module fake-dra.local/hack/kube/$(basename "$dir")

go 1.24.0

require k8s.io/kubernetes $version

replace (
EOF
  for m in "${staging[@]}"; do printf '\t%s => %s v0.%s.%s\n' "$m" "$m" "$minor" "$patch"; done
  cat <<'EOF'
)

tool (
	k8s.io/kubernetes/cmd/kube-apiserver
	k8s.io/kubernetes/cmd/kube-controller-manager
	k8s.io/kubernetes/cmd/kube-proxy
	k8s.io/kubernetes/cmd/kube-scheduler
	k8s.io/kubernetes/cmd/kubectl
	k8s.io/kubernetes/cmd/kubelet
)
EOF
} >"$dir/go.mod"
rm -f "$dir/go.sum"
t0=$SECONDS
(cd "$dir" && go mod tidy) || die "go mod tidy failed in $dir (a staging module without a v0.$minor.$patch release?)"
echo "wrote $dir/go.mod ($version, ${#staging[@]} staging modules at v0.$minor.$patch; go mod tidy $((SECONDS - t0)) s)"
