#!/usr/bin/env bash
# A MultiKueue manager and two worker clusters, each a hack/cluster/up.sh cluster of its own (etcd,
# kube-apiserver, controller-manager, scheduler, KWOK, Kueue) in its own run directory and port range:
#
#   hack/cluster/multi.sh up      start manager (no nodes), worker-a and worker-b (the GPU nodes of
#                                 hack/cluster/nodes.yaml each), then write
#                                   $RUN/kubeconfig   contexts manager (current), worker-a, worker-b (admin)
#                                   $RUN/worker-X/multikueue.kubeconfig  what the manager's Kueue uses to
#                                     reach worker X: a ServiceAccount token with MultiKueue's rights only
#   hack/cluster/multi.sh down    stop all three
#   hack/cluster/multi.sh stop-worker NAME | start-worker NAME   stop / start one worker's API server
#                                 (its etcd keeps the state: an outage as the manager sees it)
#
# Environment: GPUCTL_MULTI_RUN (default /tmp/gpuctl-multi), GPUCTL_MULTI_OFFSETS (default "400 500 900":
# the port offsets of manager, worker-a, worker-b). The MultiKueue objects themselves (kubeconfig Secrets,
# MultiKueueClusters, MultiKueueConfig, AdmissionCheck) are gpuctl's: `gpuctl create -f` a pool that names
# its cluster(s) (docs/multicluster.md).
set -Eeuo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
source "$HERE/versions.env"
CACHE="${GPUCTL_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuctl-testbed}"
RUN="${GPUCTL_MULTI_RUN:-/tmp/gpuctl-multi}"
read -r -a OFFS <<<"${GPUCTL_MULTI_OFFSETS:-400 500 900}"
NAMES=(manager worker-a worker-b)
PY="${GPUCTL_PYTHON:-$(command -v python3)}"
KUBECTL="$CACHE/bin/k8s-$K8S_VERSION/kubectl"

offset_of() { local i; for i in 0 1 2; do [[ "${NAMES[$i]}" == "$1" ]] && { echo "${OFFS[$i]}"; return; }; done; return 1; }

up_one() { # up_one NAME
  local name=$1 off; off=$(offset_of "$name")
  local env=(GPUCTL_TESTBED_RUN="$RUN/$name" GPUCTL_TESTBED_PORT_OFFSET="$off")
  if [[ "$name" == manager ]]; then
    env+=(GPUCTL_TESTBED_NODES=none GPUCTL_TESTBED_KUEUE_CONFIG="$RUN/manager-kueue.yaml")
  fi
  env "${env[@]}" "$HERE/up.sh" >"$RUN/$name.up.log" 2>&1
}

# The worker's ServiceAccount for the manager's Kueue, with the rights MultiKueue uses there: create and
# delete the copies of jobs (batch Jobs, pods, StatefulSets: the frameworks of manifests/kueue/
# multikueue-manager.yaml) and their Workloads, watch them, read their status.
worker_credentials() { # worker_credentials NAME
  local name=$1; local kc="$RUN/$name/kubeconfig" off; off=$(offset_of "$name")
  "$KUBECTL" --kubeconfig="$kc" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: ServiceAccount
metadata: {name: gpuctl-multikueue, namespace: kueue-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: gpuctl-multikueue}
rules:
- apiGroups: [batch]
  resources: [jobs]
  verbs: [create, delete, get, list, watch, update, patch]
- apiGroups: [batch]
  resources: [jobs/status]
  verbs: [get]
- apiGroups: [""]
  resources: [pods]
  verbs: [create, delete, get, list, watch, update, patch]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [get]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [create, delete, get, list, watch]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [create, delete, get, list, watch, update, patch]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/status]
  verbs: [get, patch, update]
- apiGroups: [kueue.x-k8s.io]
  resources: [clusterqueues, localqueues]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: gpuctl-multikueue}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gpuctl-multikueue}
subjects: [{kind: ServiceAccount, name: gpuctl-multikueue, namespace: kueue-system}]
YAML
  local token out="$RUN/$name/multikueue.kubeconfig"
  token=$("$KUBECTL" --kubeconfig="$kc" -n kueue-system create token gpuctl-multikueue --duration=8760h)
  "$KUBECTL" config --kubeconfig="$out" set-cluster "$name" --server="https://127.0.0.1:$((36443 + off))" \
    --certificate-authority="$RUN/$name/pki/ca.crt" --embed-certs=true >/dev/null
  "$KUBECTL" config --kubeconfig="$out" set-credentials gpuctl-multikueue --token="$token" >/dev/null
  "$KUBECTL" config --kubeconfig="$out" set-context "$name" --cluster="$name" --user=gpuctl-multikueue >/dev/null
  "$KUBECTL" config --kubeconfig="$out" use-context "$name" >/dev/null
}

