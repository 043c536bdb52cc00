"""The local cluster's metrics stack for a test module (hack/cluster/autoscaling.sh: Prometheus with the
shipped scrape jobs, the fake exporter with its vLLM and DCGM families, prometheus-adapter), and reading a
/metrics page: what test_serving.py (issue 44) and test_idle.py (issue 40) share."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / "hack/cluster/autoscaling.sh"


@contextmanager
def metrics_stack(cluster: str) -> Iterator[dict[str, str]]:
    """Start the stack on the cluster of the kubeconfig `cluster` (idempotent), yield its URLs
    (PROMETHEUS_URL, FAKE_EXPORTER_URL), stop it after. Without Prometheus: skipped (failed on CI)."""
    if shutil.which("prometheus") is None and not os.path.exists("/usr/bin/prometheus"):
        msg = "Prometheus is not installed: apt-get install -y prometheus"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    env = {**os.environ, "GPUCTL_TESTBED_RUN": str(Path(cluster).parent), "GPUCTL_PYTHON": sys.executable}
    up = subprocess.run([str(STACK), "up"], env=env, capture_output=True, text=True)
    if up.returncode != 0:
        subprocess.run([str(STACK), "down"], env=env, capture_output=True)
        pytest.fail(f"hack/cluster/autoscaling.sh up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}")
    out = subprocess.run([str(STACK), "env"], env=env, capture_output=True, text=True).stdout
    try:
        yield dict(line.split("=", 1) for line in out.split())
    finally:
        subprocess.run([str(STACK), "down"], env=env, capture_output=True)


def scrape(url: str) -> dict[str, dict[tuple, float]]:
    """A /metrics page: series name -> (sorted label pairs) -> value."""
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out
