#!/usr/bin/env bash
# One real node for the local cluster: a real kubelet and containerd running real pods, beside the KWOK
# nodes. hack/cluster/up.sh --real-node (or GPUCTL_TESTBED_REAL_NODE=1) calls it; down.sh removes it.
#
#   real-node.sh vars      the node's addresses for this port offset (up.sh evals them before the API server)
#   real-node.sh check     prerequisites (root, containerd, runc, CNI plugins, the built images)
#   real-node.sh up        start it (env from up.sh: RUN OFF CACHE KUBECTL KC PKI P_API PAUSE_DIR PAUSE_IMAGE)
#   real-node.sh import F  import one more image archive (OCI or docker-archive) into its containerd
#   real-node.sh down      stop it and remove everything it made on this machine
#   real-node.sh ctr ...   run ctr (containerd's client) inside the node, e.g. `ctr -n k8s.io images ls`
#
# Everything the node does on the machine is confined, so down leaves nothing behind:
# - namespaces: containerd, the kubelet and every container run inside one PID + mount + network namespace
#   (`unshare --pid --mount --net --kill-child`); killing that unshare process kills all of them at once;
# - network: the node's own network namespace (its iptables rules, the CNI bridge, the pods' veths live
#   there) joined to the machine by one veth pair: gpuctl-rn<offset> on the machine (10.(128+o/256).(o%256).1)
#   and eth0 in the node (.2, the node's InternalIP); a route sends the pod subnet 10.(96+o/256).(o%256).0/24
#   to the node, so the API server and a Prometheus on the machine reach pod IPs. The pair and the route go
#   with the namespace. The API server listens on 0.0.0.0 and advertises the machine's end of the pair, so
#   the `kubernetes` Service's endpoint is reachable from pods; in the node one DNAT rule takes pods'
#   10.0.0.1:443 there, the rule kube-proxy would write (no kube-proxy here: nothing else in the pods
#   needs a Service, and the API server calls webhooks by endpoint, --enable-aggregator-routing);
# - files: under $RUN/node (containerd's root and state, the kubelet's root dir, CNI state); inside the
#   mount namespace /run is a tmpfs and /var/lib, /var/log are bind mounts of $RUN/node/var-{lib,log}, so
#   the defaults nobody can configure (shim sockets, CNI cache, /var/log/pods) land there too;
# - cgroups (v1 here, the kubelet runs with failCgroupV1: false): everything under gpuctl-rn-<offset> in
#   each hierarchy (the kubelet's cgroupRoot; containerd and the kubelet themselves in .../runtime);
#   down removes the directories once the processes are gone.
# The node registers as gpuctl-real-node with label and taint gpuctl.runwhere.ai/platform=true (NoSchedule):
# only pods that tolerate it (the chart with hack/cluster/real-node-values.yaml) land there.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
source "$HERE/versions.env"
CACHE="${GPUCTL_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuctl-testbed}"
RUN="${GPUCTL_TESTBED_RUN:-$CACHE/run}"
OFF="${GPUCTL_TESTBED_PORT_OFFSET:-0}"
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"

N="$RUN/node"
# down and import act on the node up made, whatever the caller's environment says.
if [[ -f "$N/offset" ]]; then OFF=$(cat "$N/offset"); fi
NODE_NAME=gpuctl-real-node
PLATFORM_KEY=gpuctl.runwhere.ai/platform
X=$(( (OFF >> 8) & 31 )); Y=$(( OFF & 255 ))
LINK_HOST="10.$((128 + X)).$Y.1"; LINK_NODE="10.$((128 + X)).$Y.2"
POD_CIDR="10.$((96 + X)).$Y.0/24"
HOST_IF="gpuctl-rn$OFF"
CG="gpuctl-rn-$OFF"
KUBELET="$CACHE/bin/kubelet-$K8S_VERSION/kubelet"
COREDNS="$CACHE/bin/coredns-$COREDNS_VERSION/coredns"
IMAGE_ARCHIVE="${GPUCTL_IMAGE_ARCHIVE:-$ROOT/build/image/gpuctl.oci.tar}"
SOCK="$N/containerd.sock"

log() { echo "real-node: $*"; }
die() { echo "real-node: error: $*" >&2; exit 1; }

