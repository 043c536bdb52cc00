"""Sizing by GPU memory and choosing pools by GPU model on the real cluster (issue 44, docs/serving.md):
`resources.gpuMemory` and `placementConstraints.nodeTypes` submitted by a team member with only the roles
gpuctl ships, on pools of fake nodes that carry the labels NVIDIA's GPU feature discovery sets.

- 140Gi on 80 GB GPUs is 2 GPUs, 13Gi is 1, and a slice (MIG 1g.20gb) on a pool that cuts its GPUs;
- more than any node holds is refused naming file, field and fix, and nothing is created (the API
  server's own state says so), as on a pool whose GPUs' memory is unknown;
- nodeTypes is the pools of those models, through the any-pool machinery, and Kueue admits the job there;
- a server dry run sizes the same and writes nothing; the REST API sizes the same.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuctl.cli.main import main
from gpuctl.cluster import ApiError, path
from gpuctl.server.api import create_app
from gpuctl.server.api.auth import ApiKeys, Authenticator, hash_key, new_api_key
from tests.integration.conftest import wait_until
from tests.integration.fake_nodes import fake_node
from tests.integration.own_pool import node_ready, remove_team
from tests.integration.tenancy import SHIPPED_ROLES, TeamMember, apply_caller_roles

A100_80 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920"}
A10G = {"nvidia.com/gpu.product": "NVIDIA-A10G", "nvidia.com/gpu.memory": "23028"}
MIG = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8"}


@dataclass(frozen=True)
class Pools:
    ns: str
    a100: str  # 2 nodes x 8 A100-80GB
    a10g: str  # 1 node x 4 A10G
    mig: str  # 1 node: 6 whole A100-80GB, 8 x 1g.20gb
    unknown: str  # 1 node labelled only "A100" (40 or 80 GB?)
    member: TeamMember


@pytest.fixture(scope="module")
def pools(cluster, kube, tmp_path_factory) -> Iterator[Pools]:
    sfx = uuid.uuid4().hex[:5]
    names = {k: f"sz-{sfx}-{k}" for k in ("a100", "a10g", "mig", "unknown")}
    nodes = {
        f"sz-{sfx}-a100-1": ("a100", A100_80, {"nvidia.com/gpu": "8"}),
        f"sz-{sfx}-a100-2": ("a100", A100_80, {"nvidia.com/gpu": "8"}),
        f"sz-{sfx}-a10g-1": ("a10g", A10G, {"nvidia.com/gpu": "4"}),
        f"sz-{sfx}-mig-1": ("mig", MIG, {"nvidia.com/gpu": "6", "nvidia.com/mig-1g.20gb": "8"}),
        f"sz-{sfx}-unknown-1": ("unknown", {"nvidia.com/gpu.product": "A100"}, {"nvidia.com/gpu": "8"}),
    }
    ns = f"sz-team-{sfx}"
    tmp = tmp_path_factory.mktemp("sizing")
    for n, (_, labels, gpus) in nodes.items():
        kube.create(fake_node(n, labels, gpus))
    member = None
    try:
        for n in nodes:
            wait_until(lambda n=n: node_ready(kube, n), 60, what=f"node {n} Ready")
        (tmp / "pools.yaml").write_text(
            "\n---\n".join(
                f"kind: pool\npool: {{name: {names[k]}}}\nnodes:\n"
                + "".join(f"  {n}: {{}}\n" for n, (key, _, _) in nodes.items() if key == k)
                for k in names
            )
            + f"\n---\nkind: quota\nquota: {{name: q-{ns}}}\nnamespace:\n  {ns}: {{gpu: 16}}\n"
        )
        assert main(["create", "-f", str(tmp / "pools.yaml"), "--kubeconfig", cluster]) == 0
        apply_caller_roles(kube)
        member = TeamMember.create(kube, ns, roles=SHIPPED_ROLES)
        yield Pools(ns, names["a100"], names["a10g"], names["mig"], names["unknown"], member)
    finally:
        if member is not None:
            member.delete()
        for k in ("a10g", "mig", "unknown"):
            main(["delete", "pool", names[k], "--kubeconfig", cluster])
        remove_team(kube, cluster, ns, names["a100"], nodes)


def _file(tmp: Path, name: str, pools: Pools, resources: str, extra: str = "") -> str:
    f = tmp / f"{name}.yaml"
    f.write_text(
        f"kind: inference\njob: {{name: {name}, namespace: {pools.ns}}}\nenvironment: {{image: vllm}}\n"
        f"service: {{port: 8000}}\nresources: {{{resources}, cpu: 1, memory: 1Gi}}\n{extra}"
    )
    return str(f)


def _template(kube, ns: str, name: str) -> dict:
    return kube.get(path("Deployment", name, ns))["spec"]["template"]["spec"]


def _gpus(spec: dict) -> dict[str, str]:
    req = spec["containers"][0]["resources"]["limits"]
    return {k: v for k, v in req.items() if k not in ("cpu", "memory")}


def _nothing_named(kube, ns: str, name: str) -> bool:
    return all(
        kube.get_or_none(path(kind, n, ns)) is None
        for kind, n in (("Deployment", name), ("Service", f"svc-{name}"))
    )


def test_140gi_on_80gb_gpus_is_two_gpus_and_13gi_one(pools, kube, tmp_path):
    m = pools.member
    p = m.gpuctl("create", "-f", _file(tmp_path, "llama-70b", pools, f"pool: {pools.a100}, gpuMemory: 140Gi"))
    assert p.returncode == 0, p.stderr
    assert _gpus(_template(kube, pools.ns, "llama-70b")) == {"nvidia.com/gpu": "2"}
    p = m.gpuctl("create", "-f", _file(tmp_path, "llama-7b", pools, f"pool: {pools.a100}, gpuMemory: 13Gi"))
    assert p.returncode == 0, p.stderr
    assert _gpus(_template(kube, pools.ns, "llama-7b")) == {"nvidia.com/gpu": "1"}
    # Kueue admits them there, 3 GPUs of the team's budget: the pods run in the pool.
    wait_until(
        lambda: (
            {
                pod["metadata"]["labels"].get("app")
                for pod in kube.list(path("Pod", namespace=pools.ns))
                if pod["status"].get("phase") == "Running"
            }
            >= {"llama-70b", "llama-7b"}
        ),
        90,
        what="both services running",
    )


def test_13gi_on_a_pool_that_cuts_its_gpus_is_one_slice(pools, kube, tmp_path):
    f = _file(tmp_path, "small", pools, f"pool: {pools.mig}, gpuMemory: 13Gi")
    p = pools.member.gpuctl("create", "-f", f)
    assert p.returncode == 0, p.stderr
    assert _gpus(_template(kube, pools.ns, "small")) == {"nvidia.com/mig-1g.20gb": "1"}


def test_more_than_a_node_holds_is_refused_and_nothing_is_created(pools, kube, tmp_path):
    f = _file(tmp_path, "too-big", pools, f"pool: {pools.a100}, gpuMemory: 700Gi")
    for args in (("create", "-f", f), ("create", "-f", f, "--dry-run=server")):
        p = pools.member.gpuctl(*args)
        assert p.returncode == 1, p.stdout
        assert f"{f}: job too-big: resources.gpuMemory: 700Gi needs 9 GPUs of 80 GiB (A100-80GB)" in p.stderr
        assert f"the largest node of pool {pools.a100} has 8" in p.stderr
        assert "resources.nodes: N, with gpuMemory per node" in p.stderr
    assert _nothing_named(kube, pools.ns, "too-big")


def test_a_pool_of_unknown_gpu_memory_is_refused_naming_the_fix(pools, kube, tmp_path):
    f = _file(tmp_path, "unsized", pools, f"pool: {pools.unknown}, gpuMemory: 13Gi")
    p = pools.member.gpuctl("create", "-f", f)
    assert p.returncode == 1
    assert "A100 is made with 40 or 80 GB" in p.stderr and "gpu-type: A100-80GB" in p.stderr
    assert _nothing_named(kube, pools.ns, "unsized")


def test_node_types_are_any_pool_of_those_models(pools, kube, tmp_path):
    f = _file(
        tmp_path, "typed", pools, "gpuMemory: 40Gi", "placementConstraints: {nodeTypes: [a10g, a100-80gb]}\n"
    )
    # A server dry run says the same and writes nothing.
    p = pools.member.gpuctl("create", "-f", f, "--dry-run=server", "-o", "json")
    assert p.returncode == 0, p.stderr
    assert _nothing_named(kube, pools.ns, "typed")
    p = pools.member.gpuctl("create", "-f", f)
    assert p.returncode == 0, p.stderr
    spec = _template(kube, pools.ns, "typed")
    # One count for both pools: 2 A10Gs (22.5 GiB each) hold 40Gi, and 2 A100s do.
    assert _gpus(spec) == {"nvidia.com/gpu": "2"}
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    # The MIG pool's node has A100-80GBs too; the unknown pool's "A100" is not known to be 80 GB. (Pools of
    # other tests on the same cluster with those models would be listed as well.)
    (expr,) = term["matchExpressions"]
    assert (expr["key"], expr["operator"]) == ("runwhere.ai/pool", "In")
    assert {pools.a10g, pools.a100, pools.mig} <= set(expr["values"]) and pools.unknown not in expr["values"]
    wait_until(
        lambda: any(
            pod["metadata"]["labels"].get("app") == "typed" and pod["spec"].get("nodeName")
            for pod in kube.list(path("Pod", namespace=pools.ns))
        ),
        90,
        what="typed admitted and bound in one of its pools",
    )
    p = pools.member.gpuctl(
        "create",
        "-f",
        _file(tmp_path, "b200", pools, "gpu: 1", "placementConstraints: {nodeTypes: [b200]}\n"),
    )
    assert p.returncode != 0 and "no pool has only GPUs of b200" in p.stderr
    assert f"{pools.a10g} (A10G)" in p.stderr
    assert _nothing_named(kube, pools.ns, "b200")


def test_the_rest_api_sizes_the_same(pools, kube, tmp_path):
    key = new_api_key()
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys:\n- name: ci\n  sha256: '{hash_key(key)}'\n  groups: [system:masters]\n")
    app = create_app(lambda: kube, Authenticator(lambda: kube, api_keys=ApiKeys(keys)))
    with TestClient(app, headers={"X-API-Key": key}) as api:
        text = Path(_file(tmp_path, "api-70b", pools, f"pool: {pools.a100}, gpuMemory: 140Gi")).read_text()
        r = api.post("/api/v1/jobs", json={"yamlContent": text})
        assert r.status_code == 201, r.text
        assert _gpus(_template(kube, pools.ns, "api-70b")) == {"nvidia.com/gpu": "2"}
        text = Path(_file(tmp_path, "api-big", pools, f"pool: {pools.a100}, gpuMemory: 700Gi")).read_text()
        r = api.post("/api/v1/jobs", json={"yamlContent": text})
        assert r.status_code == 400, r.text
        assert "700Gi needs 9 GPUs" in r.text
    assert _nothing_named(kube, pools.ns, "api-big")
    with pytest.raises(ApiError):
        kube.get(path("Deployment", "api-big", pools.ns))
