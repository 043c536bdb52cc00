"""An autoscaled service of multi-node replicas (issue 44, docs/serving.md "Replicas bigger than a node"):
the real LeaderWorkerSet controller (GPUCTL_TESTBED_LWS=1), the real Kueue with its LeaderWorkerSet
integration, and Kubernetes' own HPA controller fed by prometheus-adapter (the stack of test_serving.py).

A service of 2-pod replicas (2 GPUs a pod: 4 GPUs a replica), minReplicas 1, maxReplicas 3, on a team of 8
GPUs that may borrow none. The floor group runs; a load of 2 replicas makes the HPA scale the burst
LeaderWorkerSet by one group, which Kueue admits whole (both its pods bound); a load of 3 replicas asks
for a second burst group, which does not fit the team's quota: it waits as its own Workload, both its
pods at Kueue's gate, holding no GPU, and `get jobs` / `describe job` count it as a waiting group. Then
`stop` takes the whole service to zero groups and `delete` removes every object gpuctl made."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from gpuctl.cluster import path
from gpuctl.constants import LWS_NAME_LABEL, LWS_WORKER_INDEX_LABEL
from gpuctl.domain.status import is_gated
from tests.integration.conftest import delete_namespaces, require_controller, wait_until
from tests.integration.metrics_stack import metrics_stack
from tests.integration.test_serving import Stack, _cli, _pool, _set_load, _team_gpus

GPUS_PER_POD = 2


@pytest.fixture(scope="module")
def stack(cluster, kube, tmp_path_factory) -> Iterator[Stack]:
    require_controller(
        kube, "leaderworkersets.leaderworkerset.x-k8s.io", "LeaderWorkerSet", "GPUCTL_TESTBED_LWS"
    )
    sfx = uuid.uuid4().hex[:5]
    pool, nodes = f"lwsa-{sfx}", [f"lwsa-{sfx}-1", f"lwsa-{sfx}-2"]
    tmp = tmp_path_factory.mktemp("lws-autoscaled")
    with metrics_stack(cluster) as urls:
        yield from _pool(cluster, kube, pool, nodes, urls, tmp)  # test_serving's: 2 fake 8-GPU nodes


def _groups(kube, ns: str, lws: str) -> dict[str, list[dict]]:
    """The live pods of a LeaderWorkerSet by group index."""
    out: dict[str, list[dict]] = {}
    for p in kube.list(path("Pod", namespace=ns), label_selector=f"{LWS_NAME_LABEL}={lws}"):
        if not p["metadata"].get("deletionTimestamp"):
            out.setdefault(p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"], []).append(p)
    return out


def _state(groups: dict[str, list[dict]]) -> tuple[int, int]:
    """(groups whose every pod runs, groups whose every pod is gated)."""
    running = sum(
        1 for ps in groups.values() if len(ps) == 2 and all(p["status"].get("phase") == "Running" for p in ps)
    )
    gated = sum(1 for ps in groups.values() if len(ps) == 2 and all(is_gated(p) for p in ps))
    return running, gated


def _wait_groups(
    kube, ns: str, lws: str, running: int, gated: int, timeout: float = 180
) -> dict[str, list[dict]]:
    def check():
        g = _groups(kube, ns, lws)
        return (g,) if _state(g) == (running, gated) and len(g) == running + gated else None

    return wait_until(check, timeout, 1, what=f"{ns}/{lws}: {running} group(s) running, {gated} gated")[0]


def _leader(groups: dict[str, list[dict]], index: str = "0") -> str:
    return next(
        p["metadata"]["name"] for p in groups[index] if p["metadata"]["labels"][LWS_WORKER_INDEX_LABEL] == "0"
    )


def test_an_autoscaled_service_of_two_pod_replicas_scales_by_whole_groups(stack: Stack, kube, capsys) -> None:
    ns = f"lwsa-{uuid.uuid4().hex[:6]}"
    quota = stack.tmp / f"quota-{ns}.yaml"
    quota.write_text(
        f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace:\n  {ns}: {{gpu: 8, borrowingLimit: 0}}\n"
    )
    assert _cli(stack.cluster, "create", "-f", str(quota)) == 0
    try:
        svc = stack.tmp / f"{ns}-llm.yaml"
        svc.write_text(
            f"kind: inference\njob: {{name: llm, namespace: {ns}}}\n"
            "environment: {image: vllm/vllm-openai:v0.12.0}\n"
            f"resources: {{pool: {stack.pool}, nodes: 2, gpu: {GPUS_PER_POD}, cpu: 1, memory: 1Gi}}\n"
            "service: {port: 8000, autoscaling: {minReplicas: 1, maxReplicas: 3, targetConcurrency: 10}}\n"
        )
        assert _cli(stack.cluster, "create", "-f", str(svc)) == 0
        floor = _wait_groups(kube, ns, "llm", running=1, gated=0)
        assert _team_gpus(kube, ns) == 4
        leader = _leader(floor)

        # 15 requests in flight on the floor's leader: ceil(15 / 10) = 2 replicas, one burst group.
        _set_load(stack, ns, leader, 15)
        _wait_groups(kube, ns, "llm-burst", running=1, gated=0)
        hpa = kube.get(path("HorizontalPodAutoscaler", "llm", ns))
        assert hpa["status"]["desiredReplicas"] == 1, "the HPA counts groups, not pods"
        lws = kube.get(path("LeaderWorkerSet", "llm-burst", ns))
        assert lws["spec"]["replicas"] == 1
        assert _team_gpus(kube, ns) == 8, "the floor group and one burst group, each admitted whole"

        # 25: 3 replicas, two burst groups; the second does not fit the team's 8 GPUs: it waits whole.
        _set_load(stack, ns, leader, 25)
        _wait_groups(kube, ns, "llm-burst", running=1, gated=1)
        assert _team_gpus(kube, ns) == 8, "the waiting group holds no GPU"
        bound = [p for p in kube.list(path("Pod", namespace=ns)) if p["spec"].get("nodeName")]
        assert len(bound) == 4, [p["metadata"]["name"] for p in bound]
        assert sorted(p["metadata"]["name"] for g in _groups(kube, ns, "llm").values() for p in g) == sorted(
            p["metadata"]["name"] for g in floor.values() for p in g
        ), "the floor's pods are the same pods"

        capsys.readouterr()
        assert _cli(stack.cluster, "get", "jobs", "-n", ns, "-o", "json") == 0
        items = json.loads(capsys.readouterr().out)["items"]
        (row,) = [j["status"] for j in items if j["metadata"]["name"] == "llm"]  # the service's own row
        assert row["ready"].endswith("/3"), row
        assert row["reason"].startswith("1 of 3 replicas waiting for GPUs"), row["reason"]
        assert row["gpus"] == 8
        assert (row["replicas"]["desired"], row["replicas"]["running"], row["replicas"]["waiting"]) == (
            3,
            2,
            1,
        )
        assert _cli(stack.cluster, "describe", "job", "llm", "-n", ns, "-o", "json") == 0
        auto = json.loads(capsys.readouterr().out)["autoscaling"]
        assert (auto["minReplicas"], auto["maxReplicas"], auto["desired"]) == (1, 3, 3), auto
        assert (auto["running"], auto["waiting"]) == (2, 1), auto
        (waiting,) = auto["waitingReplicas"]
        assert waiting["tier"] == "burst" and f"{ns} uses 8 of its 8 GPUs" in waiting["reason"], waiting

        # stop: the whole service, floor and burst, goes to zero groups and gives its GPUs back.
        assert _cli(stack.cluster, "stop", "llm", "-n", ns) == 0
        wait_until(
            lambda: not _groups(kube, ns, "llm") and not _groups(kube, ns, "llm-burst"),
            120,
            what="no group left",
        )
        wait_until(lambda: _team_gpus(kube, ns) == 0, 60, what="the team's GPUs given back")
        assert _cli(stack.cluster, "resume", "llm", "-n", ns) == 0
        _wait_groups(kube, ns, "llm", running=1, gated=0)

        # delete: both LeaderWorkerSets, the HPA and the Service.
        assert _cli(stack.cluster, "delete", "job", "llm", "-n", ns) == 0
        for kind, name in (
            ("LeaderWorkerSet", "llm"),
            ("LeaderWorkerSet", "llm-burst"),
            ("HorizontalPodAutoscaler", "llm"),
            ("Service", "svc-llm"),
        ):
            wait_until(
                lambda k=kind, n=name: kube.get_or_none(path(k, n, ns)) is None,
                60,
                what=f"{kind} {name} gone",
            )
    finally:
        for lws in kube.list(path("LeaderWorkerSet", namespace=ns)):
            kube.delete(path("LeaderWorkerSet", lws["metadata"]["name"], ns))
        _cli(stack.cluster, "delete", "quota", f"q-{ns}", "--delete-namespace")
        # Its Workloads go with the namespace; the pool is deleted (module teardown) only after.
        delete_namespaces(kube, [ns], 120)
