#!/usr/bin/env bash
# Runs the seed scenarios of deploy/examples against a real kind cluster and checks what
# the containers see. Needs docker or podman, kind and kubectl.
#   structured: deploy/examples/structured (1-8; rewritten to v1beta1 on 1.32/1.33), plus
#               "deletion frees the devices" and "ResourceSlice deleted by hand comes back"
#   classic:    deploy/examples (1-9)
# Usage: hack/e2e-kind.sh [--mode structured|classic] [--no-setup]
#   --mode: default structured, or with --no-setup what the current cluster serves
#   --no-setup: use the current cluster as it is; without it: kind-up --mode MODE,
#   build-image, kind-load and deploy MODE first.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
setup=true
mode=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --no-setup) setup=false; shift ;;
    --mode) mode="${2:?--mode needs a value}"; shift 2 ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
case "$mode" in ""|structured|classic) ;; *) die "unknown mode '$mode' (structured or classic)" ;; esac
need kubectl "kubectl (https://kubernetes.io/docs/tasks/tools/)"
H="$ROOT/hack"
if $setup; then
  mode="${mode:-structured}"
  "$H/kind-up.sh" --mode "$mode"; "$H/build-image.sh"; "$H/kind-load.sh"; "$H/deploy.sh" "$mode"
fi
[[ -n "$mode" ]] || mode="$(cluster_mode)"
echo "running the $mode scenarios"
if [[ "$mode" == structured ]]; then EX="$ROOT/deploy/examples/structured"; else EX="$ROOT/deploy/examples"; fi
failures=0
scenario="" scenario_failures=0 passed=0 failed=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
# Each scenario starts with run (or begin) and is counted when the next one starts.
end_scenario() {
  [[ -n "$scenario" ]] || return 0
  if ((failures > scenario_failures)); then failed=$((failed + 1)); echo "-- $scenario: FAILED"
  else passed=$((passed + 1)); echo "-- $scenario: ok"; fi
  scenario=""
}
begin() { end_scenario; scenario="$1"; scenario_failures=$failures; echo "== $1"; }

# devices NS POD [CONTAINER]: the FAKE_DEVICE_<i> ids, one a line
devices() {
  kubectl -n "$1" logs "$2" ${3:+-c "$3"} | sed -nE "s/^export FAKE_DEVICE_[0-9]+='?([^']*)'?$/\1/p"
}
envvar() { kubectl -n "$1" logs "$2" ${4:+-c "$4"} | sed -nE "s/^export $3='?([^']*)'?$/\1/p"; }
# ready NS POD: waits for the pod; when it is not Ready, shows its state and events.
ready() {
  local out
  out="$(kubectl -n "$1" wait --for=condition=Ready "pod/$2" --timeout=120s 2>&1)" && return 0
  echo "$1/$2 is not Ready: $out" >&2
  show_output "$(kubectl -n "$1" get pod "$2" -o wide 2>&1; kubectl -n "$1" get events --field-selector "involvedObject.name=$2" 2>&1)" >&2
  return 1
}
expect_count() { # NS POD N [CONTAINER]
  local n; n="$(devices "$1" "$2" "${4:-}" | sort -u | wc -l)"
  [[ "$n" == "$3" ]] || fail "$1/$2${4:+/$4}: $n distinct FAKE_DEVICE ids, want $3"
  local driver; driver="$(envvar "$1" "$2" DRA_RESOURCE_DRIVER_NAME "${4:-}")"
  [[ "$driver" == fake.resource.3-shake.com ]] \
    || fail "$1/$2: DRA_RESOURCE_DRIVER_NAME is '${driver}', want fake.resource.3-shake.com"
  [[ -n "$(envvar "$1" "$2" FAKE_NODE_NAME "${4:-}")" ]] || fail "$1/$2: FAKE_NODE_NAME missing"
}
# The example as the cluster takes it (structured: v1, or v1beta1 on 1.32/1.33).
manifest() { if [[ "$mode" == structured ]]; then structured_manifest "$EX/$1"; else cat "$EX/$1"; fi; }
run() { begin "$1"; manifest "$1" | kubectl apply -f - >/dev/null; }
cleanup() { manifest "$1" | kubectl delete -f - --wait=false >/dev/null; }
# Published inventory: ResourceSlices (structured) or NodeAllocationStates (classic).
inventory() {
  if [[ "$mode" == structured ]]; then kubectl get resourceslices -o yaml; else kubectl get nas -n fake-dra -o yaml; fi
}

run 1-two-pods-own-claims.yaml
{ ready test1 pod0 && ready test1 pod1; } || fail "test1 pods not Ready"
expect_count test1 pod0 1; expect_count test1 pod1 1
[[ "$(devices test1 pod0)" != "$(devices test1 pod1)" ]] || fail "test1: both pods got the same device: $(devices test1 pod0)"
cleanup 1-two-pods-own-claims.yaml

run 2-two-containers-share.yaml
ready test2 pod0 || fail "test2 pod not Ready"
expect_count test2 pod0 1 ctr0; expect_count test2 pod0 1 ctr1
[[ "$(devices test2 pod0 ctr0)" == "$(devices test2 pod0 ctr1)" ]] \
  || fail "test2: containers see different devices: ctr0 $(devices test2 pod0 ctr0), ctr1 $(devices test2 pod0 ctr1)"
cleanup 2-two-containers-share.yaml

run 3-global-claim-shared.yaml
{ ready test3 pod0 && ready test3 pod1; } || fail "test3 pods not Ready"
[[ "$(devices test3 pod0)" == "$(devices test3 pod1)" ]] \
  || fail "test3: pods see different devices: pod0 $(devices test3 pod0), pod1 $(devices test3 pod1)"
