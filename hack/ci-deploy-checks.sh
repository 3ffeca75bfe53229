#!/usr/bin/env bash
# CI checks of deploy/ and hack/ (no cluster needed):
#  1. kubectl kustomize renders every overlay of deploy/ (kubectl missing = failure);
#  2. every rendered object and every example of the overlay validates against the
#     Kubernetes JSON schemas of each supported version (kubernetes-validate, strict);
#     kinds of our CRDs against the openAPIV3Schema in deploy/crds; no object skipped;
#     structured on 1.32/1.33 after the v1beta1 rewrite hack/deploy.sh applies there;
#  3. deploy/crds equals what crdgen generates (hack/check-crds.sh);
#  4. shellcheck passes on hack/*.sh and each script's --help exits 0.
# Usage: hack/ci-deploy-checks.sh   Installs shellcheck (apt) and kubernetes-validate (pip) if missing.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") ;;
  *) die "unknown argument: $1 (try --help)" ;;
esac
cd "$ROOT"

# Supported Kubernetes versions per overlay (kubernetes-validate 1.37 has schemas up to 1.37).
declare -A VERSIONS=(
  [classic]="1.27.0 1.28.0 1.29.0 1.30.0"
  [classic-admission]="1.30.0"
  [structured]="1.32.0 1.33.0 1.34.0 1.35.0 1.36.0 1.37.0"
)
# Versions whose manifests are the v1 ones rewritten to resource.k8s.io/v1beta1 (to_v1beta1
# in hack/lib.sh, as hack/deploy.sh, demo.sh and e2e-kind.sh apply them there).
declare -A V1BETA1=([structured]="1.32.0 1.33.0")
# Example manifests validated with each overlay, against the same versions.
declare -A EXAMPLES=([classic]="deploy/examples" [structured]="deploy/examples/structured")

need kubectl "kubectl (https://kubernetes.io/docs/tasks/tools/)"
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
  # The CRDs sit in deploy/crds, outside deploy/base, hence the load restrictor flag.
  kubectl kustomize --load-restrictor LoadRestrictionsNone "deploy/$d" >"$out/$d.yaml"
  echo "rendered deploy/$d: $(grep -c '^kind:' "$out/$d.yaml") objects"
done
(( ${#overlays[@]} > 0 )) || die "no overlays found under deploy/"

echo "== schemas"
for o in "${overlays[@]}"; do
  files=("$out/$o.yaml")
  if [[ -n "${EXAMPLES[$o]:-}" ]]; then
    for f in "${EXAMPLES[$o]}"/*.yaml; do files+=("$f"); done
  fi
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
for path in files:
    for obj in yaml.safe_load_all(open(path)):
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

echo "== CRDs equal crdgen's output"
hack/check-crds.sh

echo "== shellcheck"
shellcheck -x -P SCRIPTDIR hack/*.sh
for s in hack/*.sh; do
  "$s" --help >/dev/null || die "$s --help failed"
  echo "ok   $s --help"
done
echo "deploy checks passed"
