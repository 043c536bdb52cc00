#!/usr/bin/env bash
# The main job on the local default: install gpuctl into .venv, start the local cluster (building its
# binaries the first time), then the platform the Helm chart installs (charts/gpuctl, its values as shipped),
# with its two Deployments run as processes on this machine (hack/demo_chart.py):
#   - the chart's ServiceAccounts, roles and bindings, the Kueue objects it keeps, its webhook configuration
#     (pointed at the process by URL) and every admission policy it renders, serve's own included;
#   - gpuctl's validating webhook and `gpuctl serve` (reconciler, /metrics, the REST API over HTTPS) with the
#     chart's flags, each authenticated as its own ServiceAccount (gpuctl-system/gpuctl-admission, gpuctl-serve);
#   - a real Prometheus (Debian's package) scraping both every 5 s with the shipped rules;
#   - the autoscaling stack (hack/cluster/autoscaling.sh: a second Prometheus with the serving scrape job,
#     prometheus-adapter, the fake exporter of the fake nodes' pods) for the autoscaled service.
# Then, on screen: pools, quotas and jobs of two teams (queued, preempted, an autoscaled service); a third
# team's 2-node x 8-GPU job admitted as one gang in one rack, a notebook on a MIG slice with the pool's free
# slices per profile and the team's quota spent on both; the service scaled by its load; a team member's
# view; raw `kubectl apply`s the webhook and the policies refuse; per-pool GPU use from PromQL; the
# addresses to open and what to try next. Where it differs from a chart install it says so (README, "The
# demo"). hack/cluster/down.sh stops all of it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
T_START=$(date +%s)
hack/venv.sh
export GPUCTL_PYTHON="$PWD/.venv/bin/python"
VPY=.venv/bin/python
# Prometheus comes from Debian's package (as in hack/test.sh).
if ! command -v prometheus >/dev/null 2>&1 && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  echo "demo: installing prometheus (apt-get)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null) \
    || echo "demo: could not install prometheus; the demo runs without it" >&2
fi
# The fake GPU nodes keep a Job's pod running this long (the fake nodes' default, hack/cluster/up.sh).
export GPUCTL_TESTBED_FAKE_RUNTIME="${GPUCTL_TESTBED_FAKE_RUNTIME:-30m}"
hack/cluster/up.sh
export KUBECONFIG="$(hack/cluster/up.sh --print-kubeconfig)"
# The autoscaling stack (docs/serving.md: Prometheus, prometheus-adapter, the fake exporter) for the demo's
# autoscaled inference service; idempotent. Without Prometheus the service keeps its floor.
FAKE_EXPORTER_URL=""
if command -v prometheus >/dev/null 2>&1; then
  hack/cluster/autoscaling.sh up
  eval "$(hack/cluster/autoscaling.sh env)"
fi
T_CLUSTER=$(date +%s)
source hack/cluster/versions.env
CACHE="${GPUCTL_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuctl-testbed}"
RUN="$(dirname "$KUBECONFIG")"
OFF="${GPUCTL_TESTBED_PORT_OFFSET:-0}"
KUBECTL="$CACHE/bin/k8s-$K8S_VERSION/kubectl"
HELM="$CACHE/bin/helm-$HELM_VERSION/helm"
P_HOOK=$((19443 + OFF)); P_SERVE=$((19090 + OFF)); P_PROM=$((19091 + OFF))
G=.venv/bin/gpuctl
D="$RUN/demo"; mkdir -p "$D"
NS=gpuctl-system
kc() { "$KUBECTL" "$@"; }

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
show() { # show CMD...: print the command as a user types it (gpuctl, not .venv/bin/gpuctl), then run it
  local typed="$*"
  echo; echo "\$ ${typed//$G/gpuctl}"; "$@"
}
# A kubeconfig holding this cluster's address and CA and one identity's token, nothing else (not the
# admin's client certificate): what a ServiceAccount's pod or a team member gets.
token_kubeconfig() { # token_kubeconfig FILE USER TOKEN [NAMESPACE]
  local f=$1 user=$2 token=$3 ns=${4:-}
  rm -f "$f"
  kc config --kubeconfig "$f" set-cluster testbed --server="$(kc config view --minify -o jsonpath='{.clusters[0].cluster.server}')" \
    --certificate-authority="$RUN/pki/ca.crt" --embed-certs=true >/dev/null
  kc config --kubeconfig "$f" set-credentials "$user" --token="$token" >/dev/null
  kc config --kubeconfig "$f" set-context "$user" --cluster=testbed --user="$user" ${ns:+--namespace="$ns"} >/dev/null
  kc config --kubeconfig "$f" use-context "$user" >/dev/null
  chmod 600 "$f"
}

