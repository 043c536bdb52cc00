"""`get jobs` reads pods as the API server's Table rows (metadata + kubectl's printed cells) instead of
full objects. Both forms must give the same words: gpuctl's port of the printer
(gpuctl.domain.status.printed_pod_status) is compared with the API server's own printing on live pods,
and the `get jobs` rows built from Table rows with the rows built from full pods."""

from __future__ import annotations

import uuid

from gpuctl.cluster import path
from gpuctl.constants import Labels
from gpuctl.domain.objects import pod_finished
from gpuctl.domain.status import pod_ip, pod_node, pod_ready, pod_status, printed_pod_status
from gpuctl.domain.teams import team_usage
from gpuctl.service import inventory
from gpuctl.service.inventory import Inventory
from gpuctl.service.jobs import list_job_rows
from tests.integration.conftest import wait_until
from tests.integration.test_cli_cluster import _training, gpuctl, pools, teams  # noqa: F401 - fixtures


def _pod(ns: str, name: str, **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {Labels.JOB_TYPE: "training"}},
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}],
            "tolerations": [{"operator": "Exists"}],
            **spec,
        },
    }


def _compare(kube, ns: str) -> dict[str, str]:
    objects = {p["metadata"]["name"]: p for p in kube.list(path("Pod", namespace=ns))}
    rows = {r["metadata"]["name"]: r for r in kube.list_table(path("Pod", namespace=ns))}
    assert set(objects) == set(rows)
    for name, obj in objects.items():
        row = rows[name]
        assert row["metadata"]["uid"] == obj["metadata"]["uid"]
        assert printed_pod_status(obj) == printed_pod_status(row), name
        assert pod_status(obj) == pod_status(row), name
        assert pod_ready(obj) == pod_ready(row), name
        assert (pod_node(obj), pod_ip(obj)) == (pod_node(row), pod_ip(row)), name
        assert pod_finished(obj) == pod_finished(row), name
    return {name: printed_pod_status(row) for name, row in rows.items()}


def test_printer_port_matches_the_api_server(kube, namespace) -> None:
    node = next(
        n["metadata"]["name"]
        for n in kube.list(path("Node"))
        if (n["metadata"].get("annotations") or {}).get("kwok.x-k8s.io/node") == "fake"
    )
    kube.create(_pod(namespace, "gated", schedulingGates=[{"name": "example.com/hold"}]))
    kube.create(_pod(namespace, "running", nodeName=node))
    kube.create(_pod(namespace, "nowhere", nodeName=f"no-such-node-{uuid.uuid4().hex[:4]}"))
    deleting = _pod(namespace, "deleting", nodeName=node)
    deleting["metadata"]["finalizers"] = ["example.com/keep"]
    kube.create(deleting)
    wait_until(
        lambda: all(
            printed_pod_status(p) == "Running"
            for p in kube.list(path("Pod", namespace=namespace))
            if p["spec"].get("nodeName") == node
        ),
        60,
        what="KWOK runs the pods",
    )
    kube.delete(path("Pod", "deleting", namespace))
    try:
        words = _compare(kube, namespace)
        assert words == {
            "gated": "SchedulingGated",
            "running": "Running",
            "nowhere": "Pending",
            "deleting": "Terminating",
        }
    finally:
        kube.merge_patch(path("Pod", "deleting", namespace), {"metadata": {"finalizers": None}})


def test_get_jobs_rows_are_the_same_from_table_rows(
    pools,  # noqa: F811
    teams,  # noqa: F811
    gpuctl,  # noqa: F811
    kube,
    tmp_path,
    monkeypatch,
) -> None:
    a, b = teams
    jobs = [
        _training(tmp_path, "fits", b, 4, runtime="30m"),
        _training(tmp_path, "done", b, 1, runtime="1s"),
        _training(tmp_path, "waits", b, 8, runtime="30m"),  # beyond b's 8-GPU hard cap with `fits`
    ]
    web = tmp_path / "web.yaml"
    web.write_text(
        f"kind: compute\njob: {{name: web, namespace: {a}}}\nenvironment: {{image: nginx}}\n"
        "service: {replicas: 3, port: 80}\nresources: {pool: inference-pool, gpu: 1, cpu: 1, memory: 1Gi}\n"
    )
    for f in (*jobs, str(web)):
        rc, _, err = gpuctl("create", "-f", f)
        assert rc == 0, err

    def settled():
        rows = list_job_rows(kube, None)
        web = [r for r in rows if r.name == "web" and r.namespace == a]
        by_name = {r.name: r.status for r in rows}
        # Kueue releases a finished job's quota a second or two after the Job completes: until then the
        # queued job's reason still counts `done`'s GPU (the reason comes from the ClusterQueue's status).
        released = team_usage(kube.get(path("ClusterQueue", b))).gpus == 4
        stable = (
            released
            and by_name.get("done") == "Succeeded"
            and by_name.get("fits") == "Running"
            and len(web) == 3
            and all(r.status == "Running" and r.ready == "1/1" for r in web)
        )
        return by_name if stable else None

    # generous: on a loaded machine KWOK and Kueue take their time; the comparison needs a still cluster
    statuses = wait_until(settled, 240, what="jobs run, finish and queue")
    assert statuses["waits"] == "Queued"
    for namespace in (None, a):
        full = list_job_rows(kube, namespace, gpus=True)
        table = list_job_rows(kube, namespace, gpus=False)
        # age is measured at each call; everything else must be equal
        assert [r.as_dict() | {"gpus": None, "slices": None, "age": None} for r in full] == [
            r.as_dict() | {"age": None} for r in table
        ]
        assert all(abs((f.age or 0) - (t.age or 0)) < 30 for f, t in zip(full, table, strict=True))
        assert full, "rows expected"
    assert {r.name for r in list_job_rows(kube, a, gpus=False)} == {"web"}
    # Many jobs: pods come in parallel lists split by owner label; the same rows.
    one_list = [r.as_dict() | {"age": None} for r in list_job_rows(kube, None, gpus=False)]
    monkeypatch.setattr(inventory, "SHARD_MIN_CONTROLLERS", 1)
    monkeypatch.setattr(inventory, "SHARD_MIN_PODS", 1)
    monkeypatch.setattr(inventory, "SHARDS", 3)
    assert len(inventory.owner_shards(Inventory(kube).controllers)) >= 3
    sharded = [r.as_dict() | {"age": None} for r in list_job_rows(kube, None, gpus=False)]
    assert sharded == one_list
