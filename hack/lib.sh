#!/usr/bin/env bash
# Helpers sourced by the hack/ scripts (not run on its own).
# shellcheck disable=SC2034  # variables are used by the sourcing scripts
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLUSTER_NAME="${CLUSTER_NAME:-kind}"
IMAGE="${IMAGE:-fake-dra:dev}"

die() { echo "error: $*" >&2; exit 1; }

# The flags of every Go build of hack/ (kube-build.sh, helm.sh, promcheck.sh,
# wire-clients.sh): reproducible paths, and no DWARF generated in the compiler: the
# binaries are stripped (-s -w) or never debugged, and it takes 14 % less CPU (etcd, cold:
# 65.5 s instead of 76.0 s of user+sys; the binary is byte-for-byte the same size). Part of
# each build's stamp, so a change rebuilds.
GO_BUILD_FLAGS=(-trimpath -gcflags=all=-dwarf=false)

# need <command> <what to install>
need() {
  command -v "$1" >/dev/null 2>&1 || die "$1 not found; install $2"
}

# The container engine that answers: $CONTAINER_ENGINE, else docker, else podman. A CLI
# alone is not an engine (a docker CLI without a daemon is common): each is asked `info`.
engine() {
  local e out tried=()
  if [[ -n "${CONTAINER_ENGINE:-}" ]]; then
    need "$CONTAINER_ENGINE" "$CONTAINER_ENGINE"
    out="$(timeout 30 "$CONTAINER_ENGINE" info 2>&1)" \
      || die "CONTAINER_ENGINE=$CONTAINER_ENGINE does not answer ($CONTAINER_ENGINE info: $(tail -n 1 <<<"$out")); start it, or unset CONTAINER_ENGINE to pick docker or podman"
    echo "$CONTAINER_ENGINE"; return
  fi
  for e in docker podman; do
    command -v "$e" >/dev/null 2>&1 || { tried+=("$e: not installed"); continue; }
    if out="$(timeout 30 "$e" info 2>&1)"; then echo "$e"; return; fi
    tried+=("$e: installed, but '$e info' failed: $(tail -n 1 <<<"$out")")
  done
  local joined
  joined="$(printf '%s; ' "${tried[@]}")"
  die "no container engine answers (${joined%; }); start the Docker daemon, or install podman (apt-get install podman runc), or install Docker (https://docs.docker.com/engine/install/)"
}

