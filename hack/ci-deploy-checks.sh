#!/usr/bin/env bash
# CI checks of deploy/ and hack/ (no cluster needed):
#  1. kubectl kustomize renders every overlay of deploy/ as `kubectl apply -k` does (no
#     flags; kubectl missing = failure), and deploy/rendered/ holds exactly those renders
#     (hack/render-deploy.sh);
#  2. the Helm chart deploy/helm/fake-dra (helm built by hack/helm.sh): `helm lint --strict`
#     for both modes, fleet mode and the opt-ins; `helm template` of both modes (and of classic with the
#     admission policy, and of fleet mode) renders the same objects as the overlays, once
#     what only the chart has is set aside (Helm's standard labels, the metrics Services);
#  3. every rendered object, kustomize's and helm's, and every example of the overlay
#     validates against the Kubernetes JSON schemas of each supported version
#     (kubernetes-validate, strict); kinds of our CRDs against the openAPIV3Schema in
#     deploy/crds; no object skipped; structured on 1.32/1.33 after the v1beta1 rewrite
#     hack/deploy.sh applies there (helm: deviceClassApiVersion=v1beta1);
#  4. deploy/crds and the chart's copy equal what crdgen generates (hack/check-crds.sh);
#  5. to_v1beta1 (hack/lib.sh) rewrites `exactly` in block and flow style;
#  6. shellcheck passes on hack/*.sh and each script's --help exits 0; no script pipes into
#     `grep -q` (under pipefail the writer dies of SIGPIPE and the check fails although the
#     match was there: hack/lib.sh wait_for).
# Usage: hack/ci-deploy-checks.sh   Installs shellcheck (apt) and kubernetes-validate (pip) if
# missing; needs Go to build helm (once; cached under target/helm).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") ;;
  *) die "unknown argument: $1 (try --help)" ;;
esac
cd "$ROOT"

# Supported Kubernetes versions per render (kubernetes-validate 1.37 has schemas up to 1.37):
# the overlays, and the chart's renders of "== helm" below.
declare -A VERSIONS=(
  [classic]="1.27.0 1.28.0 1.29.0 1.30.0"
  [classic-admission]="1.30.0"
  [structured]="1.32.0 1.33.0 1.34.0 1.35.0 1.36.0 1.37.0"
  [fleet]="1.34.0 1.35.0 1.36.0 1.37.0"
  [helm-classic]="1.27.0 1.28.0 1.29.0 1.30.0"
  [helm-classic-admission]="1.30.0"
  [helm-structured]="1.34.0 1.35.0 1.36.0 1.37.0"
  [helm-structured-v1beta1]="1.32.0 1.33.0"
  [helm-fleet]="1.34.0 1.35.0 1.36.0 1.37.0"
)
# Versions whose manifests are the v1 ones rewritten to resource.k8s.io/v1beta1 (to_v1beta1
# in hack/lib.sh, as hack/deploy.sh, demo.sh and e2e-kind.sh apply them there).
declare -A V1BETA1=([structured]="1.32.0 1.33.0")
# Example manifests validated with each overlay, against the same versions.
# (Directories separated by spaces; fleet's: the newer DRA features, the DeviceFaults and the
# nvidia profile's DeviceClasses.)
declare -A EXAMPLES=([classic]="deploy/examples" [structured]="deploy/examples/structured"
  [fleet]="deploy/examples/structured/features deploy/examples/faults deploy/examples/nvidia")

need kubectl "kubectl (https://kubernetes.io/docs/tasks/tools/)"
need go "Go 1.26, to build helm (https://go.dev/doc/install)"
if ! command -v shellcheck >/dev/null 2>&1; then
  echo "installing shellcheck"
  apt-get install -y shellcheck >/dev/null || die "could not install shellcheck (apt-get install shellcheck)"
fi
if ! python3 -c 'import kubernetes_validate' 2>/dev/null; then
  echo "installing kubernetes-validate"
  python3 -m pip install -q kubernetes-validate || die "could not install kubernetes-validate (pip install kubernetes-validate)"
fi

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

echo "== kustomize"
overlays=()
for d in deploy/*/; do
  d="${d%/}"; d="${d##*/}"
  [[ "$d" != base && -f "deploy/$d/kustomization.yaml" ]] || continue
  overlays+=("$d")
  [[ -n "${VERSIONS[$d]:-}" ]] || die "overlay $d has no Kubernetes versions in VERSIONS of $0"
  kubectl kustomize "deploy/$d" >"$out/$d.yaml"
  echo "rendered deploy/$d: $(grep -c '^kind:' "$out/$d.yaml") objects"
