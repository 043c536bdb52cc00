"""Issue 42's wrong numbers: what `describe` shows equals what Kueue charges (the quota transformations
gpuctl configures Kueue with, its ClusterQueue accounting) and what `get` shows of the same job."""

from __future__ import annotations

import json
import re

from gpuctl.constants import BUDGET_FLAVOR, GPU_UNITS, QUOTA_GPU, SHARED_GPU_RESOURCE, Labels
from gpuctl.domain.sharing import quota_transformations
from queues.model import PoolGuarantee, TeamQuota
from queues.objects import cluster_queue
from tests.unit.test_consistency import (
    DEV,
    INF,
    NS,
    POOL,
    FakeApiServer,
    _cli_out,
    _labels,
    _team_objects,
    cli_jobs,
    cond,
    deployment_obj,
    pod_obj,
    pod_spec,
    workload_obj,
)


def _line(text: str, key: str) -> str:
    (m,) = re.findall(rf"^{key}:\s+(.*)$", text, re.M)
    return m


def test_a_three_replica_service_is_described_with_its_three_gpus_and_every_workload(monkeypatch) -> None:
    """It said `GPUs: 1` (one pod's Workload) and named 1 of its 3 Workloads."""
    spec = pod_spec(1)
    d = deployment_obj("svc3", spec)
    d["spec"]["replicas"] = 3
    objs = []
    for i in range(3):
        p = pod_obj(f"svc3-7d9f-x{i}", d, spec, gated=False, node="inf-node-1", phase="Running")
        objs += [
            p,
            workload_obj(
                f"pod-svc3-7d9f-x{i}", p, spec, [cond("QuotaReserved"), cond("Admitted")], reserved=1
            ),
        ]
    fake = FakeApiServer([*_team_objects(), d, *objs])
    described = json.loads(_cli_out(monkeypatch, fake, ["describe", "job", "svc3", "-n", NS, "-o", "json"]))
    (obj,) = [j for j in cli_jobs(monkeypatch, fake) if j["metadata"]["name"] == "svc3"]
    assert described["gpus"] == obj["spec"]["gpus"] == 3
    assert described["workloads"] == [f"pod-svc3-7d9f-x{i}" for i in range(3)]
    text = _cli_out(monkeypatch, fake, ["describe", "job", "svc3", "-n", NS])
    assert _line(text, "GPUs") == "3 (3 replicas x 1 GPUs)"
    assert _line(text, "Kueue Workloads") == "3: pod-svc3-7d9f-x0, pod-svc3-7d9f-x1, pod-svc3-7d9f-x2"


def test_a_gpu_share_notebook_is_described_with_what_its_quota_is_charged(monkeypatch) -> None:
    """It said `GPUs: 0` while `get quotas` charged it a share of a GPU: describe, get jobs -o json and
    get quotas now read one number, the one Kueue's transformation charges (manifests/kueue)."""
    (rule,) = [t for t in quota_transformations() if t["input"] == SHARED_GPU_RESOURCE]
    charged_units = int(rule["outputs"][QUOTA_GPU])  # what Kueue adds to the team's budget use per replica
    spec = {
        "containers": [
            {"name": "main", "image": "jupyter", "resources": {"requests": {SHARED_GPU_RESOURCE: "1"}}}
        ]
    }
    nb = deployment_obj("nb", spec)
    nb["kind"], nb["metadata"]["labels"] = "StatefulSet", _labels("nb", "notebook")
    nb["spec"]["template"]["metadata"]["labels"] = {**_labels("nb", "notebook"), Labels.APP: "nb"}
    pod = pod_obj("nb-0", nb, spec, gated=False, node="dev-node-1", phase="Running")
    objects = _team_objects()
    (cq,) = [o for o in objects if o["kind"] == "ClusterQueue"]
    # Kueue's accounting of the running notebook, as it writes it on the team's ClusterQueue
    cq["status"] = {
        "flavorsReservation": [
            {
                "name": BUDGET_FLAVOR,
                "resources": [{"name": QUOTA_GPU, "total": str(charged_units), "borrowed": "0"}],
            }
        ]
    }
    fake = FakeApiServer([*objects, nb, pod])
    described = json.loads(_cli_out(monkeypatch, fake, ["describe", "job", "nb", "-n", NS, "-o", "json"]))
    (obj,) = [j for j in cli_jobs(monkeypatch, fake) if j["metadata"]["name"] == "nb"]
    (quota,) = json.loads(_cli_out(monkeypatch, fake, ["get", "quotas", "-n", NS, "-o", "json"]))["items"]
    share = round(charged_units / GPU_UNITS, 2)
    assert 0 < share < 1
    assert described["gpus"] == obj["spec"]["gpus"] == quota["status"]["gpus"]["used"] == share
    text = _cli_out(monkeypatch, fake, ["describe", "job", "nb", "-n", NS])
    assert _line(text, "GPUs") == f"{share} (1 {SHARED_GPU_RESOURCE})"


def test_describe_pool_says_each_team_is_guaranteed_its_whole_quota(monkeypatch) -> None:
    """GUARANTEED read the quota's per-pool `pools:` entry (display only), so a team whose whole quota is
    guaranteed (in any pool: Kueue reclaims it, docs/queueing.md rule 3) read 0."""
    objects = [o for o in _team_objects() if o["kind"] != "ClusterQueue"]
    team = TeamQuota(namespace=NS, quota_name="q", gpu=8, pools={DEV: PoolGuarantee(gpu=2)})
    objects.append(cluster_queue(team, [POOL, DEV, INF]))
    fake = FakeApiServer(objects)
    for pool in (POOL, DEV):
        d = json.loads(_cli_out(monkeypatch, fake, ["describe", "pool", pool, "-o", "json"]))
        assert [(t["team"], t["guaranteed"]) for t in d["teams"]] == [(NS, 8)], pool
    text = _cli_out(monkeypatch, fake, ["describe", "pool", POOL])
    rows = text[text.index("Teams:\n") :].splitlines()[1:3]
    assert rows[0].split()[-3:] == ["GUARANTEED", "(ANY", "POOL)"] and rows[1].split() == [NS, "0", "8"], rows
