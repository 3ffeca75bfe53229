#!/usr/bin/env bash
# The step table of CI (.ci/run, hack/ci-*.sh; docs/ci.md), sourced after hack/lib.sh.
#
#   ci_table_init                 once per script: the outermost script owns the table
#                                 ($FAKE_DRA_CI_TABLE, inherited by the scripts it runs) and
#                                 prints it when it exits, passed or failed
#   ci_step NAME [OPTIONS] -- COMMAND...
#                                 runs one step, times it and adds its row
#     --rust                      a cargo step: counts the crates it compiled; cold when it
#                                 compiled 100 or more (the dependencies, not just ours)
#     --go                        a step that waits for the Go builds: cold when the Go
#                                 build cache was empty when the table began
#     --retry-once                on failure (a limit overrun too), one more try, shown as
#                                 such in the table (for the steps on a real cluster, which
#                                 a loaded machine can slow past a deadline)
#     --limit SECONDS             how long the step may run (default 1500, --go steps 2400):
#                                 past it the step is stopped (TERM, then KILL 30 s later, to
#                                 its whole process group) and fails saying so. A hung step
#                                 once ran silently into CI's own 90-minute limit.
#     --after-overrun FUNCTION    run after the step was stopped at its limit (e.g. to take
#                                 down the cluster a killed step left, before the retry)
#     --inputs PATHSPEC...        git pathspecs the step depends on (hack/, .ci/, Cargo.lock
#                                 and the Rust and Go versions always count too): when they
#                                 are exactly as when the step last passed on this machine,
#                                 it is skipped with a line naming the hash they matched.
#                                 A fresh machine has no record, so it runs everything;
#                                 FAKE_DRA_CI_SKIP=0 runs everything anyway.
#   ci_row NAME SECONDS STATE OUTCOME
#                                 adds a row for work done elsewhere (the background Go
#                                 builds)
# Env: FAKE_DRA_CI_TABLE (the rows; set by ci_table_init), FAKE_DRA_CI_SKIP (0: never
#      skip), FAKE_DRA_CI_STATE (where the passes are recorded; default
#      ~/.cache/fake-dra-ci).
# shellcheck disable=SC2034  # variables are used by the sourcing scripts

CI_TABLE_OWNER=false
CI_STATE_DIR="${FAKE_DRA_CI_STATE:-${XDG_CACHE_HOME:-$HOME/.cache}/fake-dra-ci}"

ci_table_init() {
  if [[ -n "${FAKE_DRA_CI_TABLE:-}" && -f "$FAKE_DRA_CI_TABLE" ]]; then return; fi
  CI_TABLE_OWNER=true
  FAKE_DRA_CI_TABLE="$(mktemp "${TMPDIR:-/tmp}/fake-dra-ci-table.XXXXXX")"
  export FAKE_DRA_CI_TABLE
  export FAKE_DRA_CI_T0="$SECONDS"
  # The Go build cache at the start: a fresh machine's is empty (or missing).
  local gocache size=0
  if command -v go >/dev/null 2>&1; then
    gocache="$(go env GOCACHE 2>/dev/null || true)"
    [[ ! -d "$gocache" ]] || size="$(du -sm "$gocache" 2>/dev/null | cut -f1)"
  fi
  if ((size < 100)); then export FAKE_DRA_CI_GO_CACHE=cold; else export FAKE_DRA_CI_GO_CACHE=warm; fi
  echo "== CI table: Go build cache $FAKE_DRA_CI_GO_CACHE at the start (${size} MiB)"
}

ci_row() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$FAKE_DRA_CI_TABLE"
}

# ci_inputs_key <pathspec...>: a hash of the files' contents (committed, changed and new),
# hack/, .ci/, Cargo.lock and the toolchains.
ci_inputs_key() {
  local specs=("$@" hack .ci Cargo.lock)
  {
    git -C "$ROOT" ls-files -s -- "${specs[@]}"
    git -C "$ROOT" diff HEAD -- "${specs[@]}"
    git -C "$ROOT" ls-files -z -o --exclude-standard -- "${specs[@]}" \
      | (cd "$ROOT" && xargs -0 -r sha256sum)
    rustc -Vv 2>&1 || true
    go version 2>&1 || true
  } | sha256sum | cut -c1-16
}

