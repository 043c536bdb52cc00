#!/usr/bin/env bash
# The main job on the local default: install gpuctl into .venv, start the local cluster (building its
# binaries the first time), then the whole platform next to it as processes:
#   - gpuctl's validating webhook (`gpuctl admission serve`, enforce mode), registered with the API
#     server with the Helm chart's rules and matchConditions (by URL instead of a Service),
#   - `gpuctl serve` (pool reconciler, /metrics, REST API),
#   - a real Prometheus (Debian's package) scraping it every 5 s with the shipped rules;
#   - the autoscaling stack (hack/cluster/autoscaling.sh: a second Prometheus with the serving scrape job,
#     prometheus-adapter, the fake exporter of the fake nodes' replicas) for the autoscaled service;
# create the four pools of the product documents, two team quotas and sample jobs of every kind (all
# through the webhook), then show pools and jobs, a raw `kubectl apply` the webhook refuses, per-pool GPU
# use from PromQL, and the URLs to open. hack/cluster/down.sh stops all of it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
hack/venv.sh
export GPUCTL_PYTHON="$PWD/.venv/bin/python"
VPY=.venv/bin/python
# Prometheus comes from Debian's package (as in hack/test.sh).
if ! command -v prometheus >/dev/null 2>&1 && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  echo "demo: installing prometheus (apt-get)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null) \
    || echo "demo: could not install prometheus; the demo runs without it" >&2
fi
hack/cluster/up.sh
export KUBECONFIG="$(hack/cluster/up.sh --print-kubeconfig)"
# The autoscaling stack (docs/serving.md: Prometheus, prometheus-adapter, the fake exporter) for the demo's
# autoscaled inference service; idempotent. Without Prometheus the service keeps its floor.
if command -v prometheus >/dev/null 2>&1; then hack/cluster/autoscaling.sh up; fi
source hack/cluster/versions.env
CACHE="${GPUCTL_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuctl-testbed}"
RUN="$(dirname "$KUBECONFIG")"
OFF="${GPUCTL_TESTBED_PORT_OFFSET:-0}"
KUBECTL="$CACHE/bin/k8s-$K8S_VERSION/kubectl"
HELM="$CACHE/bin/helm-$HELM_VERSION/helm"
P_HOOK=$((19443 + OFF)); P_SERVE=$((19090 + OFF)); P_PROM=$((19091 + OFF))
G=.venv/bin/gpuctl
D="$RUN/demo"; mkdir -p "$D"

start() { # start NAME CMD...  (own session; PID in $RUN/pids/NAME, which hack/cluster/down.sh stops)
  local name=$1; shift
  if [[ -f "$RUN/pids/$name" ]] && kill -0 "$(cat "$RUN/pids/$name")" 2>/dev/null; then return; fi
  setsid "$@" >"$RUN/logs/$name.log" 2>&1 < /dev/null &
  echo $! >"$RUN/pids/$name"
}
wait_url() { # wait_url WHAT URL [curl args]
  local what=$1 url=$2; shift 2
  for _ in $(seq 1 120); do curl -fs "$@" "$url" >/dev/null 2>&1 && return; sleep 0.5; done
  echo "demo: $what did not answer at $url; its log:" >&2; tail -n 30 "$RUN/logs/$what.log" >&2; exit 1
}

# ---- the webhook: its own CA and serving certificate for 127.0.0.1 ----
if [[ ! -f "$D/tls.crt" ]]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=gpuctl-demo-ca -keyout "$D/ca.key" -out "$D/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$D/tls.key" -out "$D/tls.csr" 2>/dev/null
  echo "subjectAltName=IP:127.0.0.1" > "$D/tls.ext"
  openssl x509 -req -in "$D/tls.csr" -CA "$D/ca.crt" -CAkey "$D/ca.key" -CAcreateserial -days 365 \
    -extfile "$D/tls.ext" -out "$D/tls.crt" 2>/dev/null
fi
start gpuctl-webhook "$G" admission serve --tls-cert "$D/tls.crt" --tls-key "$D/tls.key" --host 127.0.0.1 \
  --port "$P_HOOK" --mode enforce --kubeconfig "$KUBECONFIG"
