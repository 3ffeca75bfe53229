#!/usr/bin/env bash
# The version matrix on real components. For each Kubernetes release line of hack/kube/
# (or each RELEASE named): builds its components (cached: hack/kube-build.sh), brings up
# hack/local-cluster.sh's cluster with what that release needs turned on, deploys the
# release's overlay and runs the seed demo (hack/real-k8s-demo.sh), then
#   structured (1.32+): the real-cluster suite (e2e/tests/it/real_cluster.rs) on a fresh
#     cluster, compared with the release's record e2e/tests/it/real/observed/1.MINOR.txt
#     (a scenario whose feature gate a default cluster of the release has off records
#     that it does not apply);
#   classic (1.27-1.30): the seed scenarios of deploy/examples (hack/e2e-kind.sh
#     --no-setup) on the demo's cluster;
# and tears the cluster down. Ends with a table (release, demo, scenarios passed / failed
# / not applicable, minutes) and exits 0 only if everything passed; when every release
# line ran and passed, it writes e2e/tests/it/real/observed/inputs.sha256 (see
# hack/kube/matrix-inputs). Logs and each release's results go to target/real-matrix/.
# Needs root.
# Usage: hack/real-matrix.sh [--skip-build] [--demo-only] [--record] [--lock FILE] [RELEASE...]
#   RELEASE       1.27 ... 1.37 (default: every release line of hack/kube/, oldest first);
#                 1.34+DRADeviceTaints[+GATE...] runs that release with those gates on
#                 (KUBE_FEATURE_GATES for it alone: not recorded; compared with
#                 the emulator started with the same gates, when it models them)
#   --skip-build  use the binaries and images already built (no go or cargo build)
#   --demo-only   the seed demo only
#   --record      rewrite each structured release's observed file instead of comparing
#   --lock FILE   hold FILE (flock) while a release's clusters run, released between
#                 releases (for machines several people take turns on)
# The matrix runs the e2e test executable `cargo test --workspace` builds (built first when
# stale) and the binaries next to it.
# Env: KUBE_FEATURE_GATES (more gates on every component: such a run is not
#      recorded, and is compared with the emulator as above), CARGO_TARGET_DIR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
# The gates asked for on the command line's environment apply to every release.
KUBE_FEATURE_GATES_ALL="${KUBE_FEATURE_GATES:-}"
build=true
suite=true
record=false
lock=""
releases=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --skip-build) build=false; shift ;;
    --demo-only) suite=false; shift ;;
    --record) record=true; shift ;;
    --lock) lock="${2:?--lock needs a file}"; shift 2 ;;
    1.[0-9]*) releases+=("$1"); shift ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
[[ "$(id -u)" == 0 ]] || die "must run as root (hack/local-cluster.sh mounts and makes network interfaces)"

