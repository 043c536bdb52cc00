"""Shared test fixtures.

Integration tests (tests/integration, marker `integration`) run against the local cluster of
hack/cluster/up.sh: the `cluster` fixture reuses the cluster that $GPUCTL_TEST_KUBECONFIG (or
$KUBECONFIG, when it points at that cluster's file) names, else starts one for the session in its own
run directory and stops it at the end. Under pytest-xdist (hack/test.sh runs three workers) each worker
starts its own cluster (run directory and port offset by worker), since tests own cluster-wide state
(pools, node labels and taints, Kueue's cluster objects). Nothing is built inside a test: up.sh
builds only what hack/cluster/build.sh has not cached (CI runs the build first).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("GPUCTL_TESTBED_CACHE", Path.home() / ".cache" / "gpuctl-testbed"))


# hack/test.sh runs two xdist workers with --dist loadfile: each file goes whole to whichever worker is
# free, in collection order, and the run ends when the file handed out last ends. So the longest files
# go first, in this order (measured: README, "Tests"), then every other file as collected; the unit
# files, seconds each, fill the end. (xdist's own reordering, by number of tests, is switched off below:
# it put the 40-test unit files first and the one-test demo, a cluster of its own, last.)
LONGEST_FIRST = (
    "tests/integration/test_tenant_attacks.py",
    "tests/integration/test_multicluster.py",
    "tests/integration/test_admission_policy.py",
    "tests/integration/test_chart.py",
    "tests/integration/test_demo.py",
    "tests/integration/test_admission_webhook.py",
    "tests/integration/test_stop_estimate.py",
    "tests/integration/test_pool_isolation.py",
    "tests/integration/test_api_cluster.py",
    "tests/integration/test_metrics.py",
    "tests/integration/test_starvation.py",
)


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "loadscopereorder", None):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    for item in items:
        if "tests/integration" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.integration)
    # A stable sort: the tests of a file stay together and in their order (module fixtures).
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).relative_to(ROOT).as_posix(), len(rank)))


def _reachable(kubeconfig: str) -> bool:
    from gpuctl.cluster import Cluster

    try:
        Cluster.connect(kubeconfig=kubeconfig).server_version()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def cluster() -> Iterator[str]:
    """Path of a kubeconfig for the local test cluster; also exported as $KUBECONFIG."""
    existing = os.environ.get("GPUCTL_TEST_KUBECONFIG")
    if not existing and "gpuctl-testbed" in os.environ.get("KUBECONFIG", ""):
        existing = os.environ["KUBECONFIG"]
    if existing:
        if not _reachable(existing):
            pytest.fail(f"the cluster of {existing} does not answer; start it with hack/cluster/up.sh")
        os.environ["KUBECONFIG"] = existing
        yield existing
        return
    run = Path(os.environ.get("GPUCTL_TESTBED_RUN_PYTEST", f"/tmp/gpuctl-pytest-{os.getpid()}"))
    offset = int(os.environ.get("GPUCTL_TESTBED_PORT_OFFSET", "100"))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ... under pytest-xdist
    if worker:
        run = run.with_name(f"{run.name}-{worker}")
        # Steps of 100: up.sh's base ports differ by 1,000 (8443 metrics, 9443 webhook), never by 100.
        offset += 100 * int(worker.removeprefix("gw"))
    env = {**os.environ, "GPUCTL_TESTBED_RUN": str(run), "GPUCTL_TESTBED_PORT_OFFSET": str(offset)}
    # The JobSet controller too (tests/integration/test_jobset.py): about 50 MiB, a few seconds per cluster.
    env.setdefault("GPUCTL_TESTBED_JOBSET", "1")
    # And the LeaderWorkerSet controller (tests/integration/test_lws.py), the same way.
    env.setdefault("GPUCTL_TESTBED_LWS", "1")
    up = subprocess.run([str(ROOT / "hack/cluster/up.sh")], env=env, capture_output=True, text=True)
    if up.returncode != 0:
        # What up.sh started before it failed (a half-started cluster keeps its ports and processes).
        subprocess.run([str(ROOT / "hack/cluster/down.sh")], env=env, capture_output=True)
        pytest.fail(f"hack/cluster/up.sh failed:\n{up.stdout[-4000:]}\n{up.stderr[-4000:]}")
    kubeconfig = str(run / "kubeconfig")
    os.environ["KUBECONFIG"] = kubeconfig
    try:
        yield kubeconfig
    finally:
        subprocess.run([str(ROOT / "hack/cluster/down.sh")], env=env, capture_output=True)


@pytest.fixture(scope="session")
def kube(cluster: str):
    """The gpuctl JSON client on the test cluster."""
    from gpuctl.cluster import Cluster

    return Cluster.connect(kubeconfig=cluster)


@pytest.fixture(scope="session")
def kubectl_bin() -> str:
    versions = dict(
        line.split("=", 1)
        for line in (ROOT / "hack/cluster/versions.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    return str(CACHE / "bin" / f"k8s-{versions['K8S_VERSION']}" / "kubectl")


@pytest.fixture
def kubectl(cluster: str, kubectl_bin: str):
    """Run kubectl on the test cluster: kubectl("get", "pods", check=False) -> CompletedProcess."""

    def run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run(
            [kubectl_bin, "--kubeconfig", cluster, *args], input=input, capture_output=True, text=True
        )
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {p.stderr}")
        return p

    return run


@pytest.fixture
def namespace(kube) -> Iterator[str]:
    """A fresh namespace (unique name), deleted after the test. Not a team namespace by itself."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.delete(f"/api/v1/namespaces/{name}")