# ci_slug <name>: the step's file name in $CI_STATE_DIR.
ci_slug() { local s="${1//[^A-Za-z0-9.]/-}"; echo "${s,,}"; }

ci_step() {
  local name="$1" kind="" retry=false inputs=() has_inputs=false limit="" after_overrun=""
  shift
  while [[ $# -gt 0 && "$1" != -- ]]; do
    case "$1" in
      --rust) kind=rust; shift ;;
      --go) kind=go; shift ;;
      --retry-once) retry=true; shift ;;
      --limit)
        [[ "${2:-}" =~ ^[0-9]+$ ]] || die "ci_step $name: --limit needs seconds, not '${2:-}'"
        limit="$2"; shift 2 ;;
      --after-overrun) after_overrun="${2:?ci_step $name: --after-overrun needs a function}"; shift 2 ;;
      --inputs)
        has_inputs=true; shift
        while [[ $# -gt 0 && "$1" != -- && "$1" != --* ]]; do inputs+=("$1"); shift; done ;;
      *) die "ci_step $name: unknown option $1" ;;
    esac
  done
  [[ "${1:-}" == -- ]] || die "ci_step $name: no -- before the command"
  shift
  [[ -n "${FAKE_DRA_CI_TABLE:-}" ]] || ci_table_init

  local key="" stamp
  stamp="$CI_STATE_DIR/$(ci_slug "$name")"
  if $has_inputs; then
    key="$(ci_inputs_key "${inputs[@]}")"
    if [[ "${FAKE_DRA_CI_SKIP:-1}" != 0 && -f "$stamp" && "$(cat "$stamp")" == "$key" ]]; then
      echo "== SKIPPED $name: its inputs (${inputs[*]}, hack/, .ci/, Cargo.lock, toolchains)"
      echo "   hash to $key, as when it last passed on this machine ($stamp; FAKE_DRA_CI_SKIP=0 runs it)"
      ci_row "$name" 0 - "skipped: inputs $key as when it last passed"
      return 0
    fi
  fi

  local t0=$SECONDS rc=0 why="" log first="" state="-" tries=1
  log="$(mktemp "${TMPDIR:-/tmp}/fake-dra-ci-step.XXXXXX")"
  echo "== $name"
  if [[ -z "$limit" ]]; then
    limit=1500
    [[ "$kind" != go ]] || limit=2400
  fi
  while :; do
    ci_run_limited "$name" "$limit" "$kind" "$log" "$@" && rc=0 || rc=$?
    why="exit $rc"
    if [[ -f "$log.over" ]]; then
      rm -f "$log.over"
      why="over its limit of $limit s"
      [[ -z "$after_overrun" ]] || "$after_overrun"
    fi
    if ((rc != 0)) && $retry && ((tries == 1)); then
      first="first try $why after $((SECONDS - t0)) s"
      echo "== $name FAILED ($why after $((SECONDS - t0)) s); trying once more (the table reports the retry)"
      tries=2
      continue
    fi
    break
  done
  local secs=$((SECONDS - t0)) outcome
  case "$kind" in
    rust)
      local n
      n="$(grep -cE '^ +(Compiling|Checking) ' "$log" || true)"
      if ((n >= 100)); then state="cold ($n crates)"; else state="warm ($n crates)"; fi ;;
    go) state="Go cache ${FAKE_DRA_CI_GO_CACHE:-?}" ;;
  esac
  rm -f "$log"
  if ((rc == 0)); then
    outcome=passed
    [[ -z "$first" ]] || outcome="passed on retry ($first)"
    if $has_inputs; then mkdir -p "$CI_STATE_DIR" && echo "$key" >"$stamp"; fi
  else
    outcome="FAILED ($why)"
    [[ -z "$first" ]] || outcome="FAILED twice ($first, then $why)"
  fi
  ci_row "$name" "$secs" "$state" "$outcome"
  echo "== $name: $outcome, $secs s"
  return "$rc"
}

