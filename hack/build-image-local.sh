#!/usr/bin/env bash
# Builds the images of the local real cluster (hack/local-cluster.sh) without a container
# engine, a base image or a registry, as OCI archives that `ctr images import` takes:
#   fake-dra.tar  docker.io/library/fake-dra:dev (IMAGE): our release binaries
#                 /usr/bin/fake-dra-controller and /usr/bin/fake-dra-kubelet-plugin, the
#                 shared libraries ldd lists for them (glibc), /etc/passwd with nonroot
#                 65532, CA certificates; entrypoint and user as deploy/container/Dockerfile
#   busybox.tar   docker.io/library/busybox:1.36, what the examples run: Debian's
#                 busybox-static (1.35) and its applet links
#   pause.tar     fake-dra.local/pause:1, containerd's sandbox image: our pause program
# into target/kube/images/ (IMAGES_DIR), which hack/local-cluster.sh up loads.
# Usage: hack/build-image-local.sh [--image NAME:TAG] [--cargo-profile release|dev] [--skip-cargo] [--bin-dir DIR]
#   --cargo-profile  release (default, target/release) or dev (target/debug: the binaries
#                    `cargo test --workspace` already built, so CI pays no release build;
#                    stripped, they behave the same)
#   --skip-cargo     use the binaries already built for that profile
#   --bin-dir DIR    take the two binaries from DIR (no cargo build; e.g. the directory
#                    next to a test executable, which the e2e suite packs)
# Env: IMAGE (default fake-dra:dev), IMAGES_DIR, CARGO_TARGET_DIR (default target/),
#      BUSYBOX (default /bin/busybox)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/hack/kube/lib.sh"
skip_cargo=false
profile=release
bin_dir=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --image) IMAGE="${2:?--image needs a value}"; shift 2 ;;
    --skip-cargo) skip_cargo=true; shift ;;
    --bin-dir) bin_dir="${2:?--bin-dir needs a value}"; skip_cargo=true; shift 2 ;;
    --cargo-profile) profile="${2:?--cargo-profile needs a value}"; shift 2 ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
case "$profile" in
  release) profile_dir=release ;;
  dev) profile_dir=debug ;;
  *) die "unknown cargo profile '$profile' (release or dev)" ;;
esac
IMAGES_DIR="${IMAGES_DIR:-$ROOT/target/kube/images}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
BUSYBOX="${BUSYBOX:-/bin/busybox}"
need cargo "Rust (https://rustup.rs)"
need ldd "libc-bin"
need strip "binutils (apt-get install binutils)"
[[ -x "$BUSYBOX" ]] || die "$BUSYBOX not found; apt-get install busybox-static"
# ldd of a static binary says "not a dynamic executable" (and exits 1).
linkage="$(ldd "$BUSYBOX" 2>&1 || true)"
[[ "$linkage" == *"not a dynamic executable"* ]] \
  || die "$BUSYBOX is not statically linked (ldd: $linkage); apt-get install busybox-static"

"$ROOT/hack/kube-build.sh" tools >/dev/null
ociarchive="$KUBE_BIN/ociarchive"
mkdir -p "$IMAGES_DIR"
work="$IMAGES_DIR/rootfs"
rm -rf "$work"; mkdir -p "$work"

bins=(fake-dra-controller fake-dra-kubelet-plugin)
if ! $skip_cargo; then
  t0=$SECONDS
  (cd "$ROOT" && cargo build --profile "$profile" --locked -p fake-dra-controller --bin fake-dra-controller \
    -p fake-dra-kubelet-plugin --bin fake-dra-kubelet-plugin) || die "cargo build --profile $profile failed"
  echo "cargo build --profile $profile: $((SECONDS - t0)) s"
fi

# fake-dra: the binaries, stripped, and their shared libraries at the paths ldd gives.
r="$work/fake-dra"
mkdir -p "$r/usr/bin" "$r/etc" "$r/tmp"
chmod 1777 "$r/tmp"
for b in "${bins[@]}"; do
  src="${bin_dir:-$CARGO_TARGET_DIR/$profile_dir}/$b"
  [[ -x "$src" ]] || die "$src not found; run without --skip-cargo"
  strip -o "$r/usr/bin/$b" "$src"
  ldd "$src" | awk '/=> \// { print $3 } /^\t\// { print $1 }' | while read -r lib; do
    mkdir -p "$r$(dirname "$lib")"
    cp -L "$lib" "$r$lib"
  done
done
# The dynamic loader's cache is not there: the libraries sit where ldd found them, which is
# where the binaries' loader looks by default (/lib/x86_64-linux-gnu, /lib64).
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$r/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$r/etc/group"
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  mkdir -p "$r/etc/ssl/certs"; cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/"
fi
"$ociarchive" -rootfs "$r" -name "$(full_name "$IMAGE")" -o "$IMAGES_DIR/fake-dra.tar" \
  -entrypoint /usr/bin/fake-dra-controller -user 65532:65532 \
  -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# busybox: the static binary and a link per applet.
r="$work/busybox"
mkdir -p "$r/bin" "$r/tmp" "$r/etc"
chmod 1777 "$r/tmp"
cp "$BUSYBOX" "$r/bin/busybox"
"$BUSYBOX" --list | while read -r applet; do
  [[ "$applet" == busybox ]] || ln -sf busybox "$r/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$r/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\n' >"$r/etc/group"
"$ociarchive" -rootfs "$r" -name docker.io/library/busybox:1.36 -o "$IMAGES_DIR/busybox.tar" \
  -cmd sh -env PATH=/usr/sbin:/usr/bin:/sbin:/bin

# pause: our static pause program as user 65535, like the upstream image.
r="$work/pause"
mkdir -p "$r"
cp "$KUBE_BIN/pause" "$r/pause"
"$ociarchive" -rootfs "$r" -name fake-dra.local/pause:1 -o "$IMAGES_DIR/pause.tar" \
  -entrypoint /pause -user 65535:65535

rm -rf "$work"
echo "images in $IMAGES_DIR (hack/local-cluster.sh up loads them; hack/local-cluster.sh load ARCHIVE into a running cluster)"
