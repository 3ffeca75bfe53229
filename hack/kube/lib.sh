#!/usr/bin/env bash
# Helpers for the real-Kubernetes scripts (hack/kube-build.sh, hack/local-cluster.sh,
# hack/build-image-local.sh, hack/real-k8s-demo.sh); sourced after hack/lib.sh.
# The versions live in the go.mod files of hack/kube/*/ and nowhere else.
# shellcheck disable=SC2034  # variables are used by the sourcing scripts
KUBE_MODULES="$ROOT/hack/kube"
# A Go newer than the machine's is never fetched behind our back: a pinned module that
# needs one fails with a clear message (export GOTOOLCHAIN=go1.27.3 to allow it).
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

# go_mod_version <module dir> <module path>: the version go.mod requires.
go_mod_version() {
  local v
  v="$(awk -v m="$2" '($1 == m || ($1 == "require" && $2 == m)) { print ($1 == m ? $2 : $3); exit }' "$1/go.mod")"
  [[ -n "$v" ]] || die "$1/go.mod does not require $2"
  echo "$v"
}

# Which Kubernetes: hack/kube/kubernetes (1.37, structured DRA; the default) or
# hack/kube/kubernetes-1.30 (classic DRA).
KUBE_MODULE="${KUBE_MODULE:-kubernetes}"
[[ -f "$KUBE_MODULES/$KUBE_MODULE/go.mod" ]] || die "KUBE_MODULE=$KUBE_MODULE: no $KUBE_MODULES/$KUBE_MODULE/go.mod"
export KUBE_MODULE
KUBE_VERSION="$(go_mod_version "$KUBE_MODULES/$KUBE_MODULE" k8s.io/kubernetes)"
ETCD_VERSION="$(go_mod_version "$KUBE_MODULES/etcd" go.etcd.io/etcd/server/v3)"
CONTAINERD_VERSION="$(go_mod_version "$KUBE_MODULES/containerd" github.com/containerd/containerd/v2)"
CRI_TOOLS_VERSION="$(go_mod_version "$KUBE_MODULES/cri-tools" sigs.k8s.io/cri-tools)"
# Where hack/kube-build.sh puts the binaries (one directory per Kubernetes version).
KUBE_OUT="${KUBE_OUT:-$ROOT/target/kube/$KUBE_VERSION}"
KUBE_BIN="$KUBE_OUT/bin"

# kube_minor: 37 for v1.37.2.
kube_minor() { local v="${KUBE_VERSION#v1.}"; echo "${v%%.*}"; }

# matrix_inputs_sha256: one hash over the files hack/kube/matrix-inputs names (git
# pathspecs): CI compares it with e2e/tests/it/real/observed/inputs.sha256, written when the
# whole version matrix last passed (hack/real-matrix.sh), to say whether it is due.
matrix_inputs_sha256() {
  local patterns files
  mapfile -t patterns < <(grep -v -e '^#' -e '^[[:space:]]*$' "$KUBE_MODULES/matrix-inputs")
  files="$(cd "$ROOT" && git ls-files -- "${patterns[@]}")" || die "git ls-files failed in $ROOT"
  [[ -n "$files" ]] || die "hack/kube/matrix-inputs names no file git knows"
  # shellcheck disable=SC2086  # one argument per file (paths without spaces)
  (cd "$ROOT" && sha256sum $files) | sha256sum | cut -d' ' -f1
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  echo "hack/kube/lib.sh: helpers sourced by the real-Kubernetes scripts; nothing to run"
  exit 0
fi