# ---- the chart, rendered with its shipped values (only the image digest set: nothing here runs the image) ----
"$HELM" template gpuctl charts/gpuctl -n "$NS" --kube-version "$K8S_VERSION" \
  --set image.digest="sha256:$(printf '0%.0s' {1..64})" >"$D/chart.yaml" 2>/dev/null
kc create namespace "$NS" --dry-run=client -o yaml | kc apply -f - >/dev/null
"$VPY" hack/demo_chart.py identities <"$D/chart.yaml" | kc apply -f - >/dev/null

# ---- one CA and a serving certificate for 127.0.0.1 (the webhook's and serve's HTTPS) ----
if [[ ! -f "$D/tls.crt" ]]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=gpuctl-demo-ca -keyout "$D/ca.key" -out "$D/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$D/tls.key" -out "$D/tls.csr" 2>/dev/null
  echo "subjectAltName=IP:127.0.0.1" > "$D/tls.ext"
  openssl x509 -req -in "$D/tls.csr" -CA "$D/ca.crt" -CAkey "$D/ca.key" -CAcreateserial -days 365 \
    -extfile "$D/tls.ext" -out "$D/tls.crt" 2>/dev/null
fi

# ---- the webhook: the chart's command and flags, then the demo's address, port, certificate, identity ----
token_kubeconfig "$D/gpuctl-admission.kubeconfig" gpuctl-admission \
  "$(kc -n "$NS" create token gpuctl-admission --duration=8760h)"
mapfile -t HOOK_ARGS < <("$VPY" hack/demo_chart.py args gpuctl-admission <"$D/chart.yaml")
start gpuctl-webhook "$G" "${HOOK_ARGS[@]}" --tls-cert "$D/tls.crt" --tls-key "$D/tls.key" --host 127.0.0.1 \
  --port "$P_HOOK" --kubeconfig "$D/gpuctl-admission.kubeconfig"
wait_url gpuctl-webhook "https://127.0.0.1:$P_HOOK/readyz" --cacert "$D/ca.crt"
# The Kueue objects the chart keeps, its webhook configuration (rules, matchConditions, namespaceSelector,
# failurePolicy Fail) pointed at this process by URL and labelled so that hack/cluster/down.sh deletes it
# first, and every ValidatingAdmissionPolicy and MutatingAdmissionPolicy with its binding: the team rules
# that hold while the webhook is down, isolation, topology, the earlier client, workload-edit
# (docs/admission.md), and serve's own: only serve writes the audit trail, serve and the API write only in
# team namespaces (docs/audit.md, docs/security.md). tests/integration/test_demo.py compares with the chart.
"$VPY" hack/demo_chart.py objects "https://127.0.0.1:$P_HOOK" "$D/ca.crt" <"$D/chart.yaml" | kc apply -f - >/dev/null
echo "demo: the chart's admission installed: webhook (enforce) at https://127.0.0.1:$P_HOOK, $(grep -c '^kind: ValidatingAdmissionPolicy$\|^kind: MutatingAdmissionPolicy$' "$D/chart.yaml") admission policies"

# ---- gpuctl serve (reconciler, /metrics, REST API over HTTPS), as its ServiceAccount ----
token_kubeconfig "$D/gpuctl-serve.kubeconfig" gpuctl-serve "$(kc -n "$NS" create token gpuctl-serve --duration=8760h)"
mapfile -t SERVE_ARGS < <("$VPY" hack/demo_chart.py args gpuctl-serve <"$D/chart.yaml")
start gpuctl-serve env POD_NAMESPACE="$NS" "$G" "${SERVE_ARGS[@]}" --address 127.0.0.1 --metrics-port "$P_SERVE" \
  --tls-cert "$D/tls.crt" --tls-key "$D/tls.key" --kubeconfig "$D/gpuctl-serve.kubeconfig"
wait_url gpuctl-serve "https://127.0.0.1:$P_SERVE/readyz" --cacert "$D/ca.crt"
echo "demo: gpuctl serve on https://127.0.0.1:$P_SERVE (metrics, REST API), leader election on Lease $NS/gpuctl-serve"

