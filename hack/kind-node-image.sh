#!/usr/bin/env bash
# Builds a kind node image offline, from parts built or installed here (nothing is pulled):
#   - a Debian rootfs (debootstrap --variant=minbase: systemd, iptables, runc, the CNI
#     plugins, ...; cached in target/kind/base), the packages of kind's base image
#   - kind's node files (entrypoint, systemd units, containerd config) from the kind
#     module in the Go module cache (the version hack/kube/kind/go.mod pins), copied into
#     the image at build time and never into this repository
#   - kubelet, kubeadm, kubectl, containerd, ctr, crictl (hack/kube-build.sh)
#   - the control plane's images, pre-imported into the node's containerd: kube-apiserver,
#     kube-controller-manager, kube-scheduler, kube-proxy, etcd, coredns and pause, each
#     made from our builds under the name `kubeadm config images list` gives
#   - in place of kindnetd: hack/kind-node/fake-dra-kind-network, a DaemonSet (its image
#     made from the rootfs' bash, ip and kubectl) that writes each node's CNI config from
#     its podCIDR and routes the other nodes' podCIDRs
# and tags it (default localhost/fake-dra/kind-node:<Kubernetes version>), where
# hack/kind-up.sh finds it. The image carries a label with the hash of its inputs: with the
# same inputs a second run does nothing. Needs root, Linux, Go, debootstrap (installed with
# apt-get when missing) and podman or docker. Prints the time of each step.
# Usage: hack/kind-node-image.sh [--mode structured|classic] [--force] [--print-image]
#   --mode         structured: Kubernetes 1.37 (hack/kube/kubernetes, the default);
#                  classic: 1.30 (hack/kube/kubernetes-1.30)
#   --force        rebuild even if the image's inputs are unchanged
#   --print-image  print the image's name for the mode and exit
# Env: KIND_NODE_IMAGE (the tag), CONTAINER_ENGINE, DEBIAN_MIRROR (debootstrap's mirror)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
mode=structured
force=false
print=false
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --mode) mode="${2:?--mode needs a value}"; shift 2 ;;
    --force) force=true; shift ;;
    --print-image) print=true; shift ;;
    *) die "unknown argument: $1 (try --help)" ;;
  esac
done
case "$mode" in
  structured) export KUBE_MODULE=kubernetes ;;
  classic) export KUBE_MODULE=kubernetes-1.30 ;;
  *) die "unknown mode '$mode' (structured or classic)" ;;
esac
source "$ROOT/hack/kube/lib.sh"
image="${KIND_NODE_IMAGE:-$(kind_node_image "$KUBE_VERSION")}"
if $print; then echo "$image"; exit 0; fi
[[ "$(id -u)" == 0 ]] || die "must run as root (debootstrap, chroot and containerd write root-owned files)"
e="$(engine)"
t_all=$SECONDS
step() { echo "== $1: $((SECONDS - t_step)) s"; t_step=$SECONDS; }
t_step=$SECONDS

# 1. Our builds (cached by hack/kube-build.sh's stamps).
"$ROOT/hack/kube-build.sh" tools kubernetes kubeadm etcd containerd cri-tools
KIND_TOOLS="$ROOT/target/kube/kind/bin"
KUBE_OUT="$ROOT/target/kube/kind" "$ROOT/hack/kube-build.sh" coredns kind
step builds
kind_files="$(cd "$ROOT/hack/kube/kind" && go list -m -f '{{.Dir}}' sigs.k8s.io/kind)/images/base/files"
[[ -f "$kind_files/usr/local/bin/entrypoint" ]] || die "kind's node files are not in the Go module cache ($kind_files); cd hack/kube/kind && go mod download"

