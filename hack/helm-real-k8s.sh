#!/usr/bin/env bash
# The Helm chart on a real cluster (hack/local-cluster.sh, Kubernetes 1.37.2): on a fresh
# one-node cluster, with the images hack/build-image-local.sh built,
#  1. a bad value is refused before anything is installed (kubeletPlugin.profile=fpga);
#  2. helm install fake-dra deploy/helm/fake-dra -n fake-dra --create-namespace
#     --set image.tag=dev --wait; the node's ResourceSlice appears;
#  3. a second install is refused: the same release name by helm, another release name by
#     the chart (it names the release that owns the driver);
#  4. the seed demo (hack/demo.sh) runs on it: pod0 sees 8 distinct devices; the plugin's
#     /metrics, through the chart's metrics Service, answers in OpenMetrics;
#  4b. the opt-ins: helm upgrade --set kubeletPlugin.deviceMetadata=true,
#     kubeletPlugin.seamlessUpgrade=true, its rollout sampled every 0.2 s: two plugin pods
#     side by side at some point (maxSurge 1), the node's ResourceSlice in every sample;
#     then a pod prints the device metadata file of its claim
#     (deploy/examples/structured/features/device-metadata.yaml) where upstream's layout
#     puts it (the times are printed);
#  5. helm uninstall leaves nothing of the release: no object labelled with it in any
#     namespace, no CRD, class, cluster role, admission policy, and (after the kubelet's
#     wiping delay) no ResourceSlice of the driver; the CRDs are templates of the chart, so
#     they go with the release (crds.keep=true would keep them);
#  6. into a namespace holding the kustomize install (hack/deploy.sh structured), helm
#     install is refused with the chart's message, and nothing of it is changed.
# Tears the cluster down at the end (also on failure). CI runs it after the real-cluster
# suite (hack/ci-real-k8s.sh). Needs root.
# Usage: hack/helm-real-k8s.sh [--keep]
#   --keep  leave the cluster running (hack/local-cluster.sh down removes it)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/hack/kube/lib.sh"
keep=false
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --keep) keep=true; shift ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
[[ "$(id -u)" == 0 ]] || die "must run as root (hack/local-cluster.sh mounts and makes network interfaces)"
[[ -x "$KUBE_BIN/kube-apiserver" ]] || die "no Kubernetes binaries in $KUBE_BIN: run hack/kube-build.sh"
[[ -f "$ROOT/target/kube/images/fake-dra.tar" ]] || die "no fake-dra image archive: run hack/build-image-local.sh"
NODE_NAME="${NODE_NAME:-fake-dra-node}"
export NODE_NAME
helm="$("$ROOT/hack/helm.sh" | tail -n 1)"
chart="$ROOT/deploy/helm/fake-dra"
driver=fake.resource.3-shake.com
t0=$SECONDS
KUBECONFIG="$("$ROOT/hack/local-cluster.sh" kubeconfig)"
export KUBECONFIG
export PATH="$KUBE_BIN:$PATH"
"$ROOT/hack/local-cluster.sh" down >/dev/null 2>&1 || true
finish() {
  local rc=$?
  if ((rc != 0)); then
    echo "== diagnostics" >&2
    "$helm" list -A >&2 || true
    kubectl get all -A >&2 || true
  fi
  if $keep; then
    echo "cluster left running: export KUBECONFIG=$KUBECONFIG PATH=$KUBE_BIN:\$PATH; hack/local-cluster.sh down removes it"
  else
    "$ROOT/hack/local-cluster.sh" down
  fi
  echo "== helm-real-k8s: $((SECONDS - t0)) s"
  exit "$rc"
}
trap finish EXIT
"$ROOT/hack/local-cluster.sh" up
echo "helm $("$helm" version --template '{{.Version}}'), $(kubectl version 2>/dev/null | grep '^Server Version')"

# expect_refusal <what the output must contain> <command...>: the command fails saying so.
expect_refusal() {
  local says="$1" out rc=0
  shift
  out="$("$@" 2>&1)" || rc=$?
  ((rc != 0)) || die "$* succeeded; it must be refused. It printed:"$'\n'"$out"
  [[ "$out" == *"$says"* ]] || die "$* was refused without saying \"$says\"; it printed:"$'\n'"$out"
  echo "refused as expected: ${out%%$'\n'*}"
}

