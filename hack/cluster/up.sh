#!/usr/bin/env bash
# Start the local gpuctl test cluster as plain processes on loopback:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK (fake GPU nodes whose pods
#   really go Running/Succeeded) and the real Kueue controller with its webhooks registered by URL.
#
#   hack/cluster/up.sh            build what is missing (build.sh), start, wait until ready
#   hack/cluster/up.sh --real-node   also one real node: kubelet + containerd running real pods, with the
#                                 built image (build/image/gpuctl.oci.tar) imported (hack/cluster/real-node.sh)
#   export KUBECONFIG=$(hack/cluster/up.sh --print-kubeconfig)
#
# Environment:
#   GPUCTL_TESTBED_CACHE   binaries and scratch modules (default ~/.cache/gpuctl-testbed)
#   GPUCTL_TESTBED_RUN     state of this cluster: pki, etcd data, logs, pids, kubeconfig
#                          (default $CACHE/run); two clusters need two RUN dirs and port offsets
#   GPUCTL_TESTBED_PORT_OFFSET  added to every port (default 0)
#   GPUCTL_TESTBED_NODES   node list to create (default hack/cluster/nodes.yaml; "none" for no nodes)
#   GPUCTL_TESTBED_REAL_NODE=1  same as --real-node (needs root; GPUCTL_IMAGE_ARCHIVE: the image to import)
#   GPUCTL_TESTBED_KUEUE_CONFIG  Kueue Configuration to start from (default manifests/kueue/configuration.yaml;
#                          hack/cluster/multi.sh gives the MultiKueue manager its own)
#   GPUCTL_TESTBED_JOBSET=1  also the JobSet controller (sigs.k8s.io/jobset, built by build.sh): its CRD
#                          before Kueue starts (Kueue's jobset integration then runs from the start), the
#                          controller as its own ServiceAccount, its webhooks by URL. Off by default: it adds
#                          about 40 MiB and a second or two (tests/integration/test_jobset.py needs it)
#   GPUCTL_TESTBED_LWS=1     also the LeaderWorkerSet controller (sigs.k8s.io/lws, built by build.sh), the
#                          same way: multi-node inference replicas (resources.nodes on kind: inference;
#                          tests/integration/test_lws.py needs it)
#   GPUCTL_TESTBED_FAKE_RUNTIME  how long a Job's pod runs on a KWOK node before it succeeds (default 10m;
#                          e.g. 90s, 30m, 2h): the fake nodes' default, so no example carries a test knob.
#                          hack/demo.sh starts its cluster with 30m. A pod may still say otherwise (tests and
#                          bench/ do): annotation pod-complete.stage.kwok.x-k8s.io/delay, or the test-only env
#                          var GPUCTL_FAKE_RUNTIME in its first container (hack/cluster/kwok/pod-complete.yaml)
#   GPUCTL_TESTBED_AUTOSCALING=1  also the autoscaling stack of hack/cluster/autoscaling.sh: Prometheus,
#                          prometheus-adapter (external.metrics.k8s.io) and the fake exporter of the fake
#                          nodes' pods. Off by default (about 150 MiB); a test module that needs it on a
#                          running cluster starts it with `hack/cluster/autoscaling.sh up`
# On failure it prints the tail of every log, stops what it started and exits non-zero.
set -Eeuo pipefail  # -E: the ERR trap (cleanup) also fires for a failure inside a function (kc)
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
source "$HERE/versions.env"
CACHE="${GPUCTL_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuctl-testbed}"
RUN="${GPUCTL_TESTBED_RUN:-$CACHE/run}"
OFF="${GPUCTL_TESTBED_PORT_OFFSET:-0}"
NODES="${GPUCTL_TESTBED_NODES:-$HERE/nodes.yaml}"
PY="${GPUCTL_PYTHON:-$(command -v python3)}"
KUEUE_CONFIG="${GPUCTL_TESTBED_KUEUE_CONFIG:-$ROOT/manifests/kueue/configuration.yaml}"

