#!/usr/bin/env bash
# gpuctl on a kind cluster, for people who have Docker (or Podman): the real install path of a cluster
# admin, end to end, with KWOK fake GPU nodes.
#
#   sudo hack/kind.sh          create kind cluster "gpuctl", install Kueue, KWOK and gpuctl, run the demo jobs
#   hack/kind.sh --check       only validate what it would use (kind config, chart), no container runtime needed
#   kind delete cluster --name gpuctl
#
# Steps: build kind, helm and kubectl from Go modules (hack/cluster/build.sh, GPUCTL_BUILD_KIND=1);
# validate hack/kind/cluster.yaml with kind's own loader; `kind create cluster`; build the image
# (hack/image.sh, needs root) and `kind load image-archive` it; install Kueue from its own Helm chart
# (the Go module's charts/kueue, image registry.k8s.io/kueue/kueue) with manifests/kueue/configuration.yaml;
# install KWOK in the cluster (its module's kustomize/kwok, our stages) and the fake GPU nodes of
# hack/cluster/nodes.yaml; `helm install gpuctl charts/gpuctl` with hack/kind/values.yaml and the
# image's digest; then pools, quotas, jobs through the webhook, and a raw Job it refuses.
# What CI exercises of this (no Docker there): the kind config validation and the chart rendered with
# hack/kind/values.yaml and server-side dry-run against a real API server (tests/integration/test_chart.py),
# and the image itself (tests/integration/test_image.py). Not exercised: kind, the image pull by
# digest in containerd, Kueue's chart, KWOK in-cluster.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source hack/cluster/versions.env
CACHE="${GPUCTL_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuctl-testbed}"
NAME=gpuctl
KC="${GPUCTL_KIND_KUBECONFIG:-$ROOT/build/kind/kubeconfig}"
CHECK=0; [[ "${1:-}" == "--check" ]] && CHECK=1
log() { echo "kind: $*"; }

GPUCTL_BUILD_KIND=$(( 1 - CHECK )) hack/cluster/build.sh
source "$CACHE/dirs.env"
KIND="$CACHE/bin/kind-$KIND_VERSION/kind"
HELM="$CACHE/bin/helm-$HELM_VERSION/helm"
KUBECTL="$CACHE/bin/k8s-$K8S_VERSION/kubectl"
"$CACHE/bin/kind-validate-$KIND_VERSION/kind-validate" hack/kind/cluster.yaml
"$HELM" lint --strict charts/gpuctl -f hack/kind/values.yaml >/dev/null 2>&1 || { "$HELM" lint --strict charts/gpuctl -f hack/kind/values.yaml; exit 1; }
log "kind config and chart values valid"
(( CHECK )) && exit 0

command -v docker >/dev/null || command -v podman >/dev/null || { echo "kind: needs Docker or Podman" >&2; exit 1; }
mkdir -p "$(dirname "$KC")"
if ! "$KIND" get clusters 2>/dev/null | grep -qx "$NAME"; then
  "$KIND" create cluster --config hack/kind/cluster.yaml --kubeconfig "$KC" --wait 120s
fi
kc() { "$KUBECTL" --kubeconfig "$KC" "$@"; }

# ---- the image: built without a daemon, loaded into the nodes' containerd ----
hack/image.sh
DIGEST=$(cat build/image/digest)
"$KIND" load image-archive build/image/gpuctl.oci.tar --name "$NAME"

# ---- Kueue, from its own chart in the Go module, with gpuctl's configuration ----
"$HELM" upgrade --install kueue "$KUEUE_DIR/charts/kueue" --kubeconfig "$KC" -n kueue-system --create-namespace \
  --set controllerManager.manager.image.repository=registry.k8s.io/kueue/kueue \
  --set controllerManager.manager.image.tag="v$KUEUE_VERSION" \
  --set controllerManager.manager.image.pullPolicy=IfNotPresent \
  --set-file managerConfig.controllerManagerConfigYaml=manifests/kueue/configuration.yaml --wait --timeout 5m

# ---- KWOK in the cluster, gpuctl's stages, the fake GPU nodes ----
kc kustomize "$KWOK_DIR/kustomize/kwok" \
  | sed -E "s#image: registry.k8s.io/kwok/kwok\$#image: registry.k8s.io/kwok/kwok:v$KWOK_VERSION#" | kc apply -f -
kc apply -f hack/cluster/kwok/
kc -n kube-system rollout status deployment/kwok-controller --timeout=180s
kc apply -f hack/cluster/nodes.yaml

# ---- gpuctl ----
"$HELM" upgrade --install gpuctl charts/gpuctl --kubeconfig "$KC" -n gpuctl-system --create-namespace \
  -f hack/kind/values.yaml --set image.digest="$DIGEST" --wait --timeout 5m
log "gpuctl installed (image $(cat build/image/ref))"

# ---- the demo, through the in-cluster webhook ----
G="$ROOT/.venv/bin/gpuctl"; [[ -x "$G" ]] || G=gpuctl
export KUBECONFIG="$KC"
"$G" apply -f examples/pools.yaml
"$G" apply -f examples/quota.yaml
"$G" apply -f examples/demo/
sleep 10
"$G" get pools
"$G" get jobs -A
echo "\$ kubectl apply -f examples/raw/typo-pool-job.yaml"
if kc apply -f examples/raw/typo-pool-job.yaml; then echo "kind: the webhook let a bad raw Job through" >&2; exit 1; fi
log "done: export KUBECONFIG=$KC; kind delete cluster --name $NAME removes it"