# ci_run_limited NAME LIMIT KIND LOG COMMAND...: runs COMMAND (a function too) in a
# process group of its own, its output also into LOG for a rust step, and stops the
# group when it runs past LIMIT seconds (or when this script is interrupted); its exit
# status.
ci_run_limited() {
  local name="$1" limit="$2" kind="$3" log="$4" pid dog rc=0
  shift 4
  set -m # job control: the background job below leads its own process group
  if [[ "$kind" == rust ]]; then
    { (set -e; "$@") 2>&1 | tee "$log"; exit "${PIPESTATUS[0]}"; } &
  else
    (set -e; "$@") &
  fi
  pid=$!
  (
    sleep "$limit"
    echo "== $name: still running after its limit of $limit s (ci_step --limit); stopping it"
    : >"$log.over"
    kill -TERM -- "-$pid" 2>/dev/null || true
    sleep 30
    kill -KILL -- "-$pid" 2>/dev/null || true
  ) &
  dog=$!
  set +m
  trap 'kill -TERM -- "-$pid" "-$dog" 2>/dev/null; exit 130' INT TERM
  wait "$pid" || rc=$?
  trap - INT TERM
  kill -TERM -- "-$dog" 2>/dev/null || true
  wait "$dog" 2>/dev/null || true
  return "$rc"
}

# ci_apt_install <package...>: installs the Debian packages that are missing (and says
# which, or that none was).
ci_apt_install() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if ((${#missing[@]} == 0)); then
    echo "installed already: $*"
    return 0
  fi
  echo "installing: ${missing[*]}"
  apt-get update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed"
}

# ci_go_rows <log>: a row per Go build of the background build's log (what each cost, or
# that it was up to date), for the table.
ci_go_rows() {
  [[ -f "$1" && -n "${FAKE_DRA_CI_TABLE:-}" ]] || return 0
  local line re_built='^== (.+): modules ([0-9]+) s, build ([0-9]+) s' re_one='^== (.+): built in ([0-9]+) s'
  local re_cached='^== (.+): (up to date|copied from).*'
  while IFS= read -r line; do
    if [[ "$line" =~ $re_built ]]; then
      ci_row "  Go (background): ${BASH_REMATCH[1]}" "$((BASH_REMATCH[2] + BASH_REMATCH[3]))" \
        "Go cache ${FAKE_DRA_CI_GO_CACHE:-?}" "built (modules ${BASH_REMATCH[2]} s)"
    elif [[ "$line" =~ $re_one ]]; then
      ci_row "  Go (background): ${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "Go cache ${FAKE_DRA_CI_GO_CACHE:-?}" built
    elif [[ "$line" =~ $re_cached ]]; then
      ci_row "  Go (background): ${BASH_REMATCH[1]}" 0 - "${BASH_REMATCH[2]}"
    fi
  done <"$1"
}

# ci_table_print: the rows so far and the total, as a Markdown table (also on failure).
ci_table_print() {
  [[ -n "${FAKE_DRA_CI_TABLE:-}" && -f "$FAKE_DRA_CI_TABLE" ]] || return 0
  local total=$((SECONDS - ${FAKE_DRA_CI_T0:-0}))
  echo
  echo "== CI steps ($(nproc) cores; budget: cold <= 45 min, warm <= 25 min; docs/ci.md)"
  echo "| step | seconds | cache | outcome |"
  echo "| --- | ---: | --- | --- |"
  local name secs state outcome
  while IFS=$'\t' read -r name secs state outcome; do
    echo "| $name | $secs | $state | $outcome |"
  done <"$FAKE_DRA_CI_TABLE"
  echo "| **total** | **$total** | | |"
  echo "== total: $total s ($((total / 60)) min $((total % 60)) s)"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  echo "hack/ci-lib.sh: the CI step table (ci_table_init, ci_step, ci_row, ci_table_print), sourced by .ci/run and hack/ci-*.sh; nothing to run"
  exit 0
fi