# ---- Prometheus with the shipped rules, scraping both (the label the shipped alerts select them by) ----
PROM=""
if command -v prometheus >/dev/null 2>&1; then
  cat >"$D/prometheus.yml" <<EOF
global: {scrape_interval: 5s, evaluation_interval: 5s}
rule_files: ["$ROOT/manifests/prometheus/rules.yaml"]
scrape_configs:
- job_name: gpuctl
  scheme: https
  tls_config: {ca_file: "$D/ca.crt"}
  static_configs: [{targets: ["127.0.0.1:$P_SERVE"], labels: {service: gpuctl, namespace: $NS}}]
- job_name: gpuctl-admission
  scheme: https
  tls_config: {ca_file: "$D/ca.crt"}
  static_configs: [{targets: ["127.0.0.1:$P_HOOK"], labels: {service: gpuctl-admission, namespace: $NS}}]
EOF
  start prometheus prometheus --config.file="$D/prometheus.yml" --storage.tsdb.path="$D/prometheus-data" \
    --web.listen-address="127.0.0.1:$P_PROM" --storage.tsdb.retention.time=1d
  wait_url prometheus "http://127.0.0.1:$P_PROM/-/ready"
  PROM="http://127.0.0.1:$P_PROM"
  echo "demo: Prometheus on $PROM scraping gpuctl serve and the webhook (rules: manifests/prometheus/rules.yaml)"
else
  echo "demo: no prometheus binary (apt-get install prometheus); skipping the PromQL part" >&2
fi
echo
echo "demo: this is \`helm install gpuctl charts/gpuctl -n $NS\` (values as shipped), except:"
"$VPY" hack/demo_chart.py differences

# ---- pools, quotas, jobs: every write below passes the webhook ----
show $G apply -f examples/pools.yaml
show $G apply -f examples/quota.yaml
show $G apply -f examples/demo/
# Until Kueue has placed them: the first three fill training-pool, the service's floor runs.
for j in team-a/pretrain-a team-a/finetune-a team-b/eval-b team-a/llm-serving; do
  $G wait job "${j#*/}" -n "${j%/*}" --for=running --timeout 3m >/dev/null
done
show $G get pools
show $G get jobs -A -o wide

# ---- a third team: a gang in one rack, a notebook on a MIG slice, one quota for both ----
echo; echo "\$ kubectl apply -f hack/cluster/demo-nodes.yaml   # 3 more fake 8 x A100 nodes in racks r1, r1, r2; one A100-80GB cut into MIG slices"
kc apply -f hack/cluster/demo-nodes.yaml
kc wait --for=condition=Ready node/gpu-node-6 node/gpu-node-7 node/gpu-node-8 node/mig-node-1 --timeout=60s >/dev/null
show $G apply -f examples/demo/team-c/platform.yaml
show $G apply -f examples/demo/team-c/llama-pretrain.yaml
$G wait job llama-pretrain -n team-c --for=running --timeout 3m >/dev/null
echo; echo "\$ gpuctl describe job llama-pretrain -n team-c | sed -n '/^GPUs:/p;/^Ranks:/,\$p'   # one gang, one rack"
$G describe job llama-pretrain -n team-c | sed -n '/^GPUs:/p;/^Ranks:/,$p'
show $G apply -f examples/demo/team-c/notebook-mig.yaml
$G wait job carol-notebook -n team-c --for=running --timeout 3m >/dev/null
echo; echo "\$ gpuctl describe pool mig-pool | sed -n '/^Sharing:/p;/^Slices:/,/^Nodes:/p'   # free slices per profile"
$G describe pool mig-pool | sed -n '/^Sharing:/p;/^Slices:/,/^Nodes:/p' | sed '$d'
echo; echo "\$ gpuctl get quotas   # team-c: 16 whole GPUs + one 1g.10gb slice (1/7) of its 18"
$G get quotas