wait_url gpuctl-webhook "https://127.0.0.1:$P_HOOK/readyz" --cacert "$D/ca.crt"
# The chart's admission objects, from the same list (manifests/admission/kustomization.yaml, which the
# chart's templates/admission.yaml installs), rendered by the chart itself for this cluster's version
# (serve's own policies bind serve's ServiceAccount, which the demo's serve process is not):
# the ValidatingWebhookConfiguration (rules, matchConditions, namespaceSelector, failurePolicy Fail),
# pointed at this process by URL and labelled so that hack/cluster/down.sh deletes it first, and every
# ValidatingAdmissionPolicy and MutatingAdmissionPolicy with its binding (the stateless rules that hold
# while the webhook is down, the isolation rules outside team namespaces, topology, the earlier client,
# workload-edit: docs/admission.md). tests/integration/test_demo.py checks the two sets are equal.
# (The chart pins its image by digest: any digest renders these objects, which run no image.)
"$HELM" template gpuctl charts/gpuctl -n gpuctl-system --show-only templates/admission.yaml \
  --kube-version "$K8S_VERSION" --set image.digest="sha256:$(printf '0%.0s' {1..64})" 2>/dev/null \
  | "$VPY" -m admission.policies.catalog --chart-objects "https://127.0.0.1:$P_HOOK" "$D/ca.crt" \
  | "$KUBECTL" apply -f - >/dev/null
echo "demo: webhook registered (enforce) at https://127.0.0.1:$P_HOOK/validate and /isolation, with the chart's admission policies"

# ---- gpuctl serve: reconciler, /metrics, REST API ----
# One replica: no leader election (its Lease would need the gpuctl-system namespace).
start gpuctl-serve "$G" serve --address 127.0.0.1 --metrics-port "$P_SERVE" --api --no-leader-elect \
  --kubeconfig "$KUBECONFIG"
wait_url gpuctl-serve "http://127.0.0.1:$P_SERVE/readyz"
echo "demo: gpuctl serve on http://127.0.0.1:$P_SERVE (metrics, API)"

# ---- Prometheus with the shipped rules ----
PROM=""
if command -v prometheus >/dev/null 2>&1; then
  cat >"$D/prometheus.yml" <<EOF
global: {scrape_interval: 5s, evaluation_interval: 5s}
rule_files: ["$ROOT/manifests/prometheus/rules.yaml"]
scrape_configs:
- job_name: gpuctl
  # the label the shipped alerts select gpuctl serve by (Kubernetes discovery sets it from the Service)
  static_configs: [{targets: ["127.0.0.1:$P_SERVE"], labels: {service: gpuctl}}]
EOF
  start prometheus prometheus --config.file="$D/prometheus.yml" --storage.tsdb.path="$D/prometheus-data" \
    --web.listen-address="127.0.0.1:$P_PROM" --storage.tsdb.retention.time=1d
  wait_url prometheus "http://127.0.0.1:$P_PROM/-/ready"
  PROM="http://127.0.0.1:$P_PROM"
  echo "demo: Prometheus on $PROM (rules: manifests/prometheus/rules.yaml)"
else
  echo "demo: no prometheus binary (apt-get install prometheus); skipping the PromQL part" >&2
fi

# ---- pools, quotas, jobs: every write below passes the webhook ----
$G apply -f examples/pools.yaml
$G apply -f examples/quota.yaml
$G apply -f examples/demo/
sleep 10   # let Kueue settle: admissions and preemptions take a few seconds
echo; echo "\$ gpuctl get pools"; $G get pools
echo; echo "\$ gpuctl get jobs -A -o wide"; $G get jobs -A -o wide

# ---- a team member: only the roles gpuctl ships, the team's namespace as the context's ----
# alice is a ServiceAccount in team-a bound to gpuctl-user (RoleBinding) and gpuctl-pool-viewer
# (ClusterRoleBinding) from manifests/api/rbac.yaml; her kubeconfig names team-a as its namespace, so
# `gpuctl get jobs` lists team-a's jobs, as kubectl would (docs/security.md).
"$VPY" -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(open("manifests/api/rbac.yaml")) if d]
print(yaml.safe_dump_all([d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] != "gpuctl-api"]))' \
  | "$KUBECTL" apply -f - >/dev/null
"$KUBECTL" -n team-a create serviceaccount alice --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
"$KUBECTL" -n team-a create rolebinding alice-gpuctl-user --clusterrole=gpuctl-user \
  --serviceaccount=team-a:alice --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