# The full name containerd gives an image: fake-dra:dev -> docker.io/library/fake-dra:dev.
full_name() {
  local n="$1" first="${1%%/*}"
  if [[ "$n" != */* ]]; then n="docker.io/library/$n"
  elif [[ "$first" != *.* && "$first" != *:* && "$first" != localhost ]]; then n="docker.io/$n"; fi
  echo "$n"
}

# The kind node image hack/kind-node-image.sh builds for Kubernetes version $1 (v1.37.2).
kind_node_image() { echo "localhost/fake-dra/kind-node:$1"; }

# kind_setup: for the kind scripts. Sets KIND (kind on PATH, else ours, built from
# hack/kube/kind/go.mod into target/kube/kind/bin, cached) and ENGINE; tells kind which
# provider to use (it would take a docker CLI without a daemon); and where podman cannot set
# its default rlimits (no CAP_SYS_RESOURCE: "error setting rlimit type 7"), points podman
# at a containers.conf with limits it can set.
kind_setup() {
  ENGINE="$(engine)"
  export KIND_EXPERIMENTAL_PROVIDER="$ENGINE"
  if command -v kind >/dev/null 2>&1; then
    KIND="$(command -v kind)"
  else
    KIND="$ROOT/target/kube/kind/bin/kind"
    if command -v go >/dev/null 2>&1; then
      KUBE_OUT="$ROOT/target/kube/kind" "$ROOT/hack/kube-build.sh" kind >/dev/null \
        || die "building kind failed (KUBE_OUT=target/kube/kind hack/kube-build.sh kind)"
    fi
    [[ -x "$KIND" ]] || die "kind not found; install kind (https://kind.sigs.k8s.io/docs/user/quick-start/#installation), or Go 1.26 to build it here"
  fi
  if [[ "$ENGINE" == podman && -z "${CONTAINERS_CONF:-}" ]] && ! can_raise_limits; then
    local conf="$ROOT/target/kind/containers.conf"
    mkdir -p "${conf%/*}"
    local nofile nproc
    nofile="$(ulimit -Hn)"; nproc="$(ulimit -Hu)"
    # podman asks for nofile 1048576 by default; runc cannot even set the hard limits this
    # process has (nproc) without the capability, so both stay below them.
    if [[ "$nproc" == unlimited ]] || ((nproc > 32768)); then nproc=32768; fi
    ((nofile < 20000)) || nofile=20000
    printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n' "$nofile" "$nofile" "$nproc" "$nproc" >"$conf"
    export CONTAINERS_CONF="$conf"
  fi
}

# can_raise_limits: whether this process may raise a hard rlimit (CAP_SYS_RESOURCE), which
# also decides whether anything may lower an oom_score_adj.
can_raise_limits() { (ulimit -Hn "$(($(ulimit -Hn) + 1))") 2>/dev/null; }

# kind_clusters: the kind clusters, one a line (dies with kind's message when it cannot list).
kind_clusters() {
  local out
  out="$("$KIND" get clusters 2>&1)" || die "kind get clusters failed: $out"
  [[ "$out" == "No kind clusters found." ]] || echo "$out"
}

# local_cluster_up: whether hack/local-cluster.sh's cluster runs (one of its processes).
local_cluster_up() {
  local f p
  for f in "${LOCAL_CLUSTER_DIR:-/var/lib/fake-dra-cluster}"/run/*.pid; do
    [[ -f "$f" ]] || continue
    p="$(cat "$f")"
    [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null && return 0
  done
  return 1
}

# wait_for <what> <seconds> <command...>: runs the command (a program or a function) until it
# succeeds, once a second, until the deadline; then says what its last try exited with and
# printed, and returns 1. Checks that need a pipe are functions that capture the output
# first: never `cmd | grep -q` under pipefail (grep exits at its first match, cmd dies of
# SIGPIPE on its next write, and the pipeline fails although the match was there).
wait_for() {
  local what="$1" secs="$2"; shift 2
  local deadline=$((SECONDS + secs)) out rc=0
  while :; do
    out="$("$@" 2>&1)" && return 0 || rc=$?
    ((SECONDS < deadline)) || break
    sleep 1
  done
  echo "timed out after ${secs} s waiting for $what; the last try ($*) exited $rc and printed:" >&2
  show_output "$out" >&2
  return 1
}

# show_output <text>: the text's last 30 lines, indented, or <nothing> (for error reports).
show_output() {
  if [[ -z "$1" ]]; then echo "    <nothing>"; return; fi
  local lines
  mapfile -t lines <<<"$1"
  local n=${#lines[@]} from=0
  ((n <= 30)) || { from=$((n - 30)); echo "    ... ($from lines before)"; }
  printf '    %s\n' "${lines[@]:from}"
}

# contains_line <text> <line>: the text has that exact line (no pipe, no grep -q).
contains_line() {
  local l
  while IFS= read -r l; do [[ "$l" != "$2" ]] || return 0; done <<<"$1"
  return 1
}

# Prints the usage block (the comment lines after the shebang) of the calling script.
usage() { sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; }

# Rewrites resource.k8s.io/v1 manifests (stdin) to v1beta1 (stdout), for Kubernetes
# 1.32/1.33: the apiVersion changes and each request's `exactly:` block is flattened into the
# request (v1beta1 has the request fields directly on it). DeviceClass, opaque config, CEL
# selectors and Pods are the same in both. Needs block style, children of `exactly:`
# indented two more spaces than it (as in deploy/).
to_v1beta1() {
  # `exactly:` in block style: its fields move up one level (two spaces). In flow style on
  # one line (`exactly: {deviceClassName: c, count: 4}`): its fields become block lines at
  # the request's indentation; a flow mapping holding collections is refused by line.
  awk '
    function indent(s) { match(s, /^ */); return RLENGTH }
    BEGIN { depth = -1 }
    /^apiVersion: *resource\.k8s\.io\/v1 *$/ { print "apiVersion: resource.k8s.io/v1beta1"; next }
    {
      blank = ($0 ~ /^ *$/)
      if (depth >= 0 && !blank && indent($0) <= depth) depth = -1
      if (depth < 0 && $0 ~ /^ *exactly: *\{.*\} *$/) {
        lead = substr($0, 1, indent($0))
        body = $0
        sub(/^ *exactly: *\{/, "", body)
        sub(/\} *$/, "", body)
        if (body ~ /[][{}]/) {
          print "to_v1beta1: line " NR ": a flow-style exactly: {...} holding [ ] or { } cannot be rewritten; write it in block style: " $0 > "/dev/stderr"
          failed = 1
          exit 1
        }
        n = split(body, fields, ",")
        for (i = 1; i <= n; i++) {
          f = fields[i]
          sub(/^ */, "", f)
          sub(/ *$/, "", f)
          if (f != "") print lead f
        }
        next
      }
      if (depth < 0 && $0 ~ /^ *exactly: *$/) { depth = indent($0); next }
      if (depth >= 0 && !blank) { print substr($0, 3); next }
      print
    }
    END { if (failed) exit 1 }'
}

# The structured resource.k8s.io version the current cluster serves: v1, else v1beta1,
# else nothing (an empty line).
structured_api_version() {
  local versions
  versions="$(kubectl api-versions)" || die "kubectl cannot reach the cluster"
  if grep -qx 'resource.k8s.io/v1' <<<"$versions"; then echo v1
  elif grep -qx 'resource.k8s.io/v1beta1' <<<"$versions"; then echo v1beta1
  else echo; fi
}