# 2. The Debian rootfs, cached: the packages of kind's base image that Debian has, with
# Debian's runc and CNI plugins (ours: containerd, crictl).
packages=systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,curl,jq,procps,runc,containernetworking-plugins
suite=bookworm
base="$ROOT/target/kind/base"
base_key="$suite $packages"
if [[ ! -f "$base.stamp" || "$(cat "$base.stamp")" != "$base_key" ]]; then
  if ! command -v debootstrap >/dev/null 2>&1; then
    echo "installing debootstrap"
    apt-get install -y -qq debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; } \
      || die "could not install debootstrap (apt-get install debootstrap)"
  fi
  rm -rf "$base" "$base.stamp"
  log="$ROOT/target/kind/debootstrap.log"
  mkdir -p "${base%/*}"
  echo "debootstrap $suite (log $log)"
  # shellcheck disable=SC2086  # the mirror is optional
  debootstrap --variant=minbase --include="$packages" "$suite" "$base" ${DEBIAN_MIRROR:-} >"$log" 2>&1 \
    || { show_output "$(cat "$log")" >&2; die "debootstrap $suite failed (its log: $log)"; }
  rm -rf "$base"/var/cache/apt/archives/*.deb "$base"/var/lib/apt/lists/*
  echo "$base_key" >"$base.stamp"
fi
step "debian rootfs"

# 3. The inputs' hash: an image with the same one is up to date.
images_list="$("$KUBE_BIN/kubeadm" config images list --kubernetes-version "$KUBE_VERSION")" \
  || die "kubeadm config images list failed: $images_list"
bins=("$KUBE_BIN"/{kubelet,kubeadm,kubectl,kube-apiserver,kube-controller-manager,kube-scheduler,kube-proxy,etcd,containerd,containerd-shim-runc-v2,ctr,crictl,pause,ociarchive} "$KIND_TOOLS/coredns")
inputs="$({
  cat "$0" "$ROOT"/hack/kind-node/*; echo "$base_key $images_list"
  (cd "$kind_files" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
  stat -c '%n %s %Y' "${bins[@]}"   # a rebuilt binary has a new time (hashing 700 MB takes a while)
} | sha256sum | cut -d' ' -f1)"
label=fake-dra.kind-node-inputs
have="$("$e" image inspect --format "{{ index .Config.Labels \"$label\" }}" "$image" 2>/dev/null || true)"
if ! $force && [[ "$have" == "$inputs" ]]; then
  echo "node image $image is up to date (inputs $inputs)"
  exit 0
fi
step "inputs"

# 4. The node's file system: kind's base image steps, on our rootfs.
work="$ROOT/target/kind/node-$KUBE_VERSION"
r="$work/rootfs"
rm -rf "$work"; mkdir -p "$work"
cp -a "$base" "$r"
install -m 0755 "$kind_files"/usr/local/bin/* "$r/usr/local/bin/"
mkdir -p "$r/kind/bin" "$r/etc/containerd" "$r/etc/systemd/system/kubelet.service.d" "$r/etc/kubernetes/manifests" "$r/kind/manifests"
install -m 0644 "$kind_files"/kind/*.txt "$r/kind/"
install -m 0755 "$kind_files"/kind/bin/* "$r/kind/bin/"
while IFS= read -r f; do
  install -D -m 0644 "$kind_files/$f" "$r/$f"
done < <(cd "$kind_files" && find etc -type f)
find "$r/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "$r"/lib/systemd/system/multi-user.target.wants/* "$r"/etc/systemd/system/*.wants/* \
  "$r"/lib/systemd/system/local-fs.target.wants/* "$r"/lib/systemd/system/sockets.target.wants/*udev* \
  "$r"/lib/systemd/system/sockets.target.wants/*initctl* "$r"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$r/etc/systemd/journald.conf"
ln -sf /usr/lib/systemd/systemd "$r/sbin/init"
chroot "$r" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1 \
  || die "systemctl enable in the node's rootfs failed"
chroot "$r" systemctl mask systemd-binfmt.service >/dev/null 2>&1
# Our builds; Debian's runc (/usr/sbin) and CNI plugins (/usr/lib/cni, where kind's /opt/cni/bin points).
for b in containerd containerd-shim-runc-v2 ctr crictl; do install -m 0755 "$KUBE_BIN/$b" "$r/usr/local/bin/"; done
for b in kubelet kubeadm kubectl; do install -m 0755 "$KUBE_BIN/$b" "$r/usr/bin/"; done
mkdir -p "$r/opt/cni"; ln -sfn /usr/lib/cni "$r/opt/cni/bin"
"$KUBE_BIN/ctr" oci spec | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
  | jq 'del(.process.rlimits)' >"$r/etc/containerd/cri-base.json"
echo -n "$KUBE_VERSION" >"$r/kind/version"
# kind applies these at create: the pod network (fake-dra-kind-network, in place of
# kindnetd), a default StorageClass without a provisioner pod.
network_image=fake-dra.local/kind-network:1
cat >"$r/kind/manifests/default-cni.yaml" <<YAML
apiVersion: v1
kind: ServiceAccount
metadata: {name: fake-dra-kind-network, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: fake-dra-kind-network}
rules:
  - {apiGroups: [""], resources: [nodes], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: fake-dra-kind-network}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: fake-dra-kind-network}
subjects:
  - {kind: ServiceAccount, name: fake-dra-kind-network, namespace: kube-system}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: fake-dra-kind-network, namespace: kube-system}
spec:
  selector: {matchLabels: {app: fake-dra-kind-network}}
  template:
    metadata: {labels: {app: fake-dra-kind-network}}
    spec:
      serviceAccountName: fake-dra-kind-network
      hostNetwork: true
      tolerations: [{operator: Exists}]
      containers:
        - name: network
          image: $network_image
          imagePullPolicy: Never
          command: [/usr/local/bin/fake-dra-kind-network]
          env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
          securityContext: {privileged: true}
          volumeMounts: [{name: cni, mountPath: /etc/cni/net.d}]
      volumes: [{name: cni, hostPath: {path: /etc/cni/net.d, type: DirectoryOrCreate}}]
YAML
cat >"$r/kind/manifests/default-storage.yaml" <<'YAML'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/host-path
YAML
step "node rootfs"

# 5. The control plane's images, named as kubeadm and kind's containerd config want them.
imgs="$work/images"
mkdir -p "$imgs"
# image_rootfs <dir> <file...>: the files and the shared libraries ldd lists for them.
image_rootfs() {
  local dir="$1" f lib; shift
  mkdir -p "$dir/tmp" "$dir/etc"; chmod 1777 "$dir/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$dir/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"$dir/etc/group"
  for f in "$@"; do
    mkdir -p "$dir$(dirname "$f")"
    cp -a "$r$f" "$dir$f" || die "cannot copy $f from the node's rootfs"
    [[ -f "$dir$f" && ! -L "$dir$f" ]] || continue
    while read -r lib; do
      [[ -e "$dir$lib" ]] && continue
      mkdir -p "$dir$(dirname "$lib")"; cp -L "$r$lib" "$dir$lib" || die "cannot copy $lib from the node's rootfs"
    done < <(chroot "$r" ldd "$f" 2>/dev/null | awk '/=> \// { print $3 } /^\t\// { print $1 }')
  done
}
name_of() { local n; n="$(grep -E "/$1:" <<<"$images_list")" || die "kubeadm lists no $1 image: $images_list"; echo "$n"; }
sandbox="$(sed -nE 's/^ *sandbox_image *= *"([^"]+)".*/\1/p' "$r/etc/containerd/config.toml")"
[[ -n "$sandbox" ]] || die "no sandbox_image in kind's containerd config.toml"
# Each component binary sits in the node's rootfs for the while (ldd runs there).
for c in kube-apiserver kube-controller-manager kube-scheduler etcd kube-proxy; do install -m 0755 "$KUBE_BIN/$c" "$r/usr/local/bin/"; done
for c in kube-apiserver kube-controller-manager kube-scheduler etcd; do
  image_rootfs "$imgs/$c.d" "/usr/local/bin/$c"
  "$KUBE_BIN/ociarchive" -rootfs "$imgs/$c.d" -name "$(name_of "$c")" -o "$imgs/$c.tar" \
    -env PATH=/usr/local/bin:/usr/bin:/bin
