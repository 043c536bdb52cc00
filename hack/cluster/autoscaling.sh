#!/usr/bin/env bash
# The autoscaling stack of the local cluster (docs/serving.md): what a real cluster runs next to gpuctl for
# autoscaled services, as processes on this machine:
#   - Prometheus (Debian's `prometheus`) with manifests/prometheus/serving-scrape.yaml, discovering pods
#     through the API server (hack/cluster/autoscaling.py adds the local connection details);
#   - hack/cluster/fake_exporter.py: the series the pods of KWOK's fake nodes would export (vLLM's), with
#     values a test sets; the only double, for hardware that is not there;
#   - prometheus-adapter (built by build.sh) with manifests/prometheus/adapter-rules.yaml, registered as
#     external.metrics.k8s.io through the aggregation layer.
# kube-controller-manager's HPA controller (up.sh: HPAScaleToZero on, a 2 s sync period, a 10 s downscale
# stabilization) reads the adapter as on a real cluster.
#
#   hack/cluster/autoscaling.sh up     start them for the cluster of $GPUCTL_TESTBED_RUN (idempotent)
#   hack/cluster/autoscaling.sh down   stop them (hack/cluster/down.sh also does)
#   hack/cluster/autoscaling.sh env    print PROMETHEUS_URL=, FAKE_EXPORTER_URL= for that cluster
# up.sh runs `up` itself with GPUCTL_TESTBED_AUTOSCALING=1; a test module on a running cluster calls it.
# Ports (plus the cluster's port offset): Prometheus 12090, fake exporter 13090, adapter 14443: below Linux's
# ephemeral range (32768-60999), where any client connection of the machine may hold the port a moment
# (at 33090/34090/35443 + 860, 2 of 4 demo runs on the shared machine failed "address already in use").
set -Eeuo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
source "$HERE/versions.env"
CACHE="${GPUCTL_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuctl-testbed}"
RUN="${GPUCTL_TESTBED_RUN:-$CACHE/run}"
PY="${GPUCTL_PYTHON:-$(command -v python3)}"
# The port offset the cluster was started with (up.sh writes it), else the environment's.
OFF="$(cat "$RUN/offset" 2>/dev/null || echo "${GPUCTL_TESTBED_PORT_OFFSET:-0}")"
P_PROM=$((12090 + OFF)); P_FAKE=$((13090 + OFF)); P_ADAPTER=$((14443 + OFF))
KUBECTL="$CACHE/bin/k8s-$K8S_VERSION/kubectl"
ADAPTER="$CACHE/bin/prometheus-adapter-$PROMETHEUS_ADAPTER_VERSION/adapter"
KC="$RUN/kubeconfig"
PKI="$RUN/pki"
A="$RUN/autoscaling"
PROMETHEUS="${GPUCTL_PROMETHEUS:-$(command -v prometheus || echo /usr/bin/prometheus)}"
# Local scrape interval (a real cluster's is serving-scrape.yaml's 15 s): the tests wait on the HPA.
INTERVAL="${GPUCTL_AUTOSCALING_SCRAPE_INTERVAL:-1s}"

kc() { "$KUBECTL" --kubeconfig="$KC" "$@"; }
alive() { [[ -f "$RUN/pids/$1" ]] && kill -0 "$(cat "$RUN/pids/$1")" 2>/dev/null; }
log() { echo "autoscaling: $*"; }
start() { # start NAME CMD...  (own session, output to logs/NAME.log, PID to pids/NAME: down.sh stops it)
  local name=$1; shift
  alive "$name" && return 0
  setsid "$@" >"$RUN/logs/$name.log" 2>&1 < /dev/null &
  echo $! >"$RUN/pids/$name"
}
wait_for() { # wait_for WHAT SECONDS CMD...
  local what=$1 secs=$2; shift 2
  local end=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    if (( $(date +%s) > end )); then
      echo "autoscaling: timed out after ${secs}s waiting for $what" >&2
      for f in "$RUN"/logs/{serving-prometheus,fake-exporter,prometheus-adapter}.log; do
        [[ -f "$f" ]] && { echo "----- $f" >&2; tail -n 30 "$f" >&2; }
      done
      exit 1
    fi
    sleep 0.3
  done
}

stop_one() {
  local f="$RUN/pids/$1" pid
  [[ -f "$f" ]] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$f"
}

case "${1:-}" in
  env)
    echo "PROMETHEUS_URL=http://127.0.0.1:$P_PROM"
    echo "FAKE_EXPORTER_URL=http://127.0.0.1:$P_FAKE"
    exit 0 ;;
  down)
    if [[ -f "$KC" ]] && alive kube-apiserver; then
      kc delete apiservice v1beta1.external.metrics.k8s.io --ignore-not-found --timeout=10s >/dev/null 2>&1 || true
    fi
    for name in prometheus-adapter serving-prometheus fake-exporter; do stop_one "$name"; done
    log "stopped"
    exit 0 ;;
  up) ;;
  *) echo "usage: hack/cluster/autoscaling.sh up|down|env" >&2; exit 2 ;;
