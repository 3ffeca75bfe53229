#!/usr/bin/env bash
# A real one-node Kubernetes cluster on this machine, from the binaries hack/kube-build.sh
# builds (no kind, no container engine, no image registry). Needs root.
#   up       starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
#            containerd (+ the local images), kubelet and kube-proxy; waits for the node
#            to be Ready; prints the admin kubeconfig
#   down     destroys the cluster: deletes the pods (so the kubelet unprepares their
#            claims), stops every process, unmounts, removes the pod network, the iptables
#            rules and all state; keeps only the logs
#   status   says which components run, and shows the node and the pods
#   load ARCHIVE...  imports OCI image archives into containerd (namespace k8s.io)
#   kubeconfig       prints the path of the admin kubeconfig
#   restart COMPONENT [--down-for SECONDS]
#                    stops one component (SIGTERM; containers keep running through a kubelet
#                    or containerd restart), leaves it stopped SECONDS (default 0), starts it
#                    again with the same flags as up and waits until it serves; COMPONENT is
#                    one of etcd kube-apiserver (or apiserver) kube-controller-manager
#                    kube-scheduler containerd kubelet kube-proxy
#   restart-kubelet  restart kubelet
#   crictl ARGS...   crictl on this cluster's containerd
#   env              the cluster's paths as shell assignments (KUBECONFIG, KUBE_BIN, ...)
# Usage: hack/local-cluster.sh up|down|status|load ARCHIVE...|kubeconfig|restart COMPONENT [--down-for SECONDS]|restart-kubelet|crictl ARGS...|env
# Layout (docs/real-kubernetes.md): node "$NODE_NAME" (default fake-dra-node) with the
# node IP 10.200.0.1/32 on lo; pods on the bridge fakedra0, 10.244.0.0/24; Services
# 10.96.0.0/16 (kube-proxy, iptables mode); state and logs in $CLUSTER_DIR (default
# /var/lib/fake-dra-cluster); the kubelet's root is /var/lib/kubelet (the plugin's paths).
# Kubernetes 1.37 (structured DRA, on by default) unless KUBE_MODULE=kubernetes-1.MINOR names
# another release line of hack/kube/: 1.34-1.36 as they come; 1.32/1.33 with the gate
# DynamicResourceAllocation and resource.k8s.io/v1beta1 turned on; 1.27-1.30 (classic DRA)
# with the gate and resource.k8s.io/v1alpha2.
# Env: CLUSTER_DIR, NODE_NAME, KUBE_MODULE, KUBE_FEATURE_GATES (more gates, NAME=true,...),
#      KUBE_OUT (binaries: default target/kube/<version>),
#      IMAGES_DIR (archives loaded at up: default target/kube/images/*.tar)
#      FAKE_DRA_SCHEDULER_V (kube-scheduler's --v: default 2, each bind and failed attempt;
#      6 shows its queueing hints)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/hack/kube/lib.sh"

CLUSTER_DIR="${CLUSTER_DIR:-/var/lib/fake-dra-cluster}"
NODE_NAME="${NODE_NAME:-fake-dra-node}"
IMAGES_DIR="${IMAGES_DIR:-$ROOT/target/kube/images}"
NODE_IP=10.200.0.1
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SERVICE_IP=10.96.0.1
POD_SUBNET=10.244.0.0/24
POD_GATEWAY=10.244.0.1
BRIDGE=fakedra0
KUBELET_ROOT=/var/lib/kubelet
SANDBOX_IMAGE=fake-dra.local/pause:1
# etcd on loopback only, plain HTTP (see docs/real-kubernetes.md).
ETCD_CLIENT=127.0.0.1:2379
ETCD_PEER=127.0.0.1:2380
APISERVER="https://$NODE_IP:6443"

PKI="$CLUSTER_DIR/pki"
LOGS="$CLUSTER_DIR/logs"
RUN="$CLUSTER_DIR/run"
CONTAINERD_SOCK="$CLUSTER_DIR/containerd/containerd.sock"
ADMIN_KUBECONFIG="$CLUSTER_DIR/admin.kubeconfig"
CNI_CONF_DIR="$CLUSTER_DIR/cni/net.d"
CNI_BIN_DIR="${CNI_BIN_DIR:-/usr/lib/cni}"
RUNC="${RUNC:-$(command -v runc || echo /usr/sbin/runc)}"
# The kernel settings the kubelet changes at start (protectKernelDefaults: false); down
# puts back the values up saved.
KUBELET_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy)
# What a release needs turned on for DRA (as hack/kind-up.sh does for kind): classic DRA
# (1.27-1.30) and structured v1beta1 (1.32/1.33) are behind the DynamicResourceAllocation
# gate (every component) and their resource.k8s.io version (the API server); 1.34+ serve
# resource.k8s.io/v1 with DRA on by default. KUBE_FEATURE_GATES (e.g.
# DRADeviceTaints=true,DRAPartitionableDevices=true) adds gates on every component.
dra_gates=()
DRA_APISERVER=()
if (($(kube_minor) <= 30)); then
  dra_gates=(DynamicResourceAllocation=true)
  DRA_APISERVER=(--runtime-config resource.k8s.io/v1alpha2=true)