done
# kube-proxy runs iptables (nft or legacy, as the node's entrypoint picked) and conntrack.
proxy_files=(/usr/local/bin/kube-proxy)
while IFS= read -r f; do
  [[ -d "$r$f" ]] || proxy_files+=("$f")
done < <(chroot "$r" dpkg -L iptables conntrack nftables | grep -E '^/(usr/)?(s?bin|lib)/')
for f in /usr/sbin/{iptables,ip6tables}{,-save,-restore} /etc/alternatives/{iptables,ip6tables}{,-save,-restore}; do
  [[ ! -L "$r$f" ]] || proxy_files+=("$f")
done
image_rootfs "$imgs/kube-proxy.d" "${proxy_files[@]}"
for c in kube-apiserver kube-controller-manager kube-scheduler etcd kube-proxy; do rm -f "$r/usr/local/bin/$c"; done
"$KUBE_BIN/ociarchive" -rootfs "$imgs/kube-proxy.d" -name "$(name_of kube-proxy)" -o "$imgs/kube-proxy.tar" \
  -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mkdir -p "$imgs/coredns.d/etc/ssl/certs"; cp "$KIND_TOOLS/coredns" "$imgs/coredns.d/coredns"
cp "$r/etc/ssl/certs/ca-certificates.crt" "$imgs/coredns.d/etc/ssl/certs/"
"$KUBE_BIN/ociarchive" -rootfs "$imgs/coredns.d" -name "$(name_of coredns)" -o "$imgs/coredns.tar" \
  -entrypoint /coredns -user 65532:65532
