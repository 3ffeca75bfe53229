#!/usr/bin/env bash
# Builds the real Kubernetes components of the local cluster (hack/local-cluster.sh) from
# the Go module proxy, at the versions pinned in hack/kube/*/go.mod, into
# target/kube/<kubernetes version>/bin/:
#   kubernetes  kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl
#               (k8s.io/kubernetes, one `go build`, so shared packages compile once)
#   etcd        etcd (go.etcd.io/etcd/server/v3)
#   containerd  containerd containerd-shim-runc-v2 ctr (github.com/containerd/containerd/v2)
#   cri-tools   crictl (sigs.k8s.io/cri-tools)
#   tools       pause, ociarchive (our own, hack/kube/tools)
#   kubeadm     kubeadm (k8s.io/kubernetes, the same module: for the kind node image of
#               hack/kind-node-image.sh; not in the default groups)
#   coredns     coredns (github.com/coredns/coredns, static: the kind node image's DNS)
#   kind        kind (sigs.k8s.io/kind, for the hack/kind-*.sh scripts)
#   kwok        kwok (sigs.k8s.io/kwok/cmd/kwok, the controller that plays the kubelet of
#               fake nodes, for hack/kwok.sh)
#   kueue       kueue (sigs.k8s.io/kueue/cmd/kueue, the job queueing manager, static, for
#               hack/kueue.sh, which packs it into an image)
# kubeadm, coredns, kind, kwok and kueue are not in the default groups (the scripts that use them
# build them).
# runc and the CNI plugins are Debian's (apt-get install runc containernetworking-plugins).
# A group whose go.mod, go.sum, own .go files, flags and Go version are unchanged since its
# last build is skipped (stamp files in the bin directory), so a second run does nothing; a
# group built alike for another release (etcd, containerd, crictl, tools) is hard-linked
# from there. Go builds run at the lowest CPU priority (nice 19), so a build never slows
# the machine's other work (.ci/run starts them in the background while cargo works);
# concurrent runs take turns per group (flock on target/kube/<version>/bin/.lock-<group>). Prints timings, and while
# a group builds (13+ minutes cold for kubernetes) its progress every 30 s: the elapsed
# time, the packages compiled so far of the most there are to build, the latest.
# Usage: hack/kube-build.sh [--force] [GROUP...]   (default: all groups)
#   --force  rebuild even if the stamps match
# Env: KUBE_MODULE (kubernetes = 1.37, the default; kubernetes-1.MINOR = another release
#      line, e.g. kubernetes-1.30 = classic DRA; hack/kube-module.sh writes one),
#      KUBE_OUT (default target/kube/<version>), GOFLAGS, GOCACHE, GOMODCACHE as for go.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/hack/kube/lib.sh"
force=false
groups=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --force) force=true; shift ;;
    kubernetes|kubeadm|etcd|containerd|cri-tools|tools|coredns|kind|kwok|kueue) groups+=("$1"); shift ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
