#!/usr/bin/env bash
# The SDK crates (dra-kubelet-proto, dra-kubelet-plugin, dra-kubelet-plugin-testing)
# packaged as crates.io would take them, without publishing anything:
#   1. each manifest has what crates.io and docs.rs show (description, license,
#      repository, documentation, readme, keywords, categories, rust-version), the
#      three share one version, and each CHANGELOG.md has a section for it;
#   2. each package holds its README.md and CHANGELOG.md (and the .proto files that
#      dra-kubelet-proto's build.rs compiles), and only what `include` lists;
#   3. `cargo package` of the three at once: path dependencies carry versions, the
#      packages are built from their .crate files alone, in dependency order, each
#      against the others' packaged copies (cargo's local registry overlay, so nothing
#      has to be published first), with a lock file resolved from the registry index.
#      --no-verify skips the builds (the manifests and file lists are still checked).
# Offline when the registry index cache has what the lock needs (after any build of
# the workspace it does); otherwise it asks the registry. The builds use the
# workspace's dev profile, so they share the dependencies the workspace build compiled
# in target/.
# Usage: hack/sdk-package.sh [--no-verify]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
crates=(dra-kubelet-proto dra-kubelet-plugin dra-kubelet-plugin-testing)
verify=(--config 'profile.dev.debug="line-tables-only"' --config 'profile.dev.package."*".debug=false')
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --no-verify) verify=(--no-verify) ;;
  "") ;;
  *) die "unknown argument '$1' (--no-verify; try --help)" ;;
esac
need python3 "python3"
t0=$SECONDS
target="${CARGO_TARGET_DIR:-$ROOT/target}"
mkdir -p "$target"

# 1. Metadata.
cargo metadata --no-deps --format-version 1 --offline >"$target/sdk-metadata.json" 2>/dev/null \
  || cargo metadata --no-deps --format-version 1 >"$target/sdk-metadata.json"
python3 - "$target/sdk-metadata.json" "${crates[@]}" <<'EOF' || die "the SDK manifests are incomplete (above)"
import json, sys, pathlib
meta = json.load(open(sys.argv[1]))
by_name = {p["name"]: p for p in meta["packages"]}
wanted = sys.argv[2:]
problems, versions = [], set()
for name in wanted:
    p = by_name.get(name)
    if p is None:
        problems.append(f"{name}: not a workspace member"); continue
    versions.add(p["version"])
    for field in ["description", "license", "repository", "documentation", "readme", "rust_version"]:
        if not p.get(field):
            problems.append(f"{name}: no {field} in Cargo.toml")
    for field in ["keywords", "categories"]:
        if not p.get(field):
            problems.append(f"{name}: no {field} in Cargo.toml")
    if len(p.get("keywords") or []) > 5:
        problems.append(f"{name}: crates.io takes at most 5 keywords")
    crate_dir = pathlib.Path(p["manifest_path"]).parent
    changelog = crate_dir / "CHANGELOG.md"
    if not changelog.exists():
        problems.append(f"{name}: no CHANGELOG.md")
    elif f"## {p['version']}" not in changelog.read_text():
        problems.append(f"{name}: CHANGELOG.md has no '## {p['version']}' section")
    for dep in p["dependencies"]:
        if dep.get("path") and dep["kind"] in (None, "build") and dep["req"] == "*":
            problems.append(f"{name}: path dependency {dep['name']} has no version")
        if dep["name"].startswith("fake-dra"):
            problems.append(f"{name}: depends on {dep['name']}, a crate of fake-dra")
if len(versions) > 1:
    problems.append(f"the SDK crates have different versions: {sorted(versions)}")
for p in problems:
    print("  " + p, file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
echo "== metadata: ${crates[*]} at one version, complete"

# 2. What each package holds.
offline=(--offline)
for crate in "${crates[@]}"; do
  if ! files="$(cargo package -p "$crate" --list --allow-dirty "${offline[@]}" 2>/dev/null)"; then
    offline=()
    files="$(cargo package -p "$crate" --list --allow-dirty)"
  fi
  for want in README.md CHANGELOG.md Cargo.toml src/lib.rs; do
    grep -qx "$want" <<<"$files" || die "the $crate package has no $want (Cargo.toml include)"
  done
  if [[ "$crate" == dra-kubelet-proto ]]; then
    for proto in $(git ls-files 'dra-kubelet-proto/proto/*.proto'); do
      grep -qx "${proto#dra-kubelet-proto/}" <<<"$files" || die "the dra-kubelet-proto package has no ${proto#dra-kubelet-proto/}, which build.rs compiles"
    done
  fi
  echo "== $crate: $(wc -l <<<"$files") files"
done

# 3. Package (and build) the three, in order.
args=()
for crate in "${crates[@]}"; do args+=(-p "$crate"); done
if ! cargo package "${args[@]}" --allow-dirty "${offline[@]}" "${verify[@]}"; then
  [[ ${#offline[@]} -gt 0 ]] || die "cargo package failed (above)"
  echo "== offline packaging failed; asking the registry"
  cargo package "${args[@]}" --allow-dirty "${verify[@]}" || die "cargo package failed (above)"
fi
for crate in "${crates[@]}"; do
  file="$(find "$target/package" -maxdepth 1 -name "$crate-[0-9]*.crate" | sort | tail -n 1)"
  echo "== $(basename "$file"): $(stat -c %s "$file") bytes"
done
echo "== SDK packaged$([[ "${verify[0]}" == --no-verify ]] && echo " (not built)" || echo " and built from the packages"): $((SECONDS - t0)) s"
