#!/usr/bin/env bash
# The project's test command (README): install into .venv, lint, build or reuse the cluster binaries,
# run unit and integration tests. Exits non-zero on any failure, including "no tests ran" (pytest 5).
#
#   hack/test.sh [PYTEST ARGS]              everything but the real node
#   hack/test.sh --real-node [PYTEST ARGS]  only the chart installed on a real kubelet node
#                                           (tests/integration/test_real_node.py; .ci/run-real-node)
#   hack/test.sh --all [PYTEST ARGS]        both, one after the other, linting and building once (CI: .ci/run)
# The real-node variants also build the kubelet and the pause image (hack/cluster/build.sh with
# GPUCTL_BUILD_REAL_NODE=1) and install containerd, runc and the CNI plugins from Debian; they need root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REAL_NODE=0 SUITE=1
case "${1:-}" in
  --real-node) REAL_NODE=1 SUITE=0; shift ;;
  --all) REAL_NODE=1; shift ;;
esac
hack/venv.sh
export GPUCTL_PYTHON="$PWD/.venv/bin/python"
# Debian packages, installed in one apt-get run when missing (needs root):
#   prometheus (promtool too): the metrics tests and the demo
#   mmdebstrap, umoci, skopeo: the image (hack/image.sh, tests/integration/test_image.py)
#   containerd, runc, the CNI plugins, iptables: the real node (--real-node, --all)
apt=()
command -v prometheus >/dev/null 2>&1 || apt+=(prometheus)
command -v umoci >/dev/null 2>&1 || apt+=(mmdebstrap umoci skopeo)
if (( REAL_NODE )) && { ! command -v containerd >/dev/null 2>&1 || [[ ! -x /usr/lib/cni/bridge ]]; }; then
  apt+=(containerd runc containernetworking-plugins iptables)
fi
if (( ${#apt[@]} )) && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt[@]}" >/dev/null) \
    || echo "test: could not install ${apt[*]}; the tests that use them will fail" >&2
fi
# Every local cluster's Kueue, kube-apiserver and KWOK take inotify instances; the suite starts up to
# eight clusters (three workers, the demo, MultiKueue's three, the real node) and the kernel's default of
# 128 per user ran out ("couldn't initialize inotify: too many open files"). Raised as root, never lowered.
if [[ $(id -u) == 0 ]] && (( $(cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null || echo 1024) < 1024 )); then
  sysctl -qw fs.inotify.max_user_instances=1024 || echo "test: could not raise fs.inotify.max_user_instances" >&2
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Layers point down and the domain core stays pure (contracts in pyproject.toml, docs/architecture.md).
.venv/bin/lint-imports
if (( REAL_NODE )); then export GPUCTL_BUILD_REAL_NODE=1; fi
# The cluster binaries and the container image at once: the Go build is CPU, the image mostly downloads
# (Debian packages, wheels) and disk. The image is cached by the wheel's content (rebuilt only when gpuctl
# changed, ~1-2 min cold); it needs root (mmdebstrap, chroot), as CI runs. Elsewhere
# tests/integration/test_image.py fails and says so.
mkdir -p build
hack/cluster/build.sh >build/cluster-build.log 2>&1 & build=$!
image=0
if [[ $(id -u) == 0 ]]; then hack/image.sh || image=$?; else echo "test: not root, so no image build (hack/image.sh)" >&2; fi
built=0; wait "$build" || built=$?
cat build/cluster-build.log
if (( built != 0 )); then echo "test: hack/cluster/build.sh failed (exit $built)" >&2; exit "$built"; fi
if (( image != 0 )); then echo "test: hack/image.sh failed (exit $image)" >&2; exit "$image"; fi
# Three workers, each with its own cluster (tests/conftest.py), whole files per worker (module fixtures);
# one when GPUCTL_TEST_KUBECONFIG names a shared cluster. GPUCTL_TEST_WORKERS=0 runs in this process.
# The suite waits more than it computes (one worker used ~0.46 of a core): on 2 cores, from a clean clone
# with cached binaries, 3 workers took 1340 s and 2 took 1903 s (README, "Tests").
workers=${GPUCTL_TEST_WORKERS:-3}
[[ -n ${GPUCTL_TEST_KUBECONFIG:-} ]] && workers=0
if (( SUITE )); then
  # The real node has its own run (it starts its own cluster with a kubelet node and a Prometheus; README,
  # "Install on a cluster"): deselected here, by marker, and pytest reports it as deselected.
  (( REAL_NODE )) || echo "test: tests/integration/test_real_node.py runs in hack/test.sh --real-node or --all" >&2
  # --durations: the slowest tests in CI's output; build/junit.xml: every test's time (bench/suite_times.py
  # sums them per file), where the suite's minutes go.
  .venv/bin/python -m pytest -n "$workers" --dist loadfile -m "not real_node" --durations=30 --junitxml=build/junit.xml "$@"
fi
# After the suite, not beside it: on 2 cores the suite's workers keep both busy, and both halves have
# timed claims (the real node's failover within a lease duration).
if (( REAL_NODE )); then
  .venv/bin/python -m pytest tests/integration/test_real_node.py "$@"
fi