esac

[[ -f "$KC" ]] || { echo "autoscaling: no cluster at $RUN (hack/cluster/up.sh first)" >&2; exit 1; }
[[ -x "$PROMETHEUS" ]] || { echo "autoscaling: no prometheus binary (apt-get install prometheus)" >&2; exit 1; }
[[ -x "$ADAPTER" ]] || { echo "autoscaling: no prometheus-adapter at $ADAPTER (hack/cluster/build.sh)" >&2; exit 1; }
# The aggregation layer proxies to a Service endpoint, never a loopback address: this machine's own.
HOST_IP=$(ip -4 route get 192.0.2.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1)
if [[ -z "$HOST_IP" || "$HOST_IP" == 127.* ]]; then
  echo "autoscaling: this machine has no non-loopback IPv4 address for the adapter's APIService" >&2; exit 1
fi
API_URL=$(kc config view --minify -o jsonpath='{.clusters[0].cluster.server}')
mkdir -p "$A" "$RUN/logs" "$RUN/pids"
t0=$(date +%s)

start fake-exporter "$PY" "$HERE/fake_exporter.py" --listen "127.0.0.1:$P_FAKE" --kubeconfig "$KC"
# Debian's prometheus has no Kubernetes service discovery (its build leaves it out): HTTP SD from the fake
# exporter stands in. GPUCTL_PROMETHEUS_KUBERNETES_SD=yes for a Prometheus built with it (GPUCTL_PROMETHEUS).
SD="${GPUCTL_PROMETHEUS_KUBERNETES_SD:-no}"
"$PY" "$HERE/autoscaling.py" prometheus "$API_URL" "$PKI" "127.0.0.1:$P_FAKE" "$INTERVAL" "$SD" >"$A/prometheus.yml"
start serving-prometheus "$PROMETHEUS" --config.file="$A/prometheus.yml" --storage.tsdb.path="$A/prometheus-data" \
  --web.listen-address="127.0.0.1:$P_PROM" --storage.tsdb.retention.time=1d
wait_for "fake exporter" 30 curl -fs "http://127.0.0.1:$P_FAKE/healthz"
wait_for "serving Prometheus" 60 curl -fs "http://127.0.0.1:$P_PROM/-/ready"

# The adapter's serving certificate, from the cluster's CA, for the address the aggregator dials.
if [[ ! -f "$A/adapter.crt" ]]; then
  openssl req -newkey rsa:2048 -nodes -subj "/CN=prometheus-adapter" -keyout "$A/adapter.key" -out "$A/adapter.csr" 2>/dev/null
  # The aggregator dials the endpoint but checks the certificate against the Service's DNS name.
  printf "subjectAltName=DNS:prometheus-adapter.custom-metrics.svc,IP:%s,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n" \
    "$HOST_IP" >"$A/adapter.ext"
  openssl x509 -req -in "$A/adapter.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 3650 \
    -extfile "$A/adapter.ext" -out "$A/adapter.crt" 2>/dev/null
fi
# --metrics-relist-interval: how soon a metric name whose series just appeared is served (real clusters:
# the adapter's default, 10 m, or 1 m); the local cluster's tests create their first series and read it.
start prometheus-adapter "$ADAPTER" --prometheus-url="http://127.0.0.1:$P_PROM" \
  --config="$ROOT/manifests/prometheus/adapter-rules.yaml" --metrics-relist-interval=5s \
  --bind-address="$HOST_IP" --secure-port="$P_ADAPTER" \
  --tls-cert-file="$A/adapter.crt" --tls-private-key-file="$A/adapter.key" \
  --lister-kubeconfig="$KC" --authentication-kubeconfig="$KC" --authorization-kubeconfig="$KC" \
  --cert-dir="$A/certs" --v=1
wait_for prometheus-adapter 60 curl -fsk "https://$HOST_IP:$P_ADAPTER/healthz"
"$PY" "$HERE/autoscaling.py" apiservice "$HOST_IP" "$P_ADAPTER" "$(base64 -w0 <"$PKI/ca.crt")" | kc apply -f - >/dev/null
wait_for "external.metrics.k8s.io through the aggregator" 60 kc get --raw /apis/external.metrics.k8s.io/v1beta1
log "Prometheus on http://127.0.0.1:$P_PROM, fake exporter on http://127.0.0.1:$P_FAKE, prometheus-adapter $PROMETHEUS_ADAPTER_VERSION serving external.metrics.k8s.io ($HOST_IP:$P_ADAPTER) in $(( $(date +%s) - t0 ))s"
