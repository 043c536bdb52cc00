"""owner_shards: the label selectors that split `get jobs`'s pod list into parallel requests."""

from __future__ import annotations

from gpuctl.cluster.reader import labels_match, parse_label_selector
from gpuctl.service import inventory
from gpuctl.service.inventory import owner_shards


def _ctrl(kind: str, name: str) -> tuple[str, dict]:
    return kind, {"metadata": {"name": name, "namespace": "t"}}


def test_few_controllers_use_one_list() -> None:
    assert owner_shards([_ctrl("Job", f"j{i}") for i in range(inventory.SHARD_MIN_CONTROLLERS - 1)]) == []


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