REAL_NODE="${GPUCTL_TESTBED_REAL_NODE:-0}"
case "${1:-}" in
  --print-kubeconfig) echo "$RUN/kubeconfig"; exit 0 ;;
  --real-node) REAL_NODE=1 ;;
  "") ;;
  *) echo "usage: hack/cluster/up.sh [--real-node|--print-kubeconfig]" >&2; exit 2 ;;
esac

P_ETCD=$((23790 + OFF)); P_PEER=$((23800 + OFF)); P_API=$((36443 + OFF))
P_KCM=$((10257 + OFF)); P_SCHED=$((10259 + OFF)); P_KWOK=$((10250 + OFF))
P_KQ_HEALTH=$((8081 + OFF)); P_KQ_METRICS=$((8443 + OFF)); P_KQ_HOOK=$((9443 + OFF)); P_KQ_VIS=$((8082 + OFF))
P_JS_HOOK=$((28443 + OFF)); P_JS_HEALTH=$((28081 + OFF))
JOBSET="${GPUCTL_TESTBED_JOBSET:-0}"
P_LWS_HOOK=$((26443 + OFF)); P_LWS_HEALTH=$((26081 + OFF))
LWS="${GPUCTL_TESTBED_LWS:-0}"
# The API server's port (36443 + offset) lies in Linux's range for outgoing connections' local ports
# (32768-60999): an etcd or webhook client of another cluster on the machine may hold it, and the API
# server then fails "address already in use" at random. Reserve the ports of every offset (0-999) from
# that range where we may (root; what the cluster itself binds is unaffected).
RESERVED=/proc/sys/net/ipv4/ip_local_reserved_ports
if [[ -w $RESERVED ]] && ! grep -q "36443-37443" "$RESERVED"; then
  cur=$(cat "$RESERVED"); echo "${cur:+$cur,}36443-37443" >"$RESERVED" 2>/dev/null || true
fi
AUTOSCALING="${GPUCTL_TESTBED_AUTOSCALING:-0}"
# HPAScaleToZero (alpha in 1.36, beta from 1.37): an HPA may keep its Deployment at 0 replicas and scale it
# from there on an External metric. gpuctl's autoscaled services need it for their burst (docs/serving.md).
# The API server validates minReplicas: 0 with it, the controller manager scales with it.
FEATURE_GATES="HPAScaleToZero=true"

if [[ "$REAL_NODE" == 1 ]]; then export GPUCTL_BUILD_REAL_NODE=1; fi
"$HERE/build.sh"
source "$CACHE/dirs.env"
K8SBIN="$CACHE/bin/k8s-$K8S_VERSION"; ETCD="$CACHE/bin/etcd-$ETCD_VERSION/etcd"
KWOK="$CACHE/bin/kwok-$KWOK_VERSION/kwok"; KUEUE="$CACHE/bin/kueue-$KUEUE_VERSION/kueue"
KUBECTL="$K8SBIN/kubectl"
KC="$RUN/kubeconfig"

if [[ -f "$RUN/pids/kube-apiserver" ]] && kill -0 "$(cat "$RUN/pids/kube-apiserver")" 2>/dev/null; then
  if [[ "$REAL_NODE" == 1 && ! -f "$RUN/pids/real-node" ]]; then
    echo "up: a cluster without a real node already runs from $RUN: hack/cluster/down.sh it first" >&2; exit 1
  fi
  echo "up: a cluster already runs from $RUN (hack/cluster/down.sh stops it)"; echo "export KUBECONFIG=$KC"; exit 0
