#!/usr/bin/env bash
# Stop exactly the processes hack/cluster/up.sh started (by PID, never by name) and remove their data.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/versions.env"
CACHE="${GPUCTL_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuctl-testbed}"
RUN="${GPUCTL_TESTBED_RUN:-$CACHE/run}"
KUBECTL="$CACHE/bin/k8s-$K8S_VERSION/kubectl"
[[ -d "$RUN" ]] || { echo "down: nothing runs from $RUN"; exit 0; }

alive() { [[ -f "$RUN/pids/$1" ]] && kill -0 "$(cat "$RUN/pids/$1")" 2>/dev/null; }
# Webhooks first: with Kueue gone, failurePolicy Fail would block every later API write.
if alive kube-apiserver && [[ -x "$KUBECTL" ]]; then
  "$KUBECTL" --kubeconfig="$RUN/kubeconfig" delete mutatingwebhookconfiguration,validatingwebhookconfiguration \
    -l gpuctl.runwhere.ai/testbed=true --ignore-not-found --timeout=10s >/dev/null 2>&1 || true
fi
# The real node (hack/cluster/real-node.sh): its namespaces, cgroups and network interface.
if [[ -f "$RUN/pids/real-node" ]] || [[ -d "$RUN/node" ]]; then
  GPUCTL_TESTBED_RUN="$RUN" "$HERE/real-node.sh" down || echo "down: the real node left something behind (above)" >&2
fi
# hack/demo.sh adds the webhook, gpuctl serve and Prometheus; they go first (their webhook is deleted above).
# hack/cluster/autoscaling.sh's processes (Prometheus, prometheus-adapter, the fake exporter) too.
for name in prometheus-adapter fake-exporter serving-prometheus prometheus gpuctl-serve gpuctl-webhook lws jobset kueue kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
  f="$RUN/pids/$name"
  [[ -f "$f" ]] || continue
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$f"
done
rm -rf "$RUN"
echo "down: stopped and removed $RUN"