elif (($(kube_minor) <= 33)); then
  dra_gates=(DynamicResourceAllocation=true)
  DRA_APISERVER=(--runtime-config resource.k8s.io/v1beta1=true)
fi
IFS=, read -r -a extra_gates <<<"${KUBE_FEATURE_GATES:-}"
dra_gates+=(${extra_gates[@]+"${extra_gates[@]}"})
DRA_GATES=()
KUBELET_GATES=""
if ((${#dra_gates[@]} > 0)); then
  DRA_GATES=(--feature-gates "$(IFS=,; echo "${dra_gates[*]}")")
  KUBELET_GATES="featureGates:"
  for g in "${dra_gates[@]}"; do
    [[ "$g" =~ ^[A-Za-z0-9]+=(true|false)$ ]] || die "KUBE_FEATURE_GATES: '$g' is not NAME=true or NAME=false"
    KUBELET_GATES+=$'\n'"  ${g%%=*}: ${g#*=}"
  done
fi

kctl() { "$KUBE_BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

pid_of() { [[ -f "$RUN/$1.pid" ]] && cat "$RUN/$1.pid"; }
running() { local p; p="$(pid_of "$1")" && [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null; }

# start <name> <command...>: runs it in its own session, log in $LOGS/<name>.log.
start() {
  local name="$1"; shift
  if running "$name"; then echo "$name already runs (pid $(pid_of "$name"))"; return; fi
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
  echo "started $name (pid $!, log $LOGS/$name.log)"
}

# stop <name>: SIGTERM, then SIGKILL after 15 s, by the pid recorded at start.
stop() {
  local name="$1" p i
  p="$(pid_of "$name")" || return 0
  if [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p" 2>/dev/null || true
    for ((i = 0; i < 30; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$p" 2>/dev/null; then echo "$name (pid $p) ignored SIGTERM: SIGKILL"; kill -KILL "$p" 2>/dev/null || true; fi
    echo "stopped $name (pid $p)"
  fi
  rm -f "$RUN/$name.pid"
}

check_prereqs() {
  [[ "$(id -u)" == 0 ]] || die "must run as root (it mounts, makes network interfaces and iptables rules)"
  local b missing=()
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl etcd containerd containerd-shim-runc-v2 ctr crictl; do
    [[ -x "$KUBE_BIN/$b" ]] || missing+=("$b")
  done
  [[ ${#missing[@]} -eq 0 ]] || die "missing in $KUBE_BIN: ${missing[*]}; run hack/kube-build.sh"
  need openssl "openssl (apt-get install openssl)"
  need ip "iproute2 (apt-get install iproute2)"
  need iptables "iptables (apt-get install iptables): kube-proxy's iptables mode"
  need setsid "util-linux (apt-get install util-linux)"
  [[ -x "$RUNC" ]] || die "runc not found; apt-get install runc"
  for b in bridge host-local loopback; do
    [[ -x "$CNI_BIN_DIR/$b" ]] || die "CNI plugin $CNI_BIN_DIR/$b not found; apt-get install containernetworking-plugins (or set CNI_BIN_DIR)"
  done
  grep -q -e '^cgroup ' -e '^cgroup2 ' /proc/mounts || die "no cgroup file system mounted (/proc/mounts has no cgroup or cgroup2 line)"
}

# --- certificates -------------------------------------------------------------------

# cert <file stem> <CN> <O or ""> <server|client|both> [subjectAltName]
cert() {
  local stem="$1" cn="$2" org="$3" usage="$4" san="${5:-}" eku subj ext
  [[ -f "$PKI/$stem.crt" ]] && return
  case "$usage" in server) eku=serverAuth ;; client) eku=clientAuth ;; both) eku=serverAuth,clientAuth ;; esac
  subj="/CN=$cn"; [[ -z "$org" ]] || subj="/O=$org$subj"
  ext="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=$eku"
  [[ -z "$san" ]] || ext+=$'\n'"subjectAltName=$san"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$stem.key" -subj "$subj" -out "$PKI/$stem.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$stem.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days 30 -extfile <(echo "$ext") -out "$PKI/$stem.crt" 2>/dev/null
  rm -f "$PKI/$stem.csr"
}

make_pki() {
  mkdir -p "$PKI"; chmod 700 "$PKI"
  if [[ ! -f "$PKI/ca.crt" ]]; then
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -subj "/CN=fake-dra-local-ca" \
      -days 30 -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
      -out "$PKI/ca.crt" 2>/dev/null
  fi
  cert apiserver kube-apiserver "" server \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:$NODE_IP,IP:$KUBERNETES_SERVICE_IP,IP:127.0.0.1"
  # The API server's identity towards the kubelet (logs, exec); system:masters may do that.
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters client
  cert admin kubernetes-admin system:masters client
  cert controller-manager system:kube-controller-manager "" client
  cert scheduler system:kube-scheduler "" client
  cert kube-proxy system:kube-proxy "" client
  # The Node authorizer and NodeRestriction know a kubelet by this name and group.
  cert kubelet-client "system:node:$NODE_NAME" system:nodes client
  cert kubelet-serving "system:node:$NODE_NAME" system:nodes server "DNS:$NODE_NAME,IP:$NODE_IP"
  [[ -f "$PKI/sa.key" ]] || {
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" 2>/dev/null
    openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  }
}

# kubeconfig <file> <user> <cert stem>
kubeconfig() {
  local file="$1" user="$2" stem="$3" k="$KUBE_BIN/kubectl"
  [[ -f "$file" ]] && return
  "$k" config set-cluster local --kubeconfig "$file" --server "$APISERVER" --certificate-authority "$PKI/ca.crt" --embed-certs >/dev/null
  "$k" config set-credentials "$user" --kubeconfig "$file" --client-certificate "$PKI/$stem.crt" --client-key "$PKI/$stem.key" --embed-certs >/dev/null
  "$k" config set-context local --kubeconfig "$file" --cluster local --user "$user" >/dev/null
  "$k" config use-context local --kubeconfig "$file" >/dev/null
}

# --- configuration files ------------------------------------------------------------

write_configs() {
  mkdir -p "$CNI_CONF_DIR" "$CLUSTER_DIR/cni/ipam" "$CLUSTER_DIR/containerd"
  # Pod network: one bridge, host-local addresses. No masquerading: pods only talk to this
  # machine (the API server through the kubernetes Service), nothing leaves it.
  cat >"$CNI_CONF_DIR/10-fake-dra.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "fake-dra",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$CLUSTER_DIR/cni/ipam",
        "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$POD_GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
  cat >"$CLUSTER_DIR/containerd/config.toml" <<EOF
# containerd $CONTAINERD_VERSION for the local real cluster (hack/local-cluster.sh), with
# the keys of "containerd config default" (config version 4); all state under $CLUSTER_DIR.
version = 4
root = "$CLUSTER_DIR/containerd/root"
state = "$CLUSTER_DIR/containerd/state"
# NRI would listen on /var/run/nri; opt would make /opt/containerd.
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[plugins."io.containerd.server.v1.grpc"]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.server.v1.ttrpc"]
  address = "$CONTAINERD_SOCK.ttrpc"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    # Built by hack/build-image-local.sh and imported at up: nothing is ever pulled.
    sandbox = "$SANDBOX_IMAGE"

[plugins."io.containerd.cri.v1.runtime"]
  # CDI is always on in containerd 2.x; these are the directories our plugin writes to.
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  # No CAP_SYS_RESOURCE in this sandbox: runc cannot lower oom_score_adj below our own (0),
  # which pod sandboxes (-998) and critical pods ask for; containerd clamps them instead.
  restrict_oom_score_adj = true
  # Pod network namespaces under the state directory rather than /var/run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$RUNC"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$CNI_BIN_DIR"]
    conf_dir = "$CNI_CONF_DIR"
EOF
  local failcg=""
  (($(kube_minor) < 35)) || failcg="failCgroupV1: false   # this machine has cgroup v1 (hybrid); kubelets >= 1.35 refuse it by default"
  [[ -d /sys/fs/cgroup/unified || ! -f /sys/fs/cgroup/cgroup.controllers ]] || failcg=""
  cat >"$CLUSTER_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
$failcg
# Container logs under the work dir (the symlinks in /var/log/containers are fixed). Kubelets
# before 1.30 do not know the field (lenient decoding ignores it) and write /var/log/pods.
podLogsDir: $CLUSTER_DIR/pod-logs
$KUBELET_GATES
clusterDomain: cluster.local
# No cluster DNS (no CoreDNS image can be pulled): pods get the node's resolv.conf.
resolvConf: /etc/resolv.conf
failSwapOn: false
# Images come from local archives and cannot be pulled again: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  imagefs.available: 2%
  nodefs.inodesFree: 2%
EOF
  cat >"$CLUSTER_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: $CLUSTER_DIR/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_SUBNET
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["$NODE_IP/32"]
iptables:
  localhostNodePorts: false
# Leave the machine's conntrack settings alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

# --- up -----------------------------------------------------------------------------

start_kubelet() {
  start kubelet "$KUBE_BIN/kubelet" --config "$CLUSTER_DIR/kubelet.yaml" \
    --kubeconfig "$CLUSTER_DIR/kubelet.kubeconfig" --hostname-override "$NODE_NAME" \
    --node-ip "$NODE_IP" --root-dir "$KUBELET_ROOT" --v=2
}

# The command line of each component, for up and restart alike (one place, the same flags).
start_etcd() {
  start etcd "$KUBE_BIN/etcd" --name default --data-dir "$CLUSTER_DIR/etcd" \
    --listen-client-urls "http://$ETCD_CLIENT" --advertise-client-urls "http://$ETCD_CLIENT" \
    --listen-peer-urls "http://$ETCD_PEER" --initial-advertise-peer-urls "http://$ETCD_PEER" \
    --initial-cluster "default=http://$ETCD_PEER" --listen-metrics-urls "" --log-level warn
}

start_apiserver() {
  start kube-apiserver "$KUBE_BIN/kube-apiserver" \
    --etcd-servers "http://$ETCD_CLIENT" \
    --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port 6443 \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction,ValidatingAdmissionPolicy \
    --allow-privileged=true --profiling=false --v=1 ${DRA_GATES[@]+"${DRA_GATES[@]}"} ${DRA_APISERVER[@]+"${DRA_APISERVER[@]}"}
}

# KUBE_API_QPS: the client rate limit of kube-controller-manager and kube-scheduler (their
# defaults, 20 and 50 requests/s, when unset); hack/fleet-bench.sh raises it so that the
# scheduler, not a client limiter, is measured. A restart uses the value up saw.
client_qps() {
  local qps="${KUBE_API_QPS:-}"
  [[ -n "$qps" || ! -f "$RUN/kube-api-qps" ]] || qps="$(cat "$RUN/kube-api-qps")"
  [[ -z "$qps" ]] || echo "--kube-api-qps $qps --kube-api-burst $((qps * 2))"
}

start_controller_manager() {
  local qps
  read -r -a qps <<<"$(client_qps)"
  start kube-controller-manager "$KUBE_BIN/kube-controller-manager" \
    --kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --controllers '*' --profiling=false --v=1 ${DRA_GATES[@]+"${DRA_GATES[@]}"} ${qps[@]+"${qps[@]}"}
}

start_scheduler() {
  local qps
  read -r -a qps <<<"$(client_qps)"
  start kube-scheduler "$KUBE_BIN/kube-scheduler" \
    --kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false --v="${FAKE_DRA_SCHEDULER_V:-2}" ${DRA_GATES[@]+"${DRA_GATES[@]}"} ${qps[@]+"${qps[@]}"}
}

# containerd finds its shim next to itself only through PATH.
start_containerd() {
  start containerd env PATH="$KUBE_BIN:$PATH" "$KUBE_BIN/containerd" --config "$CLUSTER_DIR/containerd/config.toml"
}

start_proxy() {
  start kube-proxy "$KUBE_BIN/kube-proxy" --config "$CLUSTER_DIR/kube-proxy.yaml" --v=1
}

tcp_open() { (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; }
port_free() { ! tcp_open "$1"; }

# The checks below print what they saw when they fail (wait_for shows it); none pipes into
# grep -q (see hack/lib.sh wait_for).

node_ip_on_lo() {
  local a
  a="$(ip -4 -o addr show dev lo)" || die "ip addr show dev lo failed: $a"
  [[ "$a" == *" $NODE_IP/32 "* ]]
}

# cri_has_image <ref>: the CRI image service (what the kubelet asks) has the image.
cri_has_image() {
  "$KUBE_BIN/crictl" --runtime-endpoint "unix://$CONTAINERD_SOCK" --image-endpoint "unix://$CONTAINERD_SOCK" inspecti "$1" >/dev/null
}

# ctr_images: the names of containerd's images in namespace k8s.io, on one line.
ctr_images() {
  local out err
  err="$(mktemp)"
  out="$("$KUBE_BIN/ctr" --address "$CONTAINERD_SOCK" -n k8s.io images ls -q 2>"$err")" \
    || out="(ctr images ls failed: $(cat "$err"))"
  rm -f "$err"
  echo "${out//$'\n'/ }"
}

kube_service_rule() {
  local rules
  rules="$(iptables -t nat -S KUBE-SERVICES 2>&1)" || { echo "$rules"; return 1; }
  [[ "$rules" == *"$KUBERNETES_SERVICE_IP/32"* ]] || { echo "$rules"; return 1; }
}

# node_ready: the node's Ready condition is True (prints its conditions otherwise).
node_ready() {
  local c
  c="$(kctl get node "$NODE_NAME" -o jsonpath='{range .status.conditions[*]}{.type}={.status} ({.reason}: {.message}){"\n"}{end}' 2>&1)" \
    || { echo "$c"; return 1; }
  local l
  while IFS= read -r l; do [[ "$l" != "Ready=True "* ]] || return 0; done <<<"$c"
  echo "$c"
  return 1
}

# no_workload_pods: no pod outside fake-dra and kube-system (prints those there are).
no_workload_pods() {
  local out err
  err="$(mktemp)"
  # stderr apart: with no pods at all kubectl says "No resources found" there.
  out="$(kctl get pods -A --no-headers -o custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,PHASE:.status.phase 2>"$err")" \
    || { cat "$err"; rm -f "$err"; return 1; }
  rm -f "$err"
  out="$(awk '$1 != "fake-dra" && $1 != "kube-system"' <<<"$out")"
  [[ -z "$out" ]] || { echo "$out"; return 1; }
}

# The CDI vendors of the drivers this repository deploys on the cluster (fake-dra, the
# fpga example).
OUR_CDI_VENDORS=(k8s.fake.resource.3-shake.com k8s.fpga.example.com)

# set_aside_stale_cdi_specs: with a fresh kubelet root no claim is prepared, so our drivers'
# specs in /var/run/cdi are an earlier cluster's that was killed before down. Left there,
# they stop our plugin at start (a checkpoint missing beside prepared claims' specs is what
# a wrong --plugin-dir looks like), so they move to $LOGS/stale-cdi, named here.
set_aside_stale_cdi_specs() {
  local v f moved=()
  for v in "${OUR_CDI_VENDORS[@]}"; do
    for f in /var/run/cdi/"$v"-*.json; do
      [[ -e "$f" ]] || continue
      mkdir -p "$LOGS/stale-cdi"
      mv -f "$f" "$LOGS/stale-cdi/" && moved+=("${f##*/}")
    done
  done
  ((${#moved[@]} == 0)) \
    || echo "warning: moved ${#moved[@]} CDI spec(s) of an earlier cluster from /var/run/cdi to $LOGS/stale-cdi: ${moved[*]}" >&2
}

up() {
  check_prereqs
  if running kube-apiserver && running kubelet; then echo "the cluster runs already"; status; return; fi
  local p kind_nodes
  # kind's nodes add host firewall rules (its bridge network) and run kubelets of their own.
  kind_nodes="$(kind_node_containers)"
  [[ -z "$kind_nodes" ]] || die "kind nodes run (${kind_nodes//$'\n'/ }); this cluster must not run beside them: delete that cluster first (hack/kind-down.sh)"
  for p in "$ETCD_CLIENT" "$ETCD_PEER" 127.0.0.1:6443 127.0.0.1:10250 127.0.0.1:10257 127.0.0.1:10259; do
    port_free "$p" || die "port ${p##*:} is in use (another cluster? hack/local-cluster.sh down)"
  done
  mkdir -p "$CLUSTER_DIR" "$LOGS" "$RUN"
  rm -rf "$LOGS"/*.log "$CLUSTER_DIR/pod-logs"
  local t0=$SECONDS
  make_pki
  kubeconfig "$ADMIN_KUBECONFIG" kubernetes-admin admin
  kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" system:kube-controller-manager controller-manager
  kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" system:kube-scheduler scheduler
  kubeconfig "$CLUSTER_DIR/kube-proxy.kubeconfig" system:kube-proxy kube-proxy
  kubeconfig "$CLUSTER_DIR/kubelet.kubeconfig" "system:node:$NODE_NAME" kubelet-client
  write_configs

  # The node IP: a /32 on lo, so nothing is reachable from outside this machine; pods
  # reach it through their default route (the bridge), the host directly.
  node_ip_on_lo || ip addr add "$NODE_IP/32" dev lo
  # The bridge exists before containerd starts (the CNI plugin would make it at the first
  # pod), so down knows it is ours.
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  ip link set "$BRIDGE" up
  if [[ ! -f "$RUN/sysctl.saved" ]]; then
    local s
    for s in "${KUBELET_SYSCTLS[@]}"; do echo "$s=$(sysctl -n "$s")"; done >"$RUN/sysctl.saved"
  fi
  ls /run/netns 2>/dev/null >"$RUN/netns.before" || true
  # Directories that containerd and the CNI library make outside $CLUSTER_DIR: down removes
  # those that were not there before.
  if [[ ! -f "$RUN/preexisting" ]]; then
    local d
    for d in /run/containerd /var/lib/cni "$KUBELET_ROOT" /var/log/pods; do [[ ! -e "$d" ]] || echo "$d"; done >"$RUN/preexisting"
    if grep -qx "$KUBELET_ROOT" "$RUN/preexisting"; then
      echo "warning: $KUBELET_ROOT exists already (an earlier cluster not taken down?); down will leave it" >&2
    else
      set_aside_stale_cdi_specs
    fi
    ls /var/run/cdi 2>/dev/null >"$RUN/cdi.before" || true
  fi

  # KUBE_API_QPS as up saw it, so that restart gives the same flags.
  echo "${KUBE_API_QPS:-}" >"$RUN/kube-api-qps"
  start_etcd
  wait_for etcd 30 tcp_open "$ETCD_CLIENT" || die "etcd did not start; see $LOGS/etcd.log"

  start_apiserver
  wait_for kube-apiserver 120 kctl get --raw /readyz || die "kube-apiserver did not become ready; see $LOGS/kube-apiserver.log"
  echo "kube-apiserver ready after $((SECONDS - t0)) s"

  start_controller_manager
  start_scheduler

  start_containerd
  wait_for containerd 30 "$KUBE_BIN/crictl" --runtime-endpoint "unix://$CONTAINERD_SOCK" version || die "containerd did not start; see $LOGS/containerd.log"
  local a
  shopt -s nullglob
  for a in "$IMAGES_DIR"/*.tar; do load "$a"; done
  shopt -u nullglob
  [[ -f "$IMAGES_DIR/pause.tar" ]] \
    || die "no sandbox image archive $IMAGES_DIR/pause.tar; run hack/build-image-local.sh (it writes it)"
  # The kubelet asks the CRI image service, which learns of an imported image from
  # containerd's ImageCreate event a moment after the import returns: wait for it there.
  wait_for "the CRI image service to list the sandbox image $SANDBOX_IMAGE" 30 cri_has_image "$SANDBOX_IMAGE" \
    || die "the sandbox image $SANDBOX_IMAGE is not in the CRI image service after loading $IMAGES_DIR/pause.tar; containerd's images: $(ctr_images); see $LOGS/containerd.log"

  start_kubelet
  start_proxy

  wait_for node 120 kctl get node "$NODE_NAME" || die "node $NODE_NAME did not register; see $LOGS/kubelet.log"
  wait_for "node $NODE_NAME to be Ready" 120 node_ready || die "node $NODE_NAME is not Ready; see $LOGS/kubelet.log"
  # The kubernetes Service must reach the API server from a pod: kube-proxy's rules.
  wait_for "kube-proxy's rule for the kubernetes Service" 60 kube_service_rule \
    || die "kube-proxy wrote no rule for the kubernetes Service ($KUBERNETES_SERVICE_IP); see $LOGS/kube-proxy.log"
  # The default ServiceAccount must exist before pods can be created.
  wait_for serviceaccount 60 kctl -n default get serviceaccount default || die "no default ServiceAccount; see $LOGS/kube-controller-manager.log"
  echo "cluster up in $((SECONDS - t0)) s: Kubernetes $KUBE_VERSION, node $NODE_NAME ($NODE_IP)"
  echo "export KUBECONFIG=$ADMIN_KUBECONFIG"
}

load() {
  [[ -f "$1" ]] || die "no image archive $1"
  local out
  out="$("$KUBE_BIN/ctr" --address "$CONTAINERD_SOCK" -n k8s.io images import "$1" 2>&1)" \
    || die "ctr images import $1 failed: $out"
  echo "loaded $(basename "$1")"
}

# --- down ---------------------------------------------------------------------------

# unmount_under <dir>: every mount point at or below it, deepest first.
unmount_under() {
  local m
  awk -v d="$1" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/self/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || echo "could not unmount $m"
  done || true
}

# remove_kube_chains: every iptables/ip6tables chain named KUBE-* and the rules jumping to it.
remove_kube_chains() {
  local cmd t rule chain
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null 2>&1 || continue
    for t in raw mangle nat filter; do
      "$cmd" -t "$t" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' | while read -r rule; do
        # shellcheck disable=SC2086  # the rule's words are the arguments
        eval "'$cmd' -t '$t' -D ${rule#-A }" 2>/dev/null || true
      done || true
      for chain in $("$cmd" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ { print $2 }'); do
        "$cmd" -t "$t" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$cmd" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ { print $2 }'); do
        "$cmd" -t "$t" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

down() {
  [[ "$(id -u)" == 0 ]] || die "must run as root"
  mkdir -p "$RUN"
  local t0=$SECONDS ns
  if running kube-apiserver && running kubelet && [[ -f "$ADMIN_KUBECONFIG" ]]; then
    # Workload pods first, while the kubelet and the DRA plugin run, so their claims are
    # unprepared (the plugin removes its CDI specs); then everything else.
    for ns in $(kctl get namespaces -o name 2>/dev/null | sed 's|^namespace/||'); do
      [[ "$ns" == fake-dra || "$ns" == kube-system ]] || kctl -n "$ns" delete pods --all --wait=false >/dev/null 2>&1 || true
    done
    wait_for "workload pods gone" 60 no_workload_pods || echo "some pods were still there after 60 s (above)"
  fi
  # The claims of this cluster: their CDI specs go if the plugin could not remove them.
  local uids=""
  if running kube-apiserver && [[ -f "$ADMIN_KUBECONFIG" ]]; then
    uids="$(kctl get resourceclaims -A -o jsonpath='{.items[*].metadata.uid}' 2>/dev/null || true)"
  fi
  stop kube-proxy
  stop kubelet
  if running containerd; then
    local crictl=("$KUBE_BIN/crictl" --runtime-endpoint "unix://$CONTAINERD_SOCK")
    # SIGTERM first (the plugin removes its sockets), then sandboxes: CNI DEL, mounts.
    local ids
    ids="$("${crictl[@]}" ps -q 2>/dev/null || true)"
    # shellcheck disable=SC2086  # one argument per container id
    [[ -z "$ids" ]] || "${crictl[@]}" stop --timeout 20 $ids >/dev/null 2>&1 || true
    "${crictl[@]}" rmp -fa >/dev/null 2>&1 || true
  fi
  for c in kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do stop "$c"; done
  # Processes still in the pod cgroups (a container whose shim went away), then the shims
  # of this containerd (they outlive it by design).
  local p
  find /sys/fs/cgroup/*/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | while read -r p; do
    kill -KILL "$p" 2>/dev/null && echo "killed leftover container process $p"
  done || true
  for p in $(pgrep -f "^$KUBE_BIN/containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" || true); do
    if kill -KILL "$p" 2>/dev/null; then echo "killed leftover shim $p"; fi
  done
  # Mounts: volumes of the kubelet, rootfs/shm of containerd, runc state.
  unmount_under "$KUBELET_ROOT"
  unmount_under "$CLUSTER_DIR"
  unmount_under /run/containerd
  # Network namespaces made by this cluster's pods (not there before up).
  if [[ -d /run/netns ]]; then
    local f n
    for f in /run/netns/cni-*; do
      [[ -e "$f" ]] || continue
      n="${f##*/}"
      grep -qx "$n" "$RUN/netns.before" 2>/dev/null && continue
      umount "/run/netns/$n" 2>/dev/null || true
      rm -f "/run/netns/$n"; echo "removed netns $n"
    done
  fi
  # kube-proxy's chains (all modes), then whatever KUBE-* chains are left (the kubelet's
  # KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT, KUBE-FIREWALL), then the bridge and the node IP.
  if [[ -x "$KUBE_BIN/kube-proxy" ]]; then "$KUBE_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
  remove_kube_chains
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    for n in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do ip link del "$n" 2>/dev/null || true; done
    ip link del "$BRIDGE" && echo "removed bridge $BRIDGE"
  fi
  if node_ip_on_lo; then ip addr del "$NODE_IP/32" dev lo && echo "removed $NODE_IP from lo"; fi
  # The pod cgroups the kubelet made (cgroupfs driver), deepest first.
  find /sys/fs/cgroup/*/kubepods -depth -type d -exec rmdir {} \; 2>/dev/null || true
  # The kubelet's links to the container logs (the logs themselves stay in pod-logs/; a
  # kubelet before 1.30 wrote /var/log/pods, removed below when up made it).
  local l own_pod_logs=false
  grep -qsx /var/log/pods "$RUN/preexisting" || own_pod_logs=true
  for l in /var/log/containers/*.log; do
    [[ -L "$l" ]] || continue
    case "$(readlink "$l")" in
      "$CLUSTER_DIR/pod-logs/"*) rm -f "$l" ;;
      /var/log/pods/*) ! $own_pod_logs || rm -f "$l" ;;
    esac
  done
  rmdir /var/log/containers 2>/dev/null || true
  local u d f v
  for u in $uids; do rm -f "/var/run/cdi/k8s.fake.resource.3-shake.com-fake_$u.json"; done
  if grep -qs "FAKE_NODE_NAME=$NODE_NAME\"" /var/run/cdi/k8s.fake.resource.3-shake.com-fake_common.json; then
    rm -f /var/run/cdi/k8s.fake.resource.3-shake.com-fake_common.json
  fi
  # Whatever else our drivers wrote there since up (claims the API server no longer
  # listed, other profiles, the fpga example): the next up must not find it.
  if [[ -f "$RUN/cdi.before" ]]; then
    for v in "${OUR_CDI_VENDORS[@]}"; do
      for f in /var/run/cdi/"$v"-*.json; do
        [[ -e "$f" ]] || continue
        grep -qxF "${f##*/}" "$RUN/cdi.before" || rm -f "$f"
      done
    done
  fi
  if [[ -f "$RUN/sysctl.saved" ]]; then
    sysctl -q -p "$RUN/sysctl.saved" >/dev/null || echo "could not restore every kernel setting of $RUN/sysctl.saved"
  fi
  # State: etcd, containerd, kubelet, certificates; the logs stay for a look afterwards.
  # Never while something is still mounted there (rm would go into the mount).
  local left
  left="$(awk -v a="$KUBELET_ROOT" -v b="$CLUSTER_DIR" -v c=/run/containerd \
    'index($2, a "/") == 1 || index($2, b "/") == 1 || index($2, c "/") == 1 { print $2 }' /proc/self/mounts)"
  [[ -z "$left" ]] || die "still mounted, state not removed (unmount and run down again): $left"
  rm -f /var/lib/cni/results/fake-dra-* 2>/dev/null || true
  for d in /run/containerd /var/lib/cni "$KUBELET_ROOT" /var/log/pods; do
    if [[ -e "$d" ]] && ! grep -qx "$d" "$RUN/preexisting" 2>/dev/null; then rm -rf "$d"; fi
  done
  rm -rf "$CLUSTER_DIR/etcd" "$CLUSTER_DIR/containerd" "$CLUSTER_DIR/cni" "$PKI" "$RUN" \
    "$CLUSTER_DIR"/*.kubeconfig "$CLUSTER_DIR"/*.yaml 2>/dev/null || true
  echo "cluster down in $((SECONDS - t0)) s (logs kept in $LOGS)"
}

# --- restart, crictl, env -------------------------------------------------------

# cri_ready: containerd's CRI says the runtime and the pod network are ready (prints its
# conditions otherwise).
cri_ready() {
  local c
  c="$("$KUBE_BIN/crictl" --runtime-endpoint "unix://$CONTAINERD_SOCK" info -o go-template \
    --template '{{range .status.conditions}}{{.type}}={{.status}} {{end}}' 2>&1)" || { echo "$c"; return 1; }
  [[ "$c" == *"RuntimeReady=true"* && "$c" == *"NetworkReady=true"* ]] || { echo "$c"; return 1; }
}

# restart <component> [--down-for SECONDS]: SIGTERM to the component (SIGKILL after 15 s;
# containers keep running through a kubelet or containerd restart, their shims outlive
# containerd), SECONDS with it stopped (default 0), then the same command line as up.
# Waits, with a deadline, until it serves again, and prints what it saw when it does not:
#   etcd, kube-apiserver            the API server's /readyz
#   kube-controller-manager,
#   kube-scheduler, kube-proxy      their port (10257, 10259, healthz 10256) accepts
#   containerd                      crictl version, then the CRI's RuntimeReady and
#                                   NetworkReady, then the node Ready
#   kubelet                         its healthz through the API server's node proxy (also
#                                   its serving certificate)
restart() {
  [[ "$(id -u)" == 0 ]] || die "must run as root"
  local name="" down_for=0
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --down-for) down_for="${2:-}"; shift 2 || die "--down-for needs a number of seconds" ;;
      -*) die "unknown flag for restart: $1 (try --help)" ;;
      *) [[ -z "$name" ]] || die "restart takes one component, got '$name' and '$1'"; name="$1"; shift ;;
    esac
  done
  [[ "$down_for" =~ ^[0-9]+$ ]] || die "--down-for takes whole seconds, got '$down_for'"
  [[ "$name" != apiserver ]] || name=kube-apiserver
  [[ -n "$name" && " ${COMPONENTS[*]} " == *" $name "* ]] \
    || die "restart needs a component, one of: ${COMPONENTS[*]} (got '${name}')"
  running "$name" || die "$name does not run (hack/local-cluster.sh up)"
  local t0=$SECONDS t1
  stop "$name"
  if ((down_for > 0)); then
    echo "$name stays stopped for $down_for s"
    sleep "$down_for"
  fi
  t1=$SECONDS
  case "$name" in
    etcd)
      start_etcd
      wait_for "the restarted etcd" 30 tcp_open "$ETCD_CLIENT" || die "the restarted etcd does not listen; see $LOGS/etcd.log"
      wait_for "kube-apiserver ready again with etcd" 120 kctl get --raw /readyz || die "kube-apiserver is not ready after the etcd restart; see $LOGS/kube-apiserver.log" ;;
    kube-apiserver)
      start_apiserver
      wait_for "the restarted kube-apiserver to be ready" 120 kctl get --raw /readyz || die "the restarted kube-apiserver is not ready; see $LOGS/kube-apiserver.log" ;;
    kube-controller-manager)
      start_controller_manager
      wait_for "the restarted kube-controller-manager" 60 tcp_open 127.0.0.1:10257 || die "see $LOGS/kube-controller-manager.log" ;;
    kube-scheduler)
      start_scheduler
      wait_for "the restarted kube-scheduler" 60 tcp_open 127.0.0.1:10259 || die "see $LOGS/kube-scheduler.log" ;;
    kube-proxy)
      start_proxy
      wait_for "the restarted kube-proxy" 60 tcp_open 127.0.0.1:10256 || die "see $LOGS/kube-proxy.log" ;;
    containerd)
      start_containerd
      wait_for "the restarted containerd" 30 "$KUBE_BIN/crictl" --runtime-endpoint "unix://$CONTAINERD_SOCK" version \
        || die "the restarted containerd does not answer; see $LOGS/containerd.log"
      wait_for "the CRI runtime and pod network ready" 60 cri_ready || die "containerd's CRI is not ready; see $LOGS/containerd.log"
      wait_for "node $NODE_NAME to be Ready" 120 node_ready || die "node $NODE_NAME is not Ready after the containerd restart; see $LOGS/kubelet.log" ;;
    kubelet)
      start_kubelet
      wait_for "the restarted kubelet" 120 kctl get --raw "/api/v1/nodes/$NODE_NAME/proxy/healthz" \
        || die "the restarted kubelet does not answer; see $LOGS/kubelet.log" ;;
  esac
  echo "$name restarted (pid $(pid_of "$name")): stopped for $((t1 - t0)) s, serving $((SECONDS - t1)) s after its start"
}

# env: the cluster's paths as shell assignments, for tools that drive it (the Rust e2e
# suite e2e/tests/it/real_cluster.rs reads them instead of repeating the layout).
print_env() {
  printf 'KUBECONFIG=%q\nKUBE_BIN=%q\nKUBE_VERSION=%q\nCLUSTER_DIR=%q\nNODE_NAME=%q\nCONTAINERD_SOCK=%q\nIMAGES_DIR=%q\nLOGS=%q\n' \
    "$ADMIN_KUBECONFIG" "$KUBE_BIN" "$KUBE_VERSION" "$CLUSTER_DIR" "$NODE_NAME" "$CONTAINERD_SOCK" "$IMAGES_DIR" "$LOGS"
}

# --- status -------------------------------------------------------------------------

status() {
  local c any=false
  for c in "${COMPONENTS[@]}"; do
    if running "$c"; then echo "running  $c (pid $(pid_of "$c"))"; any=true; else echo "stopped  $c"; fi
  done
  if running kube-apiserver && [[ -x "$KUBE_BIN/kubectl" ]]; then
    kctl get nodes -o wide || true
    kctl get pods -A -o wide || true
    echo "export KUBECONFIG=$ADMIN_KUBECONFIG"
  fi
  $any || echo "no component runs (hack/local-cluster.sh up starts them)"
}

cmd="${1:-}"
case "$cmd" in
  -h|--help|help) usage ;;
  up) up ;;
  down) down ;;
  status) status ;;
  load) shift; [[ $# -gt 0 ]] || die "load needs at least one image archive"; for a in "$@"; do load "$a"; done ;;
  kubeconfig) echo "$ADMIN_KUBECONFIG" ;;
  restart) shift; restart "$@" ;;
  restart-kubelet) restart kubelet ;;
  crictl) shift; exec "$KUBE_BIN/crictl" --runtime-endpoint "unix://$CONTAINERD_SOCK" "$@" ;;
  env) print_env ;;
  "") usage; exit 2 ;;
  *) die "unknown command: $cmd (try --help)" ;;
esac