# One kubeconfig with a context per cluster, named after it (gpuctl reaches a worker through the context
# of the worker's name in the caller's kubeconfig: docs/multicluster.md).
merged_kubeconfig() {
  "$PY" - "$RUN" "${NAMES[@]}" <<'PYEOF'
import sys, yaml
run, names = sys.argv[1], sys.argv[2:]
out = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": [],
       "current-context": names[0]}
for n in names:
    kc = yaml.safe_load(open(f"{run}/{n}/kubeconfig"))
    out["clusters"].append({"name": n, "cluster": kc["clusters"][0]["cluster"]})
    out["users"].append({"name": f"{n}-admin", "user": kc["users"][0]["user"]})
    out["contexts"].append({"name": n, "context": {"cluster": n, "user": f"{n}-admin"}})
open(f"{run}/kubeconfig", "w").write(yaml.safe_dump(out, sort_keys=False))
PYEOF
}

case "${1:-}" in
  up)
    if [[ -f "$RUN/kubeconfig" ]]; then echo "multi: already up from $RUN (multi.sh down stops it)"; exit 0; fi
    mkdir -p "$RUN"; T0=$(date +%s)
    "$PY" - "$ROOT/manifests/kueue/configuration.yaml" "$ROOT/manifests/kueue/multikueue-manager.yaml" \
      >"$RUN/manager-kueue.yaml" <<'PYEOF'
import sys, yaml
base, over = (yaml.safe_load(open(f)) for f in sys.argv[1:3])
base["integrations"]["frameworks"] = over["integrations"]["frameworks"]
base["multiKueue"] = over["multiKueue"]
yaml.safe_dump(base, sys.stdout, sort_keys=False)
PYEOF
    # Build once (up.sh's flock would serialize three builds anyway), then start the three at once.
    "$HERE/build.sh" >/dev/null
    pids=()
    for n in "${NAMES[@]}"; do up_one "$n" & pids+=($!); done
    failed=0
    for i in 0 1 2; do
      if ! wait "${pids[$i]}"; then echo "multi: ${NAMES[$i]} did not start:" >&2; tail -n 30 "$RUN/${NAMES[$i]}.up.log" >&2; failed=1; fi
    done
    if (( failed )); then "$0" down >&2 || true; exit 1; fi
    for n in worker-a worker-b; do worker_credentials "$n"; done
    merged_kubeconfig
    echo "multi: manager, worker-a, worker-b ready in $(( $(date +%s) - T0 ))s"
    echo "export KUBECONFIG=$RUN/kubeconfig"
    ;;
  down)
    for n in "${NAMES[@]}"; do
      GPUCTL_TESTBED_RUN="$RUN/$n" "$HERE/down.sh" || true
    done
    rm -rf "$RUN"
    ;;
  stop-worker|start-worker)
    # The worker's API server goes away (killed: its clients see the connection close) and comes back with
    # the same command line and the same etcd, so the worker's state survives, as after an outage.
    name=${2:?worker name}; pidf="$RUN/$name/pids/kube-apiserver"; saved="$RUN/$name/kube-apiserver.cmdline"
    if [[ "$1" == stop-worker ]]; then
      pid=$(cat "$pidf"); cp "/proc/$pid/cmdline" "$saved"; kill "$pid"
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      echo "multi: $name's API server stopped"
    else
      mapfile -d '' cmd <"$saved"
      setsid "${cmd[@]}" >>"$RUN/$name/logs/kube-apiserver.log" 2>&1 </dev/null &
      echo $! >"$pidf"
      off=$(offset_of "$name")
      for _ in $(seq 1 200); do curl -fsk "https://127.0.0.1:$((36443 + off))/readyz" >/dev/null 2>&1 && break; sleep 0.3; done
      echo "multi: $name's API server is back"
    fi
    ;;
  *) echo "usage: hack/cluster/multi.sh up|down|stop-worker NAME|start-worker NAME" >&2; exit 2 ;;
esac
