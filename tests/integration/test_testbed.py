"""The local cluster is the real thing: Kueue admits a suspended Job, injects the pool's nodeSelector,
kube-scheduler binds the pod to a fake GPU node of that pool, KWOK runs it and the Job completes; a
second Job beyond the ClusterQueue's quota stays suspended with Kueue's pending reason."""

from __future__ import annotations

from gpuctl.cluster import path
from gpuctl.constants import TAS_UNCONSTRAINED, Labels
from queues import PoolCapacity, TeamQuota, desired_objects, local_queue, team_namespace
from tests.integration.conftest import wait_until


def _job(name: str, ns: str, gpus: int, runtime: str) -> dict:
    res = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {Labels.KUEUE_QUEUE: "default"}},
        "spec": {
            "suspend": True,
            "template": {
                # Pool flavors are TAS-only (issue 15): a pod set must ask for a topology assignment,
                # as gpuctl's builders do; without it Kueue answers "supports only TopologyAwareScheduling".
                "metadata": {"annotations": {TAS_UNCONSTRAINED: "true"}},
                "spec": {
                    # No nodeSelector: Kueue must inject the pool's (the flavor's nodeLabels).
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "env": [{"name": "GPUCTL_FAKE_RUNTIME", "value": runtime}],
                            "resources": {"requests": res, "limits": res},
                        }
                    ],
                },
            },
        },
    }


def _workload_for(kube, ns: str, job_uid: str) -> dict | None:
    items = kube.list(path("Workload", namespace=ns), label_selector=f"{Labels.KUEUE_JOB_UID}={job_uid}")
    return items[0] if items else None


def _condition(obj: dict, ctype: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == ctype), {})


def test_job_admitted_scheduled_run_and_over_quota_waits(kube, namespace, clean_cluster):
    for node in ("gpu-node-1", "gpu-node-2"):
        kube.merge_patch(path("Node", node), {"metadata": {"labels": {Labels.POOL: "training-pool"}}})
    team = TeamQuota(namespace=namespace, quota_name="t", gpu=8, borrowing_limit=0)
    for obj in [
        *desired_objects([PoolCapacity("training-pool", 16, "192", "2Ti")], [team]),
        team_namespace(team),
        local_queue(namespace),
    ]:
        kube.apply(obj)

    job = kube.create(_job("fits", namespace, 4, "3s"))
    wl = wait_until(
        lambda: _workload_for(kube, namespace, job["metadata"]["uid"]), 30, what="Workload created"
    )
    wait_until(
        lambda: (
            _condition(kube.get(path("Workload", wl["metadata"]["name"], namespace)), "Admitted").get(
                "status"
            )
            == "True"
        ),
        30,
        what="Workload Admitted",
    )
    pods = wait_until(
        lambda: [
            p
            for p in kube.list(path("Pod", namespace=namespace), label_selector="job-name=fits")
            if p["status"].get("phase") == "Running"
        ],
        30,
        what="pod Running",
    )
    pod = pods[0]
    # the flavor's nodeLabels, and (TAS, one node per pod) the node Kueue assigned in that pool
    selector = pod["spec"]["nodeSelector"]
    assert selector.pop(Labels.POOL) == "training-pool"
    assert selector in ({"kubernetes.io/hostname": "gpu-node-1"}, {"kubernetes.io/hostname": "gpu-node-2"})
    assert pod["spec"]["nodeName"] in ("gpu-node-1", "gpu-node-2")
    wait_until(
        lambda: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in (kube.get(path("Job", "fits", namespace)).get("status") or {}).get("conditions", [])
        ),
        60,
        what="Job Complete",
    )

    big = kube.create(_job("too-big", namespace, 12, "3s"))
    wl = wait_until(
        lambda: _workload_for(kube, namespace, big["metadata"]["uid"]), 30, what="Workload created"
    )
    reserved = wait_until(
        lambda: _condition(kube.get(path("Workload", wl["metadata"]["name"], namespace)), "QuotaReserved"),
        30,
        what="QuotaReserved condition",
    )
    assert reserved["status"] == "False"
    # 12 > the team's 8 (in 1/840 GPU): Kueue says "insufficient quota ... > maximum capacity (6720)".
    assert "quota for runwhere.ai/quota-gpu-840ths in flavor gpuctl-budget" in reserved["message"]
    assert "maximum capacity (6720)" in reserved["message"]
    assert kube.get(path("Job", "too-big", namespace))["spec"]["suspend"] is True
    assert kube.list(path("Pod", namespace=namespace), label_selector="job-name=too-big") == []
