"""A set of manifests applied for one test module and removed after it, with plain kubectl (the way an
operator applies the chart's rendering): what test_history_trust and test_service_confinement share."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator, Sequence

import yaml

Kubectl = Callable[..., subprocess.CompletedProcess]


def kubectl_runner(kubectl_bin: str, kubeconfig: str) -> Kubectl:
    """kubectl(*args, input=None, check=True) against `kubeconfig`; check asserts exit 0 (stderr shown)."""

    def kubectl(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run(
            [kubectl_bin, "--kubeconfig", kubeconfig, *args], input=input, capture_output=True, text=True
        )
        assert not check or p.returncode == 0, p.stderr
        return p

    return kubectl


@contextlib.contextmanager
def applied(
    kubectl_bin: str, kubeconfig: str, namespace: str, docs: list[dict], cluster_kinds: Sequence[str]
) -> Iterator[Kubectl]:
    """Create `namespace`, apply `docs`; afterwards delete those of `cluster_kinds` (cluster-wide) and the
    namespace (not waited for). Yields the kubectl runner."""
    kubectl = kubectl_runner(kubectl_bin, kubeconfig)
    kubectl("create", "namespace", namespace)
    try:
        kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
        yield kubectl
    finally:
        cluster_wide = [d for d in docs if d["kind"] in cluster_kinds]
        kubectl(
            "delete", "--ignore-not-found", "-f", "-", input=yaml.safe_dump_all(cluster_wide), check=False
        )
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