done
(( ${#overlays[@]} > 0 )) || die "no overlays found under deploy/"
hack/render-deploy.sh

echo "== helm"
helm="$(hack/helm.sh | tail -n 1)"
echo "helm $("$helm" version --template '{{.Version}}') ($helm)"
chart=deploy/helm/fake-dra
for values in mode=classic mode=structured fleet.enabled=true \
  mode=structured,kubeletPlugin.seamlessUpgrade=true,kubeletPlugin.deviceMetadata=true; do
  "$helm" lint --strict "$chart" --set "$values" || die "helm lint --strict $chart --set $values failed"
done
# helm_render <name> <value...>: the chart as release fake-dra in namespace fake-dra, with
# each value --set; into $out/<name>.yaml.
helm_render() {
  local name="$1" v sets=()
  shift
  for v in "$@"; do sets+=(--set "$v"); done
  "$helm" template fake-dra "$chart" --namespace fake-dra "${sets[@]}" >"$out/$name.yaml" \
    || die "helm template $chart ${sets[*]} failed"
  echo "rendered helm $name ($*): $(grep -c '^kind:' "$out/$name.yaml") objects"
}
# With the Namespace (namespace.create=true; helm install --create-namespace makes it
# otherwise), so each compares with its overlay whole.
# image.tag=dev: the overlays' tag (the chart's defaults to its appVersion).
helm_render helm-classic mode=classic namespace.create=true image.tag=dev
helm_render helm-classic-admission mode=classic namespace.create=true admissionPolicy.classic=true image.tag=dev
helm_render helm-structured mode=structured namespace.create=true image.tag=dev
helm_render helm-fleet fleet.enabled=true namespace.create=true image.tag=dev
# As a 1.32/1.33 cluster gets it: the DeviceClass as resource.k8s.io/v1beta1.
helm_render helm-structured-v1beta1 mode=structured namespace.create=true deviceClassApiVersion=v1beta1 image.tag=dev
cat "$out/classic.yaml" <(echo ---) "$out/classic-admission.yaml" >"$out/classic+admission.yaml"
python3 - "$out" <<'PY'
# The chart renders, object for object and field for field, what the overlays render.
import sys, yaml
out = sys.argv[1]
# What only the chart renders: Helm's standard labels (also in its selectors) and the
# metrics Services; each chart object must carry the labels.
HELM_LABELS = {"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by"}
HELM_ONLY_KINDS = {"Service", "ServiceMonitor"}
def strip(v):
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if k in ("labels", "matchLabels") and isinstance(x, dict):
                x = {a: b for a, b in x.items() if a not in HELM_LABELS}
                if not x:
                    continue
            out[k] = strip(x)
        return out
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v
def objects(name):
    docs = [d for d in yaml.safe_load_all(open(f"{out}/{name}.yaml")) if d]
    if name.startswith("helm-"):
        for d in docs:
            missing = HELM_LABELS - set(d.get("metadata", {}).get("labels", {}))
            if missing:
                sys.exit(f"FAIL {name}: {d['kind']} {d['metadata']['name']} lacks the labels {sorted(missing)}")
        docs = [strip(d) for d in docs if d["kind"] not in HELM_ONLY_KINDS]
    keyed = {}
    for d in docs:
        m = d.get("metadata", {})
        keyed[(d.get("apiVersion"), d.get("kind"), m.get("namespace", ""), m.get("name"))] = d
    if len(keyed) != len(docs):
        sys.exit(f"FAIL {name}: an object is rendered twice")
    return keyed
def norm(v):
    # YAML 128.0 and 128 are the same number to the API server.
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    if isinstance(v, list):
        return [norm(x) for x in v]
    return v
failed = False
pairs = [("helm-classic", "classic"), ("helm-structured", "structured"),
         ("helm-classic-admission", "classic+admission"), ("helm-fleet", "fleet")]
for helm, kustomize in pairs:
    h, k = objects(helm), objects(kustomize)
    bad = False
    for key in sorted(set(h) | set(k), key=str):
        if key not in h or key not in k:
            print(f"FAIL {helm} vs {kustomize}: {key} only in {helm if key in h else kustomize}")
            bad = True
        elif norm(h[key]) != norm(k[key]):
            print(f"FAIL {helm} vs {kustomize}: {key} differs")
            bad = True
    if not bad:
        print(f"ok   {helm}: the same {len(h)} objects as {kustomize}")
    failed |= bad
sys.exit(1 if failed else 0)
PY

echo "== schemas"
for o in "${overlays[@]}" helm-classic helm-classic-admission helm-structured helm-structured-v1beta1 helm-fleet; do
  echo "-- $o (${VERSIONS[$o]})"
  files=("$out/$o.yaml")
  for d in ${EXAMPLES[$o]:-}; do
    for f in "$d"/*.yaml; do files+=("$f"); done
  done
  for v in ${VERSIONS[$o]}; do
    if [[ " ${V1BETA1[$o]:-} " == *" $v "* ]]; then
      # As applied to a 1.32/1.33 cluster: resource.k8s.io/v1beta1.
      mkdir -p "$out/v1beta1/$o"
      vfiles=()
      for f in "${files[@]}"; do
        to_v1beta1 <"$f" >"$out/v1beta1/$o/${f##*/}"
        vfiles+=("$out/v1beta1/$o/${f##*/}")
      done
    else
      vfiles=("${files[@]}")
    fi
    python3 - "$v" deploy/crds "${vfiles[@]}" <<'PY'
import glob, sys
import jsonschema, kubernetes_validate, yaml
from kubernetes_validate.utils import SchemaNotFoundError

version, crd_dir, files = sys.argv[1], sys.argv[2], sys.argv[3:]
crds = {}
for path in sorted(glob.glob(f"{crd_dir}/*.yaml")):
    for crd in yaml.safe_load_all(open(path)):
        for ver in crd["spec"]["versions"]:
            key = (f'{crd["spec"]["group"]}/{ver["name"]}', crd["spec"]["names"]["kind"])
            crds[key] = ver["schema"]["openAPIV3Schema"]
failed = checked = 0
def release(text):
    return tuple(int(x) for x in text.split(".")[:2])
for path in files:
    # An example of a kind a release added says so: `# min-kubernetes-version: 1.37`;
    # it is validated from that release on.
    text = open(path).read()
    since = [l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("# min-kubernetes-version:")]
    if since and release(version) < release(since[0]):
        print(f"skip {path}: needs Kubernetes {since[0]} (its min-kubernetes-version)")
        continue
    for obj in yaml.safe_load_all(text):
        if obj is None:
            continue
        what = f'{path}: {obj.get("kind")} {obj.get("metadata", {}).get("name")}'
        key = (obj.get("apiVersion"), obj.get("kind"))
        try:
            if key in crds:
                # Our own kinds: the openAPIV3Schema crdgen generated (types, limits, required).
                jsonschema.validate(obj, crds[key])
                how = "CRD schema"
            else:
                kubernetes_validate.validate(obj, version, strict=True)
                how = f"kubernetes {version}"
            checked += 1
            # Structured claims and classes carry FakeClaimParameters as opaque config (a
            # RawExtension to the API server): check those against our CRD schema too.
            def opaque(o):
                if isinstance(o, dict):
                    if "opaque" in o and isinstance(o["opaque"], dict):
                        yield o["opaque"]
                    for v in o.values():
                        yield from opaque(v)
                elif isinstance(o, list):
                    for v in o:
                        yield from opaque(v)
            for op in opaque(obj):
                params = op.get("parameters")
                pkey = (params.get("apiVersion"), params.get("kind")) if isinstance(params, dict) else None
                if pkey not in crds:
                    raise jsonschema.ValidationError(f"opaque parameters {pkey} are not one of our CRD kinds")
                jsonschema.validate(params, crds[pkey])
                how += f" + opaque {pkey[1]}"
        except SchemaNotFoundError:
            print(f"FAIL {what}: no schema for {key} in Kubernetes {version} nor in {crd_dir}")
            failed += 1
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as e:
            print(f"FAIL {what} ({version}): {e.message}")
            failed += 1
        else:
            print(f"ok   {what} ({how})")
print(f"{checked} objects valid for {version}, {failed} failed")
sys.exit(1 if failed else 0)
PY
  done
done

echo "== to_v1beta1: exactly in block and flow style; flow holding collections refused"
# The real-cluster suite's claims write `exactly: {deviceClassName: c, count: n}`; a
# rewrite that left it in place made kube-apiserver 1.33 refuse them (strict decoding).
v1_claim='apiVersion: resource.k8s.io/v1
kind: ResourceClaim
spec:
  devices:
    requests:
    - name: a
      exactly: {deviceClassName: fake.example.com, count: 4}
    - name: b
      exactly:
        deviceClassName: fake.example.com
        allocationMode: All'
want='apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
spec:
  devices:
    requests:
    - name: a
      deviceClassName: fake.example.com
      count: 4
    - name: b
      deviceClassName: fake.example.com
      allocationMode: All'
got="$(to_v1beta1 <<<"$v1_claim")" || die "to_v1beta1 failed on a valid claim; it printed: $got"
[[ "$got" == "$want" ]] || die "to_v1beta1 gave:
$got
wanted:
$want"
if refused="$(to_v1beta1 2>&1 <<<'      exactly: {selectors: [{cel: {expression: "true"}}]}')"; then
  die "to_v1beta1 accepted a flow-style exactly holding collections; it printed: $refused"
fi
[[ "$refused" == *"write it in block style"* ]] || die "to_v1beta1's refusal did not say why: $refused"

echo "== CRDs (deploy/crds and the chart's copy) equal crdgen's output"
hack/check-crds.sh

echo "== shellcheck"
shellcheck -x -P SCRIPTDIR hack/*.sh hack/kind-node/fake-dra-kind-network
# grep -q in a pipeline: file and line of each, or nothing.
piped_grep_q="$(grep -nE '^[^#]*\|[[:space:]]*grep[[:space:]]+(-[a-zA-Z]*q|--quiet)' hack/*.sh hack/*/*.sh .ci/run || true)"
[[ -z "$piped_grep_q" ]] || die "a pipeline ends in grep -q (write the output to a variable first):"$'\n'"$piped_grep_q"
for s in hack/*.sh; do
  "$s" --help >/dev/null || die "$s --help failed"
  echo "ok   $s --help"
done
echo "deploy checks passed"