# module_of <1.MINOR>: the hack/kube module of that release line.
module_of() {
  if [[ -f "$ROOT/hack/kube/kubernetes-$1/go.mod" ]]; then echo "kubernetes-$1"; return; fi
  local v
  v="$(awk '$1 == "k8s.io/kubernetes" || ($1 == "require" && $2 == "k8s.io/kubernetes") { print ($1 == "require" ? $3 : $2); exit }' "$ROOT/hack/kube/kubernetes/go.mod")"
  [[ "$v" == "v$1."* ]] && { echo kubernetes; return; }
  die "no release line $1 in hack/kube/ (hack/kube-module.sh v$1.N writes one)"
}
all_releases=false
if [[ ${#releases[@]} -eq 0 ]]; then
  all_releases=true
  mapfile -t releases < <(
    for d in "$ROOT"/hack/kube/kubernetes-1.*/; do d="${d%/}"; echo "${d##*-}"; done
    v="$(KUBE_MODULE=kubernetes bash -c "source '$ROOT/hack/lib.sh'; source '$ROOT/hack/kube/lib.sh'; echo \$KUBE_VERSION")"
    v="${v#v}"; echo "${v%.*}"
  )
  mapfile -t releases < <(printf '%s\n' "${releases[@]}" | sort -t. -k2,2n -u)
fi
for r in "${releases[@]}"; do module_of "${r%%+*}" >/dev/null; done

OUT="${CARGO_TARGET_DIR:-$ROOT/target}/real-matrix"
mkdir -p "$OUT"
t_all=$SECONDS

# The driver as `cargo test --workspace` (or `--no-run`) built it: the demo's images are
# packed from target/debug, the suite runs the e2e test executable (e2e_test_exe, built
# when missing; it packs the binaries next to it).
target="${CARGO_TARGET_DIR:-$ROOT/target}"
exe=""
if $build || $suite; then
  exe="$(e2e_test_exe)"
  [[ -x "$target/debug/fake-dra-kubelet-plugin" ]] || die "no $target/debug/fake-dra-kubelet-plugin after cargo test --workspace --no-run"
fi
if $build; then
  "$ROOT/hack/build-image-local.sh" --cargo-profile dev --skip-cargo
fi
if $suite; then
  echo "== the suite: $exe"
fi

# take_lock / drop_lock: the --lock file, held around each release's clusters.
take_lock() {
  [[ -n "$lock" ]] || return 0
  exec {lock_fd}>"$lock"
  echo "== waiting for $lock"
  flock "$lock_fd"
}
drop_lock() {
  [[ -n "$lock" ]] || return 0
  flock -u "$lock_fd"
  exec {lock_fd}>&-
}

# classic_scenarios <log>: hack/e2e-kind.sh on the running cluster; prints "passed failed".
classic_scenarios() {
  local env rc=0
  env="$("$ROOT/hack/local-cluster.sh" env)"
  (
    eval "$env"
    export KUBECONFIG PATH="$KUBE_BIN:$PATH"
    "$ROOT/hack/e2e-kind.sh" --no-setup --mode classic
  ) >"$1" 2>&1 || rc=$?
  # One "== <example>" line per scenario, "FAIL: <ns>..." lines under it for its checks.
  awk -v rc="$rc" '
    /^== / { n++; failed[n] = 0 }
    /^FAIL: / { if (n > 0) failed[n] = 1 }
    END { f = 0; for (i = 1; i <= n; i++) f += failed[i]; if (rc != 0 && f == 0) f = 1; print n - f, f }' "$1"
}

declare -A demo_of passed_of failed_of na_of minutes_of note_of
status=0
for r in "${releases[@]}"; do
  export KUBE_MODULE
  KUBE_MODULE="$(module_of "${r%%+*}")"
  minor="${r%%+*}"
  minor="${minor#1.}"
  gates="${KUBE_FEATURE_GATES_ALL:-}"
  if [[ "$r" == *+* ]]; then
    extra="${r#*+}"
    extra="${extra//+/=true,}=true"
    gates="${gates:+$gates,}$extra"
  fi
  export KUBE_FEATURE_GATES="$gates"
  mode=structured; ((minor > 30)) || mode=classic
  log="$OUT/$r"
  mkdir -p "$log"
  t0=$SECONDS
  echo "== Kubernetes $r ($KUBE_MODULE, $mode DRA${gates:+, gates $gates})"
  if $build; then
    "$ROOT/hack/kube-build.sh" >"$log/build.log" 2>&1 || {
      demo_of[$r]="build failed"; note_of[$r]="see $log/build.log"; status=1
      minutes_of[$r]=$(( (SECONDS - t0 + 30) / 60 )); continue
    }
  fi
  take_lock
  demo_args=(--skip-build)
  [[ "$mode" == structured ]] || demo_args+=(--keep)
  if "$ROOT/hack/real-k8s-demo.sh" "${demo_args[@]}" >"$log/demo.log" 2>&1; then
    demo_of[$r]=passed
  else
    demo_of[$r]=FAILED; status=1
  fi
  passed_of[$r]=-; failed_of[$r]=-; na_of[$r]=-
  if [[ "$mode" == classic ]]; then
    if [[ "${demo_of[$r]}" == passed ]]; then
      read -r "passed_of[$r]" "failed_of[$r]" < <(classic_scenarios "$log/scenarios.log")
      na_of[$r]=0
      [[ "${failed_of[$r]}" == 0 ]] || status=1
    fi
    "$ROOT/hack/local-cluster.sh" down >>"$log/demo.log" 2>&1 || true
    [[ "${demo_of[$r]}" == passed ]] || note_of[$r]="see $log/demo.log"
  elif $suite; then
    results="$log/results.tsv"
    rm -f "$results"
    envs=(FAKE_DRA_REQUIRE_REAL_K8S=1 "FAKE_DRA_REAL_RESULTS=$results")
    ! $record || envs+=(FAKE_DRA_RECORD_REAL_CLUSTER=1)
    rc=0
    (cd "$ROOT/e2e" && env "${envs[@]}" "$exe" --exact real_cluster::scenarios_on_the_real_cluster --nocapture) \
      >"$log/suite.log" 2>&1 || rc=$?
    ((rc == 0)) || { status=1; note_of[$r]="the suite failed; see $log/suite.log"; }
    if [[ -f "$results" ]]; then
      passed_of[$r]="$(awk -F'\t' '$2 == "passed"' "$results" | wc -l)"
      failed_of[$r]="$(awk -F'\t' '$2 == "failed"' "$results" | wc -l)"
      na_of[$r]="$(awk -F'\t' '$2 == "not applicable"' "$results" | wc -l)"
    else
      note_of[$r]="the suite wrote no results; see $log/suite.log"
    fi
  fi
  drop_lock
  minutes_of[$r]="$(awk -v s=$((SECONDS - t0)) 'BEGIN { printf "%.1f", s / 60 }')"
  echo "   demo ${demo_of[$r]}, scenarios passed ${passed_of[$r]}, failed ${failed_of[$r]}, not applicable ${na_of[$r]} (${minutes_of[$r]} min)"
done

{
  echo
  printf '%-8s %-10s %-8s %-8s %-16s %-6s %s\n' release demo passed failed "not applicable" min note
  for r in "${releases[@]}"; do
    printf '%-8s %-10s %-8s %-8s %-16s %-6s %s\n' "$r" "${demo_of[$r]:-}" "${passed_of[$r]:--}" "${failed_of[$r]:--}" "${na_of[$r]:--}" "${minutes_of[$r]:-}" "${note_of[$r]:-}"
  done
  echo "total: $(( (SECONDS - t_all) / 60 )) min $(( (SECONDS - t_all) % 60 )) s; logs in $OUT"
} | tee "$OUT/summary.txt"
# Every release line passed, on default clusters: CI need not run the matrix again until
# one of hack/kube/matrix-inputs changes (hack/ci-real-k8s.sh --matrix auto).
if ((status == 0)) && $all_releases && $suite && [[ -z "$KUBE_FEATURE_GATES_ALL" ]]; then
  (source "$ROOT/hack/kube/lib.sh" && matrix_inputs_sha256) >"$ROOT/e2e/tests/it/real/observed/inputs.sha256"
  echo "wrote e2e/tests/it/real/observed/inputs.sha256 (the matrix's inputs as they passed)"
fi
exit "$status"