# cgroup hierarchies: "TYPE MOUNTPOINT" of every cgroup (v1) and cgroup2 mount.
cgroup_mounts() { awk '$3 == "cgroup" || $3 == "cgroup2" {print $3, $2}' /proc/self/mounts; }

cmd_vars() {
  echo "RN_LINK_HOST=$LINK_HOST"
  echo "RN_LINK_NODE=$LINK_NODE"
  echo "RN_POD_CIDR=$POD_CIDR"
  echo "RN_HOST_IF=$HOST_IF"
  echo "RN_NODE_NAME=$NODE_NAME"
}

cmd_check() {
  local missing=() t
  [[ $(id -u) == 0 ]] || die "a real node needs root (namespaces, cgroups, mounts, veth)"
  for t in containerd containerd-shim-runc-v2 runc ctr unshare nsenter ip iptables; do
    command -v "$t" >/dev/null || missing+=("$t")
  done
  for t in bridge host-local loopback; do [[ -x /usr/lib/cni/$t ]] || missing+=("/usr/lib/cni/$t"); done
  (( ${#missing[@]} == 0 )) || die "missing ${missing[*]}: apt-get install containerd runc containernetworking-plugins iptables util-linux"
  grep -qw overlay /proc/filesystems || die "the kernel has no overlay filesystem (containerd's overlayfs snapshotter needs it)"
  [[ -n "$(cgroup_mounts | awk '$1 == "cgroup"')" ]] || die "no cgroup v1 hierarchy mounted (this testbed's kubelet runs with cgroupfs on v1)"
  [[ -x "$KUBELET" ]] || die "$KUBELET is missing: GPUCTL_BUILD_REAL_NODE=1 hack/cluster/build.sh"
  [[ -x "$COREDNS" ]] || die "$COREDNS is missing: GPUCTL_BUILD_REAL_NODE=1 hack/cluster/build.sh"
  [[ -f "${PAUSE_DIR:-/nonexistent}/pause.oci.tar" ]] || die "the pause image is missing: GPUCTL_BUILD_REAL_NODE=1 hack/cluster/build.sh"
  [[ -f "$IMAGE_ARCHIVE" ]] || die "$IMAGE_ARCHIVE is missing: build the image first (sudo hack/image.sh), or set GPUCTL_IMAGE_ARCHIVE"
  if ip link show "$HOST_IF" >/dev/null 2>&1; then
    die "interface $HOST_IF exists: a real node of another cluster with port offset $OFF runs (or a stale one: hack/cluster/down.sh with its GPUCTL_TESTBED_RUN)"
  fi
  if [[ -n "$(ip -4 route show to "$POD_CIDR")" || -n "$(ip -4 route show to "${LINK_HOST%.1}.0/30")" ]]; then
    die "a route to $POD_CIDR or ${LINK_HOST%.1}.0/30 exists already: pick another GPUCTL_TESTBED_PORT_OFFSET"
  fi
}

write_config() {
  mkdir -p "$N"/{containerd/opt,kubelet,cni/conf,cni/ipam,var-lib,var-log,runc,pki}
  echo "$OFF" >"$N/offset"
  local pki="$N/pki"
  # The kubelet's client certificate: the Node authorizer's identity for this node.
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:nodes/CN=system:node:$NODE_NAME" \
    -keyout "$pki/node.key" -out "$pki/node.csr" >/dev/null 2>&1
  printf "extendedKeyUsage=clientAuth\n" >"$pki/node.ext"
  openssl x509 -req -in "$pki/node.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 3650 \
    -extfile "$pki/node.ext" -out "$pki/node.crt" >/dev/null 2>&1
  local kc="$N/kubelet.kubeconfig"
  "$KUBECTL" config --kubeconfig="$kc" set-cluster testbed --server="https://$LINK_HOST:$P_API" \
    --certificate-authority="$PKI/ca.crt" --embed-certs=true >/dev/null
  "$KUBECTL" config --kubeconfig="$kc" set-credentials node --client-certificate="$pki/node.crt" \
    --client-key="$pki/node.key" --embed-certs=true >/dev/null
  "$KUBECTL" config --kubeconfig="$kc" set-context testbed --cluster=testbed --user=node >/dev/null
  "$KUBECTL" config --kubeconfig="$kc" use-context testbed >/dev/null

  # CoreDNS: its own ServiceAccount with the read-only role kubeadm gives it (system:coredns), a kubeconfig
  # holding that token only; the Corefile answers the cluster domain from Services and EndpointSlices (a
  # headless Service's pods by host name: <job>-0.svc-<job>.<ns>.svc.cluster.local), nothing else (no
  # upstream: the machine may have none). No cache: a rank asking before its peer's endpoint exists would
  # keep the negative answer.
  "$KUBECTL" --kubeconfig="$KC" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: ServiceAccount, metadata: {name: coredns, namespace: kube-system}}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: "system:coredns"}
  rules:
  - {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
  - {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRoleBinding
  metadata: {name: "system:coredns"}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
  subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
EOF
  kc="$N/coredns.kubeconfig"
  "$KUBECTL" config --kubeconfig="$kc" set-cluster testbed --server="https://$LINK_HOST:$P_API" \
    --certificate-authority="$PKI/ca.crt" --embed-certs=true >/dev/null
  "$KUBECTL" config --kubeconfig="$kc" set-credentials coredns \
    --token="$("$KUBECTL" --kubeconfig="$KC" -n kube-system create token coredns --duration=8760h)" >/dev/null
  "$KUBECTL" config --kubeconfig="$kc" set-context testbed --cluster=testbed --user=coredns >/dev/null
  "$KUBECTL" config --kubeconfig="$kc" use-context testbed >/dev/null
  chmod 600 "$kc"
  cat >"$N/Corefile" <<EOF
.:53 {
    errors
    log
    health 127.0.0.1:8080
    ready 127.0.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $kc testbed
        fallthrough in-addr.arpa ip6.arpa
    }
}
EOF

  cat >"$N/containerd.toml" <<EOF
version = 2
root = "$N/containerd/root"
state = "$N/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$N/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$N/cni/conf"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$N/runc"
EOF
  # bridge + host-local: pods get addresses of POD_CIDR on bridge cni0 in the node's namespace; no
  # masquerading (the machine routes the pod subnet to the node, so pod IPs are seen as they are).
  cat >"$N/cni/conf/10-gpuctl.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "gpuctl-real-node", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$N/cni/ipam", "ranges": [[{"subnet": "$POD_CIDR"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}}]}
EOF
  cat >"$N/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Kubernetes 1.36 refuses cgroup v1 unless told; this machine mounts only v1 controllers.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CG
containerRuntimeEndpoint: unix://$SOCK
address: $LINK_NODE
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
registerWithTaints: [{key: $PLATFORM_KEY, value: "true", effect: NoSchedule}]
# The cluster DNS: CoreDNS in the node's network namespace at the node's address (ns-init starts it);
# pods reach the API server by the kubernetes Service's IP. No resolv.conf of the machine's.
clusterDNS: [$LINK_NODE]
clusterDomain: cluster.local
resolvConf: ""
failSwapOn: false
# No registry: an image garbage-collected could never be pulled again.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
serializeImagePulls: false
EOF
}

# import_image ARCHIVE: into the CRI's namespace under the archive's own name (io.containerd.image.name,
# e.g. ghcr.io/runwhere/gpuctl:0.1.0) and REPO@DIGEST, the name the kubelet asks for when the chart pins
# `repo:tag@digest` (the CRI drops the tag of a reference that has a digest).
import_image() {
  local name
  name=$(tar -xOf "$1" index.json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["manifests"][0]["annotations"]["io.containerd.image.name"])' 2>/dev/null) \
    || die "$1 has no io.containerd.image.name annotation in its index.json"
  ctr -a "$SOCK" -n k8s.io images import --digests --base-name "${name%:*}" "$1" >/dev/null
  # (not `ctr ... | grep -q`: grep's early exit would fail the pipeline under pipefail)
  local names; names=$(ctr -a "$SOCK" -n k8s.io images ls -q)
  grep -qx "$name" <<<"$names" || die "importing $1 did not give image $name"
}

# PID 1 of the node's namespaces (started by cmd_up through unshare).
cmd_ns_init() {
  mount -t tmpfs -o mode=0755 tmpfs /run
  mount --bind "$N/var-lib" /var/lib
  mount --bind "$N/var-log" /var/log
  local end=$(( $(date +%s) + 30 ))
  until ip link show eth0 >/dev/null 2>&1; do
    (( $(date +%s) < end )) || die "eth0 never arrived in the node's network namespace"
    sleep 0.1
  done
  ip link set lo up
  ip addr add "$LINK_NODE/30" dev eth0
  ip link set eth0 up
  ip route add default via "$LINK_HOST"
  echo 1 >/proc/sys/net/ipv4/ip_forward
  # The kubernetes Service for pods (what kube-proxy would program from its endpoints).
  iptables -t nat -N GPUCTL-KUBERNETES
  iptables -t nat -A GPUCTL-KUBERNETES -d 10.0.0.1/32 -p tcp --dport 443 -j DNAT --to-destination "$LINK_HOST:$P_API"
  iptables -t nat -A PREROUTING -j GPUCTL-KUBERNETES
  iptables -t nat -A OUTPUT -j GPUCTL-KUBERNETES
  "$COREDNS" -conf "$N/Corefile" >"$RUN/logs/coredns.log" 2>&1 &
  containerd --config "$N/containerd.toml" >"$RUN/logs/containerd.log" 2>&1 &
  end=$(( $(date +%s) + 60 ))
  until ctr -a "$SOCK" version >/dev/null 2>&1; do
    (( $(date +%s) < end )) || die "containerd did not answer on $SOCK within 60s (logs/containerd.log)"
    sleep 0.2
  done
  import_image "$PAUSE_DIR/pause.oci.tar"
  import_image "$IMAGE_ARCHIVE"
  touch "$N/images-imported"
  "$KUBELET" --config="$N/kubelet.yaml" --kubeconfig="$N/kubelet.kubeconfig" --root-dir="$N/kubelet" \
    --hostname-override="$NODE_NAME" --node-ip="$LINK_NODE" --node-labels="$PLATFORM_KEY=true" \
    --v=1 >"$RUN/logs/kubelet.log" 2>&1 &
  # The pause binary is an init that reaps what it adopts (the shims of the containers).
  exec "$PAUSE_DIR/pause"
}

cmd_up() {
  cmd_check
  local t0 procs=() typ mp u init="" end
  t0=$(date +%s)
  write_config
  # cgroups: one tree per hierarchy; every process of the node starts in .../runtime.
  while read -r typ mp; do
    [[ $typ == cgroup ]] || continue
    mkdir -p "$mp/$CG/runtime"
    if [[ -f "$mp/cpuset.cpus" ]]; then
      for f in cpuset.cpus cpuset.mems; do
        cat "$mp/$f" >"$mp/$CG/$f"; cat "$mp/$f" >"$mp/$CG/runtime/$f"
      done
    fi
    procs+=("$mp/$CG/runtime/cgroup.procs")
  done < <(cgroup_mounts)
  export RUN OFF CACHE PKI P_API PAUSE_DIR PAUSE_IMAGE GPUCTL_IMAGE_ARCHIVE="$IMAGE_ARCHIVE"
  setsid bash -c 'for f in "${@:2}"; do echo $$ >"$f"; done; exec unshare --pid --fork --kill-child --mount-proc \
      --mount --propagation private --net "$1" ns-init' _ "$HERE/real-node.sh" "${procs[@]}" \
    >"$RUN/logs/real-node.log" 2>&1 </dev/null &
  u=$!
  echo "$u" >"$RUN/pids/real-node"
  end=$(( $(date +%s) + 10 ))
  while [[ -z "$init" ]]; do
    init=$(cat "/proc/$u/task/$u/children" 2>/dev/null | awk '{print $1}') || true
    kill -0 "$u" 2>/dev/null || die "the node's namespaces did not start: $(cat "$RUN/logs/real-node.log")"
    (( $(date +%s) < end )) || die "unshare ($u) started no init"
    [[ -n "$init" ]] || sleep 0.05
  done
  echo "$init" >"$RUN/pids/real-node-init"
  ip link add "$HOST_IF" type veth peer name eth0 netns "$init"
  ip addr add "$LINK_HOST/30" dev "$HOST_IF"
  ip link set "$HOST_IF" up
  ip route add "$POD_CIDR" via "$LINK_NODE" dev "$HOST_IF"
  end=$(( $(date +%s) + 120 ))
  until [[ -f "$N/images-imported" ]]; do
    kill -0 "$u" 2>/dev/null || die "the node's init exited: $(tail -20 "$RUN/logs/real-node.log")"
    (( $(date +%s) < end )) || die "containerd did not import the images within 120s"
    sleep 0.2
  done
  log "containerd up, images imported ($(( $(date +%s) - t0 ))s)"
  end=$(( $(date +%s) + 180 ))
  until [[ "$("$KUBECTL" --kubeconfig="$KC" get node "$NODE_NAME" \
      -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]; do
    kill -0 "$u" 2>/dev/null || die "the node's init exited: $(tail -20 "$RUN/logs/real-node.log")"
    (( $(date +%s) < end )) || die "node $NODE_NAME not Ready within 180s (logs/kubelet.log)"
    sleep 0.5
  done
  end=$(( $(date +%s) + 30 ))
  until nsenter -t "$init" -n curl -fs http://127.0.0.1:8181/ready >/dev/null 2>&1; do
    kill -0 "$u" 2>/dev/null || die "the node's init exited: $(tail -20 "$RUN/logs/real-node.log")"
    (( $(date +%s) < end )) || die "CoreDNS not ready within 30s (logs/coredns.log)"
    sleep 0.2
  done
  log "node $NODE_NAME Ready at $LINK_NODE, pods in $POD_CIDR, cluster DNS (CoreDNS) at $LINK_NODE:53 ($(( $(date +%s) - t0 ))s)"
}

in_node() { # run a command in the node's mount and network namespaces
  local init
  init=$(cat "$RUN/pids/real-node-init" 2>/dev/null) || die "no real node runs from $RUN"
  nsenter -t "$init" -m -n -- "$@"
}

cmd_import() {
  local init
  init=$(cat "$RUN/pids/real-node-init" 2>/dev/null) || die "no real node runs from $RUN"
  nsenter -t "$init" -m -n -- "$HERE/real-node.sh" import-here "$(realpath "${1:?real-node.sh import ARCHIVE}")"
}

cmd_ctr() { in_node ctr -a "$SOCK" "$@"; }

cmd_down() {
  local f="$RUN/pids/real-node" u typ mp end left=()
  if [[ -f "$f" ]]; then
    u=$(cat "$f")
    # unshare --kill-child: its death SIGKILLs the namespace's init, and with it every process inside.
    if kill -0 "$u" 2>/dev/null; then kill -9 "$u" 2>/dev/null || true; fi
    rm -f "$f" "$RUN/pids/real-node-init"
  fi
  # Wait for the processes to be gone from the node's cgroups, then remove the cgroups (deepest first).
  end=$(( $(date +%s) + 30 ))
  while read -r typ mp; do
    [[ -d "$mp/$CG" ]] || continue
    while [[ -n "$(find "$mp/$CG" -name cgroup.procs -exec cat {} + 2>/dev/null)" ]]; do
      (( $(date +%s) < end )) || { left+=("processes in $mp/$CG"); break; }
      sleep 0.1
    done
    find "$mp/$CG" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [[ -d "$mp/$CG" ]] && left+=("$mp/$CG")
  done < <(cgroup_mounts)
  # The veth pair and its route go with the network namespace; the kernel frees it a moment later.
  end=$(( $(date +%s) + 15 ))
  while ip link show "$HOST_IF" >/dev/null 2>&1; do
    if (( $(date +%s) > end )); then ip link del "$HOST_IF" 2>/dev/null || left+=("interface $HOST_IF"); break; fi
    sleep 0.1
  done
  if [[ -n "$(ip -4 route show to "$POD_CIDR")" ]]; then
    ip route del "$POD_CIDR" 2>/dev/null || left+=("route $POD_CIDR")
  fi
  if (( ${#left[@]} )); then echo "real-node: could not remove: ${left[*]}" >&2; return 1; fi
  return 0
}

case "${1:-}" in
  vars) cmd_vars ;;
  check) cmd_check ;;
  up) cmd_up ;;
  ns-init) cmd_ns_init ;;
  import) shift; cmd_import "$@" ;;
  import-here) shift; import_image "$@" ;;
  ctr) shift; cmd_ctr "$@" ;;
  down) cmd_down ;;
  *) echo "usage: hack/cluster/real-node.sh vars|check|up|import ARCHIVE|ctr ARGS|down" >&2; exit 2 ;;
esac