"$KUBECTL" create clusterrolebinding team-a-alice-pool-viewer --clusterrole=gpuctl-pool-viewer \
  --serviceaccount=team-a:alice --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
AK="$D/alice.kubeconfig"
"$KUBECTL" config view --raw --minify >"$AK"
"$KUBECTL" --kubeconfig "$AK" config set-credentials alice \
  --token="$("$KUBECTL" -n team-a create token alice --duration=24h)" >/dev/null
"$KUBECTL" --kubeconfig "$AK" config set-context alice --cluster="$("$KUBECTL" --kubeconfig "$AK" config view -o jsonpath='{.clusters[0].name}')" \
  --user=alice --namespace=team-a >/dev/null
"$KUBECTL" --kubeconfig "$AK" config use-context alice >/dev/null
echo; echo "\$ KUBECONFIG=$AK gpuctl get jobs   # alice: gpuctl-user in team-a, gpuctl-pool-viewer"
KUBECONFIG="$AK" $G get jobs
echo; echo "\$ KUBECONFIG=$AK gpuctl get jobs -A   # every namespace needs gpuctl-admin"
if KUBECONFIG="$AK" $G get jobs -A 2>&1; then
  echo "demo: a team member listed every namespace's jobs" >&2; exit 1
fi

echo; echo "\$ kubectl apply -f examples/raw/typo-pool-job.yaml   # a raw Job, not made by gpuctl"
if "$KUBECTL" apply -f examples/raw/typo-pool-job.yaml 2>&1; then
  echo "demo: the webhook let a bad raw Job through" >&2; exit 1
fi

echo; echo "\$ kubectl apply -f examples/raw/side-door-pod.yaml   # a GPU pod in default tolerating every taint"
if "$KUBECTL" apply -f examples/raw/side-door-pod.yaml 2>&1; then
  echo "demo: a side-door pod outside the team namespaces was admitted" >&2; exit 1
fi

if [[ -n "$PROM" ]]; then
  Q='sum by (pool) (gpuctl_pool_allocated_gpus)'
  Q2='sum by (pool) (gpuctl_pool_allocatable_gpus)'
  echo; echo "\$ curl $PROM/api/v1/query --data-urlencode 'query=$Q'   # and the same for allocatable"
  for _ in $(seq 1 40); do   # the first scrapes take a few seconds
    OUT=$("$VPY" - "$PROM" "$Q" "$Q2" <<'EOF' || true
import json, sys, urllib.parse, urllib.request

def query(q):
    url = f"{sys.argv[1]}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=5) as r:
        return {s["metric"]["pool"]: float(s["value"][1]) for s in json.load(r)["data"]["result"]}

used, total = query(sys.argv[2]), query(sys.argv[3])
for pool in sorted(total):
    share = f"{used.get(pool, 0) / total[pool]:.0%}" if total[pool] else "-"
    print(f"  {pool:<16} {used.get(pool, 0):3.0f} of {total[pool]:3.0f} GPUs held by pods ({share})")
EOF
)
    [[ $(grep -c "GPUs held" <<<"$OUT") -ge 4 ]] && break
    sleep 1
  done
  if [[ $(grep -c "GPUs held" <<<"$OUT") -lt 4 ]]; then
    echo "demo: Prometheus has no per-pool GPU series after 40 s; $PROM/targets and $RUN/logs/gpuctl-serve.log say why" >&2
    exit 1
  fi
  echo "$OUT"
fi

echo
echo "Open:"
echo "  metrics     http://127.0.0.1:$P_SERVE/metrics"
echo "  REST API    http://127.0.0.1:$P_SERVE/api/v1/pools   (Authorization: Bearer \$(kubectl create token ...); docs/api.md)"
if [[ -n "$PROM" ]]; then
  echo "  Prometheus  $PROM/graph?g0.expr=pool%3Agpuctl_gpu_allocation%3Aratio   alerts: $PROM/alerts"
fi
echo "  webhook     https://127.0.0.1:$P_HOOK/readyz   (logs: $RUN/logs/gpuctl-webhook.log)"
echo
echo "The platform keeps running: export KUBECONFIG=$KUBECONFIG; hack/cluster/down.sh stops all of it."