install -m 0755 "$ROOT/hack/kind-node/fake-dra-kind-network" "$r/usr/local/bin/"
image_rootfs "$imgs/kind-network.d" /usr/local/bin/fake-dra-kind-network /bin/bash /bin/ip /bin/cat /bin/mv /bin/mkdir /bin/sleep /usr/bin/kubectl
rm -f "$r/usr/local/bin/fake-dra-kind-network"
"$KUBE_BIN/ociarchive" -rootfs "$imgs/kind-network.d" -name "$network_image" -o "$imgs/kind-network.tar" \
  -env PATH=/usr/local/bin:/usr/bin:/bin
mkdir -p "$imgs/pause.d"; cp "$KUBE_BIN/pause" "$imgs/pause.d/pause"
"$KUBE_BIN/ociarchive" -rootfs "$imgs/pause.d" -name "$sandbox" -o "$imgs/pause.tar" -entrypoint /pause -user 65535:65535
step "component images"

# 6. Imported into the node's containerd store (namespace k8s.io, unpacked on overlayfs), by
# our containerd on this machine, pointed at the node's /var/lib/containerd.
cd_run="$work/containerd"
mkdir -p "$cd_run"
cat >"$cd_run/config.toml" <<TOML
version = 3
root = "$r/var/lib/containerd"
state = "$cd_run/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images", "io.containerd.nri.v1.nri"]
[grpc]
  address = "$cd_run/containerd.sock"
TOML
"$KUBE_BIN/containerd" --config "$cd_run/config.toml" >"$cd_run/containerd.log" 2>&1 &
cd_pid=$!
trap 'kill "$cd_pid" 2>/dev/null || true' EXIT
ctr_() { "$KUBE_BIN/ctr" --address "$cd_run/containerd.sock" --namespace k8s.io "$@" 2> >(grep -v 'support for cgroup v1 is deprecated' >&2); }
wait_for "containerd for the image import" 30 ctr_ version >/dev/null \
  || { show_output "$(cat "$cd_run/containerd.log")" >&2; die "containerd did not start"; }
for a in "$imgs"/*.tar; do
  # The layers go once unpacked (as kind's containerd config does for pulls): the image
  # is half the size, and kind copies the node's /var into a volume per node.
  ctr_ images import --local --snapshotter overlayfs --discard-unpacked-layers "$a" >/dev/null 2>&1 \
    || die "ctr images import $a failed: $(ctr_ images import --local --snapshotter overlayfs --discard-unpacked-layers "$a" 2>&1 | tail -n 3)"
done
# The names kubeadm lists for pause (kind's containerd config names its own).
while IFS= read -r n; do
  [[ "$n" == */pause:* && "$n" != "$sandbox" ]] || continue
  ctr_ images tag "$sandbox" "$n" >/dev/null || die "ctr images tag $sandbox $n failed"
done <<<"$images_list"
# A deletion makes containerd collect garbage: the discarded layers leave the content store.
ctr_ images tag "$sandbox" fake-dra.local/gc-trigger:1 >/dev/null 2>&1 && ctr_ images rm --sync fake-dra.local/gc-trigger:1 >/dev/null 2>&1
listed="$(ctr_ images ls -q 2>/dev/null)"
while IFS= read -r n; do
  contains_line "$listed" "$n" || die "the node's containerd lacks $n after the import; it lists:"$'\n'"$listed"
done <<<"$images_list"
echo "the node's containerd store: $(du -sh "$r/var/lib/containerd" | cut -f1) (content $(du -sh "$r/var/lib/containerd/io.containerd.content.v1.content" | cut -f1))"
kill "$cd_pid"; wait "$cd_pid" 2>/dev/null || true
trap - EXIT
rm -rf "$r/var/lib/containerd/io.containerd.runtime.v2.task" "$r/var/lib/containerd/tmpmounts"
step "image import"

# 7. The image: the rootfs as one layer, with kind's entrypoint and stop signal. The image it
# replaces goes (unless a container still uses it).
old_id="$("$e" image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
tar -C "$r" --numeric-owner --xattrs -c . \
  | "$e" import --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'ENV container=docker' \
      --change 'STOPSIGNAL SIGRTMIN+3' --change "LABEL $label=$inputs" - "$image" >/dev/null \
  || die "$e import of the node image failed"
rm -rf "$work"
new_id="$("$e" image inspect --format '{{.Id}}' "$image")"
[[ -z "$old_id" || "$old_id" == "$new_id" ]] || "$e" rmi "$old_id" >/dev/null 2>&1 || true
step "$e import"
echo "node image $image built ($((SECONDS - t_all)) s): Kubernetes $KUBE_VERSION, containerd $CONTAINERD_VERSION, images: $(tr '\n' ' ' <<<"$images_list")"