fi
# The real node's addresses (hack/cluster/real-node.sh): the API server must listen where the node and its
# pods reach it and advertise that address as the kubernetes Service's endpoint. Prerequisites first.
API_BIND=127.0.0.1; API_ADVERTISE=127.0.0.1; API_SAN=""
if [[ "$REAL_NODE" == 1 ]]; then
  export RUN OFF CACHE PAUSE_DIR PAUSE_IMAGE
  "$HERE/real-node.sh" check
  eval "$("$HERE/real-node.sh" vars)"
  API_BIND=0.0.0.0; API_ADVERTISE=$RN_LINK_HOST; API_SAN=",IP:$RN_LINK_HOST"
fi

T0=$(date +%s)
rm -rf "$RUN"; mkdir -p "$RUN"/{pki,logs,pids,etcd,kueue-webhook,kwok,jobset-webhook,lws-webhook}
echo "$OFF" >"$RUN/offset"  # hack/cluster/autoscaling.sh, started later on this cluster, reads its ports from it
log() { echo "up: [$(( $(date +%s) - T0 ))s] $*"; }

fail() {
  echo "up: FAILED: $*" >&2
  for f in "$RUN"/logs/*.log; do echo "----- $f (last 40 lines)" >&2; tail -n 40 "$f" >&2 || true; done
  "$HERE/down.sh" >&2 || true
  exit 1
}
trap 'fail "line $LINENO"' ERR

start() { # start NAME CMD...  (own session, output to logs/NAME.log, PID to pids/NAME)
  local name=$1; shift
  setsid "$@" >"$RUN/logs/$name.log" 2>&1 < /dev/null &
  echo $! >"$RUN/pids/$name"
}

wait_for() { # wait_for WHAT SECONDS CMD...
  local what=$1 secs=$2; shift 2
  local end=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    if (( $(date +%s) > end )); then fail "timed out after ${secs}s waiting for $what"; fi
    sleep 0.3
  done
  log "$what ready"
}

# ---- PKI: one CA signs every serving and client certificate. ----
PKI="$RUN/pki"
openssl_q() { openssl "$@" >/dev/null 2>&1; }
openssl_q req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=gpuctl-testbed-ca" -keyout "$PKI/ca.key" -out "$PKI/ca.crt"
cert() { # cert NAME SUBJECT [SAN]
  local n=$1 subj=$2 san=${3:-}
  openssl_q req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$PKI/$n.key" -out "$PKI/$n.csr"
  if [[ -n "$san" ]]; then printf "subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n" "$san" >"$PKI/$n.ext"
  else printf "extendedKeyUsage=clientAuth\n" >"$PKI/$n.ext"; fi
  openssl_q x509 -req -in "$PKI/$n.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 3650 -extfile "$PKI/$n.ext" -out "$PKI/$n.crt"
}
cert apiserver "/CN=kube-apiserver" "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc,IP:10.0.0.1$API_SAN"
cert admin "/O=system:masters/CN=admin"
cert kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert webhook "/CN=webhooks" "IP:127.0.0.1,DNS:localhost"
# The aggregation layer's client certificate: the API server proxies Kueue's visibility API with it.
cert front-proxy-client "/CN=front-proxy-client"
openssl_q genrsa -out "$PKI/sa.key" 2048; openssl_q rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
cp "$PKI/webhook.crt" "$RUN/kueue-webhook/tls.crt"; cp "$PKI/webhook.key" "$RUN/kueue-webhook/tls.key"
cp "$PKI/webhook.crt" "$RUN/jobset-webhook/tls.crt"; cp "$PKI/webhook.key" "$RUN/jobset-webhook/tls.key"
cp "$PKI/webhook.crt" "$RUN/lws-webhook/tls.crt"; cp "$PKI/webhook.key" "$RUN/lws-webhook/tls.key"
# Kueue with internalCertManagement off reads its metrics and visibility certs from fixed paths, shared
# by every local cluster on this machine (xdist workers start two at once). Nothing verifies them (the
# visibility APIService skips TLS verification; nothing scrapes Kueue's metrics over TLS), so all
# clusters share one self-signed pair: made once under a lock, installed by rename, never overwritten
# while it is a matching pair. Copying each run's own pair raced: one Kueue read another run's key
# with its own certificate ("tls: private key does not match public key").
fixed_certs() {
  local shared="$CACHE/fixed-certs" d pub_c pub_k
  mkdir -p "$shared"
  (
    flock 9
    if [[ ! -s "$shared/tls.crt" || ! -s "$shared/tls.key" ]]; then
      openssl_q req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=gpuctl-testbed-kueue" \
        -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$shared/tls.key.tmp" -out "$shared/tls.crt.tmp"
      mv "$shared/tls.key.tmp" "$shared/tls.key"; mv "$shared/tls.crt.tmp" "$shared/tls.crt"
    fi
    for d in /etc/kueue/metrics/certs /visibility; do
      mkdir -p "$d"
      pub_c=$(openssl x509 -in "$d/tls.crt" -noout -pubkey 2>/dev/null || true)
      pub_k=$(openssl pkey -in "$d/tls.key" -pubout 2>/dev/null || true)
      if [[ -n "$pub_c" && "$pub_c" == "$pub_k" ]]; then continue; fi
      cp "$shared/tls.key" "$d/.tls.key.$$"; cp "$shared/tls.crt" "$d/.tls.crt.$$"
      mv "$d/.tls.key.$$" "$d/tls.key"; mv "$d/.tls.crt.$$" "$d/tls.crt"
    done
  ) 9>"$shared/lock"
}
fixed_certs
"$KUBECTL" config --kubeconfig="$KC" set-cluster testbed --server="https://127.0.0.1:$P_API" \
  --certificate-authority="$PKI/ca.crt" --embed-certs=true >/dev/null
"$KUBECTL" config --kubeconfig="$KC" set-credentials admin --client-certificate="$PKI/admin.crt" \
  --client-key="$PKI/admin.key" --embed-certs=true >/dev/null
"$KUBECTL" config --kubeconfig="$KC" set-context testbed --cluster=testbed --user=admin >/dev/null
"$KUBECTL" config --kubeconfig="$KC" use-context testbed >/dev/null
kc() { "$KUBECTL" --kubeconfig="$KC" "$@"; }
sa_kubeconfig() { # sa_kubeconfig NAME NAMESPACE SERVICEACCOUNT: $RUN/NAME.kubeconfig, a year's token of it
  local f="$RUN/$1.kubeconfig"
  "$KUBECTL" config --kubeconfig="$f" set-cluster testbed --server="https://127.0.0.1:$P_API" \
    --certificate-authority="$PKI/ca.crt" --embed-certs=true >/dev/null
  "$KUBECTL" config --kubeconfig="$f" set-credentials "$1" --token="$(kc -n "$2" create token "$3" --duration=8760h)" >/dev/null
  "$KUBECTL" config --kubeconfig="$f" set-context testbed --cluster=testbed --user="$1" >/dev/null
  "$KUBECTL" config --kubeconfig="$f" use-context testbed >/dev/null
  echo "$f"
}
log "certificates and kubeconfig written"

# ---- etcd ----
start etcd "$ETCD" --name testbed --data-dir "$RUN/etcd" \
  --listen-client-urls "http://127.0.0.1:$P_ETCD" --advertise-client-urls "http://127.0.0.1:$P_ETCD" \
  --listen-peer-urls "http://127.0.0.1:$P_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$P_PEER" \
  --initial-cluster "testbed=http://127.0.0.1:$P_PEER" --unsafe-no-fsync --log-level warn \
  --quota-backend-bytes 4294967296
wait_for etcd 30 curl -fs "http://127.0.0.1:$P_ETCD/health"

# ---- kube-apiserver ----
start kube-apiserver "$K8SBIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$P_ETCD" \
  --bind-address="$API_BIND" --advertise-address="$API_ADVERTISE" --secure-port="$P_API" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --kubelet-client-certificate="$PKI/kubelet-client.crt" --kubelet-client-key="$PKI/kubelet-client.key" \
  --kubelet-preferred-address-types=InternalIP,Hostname \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --service-cluster-ip-range=10.0.0.0/24 --service-node-port-range=30000-32767 \
  --authorization-mode=Node,RBAC --allow-privileged=true --profiling=false \
  --enable-admission-plugins=NamespaceLifecycle,ServiceAccount,DefaultStorageClass,ResourceQuota,MutatingAdmissionWebhook,ValidatingAdmissionWebhook \
  --max-requests-inflight=800 --max-mutating-requests-inflight=400 \
  --requestheader-client-ca-file="$PKI/ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
  --enable-aggregator-routing=true --feature-gates="$FEATURE_GATES"
wait_for kube-apiserver 120 curl -fsk "https://127.0.0.1:$P_API/readyz"

# ---- controller-manager, scheduler ----
# --use-service-account-credentials: each controller talks to the API server as its own ServiceAccount
# (system:serviceaccount:kube-system:job-controller, replicaset-controller, ...), with the roles the API
# server's RBAC bootstrap gives them, as in kubeadm and managed clusters. The admission webhook trusts those
# identities (never an object's ownerReferences) to skip pods a controller made from a reviewed template.
# The HPA controller (horizontalpodautoscaling, in '*') reads custom and external metrics through the API
# server's aggregation layer (hack/cluster/autoscaling.sh registers prometheus-adapter). Local timing, not
# Kubernetes' defaults (15 s sync, 5 min downscale stabilization), so tests see a scale event in seconds:
# every HPA is reconciled each 2 s and scales down on the highest recommendation of the last 10 s.
start kube-controller-manager "$K8SBIN/kube-controller-manager" --kubeconfig="$KC" \
  --authentication-kubeconfig="$KC" --authorization-kubeconfig="$KC" --leader-elect=false \
  --bind-address=127.0.0.1 --secure-port="$P_KCM" --root-ca-file="$PKI/ca.crt" \
  --service-account-private-key-file="$PKI/sa.key" --use-service-account-credentials=true \
  --controllers='*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route' \
  --kube-api-qps=200 --kube-api-burst=400 --concurrent-job-syncs=10 --feature-gates="$FEATURE_GATES" \
  --horizontal-pod-autoscaler-sync-period=2s --horizontal-pod-autoscaler-downscale-stabilization=10s
cat >"$RUN/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: "$KC", qps: 200, burst: 400}
leaderElection: {leaderElect: false}
EOF
start kube-scheduler "$K8SBIN/kube-scheduler" --config="$RUN/scheduler.yaml" \
  --bind-address=127.0.0.1 --secure-port="$P_SCHED" \
  --authentication-kubeconfig="$KC" --authorization-kubeconfig="$KC"
wait_for kube-controller-manager 60 curl -fsk "https://127.0.0.1:$P_KCM/healthz"
wait_for kube-scheduler 60 curl -fsk "https://127.0.0.1:$P_SCHED/healthz"

# ---- KWOK: fake kubelets for nodes annotated kwok.x-k8s.io/node=fake ----
# KWOK serves this file as every container's log; it must be in the CRI log format.
{
  echo "2026-01-01T00:00:00.000000000Z stdout F fake workload started by KWOK"
  for i in $(seq 1 20); do
    printf '2026-01-01T00:00:%02d.000000000Z stdout F step %d: loss=%s\n' "$i" "$i" "$(awk "BEGIN{print 1/$i}")"
  done
} >"$RUN/kwok/container.log"
cat >"$RUN/kwok/logs.yaml" <<EOF
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata: {name: gpuctl-fake-logs}
spec:
  logs:
  - logsFile: "$RUN/kwok/container.log"
    follow: false
EOF
# The fake nodes' default run time of a Job's pod (GPUCTL_TESTBED_FAKE_RUNTIME) into this run's copy of the stage.
FAKE_RUNTIME="${GPUCTL_TESTBED_FAKE_RUNTIME:-10m}"
case "$FAKE_RUNTIME" in
  *ms) FAKE_MS=${FAKE_RUNTIME%ms} ;; *s) FAKE_MS=$(( ${FAKE_RUNTIME%s} * 1000 )) ;;
  *m) FAKE_MS=$(( ${FAKE_RUNTIME%m} * 60000 )) ;; *h) FAKE_MS=$(( ${FAKE_RUNTIME%h} * 3600000 )) ;;
  *) echo "up: GPUCTL_TESTBED_FAKE_RUNTIME=$FAKE_RUNTIME: write a duration such as 90s, 30m or 2h" >&2; exit 2 ;;
esac
sed "s/durationMilliseconds: 600000/durationMilliseconds: $FAKE_MS/" "$HERE/kwok/pod-complete.yaml" >"$RUN/kwok/pod-complete.yaml"
grep -q "durationMilliseconds: $FAKE_MS\$" "$RUN/kwok/pod-complete.yaml"
KWOK_CFG=()
for f in "$HERE"/kwok/*.yaml "$RUN/kwok/logs.yaml"; do
  [[ "$(basename "$f")" == pod-complete.yaml && "$f" == "$HERE"/* ]] && f="$RUN/kwok/pod-complete.yaml"
  KWOK_CFG+=(--config "$f")
done
start kwok "$KWOK" --kubeconfig="$KC" "${KWOK_CFG[@]}" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --manage-nodes-with-label-selector= --manage-single-node= \
  --cidr=10.244.0.0/16 --node-ip=127.0.0.1 --node-port="$P_KWOK" --node-lease-duration-seconds=40 \
  --server-address="127.0.0.1:$P_KWOK" --tls-cert-file="$PKI/webhook.crt" --tls-private-key-file="$PKI/webhook.key"
wait_for kwok 30 curl -fsk "https://127.0.0.1:$P_KWOK/healthz"

# ---- Kueue: CRDs (conversion webhook by URL), controller, then its admission webhooks ----
CA_B64=$(base64 -w0 <"$PKI/ca.crt")
kc create namespace kueue-system >/dev/null
"$PY" "$HERE/kueue_manifests.py" crds "$KUEUE_DIR" "https://127.0.0.1:$P_KQ_HOOK" "$CA_B64" >"$RUN/kueue-crds.yaml"
kc apply --server-side --force-conflicts -f "$RUN/kueue-crds.yaml" >/dev/null
# A CRD read before the API server wrote its first status fails `kubectl wait` ("accessor error"): retry.
wait_for "Kueue CRDs" 60 "$KUBECTL" --kubeconfig="$KC" wait --for=condition=Established crd --all --timeout=10s
if [[ "$JOBSET" == 1 ]]; then
  # dirs.env of a build.sh from before JobSet was added has no JOBSET_DIR: the module cache has it.
  JOBSET_DIR=${JOBSET_DIR:-$(go mod download -json "sigs.k8s.io/jobset@v$JOBSET_VERSION" | "$PY" -c 'import sys,json;print(json.load(sys.stdin)["Dir"])')}
  # The JobSet CRD before Kueue starts: Kueue sets up its jobset integration at start when the API is
  # served (else it polls for it with a growing backoff).
  "$PY" "$HERE/jobset_manifests.py" crds "$JOBSET_DIR" >"$RUN/jobset-crds.yaml"
  kc apply --server-side -f "$RUN/jobset-crds.yaml" >/dev/null
  wait_for "JobSet CRD" 60 "$KUBECTL" --kubeconfig="$KC" wait --for=condition=Established crd/jobsets.jobset.x-k8s.io --timeout=10s
fi
if [[ "$LWS" == 1 ]]; then
  LWS_DIR=${LWS_DIR:-$(go mod download -json "sigs.k8s.io/lws@v$LWS_VERSION" | "$PY" -c 'import sys,json;print(json.load(sys.stdin)["Dir"])')}
  # Before Kueue starts, as JobSet's: Kueue's leaderworkerset integration is set up once its API is served.
  "$PY" "$HERE/lws_manifests.py" crds "$LWS_DIR" >"$RUN/lws-crds.yaml"
  kc apply --server-side -f "$RUN/lws-crds.yaml" >/dev/null
  wait_for "LeaderWorkerSet CRD" 60 "$KUBECTL" --kubeconfig="$KC" wait --for=condition=Established crd/leaderworkersets.leaderworkerset.x-k8s.io --timeout=10s
fi
# Kueue's visibility API (pending workloads and their positions) is reached through the API server's
# aggregation layer, as on a real cluster. The API server routes an APIService to an endpoint address,
# which may not be loopback: so Kueue's visibility server listens on this machine's own address (none:
# the API is not registered and gpuctl computes positions from Workloads instead).
HOST_IP=$(ip -4 route get 192.0.2.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1)
[[ "$HOST_IP" == 127.* ]] && HOST_IP=""
"$PY" "$HERE/kueue_manifests.py" config "$KUEUE_CONFIG" \
  "$P_KQ_HOOK" "$RUN/kueue-webhook" "127.0.0.1:$P_KQ_HEALTH" "127.0.0.1:$P_KQ_METRICS" "$P_KQ_VIS" \
  "${HOST_IP:-127.0.0.1}" >"$RUN/kueue-config.yaml"
# Kueue runs as its own ServiceAccount with its own roles, as installed in a real cluster: the admission
# webhook's not-kueue matchCondition trusts exactly that username.
"$PY" "$HERE/kueue_manifests.py" rbac "$KUEUE_DIR" >"$RUN/kueue-rbac.yaml"
kc apply -f "$RUN/kueue-rbac.yaml" >/dev/null
KQ_TOKEN=$(kc -n kueue-system create token kueue-controller-manager --duration=8760h)
KQ_KC="$RUN/kueue.kubeconfig"
"$KUBECTL" config --kubeconfig="$KQ_KC" set-cluster testbed --server="https://127.0.0.1:$P_API" \
  --certificate-authority="$PKI/ca.crt" --embed-certs=true >/dev/null
"$KUBECTL" config --kubeconfig="$KQ_KC" set-credentials kueue --token="$KQ_TOKEN" >/dev/null
"$KUBECTL" config --kubeconfig="$KQ_KC" set-context testbed --cluster=testbed --user=kueue >/dev/null
"$KUBECTL" config --kubeconfig="$KQ_KC" use-context testbed >/dev/null
start kueue "$KUEUE" --config="$RUN/kueue-config.yaml" --kubeconfig="$KQ_KC" --zap-log-level=info
wait_for kueue 120 curl -fs "http://127.0.0.1:$P_KQ_HEALTH/readyz"
"$PY" "$HERE/kueue_manifests.py" webhooks "$KUEUE_DIR" "https://127.0.0.1:$P_KQ_HOOK" "$CA_B64" >"$RUN/kueue-webhooks.yaml"
kc apply -f "$RUN/kueue-webhooks.yaml" >/dev/null
log "Kueue webhooks registered"
if [[ -n "$HOST_IP" ]]; then
  "$PY" "$HERE/kueue_manifests.py" visibility "$HOST_IP" "$P_KQ_VIS" | kc apply -f - >/dev/null
  # Kueue's visibility server is its own API server: it trusts the aggregator's requests once it
  # has read the request-header CA, which takes a moment after start.
  end=$(( $(date +%s) + 60 ))
  until kc get --raw /apis/visibility.kueue.x-k8s.io/v1beta2 >/dev/null 2>&1; do
    if (( $(date +%s) > end )); then
      # Not fatal: without the APIService gpuctl computes queue positions itself.
      log "WARNING: Kueue's visibility API did not answer through the aggregator; unregistering it"
      kc delete apiservice v1beta1.visibility.kueue.x-k8s.io v1beta2.visibility.kueue.x-k8s.io >/dev/null
      HOST_IP=""
      break
    fi
    sleep 0.5
  done
  if [[ -n "$HOST_IP" ]]; then log "Kueue visibility API served through the aggregator ($HOST_IP:$P_KQ_VIS)"; fi
fi

# ---- JobSet (GPUCTL_TESTBED_JOBSET=1), LeaderWorkerSet (GPUCTL_TESTBED_LWS=1): each controller as its own
# ServiceAccount (<name>-system/<name>-controller-manager, as its kustomization installs it), its
# Configuration from <name>_manifests.py, its webhooks by URL ----
controller() { # controller NAME VERSION MODULE_DIR WEBHOOK_PORT HEALTH_PORT TITLE
  local name=$1 version=$2 dir=$3 hook=$4 health=$5 title=$6 ckc
  kc create namespace "$name-system" >/dev/null
  "$PY" "$HERE/${name}_manifests.py" rbac "$dir" | kc apply -f - >/dev/null
  "$PY" "$HERE/${name}_manifests.py" config "$hook" "$RUN/$name-webhook" "127.0.0.1:$health" >"$RUN/$name-config.yaml"
  ckc=$(sa_kubeconfig "$name" "$name-system" "$name-controller-manager")
  start "$name" "$CACHE/bin/$name-$version/$name" --config="$RUN/$name-config.yaml" --kubeconfig="$ckc"
  wait_for "$name" 60 curl -fs "http://127.0.0.1:$health/readyz"
  "$PY" "$HERE/${name}_manifests.py" webhooks "$dir" "https://127.0.0.1:$hook" "$CA_B64" | kc apply -f - >/dev/null
  log "$title $version controller and webhooks registered"
}
if [[ "$JOBSET" == 1 ]]; then controller jobset "$JOBSET_VERSION" "$JOBSET_DIR" "$P_JS_HOOK" "$P_JS_HEALTH" JobSet; fi
if [[ "$LWS" == 1 ]]; then controller lws "$LWS_VERSION" "$LWS_DIR" "$P_LWS_HOOK" "$P_LWS_HEALTH" LeaderWorkerSet; fi

# ---- fake nodes ----
if [[ "$NODES" != "none" ]]; then
  kc apply -f "$NODES" >/dev/null
  # Ready, and the node-lifecycle controller has lifted the not-ready taint the scheduler honours.
  wait_for "fake nodes" 60 bash -c \
    "! '$KUBECTL' --kubeconfig='$KC' get nodes --no-headers | grep -v ' Ready ' && \
     [ -z \"\$('$KUBECTL' --kubeconfig='$KC' get nodes -o jsonpath='{.items[*].spec.taints}')\" ]"
fi
# Smoke test of the webhook path: an object that passes through Kueue's webhooks by URL.
kc apply -f - >/dev/null <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: testbed-smoke}
EOF
kc delete resourceflavor testbed-smoke >/dev/null
if [[ "$REAL_NODE" == 1 ]]; then
  export KUBECTL KC PKI P_API
  "$HERE/real-node.sh" up || fail "the real node did not start"
fi
trap - ERR
echo "$(date +%s)" >"$RUN/started"
if [[ "$AUTOSCALING" == 1 ]]; then
  GPUCTL_TESTBED_RUN="$RUN" GPUCTL_PYTHON="$PY" "$HERE/autoscaling.sh" up || { "$HERE/down.sh" >&2; exit 1; }
fi
log "cluster ready in $(( $(date +%s) - T0 ))s"
echo "export KUBECONFIG=$KC"
