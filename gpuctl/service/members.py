"""Worker clusters of a MultiKueue manager, as the caller reaches them (docs/multicluster.md, "What users
see"): through the context named after the worker in the caller's kubeconfig, with the caller's own credential
there (never Kueue's Secret: a team member reads a worker's pods as what they are there). `gpuctl serve` has
no such contexts: `--worker-kubeconfig NAME=PATH` gives it a kubeconfig per worker
(Cluster.member_kubeconfigs), and its API reads a worker's pods with it only after checking that the caller
may read the job's pods and logs in the manager's namespace."""

from __future__ import annotations

from gpuctl.cluster import Cluster
from gpuctl.cluster.config import ConfigError
from gpuctl.service.errors import ServiceError


def worker(cluster: Cluster, name: str, where: str = "") -> Cluster:
    """Worker `name`, through the caller's kubeconfig context of that name."""
    try:
        return cluster.member(name)
    except (ConfigError, OSError) as e:
        raise ServiceError(
            f"{where}cluster {name}: gpuctl reaches a worker cluster through the context named after it in "
            f"your kubeconfig, and {e}; add one (kubectl config set-context {name} --cluster=... --user=...; "
            f"gpuctl serve: --worker-kubeconfig {name}=PATH)"
        ) from None
