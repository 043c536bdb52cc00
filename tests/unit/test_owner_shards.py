"""owner_shards: the label selectors that split `get jobs`'s pod list into parallel requests."""

from __future__ import annotations

from gpuctl.cluster.reader import labels_match, parse_label_selector
from gpuctl.service import inventory
from gpuctl.service.inventory import expected_pods, owner_shards

PODS = 50  # each test controller's pods: a few controllers reach SHARD_MIN_PODS


def _ctrl(kind: str, name: str, pods: int = PODS) -> tuple[str, dict]:
    spec = {"parallelism": pods} if kind == "Job" else {"replicas": pods}
    return kind, {"metadata": {"name": name, "namespace": "t"}, "spec": spec}


def test_few_controllers_use_one_list() -> None:
    assert owner_shards([_ctrl("Job", f"j{i}") for i in range(inventory.SHARD_MIN_CONTROLLERS - 1)]) == []


def test_few_pods_use_one_list() -> None:
    """Many controllers with few pods between them: one list (no threads, one request)."""
    n = inventory.SHARD_MIN_CONTROLLERS * 4
    per = (inventory.SHARD_MIN_PODS - 1) // n
    few = [_ctrl("Job", f"j{i}", per) for i in range(n)]
    assert expected_pods(few) < inventory.SHARD_MIN_PODS
    assert owner_shards(few) == []
    few[0][1]["spec"]["parallelism"] += inventory.SHARD_MIN_PODS - expected_pods(few)
    assert expected_pods(few) == inventory.SHARD_MIN_PODS
    assert len(owner_shards(few)) >= 2


def test_expected_pods_come_from_the_controllers_listing() -> None:
    job = {"metadata": {"name": "j"}, "spec": {"parallelism": 4}}
    cases = [
        (job, 4),
        ({**job, "spec": {}}, 1),  # parallelism defaults to 1
        ({**job, "spec": {"parallelism": 4, "suspend": True}}, 0),  # Kueue holds it: no pod yet
        ({**job, "status": {"active": 2, "succeeded": 3, "failed": 1}}, 6),
        ({**job, "spec": {"suspend": True}, "status": {"active": 2}}, 2),  # pods still terminating
    ]
    for obj, n in cases:
        assert expected_pods([("Job", obj)]) == n, obj
    assert expected_pods([("Deployment", {"spec": {"replicas": 3}})]) == 3
    assert expected_pods([("StatefulSet", {"spec": {}})]) == 1
    assert expected_pods([("Deployment", {"spec": {"replicas": 3}, "status": {"replicas": 4}})]) == 4


def test_every_pod_of_a_controller_is_in_exactly_one_shard() -> None:
    ctrls = [_ctrl("Job", f"train-{i}") for i in range(9)] + [
        _ctrl("Deployment", f"web-{i}") for i in range(5)
    ]
    shards = [parse_label_selector(s) for s in owner_shards(ctrls)]
    assert 2 <= len(shards) <= 2 * inventory.SHARDS
    pods = [{"runwhere.ai/job-type": "training", "job-name": f"train-{i}"} for i in range(9)]
    pods += [{"runwhere.ai/job-type": "compute", "app": f"web-{i}"} for i in range(5)]
    for labels in pods:
        assert sum(labels_match(s, labels) for s in shards) == 1, labels
    # not gpuctl's (no job-type label), or another job's: in no shard
    assert not any(labels_match(s, {"job-name": "train-1"}) for s in shards)
    assert not any(labels_match(s, {"runwhere.ai/job-type": "training", "job-name": "other"}) for s in shards)


def test_selectors_too_long_for_a_url_use_one_list() -> None:
    ctrls = [_ctrl("Job", f"a-rather-long-training-job-name-{i:05d}") for i in range(2000)]
    assert owner_shards(ctrls) == []