# ---- the autoscaled service: load on its floor brings its burst replicas ----
if [[ -n "$FAKE_EXPORTER_URL" ]]; then
  echo; echo "\$ gpuctl describe job llm-serving -n team-a | grep -E '^(Replicas|Autoscaler):'"
  $G describe job llm-serving -n team-a | grep -E '^(Replicas|Autoscaler):'
  echo; echo "# 30 requests in flight on each floor replica (the fake exporter stands in for vLLM's /metrics)"
  for pod in $(kc -n team-a get pods -l runwhere.ai/serving-tier=floor -o name); do
    echo "\$ curl -X PUT $FAKE_EXPORTER_URL/v1/pods/team-a/${pod#pod/} -d '{\"vllm:num_requests_running\": 30}'"
    curl -fsS -X PUT "$FAKE_EXPORTER_URL/v1/pods/team-a/${pod#pod/}" -d '{"vllm:num_requests_running": 30}' >/dev/null
  done
  for _ in $(seq 1 90); do   # Prometheus, the adapter, the HPA controller, Kueue: about 15 s
    [[ $(kc -n team-a get deployment llm-serving-burst -o jsonpath='{.status.readyReplicas}') == 2 ]] && break
    sleep 1
  done
  echo "\$ gpuctl describe job llm-serving -n team-a | grep -E '^(Replicas|Autoscaler):'"
  $G describe job llm-serving -n team-a | grep -E '^(Replicas|Autoscaler):'
fi

# ---- GPU use per job (docs/utilisation.md): dcgm-exporter's series through Prometheus ----
if [[ -n "$FAKE_EXPORTER_URL" ]]; then
  echo; echo "# what dcgm-exporter reports for the GPUs of a few pods (the fake exporter stands in for the GPU Operator's)"
  set_activity() { # set_activity NAMESPACE POD RATIO MIB: each GPU of the pod that busy, that much memory used
    local body="{\"DCGM_FI_PROF_GR_ENGINE_ACTIVE\": $3, \"DCGM_FI_DEV_FB_USED\": $4}"
    echo "\$ curl -X PUT $FAKE_EXPORTER_URL/v1/pods/$1/$2 -d '$body'"
    curl -fsS -X PUT "$FAKE_EXPORTER_URL/v1/pods/$1/$2" -d "$body" >/dev/null
  }
  for pod in $(kc -n team-c get pods -l batch.kubernetes.io/job-name=llama-pretrain -o name); do
    set_activity team-c "${pod#pod/}" 0.87 71680
  done
  set_activity team-a "$(kc -n team-a get pods -l batch.kubernetes.io/job-name=pretrain-a -o jsonpath='{.items[0].metadata.name}')" 0.93 65536
  set_activity team-c carol-notebook-0 0.35 6144
  export GPUCTL_PROMETHEUS_URL="$PROMETHEUS_URL"
  for _ in $(seq 1 40); do   # 10 s of samples at the new values (Prometheus scrapes every second)
    $G top llama-pretrain -n team-c --window 10s --no-headers 2>/dev/null | grep -q ' 87% ' && break
    sleep 1
  done
  echo; echo "\$ GPUCTL_PROMETHEUS_URL=$PROMETHEUS_URL gpuctl top -A --window 10s   # busiest first; alice-notebook's GPU is idle"
  $G top -A --window 10s
fi

# ---- a team member: only the roles gpuctl ships, the team's namespace as the context's ----
# alice is a ServiceAccount in team-a bound to gpuctl-user (RoleBinding) and gpuctl-pool-viewer
# (ClusterRoleBinding), the chart's roles; her kubeconfig holds her token only and names team-a as its
# namespace, so `gpuctl get jobs` lists team-a's jobs, as kubectl would (docs/security.md).
kc -n team-a create serviceaccount alice --dry-run=client -o yaml | kc apply -f - >/dev/null
kc -n team-a create rolebinding alice-gpuctl-user --clusterrole=gpuctl-user \
  --serviceaccount=team-a:alice --dry-run=client -o yaml | kc apply -f - >/dev/null
kc create clusterrolebinding team-a-alice-pool-viewer --clusterrole=gpuctl-pool-viewer \
  --serviceaccount=team-a:alice --dry-run=client -o yaml | kc apply -f - >/dev/null
AK="$D/alice.kubeconfig"
token_kubeconfig "$AK" alice "$(kc -n team-a create token alice --duration=24h)" team-a
echo; echo "\$ KUBECONFIG=$AK gpuctl get jobs   # alice: gpuctl-user in team-a, gpuctl-pool-viewer"
KUBECONFIG="$AK" $G get jobs
echo; echo "\$ KUBECONFIG=$AK gpuctl get jobs -A   # every namespace needs gpuctl-admin"
if KUBECONFIG="$AK" $G get jobs -A 2>&1; then
  echo "demo: a team member listed every namespace's jobs" >&2; exit 1
fi