echo "== 1. a bad value"
expect_refusal "at '/kubeletPlugin/profile': value must be one of 'fake', 'gpu'" \
  "$helm" install fake-dra "$chart" -n fake-dra --create-namespace --set kubeletPlugin.profile=fpga
left="$(kubectl get deviceclasses,crds -o name 2>&1)"
[[ -z "$left" ]] || die "the refused install left objects behind: $left"

echo "== 2. helm install"
"$helm" install fake-dra "$chart" -n fake-dra --create-namespace --set image.tag=dev --wait --timeout 180s
slice() {
  local out
  out="$(kubectl get resourceslices --field-selector "spec.nodeName=$NODE_NAME,spec.driver=$driver" -o name 2>&1)" || true
  [[ "$out" == resourceslice* ]] || { echo "slices of node $NODE_NAME: ${out:-none}"; return 1; }
}
wait_for "the node's ResourceSlice" 60 slice || die "the plugin published no ResourceSlice for node $NODE_NAME"
kubectl get -n fake-dra daemonsets,pods,services -o wide

echo "== 3. a second install"
expect_refusal "cannot reuse a name that is still in use" \
  "$helm" install fake-dra "$chart" -n fake-dra --set image.tag=dev
expect_refusal "fake-dra is already installed by Helm release fake-dra in namespace fake-dra" \
  "$helm" install other "$chart" -n other --create-namespace --set image.tag=dev

echo "== 4. the seed demo"
"$ROOT/hack/demo.sh" --mode structured --keep
log="$(kubectl -n test5 logs pod0)" || die "kubectl logs test5/pod0 failed: $log"
devices="$(grep -oE "FAKE_DEVICE_[0-7]='[^']+'" <<<"$log" | cut -d"'" -f2 | sort -u || true)"
n="$(grep -c . <<<"$devices" || true)"
[[ "$n" == 8 ]] || die "pod0 saw $n distinct devices, not 8; its log:"$'\n'"$log"
echo "pod0 ran with 8 distinct devices"
kubectl delete namespace test5 --wait=true --timeout=120s
# /metrics through the chart's Service, as Prometheus scrapes it.
metrics="$(kubectl get --raw "/api/v1/namespaces/fake-dra/services/http:fake-dra-kubelet-plugin-metrics:http-metrics/proxy/metrics" 2>&1)" \
  || die "reading /metrics through the Service failed: $metrics"
contains_line "$metrics" "# EOF" || die "/metrics through the Service is not OpenMetrics text:"$'\n'"$metrics"
echo "the metrics Service answers: $(grep -c '^fake_dra_kubelet_plugin' <<<"$metrics") samples"

echo "== 4b. the opt-ins: device metadata files, seamless upgrade"
# The upgrade's own rollout runs under the new strategy (maxSurge 1, maxUnavailable 0),
# sampled every 0.2 s: the node's slices and the plugin's pods. It runs while no claim is
# being prepared: the old instance (one-instance sockets, no lock) overlaps the new one.
samples="$(mktemp)"
(
  while :; do
    n_slices="$(kubectl get resourceslices --field-selector "spec.nodeName=$NODE_NAME,spec.driver=$driver" -o name 2>/dev/null | grep -c . || true)"
    n_pods="$(kubectl -n fake-dra get pods -l app.kubernetes.io/name=fake-dra-kubelet-plugin -o name 2>/dev/null | grep -c . || true)"
    echo "$SECONDS $n_slices $n_pods"
    sleep 0.2
  done
) >"$samples" &
sampler=$!
t_rollout=$SECONDS
"$helm" upgrade fake-dra "$chart" -n fake-dra --reuse-values \
  --set kubeletPlugin.deviceMetadata=true,kubeletPlugin.seamlessUpgrade=true --wait --timeout 180s