[[ "$(envvar test3 pod0 FAKE_NODE_NAME)" == "$(envvar test3 pod1 FAKE_NODE_NAME)" ]] \
  || fail "test3: pods on different nodes: $(envvar test3 pod0 FAKE_NODE_NAME), $(envvar test3 pod1 FAKE_NODE_NAME)"
cleanup 3-global-claim-shared.yaml

run 4-count-4.yaml
ready test4 pod0 || fail "test4 pod not Ready"; expect_count test4 pod0 4
cleanup 4-count-4.yaml

run 5-count-4-split-2.yaml
ready test5 pod0 || fail "test5 pod not Ready"; expect_count test5 pod0 8
cleanup 5-count-4-split-2.yaml

run 6-deployment-count-4-split-5.yaml
kubectl -n test6 rollout status deployment/dep0 --timeout=120s >/dev/null || fail "test6 not rolled out"
mapfile -t pods < <(kubectl -n test6 get pods -l app=test6 -o name | sed 's|^pod/||')
all=""
for p in "${pods[@]}"; do expect_count test6 "$p" 20; all+="$(devices test6 "$p")"$'\n'; done
[[ "$(grep -c . <<<"$all")" == "$(sort -u <<<"$all" | grep -c .)" ]] \
  || fail "test6: a device id is shared between replicas: $(sort <<<"$all" | uniq -d | tr '\n' ' ')"
cleanup 6-deployment-count-4-split-5.yaml

run 7-selector-model.yaml
if ready test7 pod0; then
  expect_count test7 pod0 8
  [[ "$(envvar test7 pod0 FAKE_DEVICE_MODEL)" == ULTRA_100 ]] || fail "test7: FAKE_DEVICE_MODEL is '$(envvar test7 pod0 FAKE_DEVICE_MODEL)', not ULTRA_100"
else
  [[ "$(inventory)" != *ULTRA_100* ]] || fail "test7: a node has ULTRA_100 but the pod is not Ready"
  echo "test7: no node has model ULTRA_100; the pod is Pending as expected"
fi
cleanup 7-selector-model.yaml

run 8-more-than-a-node-has.yaml
if kubectl -n test8 wait --for=condition=Ready pod/pod0 --timeout=20s >/dev/null 2>&1; then
  fail "test8: a pod asking for 9 devices became Ready"
fi
phase="$(kubectl -n test8 get pod pod0 -o jsonpath='{.status.phase}')"
[[ "$phase" == Pending ]] || fail "test8: pod is '$phase', not Pending"
cleanup 8-more-than-a-node-has.yaml

if [[ "$mode" == classic ]]; then
  run 9-immediate.yaml
  kubectl -n test9 wait --for=jsonpath='{.status.driverName}'=fake.resource.3-shake.com resourceclaim/fake --timeout=60s >/dev/null \
    || fail "test9: the Immediate claim was not allocated"
  ready test9 pod0 || fail "test9 pod not Ready"; expect_count test9 pod0 2
  cleanup 9-immediate.yaml
else
  # Deletion frees: more rounds of count 4 (split 2) than the cluster has devices for, each
  # after the previous one's namespace is gone; they all run only if deleting frees.
  names="$(kubectl get resourceslices --field-selector=spec.driver=fake.resource.3-shake.com \
    -o jsonpath='{range .items[*]}{range .spec.devices[*]}{.name}{"\n"}{end}{end}')" || die "cannot list the ResourceSlices"
  total="$(grep -c . <<<"$names" || true)"
  rounds=$(( total / 4 + 1 ))
  begin "deletion frees the devices ($total devices published, $rounds rounds of 4)"
  kubectl wait --for=delete namespace/test5 --timeout=120s >/dev/null 2>&1 || true
  for round in $(seq "$rounds"); do
    manifest 5-count-4-split-2.yaml | kubectl apply -f - >/dev/null
    ready test5 pod0 || { fail "deletion frees (round $round of $rounds): pod not Ready"; break; }
    expect_count test5 pod0 8
    manifest 5-count-4-split-2.yaml | kubectl delete -f - --wait=true --timeout=120s >/dev/null \
      || { fail "deletion frees (round $round): namespace test5 not deleted"; break; }
  done
  # A ResourceSlice deleted by hand is published again by the plugin of its node.
  begin "a deleted ResourceSlice comes back"
  # A node whose plugin publishes (the first slice's).
  node="$(kubectl get resourceslices --field-selector=spec.driver=fake.resource.3-shake.com -o jsonpath='{.items[0].spec.nodeName}')"
  sel="--field-selector=spec.nodeName=$node,spec.driver=fake.resource.3-shake.com"
  slices() { local s; s="$(kubectl get resourceslices "$sel" -o name)" || { echo 0; return; }; grep -c . <<<"$s" || true; }
  [[ "$(slices)" -ge 1 ]] || fail "no ResourceSlice of fake.resource.3-shake.com for node $node"
  kubectl delete resourceslices "$sel" --wait=true >/dev/null
  back=false
  for _ in $(seq 60); do
    if [[ "$(slices)" -ge 1 ]]; then back=true; break; fi
    sleep 1
  done
  $back || fail "the ResourceSlice of node $node was not recreated within 60 s"
fi

end_scenario
echo "e2e-kind ($mode): $passed passed, $failed failed"
if (( failures > 0 )); then die "$failures check(s) failed in $failed scenario(s)"; fi
echo "all $mode scenarios passed"