# The DRA generation of the current cluster: classic (resource.k8s.io/v1alpha2 with
# ResourceClasses, 1.27-1.30), structured (v1 or v1beta1, 1.32+), or dies.
cluster_mode() {
  if [[ -n "$(structured_api_version)" ]]; then echo structured; return; fi
  local resources
  resources="$(kubectl api-resources --api-group=resource.k8s.io -o name 2>&1)" \
    || die "kubectl api-resources --api-group=resource.k8s.io failed: $resources"
  if contains_line "$resources" resourceclasses.resource.k8s.io; then
    echo classic; return
  fi
  die "the cluster serves no DRA API (resource.k8s.io v1alpha2, v1beta1 or v1; it lists: ${resources:-nothing}); see hack/kind-up.sh --help"
}

# kind_node_containers: the running kind node containers (docker's and podman's), one a line.
kind_node_containers() {
  local e
  for e in docker podman; do
    command -v "$e" >/dev/null 2>&1 || continue
    timeout 30 "$e" ps --filter label=io.x-k8s.kind.cluster --format '{{.Names}}' 2>/dev/null || true
  done
}

# cluster_mode_of <context>: cluster_mode of that kubectl context.
cluster_mode_of() {
  local ctx="$1"
  (
    kubectl() { command kubectl --context "$ctx" "$@"; }
    cluster_mode
  )
}

# Prints a structured manifest file as the current cluster takes it (v1 as is, v1beta1
# rewritten by to_v1beta1).
structured_manifest() {
  case "$(structured_api_version)" in
    v1) cat "$1" ;;
    v1beta1) to_v1beta1 <"$1" ;;
    *) die "the cluster serves neither resource.k8s.io/v1 nor v1beta1: no structured DRA (Kubernetes 1.32+)" ;;
  esac
}

# workspace_artifact <package dir> <target>: the path of that executable target (a binary,
# or a test: `it`, the one integration-test binary of each crate) exactly as
# `cargo test --workspace` builds it. The same selection as the README's test command, so
# nothing recompiles when that command ran last (any -p or --test would unify features
# differently and rebuild part of the tree); builds it when missing. Cargo's build messages
# go to stderr, the path to stdout.
workspace_artifact() {
  local dir="$1" name="$2" json exe
  json="$(cd "$ROOT" && cargo test --locked --workspace --no-run --message-format=json-render-diagnostics)" \
    || die "cargo test --workspace --no-run failed (its messages above)"
  exe="$(python3 -c '
import json, sys
want_dir, want_name = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    m = json.loads(line)
    # A binary is also built as its own unit-test harness (profile.test): not that one.
    is_test_target = "test" in m.get("target", {}).get("kind", [])
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == want_name \
            and m["manifest_path"].endswith("/" + want_dir + "/Cargo.toml") and m.get("executable") \
            and (is_test_target or not m["profile"]["test"]):
        print(m["executable"])
        break
' "$dir" "$name" <<<"$json")"
  [[ -n "$exe" && -x "$exe" ]] || die "cargo test --workspace --no-run named no executable $name of $dir/ (saw: ${exe:-nothing})"
  echo "$exe"
}

# e2e_test_exe: fake-dra-e2e's integration tests (e2e/tests/it; pick a suite with a filter:
# real_cluster::, soak::), as workspace_artifact.
e2e_test_exe() { workspace_artifact e2e it; }

# clippy_build_env: makes every later cargo build of this shell also run clippy's lints on
# the workspace's own crates, with -D warnings, as `cargo clippy --all-targets -- -D warnings`
# does: clippy-driver is rustc with clippy's lints added, so it compiles and lints in one
# pass, and the dependencies compile once, not once to check and once to build (cargo
# clippy is `cargo check` with clippy-driver as the workspace's rustc wrapper, and cargo
# passes it the lint flags in CLIPPY_ARGS, as here). Checks first that a lint breach fails
# a build this way, so a clippy that changed how it takes its flags cannot let breaches
# through. Cargo does not rebuild a crate a plain build compiled when only the wrapper
# changed: run it on a fresh target/ (CI's clean clone) or after `cargo clean`.
clippy_build_env() {
  local driver probe out
  driver="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)" \
    || die "clippy-driver not found (rustup component add clippy)"
  probe="$(mktemp -d)"
  printf 'fn main() {\n    let v: Option<u8> = None;\n    println!("{}", v.unwrap());\n}\n' >"$probe/probe.rs"
  if out="$(cd "$probe" && CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__" \
      "$driver" rustc --edition 2024 --crate-type bin -o "$probe/probe" probe.rs 2>&1)"; then
    rm -rf "$probe"
    die "clippy-driver built a program that breaks clippy::unnecessary_literal_unwrap with CLIPPY_ARGS=-D warnings; it no longer takes its flags that way: run cargo clippy instead (it printed: ${out:-nothing})"
  fi
  rm -rf "$probe"
  [[ "$out" == *unnecessary_literal_unwrap* ]] \
    || die "clippy-driver failed on the lint probe for another reason than the lint: $out"
  export RUSTC_WORKSPACE_WRAPPER="$driver"
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  echo "hack/lib.sh: helpers sourced by the other hack/ scripts (die, need, engine, kind_setup, usage, to_v1beta1, cluster_mode, ...); nothing to run"
  exit 0
fi
