"""A team on a pool of its own fake GPU nodes, the setup of the gang, JobSet, LeaderWorkerSet and
accelerator-hole modules: the nodes Ready, `gpuctl create` of the pool and the team's quota, and after the
module its JobSets and Jobs, quota, namespace, pool and nodes removed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from gpuctl.cli.main import main
from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import GPU_RESOURCE
from tests.integration.conftest import delete_namespaces, wait_until
from tests.integration.fake_nodes import fake_node

BLOCK, RACK = "example.com/block", "example.com/rack"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"


def rack_node(name: str, rack: str) -> dict:
    """A fake 8-GPU node in block b1, rack `rack`."""
    return fake_node(name, {BLOCK: "b1", RACK: rack}, {GPU_RESOURCE: "8"})


def node_ready(kube: Cluster, name: str) -> bool:
    node = kube.get_or_none(path("Node", name)) or {}
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", [])
    )


@contextlib.contextmanager
def own_pool(
    kube: Cluster,
    cluster: str,
    tmp: Path,
    *,
    pool: str,
    ns: str,
    nodes: Mapping[str, dict],
    quota: str,
    node_spec: str = "{gpu-type: A100}",
    topology: str | None = None,
) -> Iterator[Path]:
    """Create `nodes` (name -> Node object) and wait until they are Ready; `gpuctl create` the pool `pool`
    of them (each node's entry `node_spec`, the pool's `topology` levels if given) and the quota of team
    namespace `ns` (`quota`: its namespace entry, e.g. "{gpu: 16}"). Yields the quota file; removes the
    team and the pool after (remove_team), then the nodes."""
    for obj in nodes.values():
        kube.create(obj)
    try:
        for n in nodes:
            wait_until(lambda n=n: node_ready(kube, n), 60, what=f"node {n} Ready")
        levels = f"topology: {topology}\n" if topology else ""
        (tmp / "pool.yaml").write_text(
            f"kind: pool\npool: {{name: {pool}}}\n{levels}nodes:\n"
            + "".join(f"  {n}: {node_spec}\n" for n in nodes)
        )
        quota_file = tmp / "quota.yaml"
        quota_file.write_text(f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace:\n  {ns}: {quota}\n")
        args = ["create", "-f", str(tmp / "pool.yaml"), "-f", str(quota_file), "--kubeconfig", cluster]
        assert main(args) == 0
        yield quota_file
    finally:
        remove_team(kube, cluster, ns, pool, nodes)


def remove_team(kube: Cluster, cluster: str, ns: str, pool: str, nodes: Iterable[str]) -> None:
    """Undo a team on its own pool of fake nodes: its Jobs, its quota and namespace, the pool, the nodes.
    Jobs first: a deleted namespace's gang pods wait for the Job controller (podReplacementPolicy Failed
    keeps their tracking finalizer until they end, which KWOK's pods never do on their own)."""
    for job in kube.list(path("Job", namespace=ns)):
        kube.delete(path("Job", job["metadata"]["name"], ns), propagation="Background")
    main(["delete", "quota", f"q-{ns}", "--delete-namespace", "--kubeconfig", cluster])
    delete_namespaces(kube, [ns], 120)
    main(["delete", "pool", pool, "--kubeconfig", cluster])
    for name in nodes:
        try:
            kube.delete(path("Node", name))
        except ApiError as e:
            if e.status != 404:
                raise


def delete_jobsets(kube: Cluster, ns: str) -> None:
    """Every JobSet of `ns` (background propagation: its Jobs and pods go too), if `ns` is still there."""
    if kube.get_or_none(path("Namespace", ns)) is None:
        return
    for js in kube.list(JOBSETS.format(ns=ns)):
        with contextlib.suppress(ApiError):
            kube.delete(f"{JOBSETS.format(ns=ns)}/{js['metadata']['name']}", propagation="Background")