kubectl -n fake-dra rollout status daemonset/fake-dra-kubelet-plugin --timeout=180s
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
read -r n_samples max_gap max_pods < <(awk '
  { n++; if ($2 == 0) { gap++; if (gap > max) max = gap } else gap = 0; if ($3 > pods) pods = $3 }
  END { print n + 0, max + 0, pods + 0 }' "$samples")
echo "rollout of $((SECONDS - t_rollout)) s sampled $n_samples times: at most $max_pods plugin pods at once; longest run without the node's slice: $max_gap samples"
((n_samples > 0)) || die "the rollout was not sampled: $(cat "$samples")"
((max_pods >= 2)) || die "the plugin pods never ran side by side (maxSurge 1 under seamlessUpgrade); samples: $(tail -n 20 "$samples")"
((max_gap == 0)) || die "the node had no ResourceSlice for $max_gap samples during the rollout; samples: $(cat "$samples")"
rm -f "$samples"
t_pod=$SECONDS
kubectl apply -f "$ROOT/deploy/examples/structured/features/device-metadata.yaml"
pod_running() {
  local phase
  phase="$(kubectl -n "$1" get pod "$2" -o jsonpath='{.status.phase}' 2>&1)" || { echo "$phase"; return 1; }
  [[ "$phase" == Running ]] || { echo "phase: ${phase:-none}"; return 1; }
}
wait_for "metadata-demo/pod0 to run" 120 pod_running metadata-demo pod0 \
  || { kubectl -n metadata-demo describe pod pod0 >&2 || true; die "metadata-demo/pod0 did not run"; }
echo "a pod with a claim ran $((SECONDS - t_pod)) s after it was created, $((SECONDS - t_rollout)) s after the rollout began"
log="$(kubectl -n metadata-demo logs pod0)" || die "kubectl logs metadata-demo/pod0 failed: $log"
for want in '"apiVersion": "metadata.resource.k8s.io/v1beta1"' '"apiVersion": "metadata.resource.k8s.io/v1alpha1"' \
  '"podClaimName": "gpu"' '"name": "devices"' "\"pool\": \"$NODE_NAME\""; do
  [[ "$log" == *"$want"* ]] || die "pod0's device metadata file lacks $want; pod0 printed:"$'\n'"$log"
done
echo "pod0 read its device metadata file: $(grep -c '"driver"' <<<"$log") device entries over both versions; its first object:"
sed -n '1,/^}/p' <<<"$log"
kubectl delete namespace metadata-demo --wait=true --timeout=120s

echo "== 5. helm uninstall"
"$helm" uninstall fake-dra -n fake-dra --wait --timeout 120s
# The DaemonSet's pods are not the release's objects: the garbage collector deletes them
# after their owner, and they get their grace period (30 s) to stop.
release_gone() {
  local out
  out="$(kubectl get all,configmaps,serviceaccounts,roles,rolebindings -A -l app.kubernetes.io/instance=fake-dra -o name 2>&1)" || return 1
  [[ -z "$out" ]] || { echo "left: $out"; return 1; }
}
wait_for "every object of the release to be gone" 90 release_gone || die "helm uninstall left objects of the release"
cluster_wide="$(kubectl get crds,deviceclasses,clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings -l app.kubernetes.io/instance=fake-dra -o name 2>&1)"
[[ -z "$cluster_wide" ]] || die "helm uninstall left cluster-wide objects: $cluster_wide"
crds="$(kubectl get crds -o name 2>&1)"
[[ "$crds" != *fake.resource.3-shake.com* ]] || die "helm uninstall left the driver's CRDs: $crds"
no_slices() {
  local out
  out="$(kubectl get resourceslices --field-selector "spec.driver=$driver" -o name 2>&1)" || return 1
  [[ -z "$out" ]] || { echo "slices left: $out"; return 1; }
}
# The kubelet wipes a driver's slices 30 s after its plugin left (defaultWipingDelay).
wait_for "the driver's ResourceSlices to be wiped" 90 no_slices || die "the driver's ResourceSlices stayed after helm uninstall"
echo "nothing of the release is left"

echo "== 6. helm install over a kustomize install"
"$ROOT/hack/deploy.sh" structured
before="$(kubectl get -n fake-dra daemonset fake-dra-kubelet-plugin -o jsonpath='{.metadata.resourceVersion}')"
expect_refusal "no Helm release owns it (installed with kubectl apply -k deploy/structured?)" \
  "$helm" install fake-dra "$chart" -n fake-dra --set image.tag=dev
after="$(kubectl get -n fake-dra daemonset fake-dra-kubelet-plugin -o jsonpath='{.metadata.resourceVersion}')"
[[ "$before" == "$after" ]] || die "the refused helm install changed the kustomize install's DaemonSet ($before -> $after)"
"$ROOT/hack/deploy.sh" structured --delete
echo "helm-real-k8s passed: Kubernetes $KUBE_VERSION, node $NODE_NAME"
