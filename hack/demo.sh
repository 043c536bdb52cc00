#!/usr/bin/env bash
# The main job on the local default: install gpuctl into .venv, start the local cluster (building its
# binaries the first time), create the four pools of the product documents, two team quotas and sample
# jobs of every kind, then show pools and jobs (some running, some queued).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
.venv/bin/pip install -q -e '.[dev]'
export GPUCTL_PYTHON="$PWD/.venv/bin/python"
hack/cluster/up.sh
export KUBECONFIG="$(hack/cluster/up.sh --print-kubeconfig)"
G=.venv/bin/gpuctl
$G apply -f examples/pools.yaml
$G apply -f examples/quota.yaml
$G apply -f examples/demo/
sleep 10   # let Kueue settle: admissions and preemptions take a few seconds
echo; echo "\$ gpuctl get pools"; $G get pools
echo; echo "\$ gpuctl get jobs -A -o wide"; $G get jobs -A -o wide
echo
echo "The cluster keeps running: export KUBECONFIG=$KUBECONFIG; hack/cluster/down.sh stops it."