[[ ${#groups[@]} -gt 0 ]] || groups=(tools kubernetes etcd containerd cri-tools)
need go "Go 1.26 (https://go.dev/doc/install)"
mkdir -p "$KUBE_BIN"
PROGRESS_EVERY="${PROGRESS_EVERY:-30}"

# with_progress <label> <total or ""> <output file> <command...>: runs the command with its
# stderr in the file (go build -v names each package it compiles there), printing every
# $PROGRESS_EVERY s how long it has run, how many lines (packages) it wrote of the total,
# and the last one; on failure, the file's last 40 lines.
with_progress() {
  local label="$1" total="$2" out="$3" pid rc=0 t0=$SECONDS last=$SECONDS n latest
  shift 3
  "$@" 2>"$out" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 2
    if ((SECONDS - last >= PROGRESS_EVERY)); then
      last=$SECONDS
      n="$(grep -c . "$out" || true)"
      latest="$(tail -n 1 "$out")"
      echo "   $label: $((SECONDS - t0)) s, ${n}${total:+ of at most $total} packages compiled${latest:+, now $latest}"
    fi
  done
  wait "$pid" || rc=$?
  if ((rc != 0)); then
    echo "$label failed (exit $rc); its last output:" >&2
    tail -n 40 "$out" >&2
  fi
  return "$rc"
}

# in_dir <dir> <command...>: the command, run in dir (in a subshell).
in_dir() { (cd "$1" && shift && "$@"); }

# build_group <name> <module dir> <binaries> <env...> -- <go build arguments...>
# Skips the group when its stamp matches and every binary exists. One build of a group at a
# time per release directory: a second run (a CI step, while .ci/run's background build
# builds that group) waits for it, then finds the stamp up to date; groups already built
# never wait for another group's build.
build_group() {
  local lock_fd t_wait
  exec {lock_fd}>"$KUBE_BIN/.lock-$1"
  if ! flock -n "$lock_fd"; then
    echo "== $1: waiting for another hack/kube-build.sh building it ($KUBE_BIN/.lock-$1)"
    t_wait=$SECONDS
    flock "$lock_fd"
    echo "== $1: waited $((SECONDS - t_wait)) s"
  fi
  build_group_unlocked "$@"
  exec {lock_fd}>&-
}

build_group_unlocked() {
  local name="$1" dir="$2" bins="$3"; shift 3
  local envs=()
  while [[ "$1" != -- ]]; do envs+=("$1"); shift; done
  shift
  local stamp key b missing=false t0 t1 t2 label="$name"
  # kubernetes and kubeadm differ per release; the others are shared.
  [[ "$name" != kubernetes && "$name" != kubeadm ]] || label="$name $KUBE_VERSION"
  stamp="$KUBE_BIN/.stamp-$name"
  local srcs gofiles
  mapfile -t gofiles < <(find "$dir" -name '*.go' | sort)
  srcs=("$dir/go.mod" "$dir/go.sum" "${gofiles[@]}")
  key="$(cat "${srcs[@]}" 2>/dev/null | sha256sum | cut -d' ' -f1) $(go version) ${envs[*]} ${GO_BUILD_FLAGS[*]} $*"
  for b in $bins; do [[ -x "$KUBE_BIN/$b" ]] || missing=true; done
  if ! $force && ! $missing && [[ -f "$stamp" && "$(cat "$stamp")" == "$key" ]]; then
    echo "== $label: up to date ($bins)"
    return
  fi
  # etcd, containerd, crictl and the tools are the same for every Kubernetes release: the
  # binaries of another release's directory with the same stamp are copied, not rebuilt.
  local other
  if ! $force; then
    for other in "$ROOT"/target/kube/*/bin/.stamp-"$name"; do
      [[ -f "$other" && "$other" != "$stamp" && "$(cat "$other")" == "$key" ]] || continue
      missing=false
      for b in $bins; do [[ -x "$(dirname "$other")/$b" ]] || missing=true; done
      $missing && continue
      # Hard links: the same file for every release (a copy across file systems).
      for b in $bins; do ln -f "$(dirname "$other")/$b" "$KUBE_BIN/$b" 2>/dev/null || cp -f "$(dirname "$other")/$b" "$KUBE_BIN/$b"; done
      echo "$key" >"$stamp"
      echo "== $label: copied from $(dirname "$other") (same go.mod, flags and Go)"
      return
    done
  fi
  echo "== $label: building $bins"
  t0=$SECONDS
  local out total
  out="$(mktemp)"
  # -x: each module fetched is a line of progress.
  with_progress "$name: go mod download" "" "$out" in_dir "$dir" go mod download -x \
    || die "$name: go mod download failed in $dir (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"
  t1=$SECONDS
  # The packages there are to build, at most (those in the build cache are not rebuilt).
  total="$(in_dir "$dir" env ${envs[@]+"${envs[@]}"} go list -deps "$@" 2>/dev/null | grep -c .)" || total=""
  # -v: each package compiled is a line of progress.
  with_progress "$name: go build" "$total" "$out" \
    in_dir "$dir" env ${envs[@]+"${envs[@]}"} nice -n 19 go build -v "${GO_BUILD_FLAGS[@]}" -o "$KUBE_BIN/" "$@" \
    || die "$name: go build failed in $dir"
  rm -f "$out"
  t2=$SECONDS
  echo "$key" >"$stamp"
  echo "== $label: modules $((t1 - t0)) s, build $((t2 - t1)) s"
}

total0=$SECONDS
for g in "${groups[@]}"; do
  case "$g" in
    tools)
      # Static: pause runs alone in an otherwise empty image.
      build_group tools "$KUBE_MODULES/tools" "pause ociarchive" CGO_ENABLED=0 -- \
        -ldflags "-s -w" ./pause ./ociarchive ;;
    kubernetes|kubeadm)
      v="$KUBE_VERSION"; minor="$(kube_minor)"
      ldflags="-s -w"
      for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
      done
      if [[ "$g" == kubeadm ]]; then
        build_group kubeadm "$KUBE_MODULES/$KUBE_MODULE" kubeadm -- \
          -ldflags "$ldflags" k8s.io/kubernetes/cmd/kubeadm
        continue
      fi
      build_group kubernetes "$KUBE_MODULES/$KUBE_MODULE" \
        "kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl" -- \
        -ldflags "$ldflags" \
        k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
        k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl ;;
    etcd)
      build_group etcd "$KUBE_MODULES/etcd" "etcd" -- -ldflags "-s -w" . ;;
    containerd)
      # no_btrfs: the btrfs snapshotter needs the btrfs C headers, and we use overlayfs.
      build_group containerd "$KUBE_MODULES/containerd" "containerd containerd-shim-runc-v2 ctr" -- \
        -tags no_btrfs -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
        github.com/containerd/containerd/v2/cmd/containerd \
        github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
        github.com/containerd/containerd/v2/cmd/ctr ;;
    coredns)
      build_group coredns "$KUBE_MODULES/coredns" coredns CGO_ENABLED=0 -- \
        -ldflags "-s -w" . ;;
    kind)
      build_group kind "$KUBE_MODULES/kind" kind -- -ldflags "-s -w" sigs.k8s.io/kind ;;
    kwok)
      build_group kwok "$KUBE_MODULES/kwok" kwok -- -ldflags "-s -w" sigs.k8s.io/kwok/cmd/kwok ;;
    kueue)
      # Static (it runs alone in an image, hack/kueue.sh); the version as Kueue's Makefile
      # sets it (LD_FLAGS: sigs.k8s.io/kueue/pkg/version.GitVersion).
      v="$(go_mod_version "$KUBE_MODULES/kueue" sigs.k8s.io/kueue)"
      build_group kueue "$KUBE_MODULES/kueue" kueue CGO_ENABLED=0 -- \
        -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$v" sigs.k8s.io/kueue/cmd/kueue ;;
    cri-tools)
      build_group cri-tools "$KUBE_MODULES/cri-tools" "crictl" -- \
        -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRI_TOOLS_VERSION" \
        sigs.k8s.io/cri-tools/cmd/crictl ;;
  esac
done
echo "kubernetes $KUBE_VERSION, etcd $ETCD_VERSION, containerd $CONTAINERD_VERSION, crictl $CRI_TOOLS_VERSION in $KUBE_BIN ($((SECONDS - total0)) s)"