echo; echo "\$ kubectl apply -f examples/raw/typo-pool-job.yaml   # a raw Job, not made by gpuctl"
if kc apply -f examples/raw/typo-pool-job.yaml 2>&1; then
  echo "demo: the webhook let a bad raw Job through" >&2; exit 1
fi

echo; echo "\$ kubectl apply -f examples/raw/side-door-pod.yaml   # a GPU pod in default tolerating every taint"
if kc apply -f examples/raw/side-door-pod.yaml 2>&1; then
  echo "demo: a side-door pod outside the team namespaces was admitted" >&2; exit 1
fi

show $G history llama-pretrain -n team-c

if [[ -n "$PROM" ]]; then
  Q='sum by (pool) (gpuctl_pool_allocated_gpus)'
  Q2='sum by (pool) (gpuctl_pool_allocatable_gpus)'
  echo; echo "\$ curl $PROM/api/v1/query --data-urlencode 'query=$Q'   # and the same for allocatable; up{} of both targets"
  for _ in $(seq 1 40); do   # the first scrapes take a few seconds
    OUT=$("$VPY" - "$PROM" "$Q" "$Q2" <<'EOF' || true
import json, sys, urllib.parse, urllib.request

def query(q, label):
    url = f"{sys.argv[1]}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=5) as r:
        return {s["metric"].get(label, ""): float(s["value"][1]) for s in json.load(r)["data"]["result"]}

used, total = query(sys.argv[2], "pool"), query(sys.argv[3], "pool")
for pool in sorted(total):
    share = f"{used.get(pool, 0) / total[pool]:.0%}" if total[pool] else "-"
    print(f"  {pool:<16} {used.get(pool, 0):3.0f} of {total[pool]:3.0f} GPUs held by pods ({share})")
for service, up in sorted(query('up{service=~"gpuctl|gpuctl-admission"}', "service").items()):
    print(f"  up{{service=\"{service}\"}} {up:.0f}")
EOF
)
    [[ $(grep -c "GPUs held" <<<"$OUT") -ge 6 && $(grep -c '} 1$' <<<"$OUT") -eq 2 ]] && break
    sleep 1
  done
  if [[ $(grep -c "GPUs held" <<<"$OUT") -lt 6 || $(grep -c '} 1$' <<<"$OUT") -ne 2 ]]; then
    echo "$OUT"
    echo "demo: Prometheus lacks per-pool GPU series or a target after 40 s; $PROM/classic/targets and $RUN/logs/gpuctl-serve.log say why" >&2
    exit 1
  fi
  echo "$OUT"
fi

TOKEN_CMD="kubectl -n team-a create token alice"
echo
echo "Open (the CA of both HTTPS addresses: $D/ca.crt):"
echo "  metrics     curl --cacert $D/ca.crt https://127.0.0.1:$P_SERVE/metrics"
echo "  REST API    curl --cacert $D/ca.crt -H \"Authorization: Bearer \$($TOKEN_CMD)\" https://127.0.0.1:$P_SERVE/api/v1/pools   (docs/api.md)"
echo "  webhook     curl --cacert $D/ca.crt https://127.0.0.1:$P_HOOK/readyz   (logs: $RUN/logs/gpuctl-webhook.log)"
if [[ -n "$PROM" ]]; then
  echo "  Prometheus  $PROM/classic/graph?g0.expr=pool%3Agpuctl_gpu_allocation%3Aratio&g0.tab=1"
  echo "              $PROM/classic/alerts   $PROM/classic/targets   (Debian's Prometheus serves the classic UI only)"
fi
echo
echo "demo: ready in $(( $(date +%s) - T_START ))s ($(( T_CLUSTER - T_START ))s for the cluster). Try next:"
echo "  export KUBECONFIG=$KUBECONFIG     # the cluster admin; KUBECONFIG=$AK is alice"
echo "  gpuctl describe job ablation-a -n team-a      # why it waits, and when it starts at the latest"
echo "  gpuctl create -f examples/training-multinode.yaml   # a gang of your own (edit its pool and team first)"
echo "  gpuctl stop pretrain-a -n team-a && gpuctl get jobs -A   # the queue moves up"
[[ -n "$FAKE_EXPORTER_URL" ]] && echo "  GPUCTL_PROMETHEUS_URL=$PROMETHEUS_URL gpuctl top -A   # GPU use per job (docs/utilisation.md)"
echo "  gpuctl history -n team-a    # who submitted, stopped, preempted what: written by gpuctl serve only"
echo "  hack/cluster/down.sh        # stops all of it"
