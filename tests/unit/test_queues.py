"""queues/: the Kueue objects for pools, team quotas and priorities, checked value by value."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctl.constants import BORROW_PREEMPT_THRESHOLD, PRIORITY_VALUE, Priority
from queues import (
    PoolCapacity,
    PoolGuarantee,
    TeamQuota,
    budget_flavor,
    cluster_queue,
    cohort,
    desired_objects,
    local_queue,
    resource_flavor,
    team_namespace,
    workload_priority_classes,
)

API = "kueue.x-k8s.io/v1beta2"
MANAGED = {"app.kubernetes.io/managed-by": "gpuctl"}
POOL_RESOURCES = ["cpu", "memory", "nvidia.com/gpu"]
BUDGET_RESOURCES = ["runwhere.ai/quota-cpu", "runwhere.ai/quota-memory", "runwhere.ai/quota-gpu-840ths"]
PREEMPTION = {
    "withinClusterQueue": "LowerPriority",
    "reclaimWithinCohort": "Any",
    "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 500000},
}


def _flavor(spec: dict, name: str) -> dict:
    """The flavor entry `name` of a Cohort or ClusterQueue spec, as {resource: {quota fields}}."""
    for group in spec["resourceGroups"]:
        for fl in group["flavors"]:
            if fl["name"] == name:
                return {r["name"]: {k: v for k, v in r.items() if k != "name"} for r in fl["resources"]}
    raise KeyError(name)


def _nominal(spec: dict, name: str) -> dict[str, str]:
    return {res: q["nominalQuota"] for res, q in _flavor(spec, name).items()}


# --- flavors and priority classes -------------------------------------------------------------------


def test_resource_flavor_selects_the_pools_nodes() -> None:
    assert resource_flavor("training-pool") == {
        "apiVersion": API,
        "kind": "ResourceFlavor",
        "metadata": {"name": "training-pool", "labels": {**MANAGED, "runwhere.ai/pool": "training-pool"}},
        "spec": {"nodeLabels": {"runwhere.ai/pool": "training-pool"}, "topologyName": "gpuctl-nodes"},
    }


def test_budget_flavor_has_no_node_labels() -> None:
    # A label-less flavor matches every pod and injects nothing: right for virtual resources only.
    assert budget_flavor() == {
        "apiVersion": API,
        "kind": "ResourceFlavor",
        "metadata": {"name": "gpuctl-budget", "labels": MANAGED},
        "spec": {},
    }


def test_workload_priority_classes_names_values_and_order() -> None:
    assert workload_priority_classes() == [
        {
            "apiVersion": API,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": f"gpuctl-{p}", "labels": MANAGED},
            "value": v,
            "description": f"runwhere.ai/priority={p}",
        }
        for p, v in (("high", 1_000_000), ("medium", 500_000), ("low", 100))
    ] + [
        # An autoscaled service's floor above high, its burst below low (docs/serving.md).
        {
            "apiVersion": API,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": f"gpuctl-serving-{t}", "labels": MANAGED},
            "value": v,
            "description": f"runwhere.ai/serving-tier={t}",
        }
        for t, v in (("floor", 2_000_000), ("burst", 10))
    ]


def test_borrow_preemption_threshold_is_medium() -> None:
    # Borrowing work may preempt other teams' medium and low work, never their high work.
    assert BORROW_PREEMPT_THRESHOLD == PRIORITY_VALUE[Priority.MEDIUM] == 500_000
    assert PRIORITY_VALUE[Priority.LOW] <= BORROW_PREEMPT_THRESHOLD < PRIORITY_VALUE[Priority.HIGH]


# --- the Cohort: the GPU budget no quota covers --------------------------------------------------------


def _budget(spec: dict) -> dict[str, str]:
    return _nominal(spec, "gpuctl-budget")


def test_cohort_holds_the_gpus_beyond_the_quotas() -> None:
    pools = [
        PoolCapacity("training-pool", gpu=16, cpu="192", memory="2Ti"),
        PoolCapacity("inference-pool", gpu=8, cpu="64", memory="512Gi"),
    ]
    teams = [TeamQuota("team-a", "q", gpu=8), TeamQuota("team-b", "q", gpu=6), TeamQuota("team-c", "q")]
    co = cohort(pools, teams)
    assert (co["apiVersion"], co["kind"], co["metadata"]) == (
        API,
        "Cohort",
        {"name": "gpuctl", "labels": MANAGED},
    )
    (group,) = co["spec"]["resourceGroups"]
    assert group["coveredResources"] == BUDGET_RESOURCES
    # 24 GPUs, 14 covered by quotas (team-c is unlimited and lends nothing counted here).
    assert _budget(co["spec"]) == {
        "runwhere.ai/quota-cpu": "0",
        "runwhere.ai/quota-memory": "0",
        "runwhere.ai/quota-gpu-840ths": str(10 * 840),
    }


def test_cohort_budget_floors_at_zero_when_quotas_oversubscribe() -> None:
    pools = [PoolCapacity("dev-pool", gpu=4, cpu="8", memory="16Gi")]
    teams = [TeamQuota("team-a", "q", gpu=4), TeamQuota("team-b", "q", gpu=4)]
    assert _budget(cohort(pools, teams)["spec"])["runwhere.ai/quota-gpu-840ths"] == "0"


def test_cohort_holds_no_pool_capacity() -> None:
    """Pool capacity is enforced per node by Topology Aware Scheduling, not by quota."""
    spec = cohort(POOLS, TEAMS)["spec"]
    assert [f["name"] for g in spec["resourceGroups"] for f in g["flavors"]] == ["gpuctl-budget"]


def test_cohort_without_pools_has_no_resource_groups() -> None:
    assert cohort([], [TeamQuota("team-a", "q", gpu=4)])["spec"] == {}


POOLS = [
    PoolCapacity("training-pool", gpu=16, cpu="192", memory="2Ti"),
    PoolCapacity("dev-pool", gpu=4, cpu="31500m", memory="126Gi"),
]
TEAMS = [
    TeamQuota("team-a", "q", gpu=16, pools={"training-pool": PoolGuarantee(gpu=8, cpu="95.5", memory="1Ti")}),
    TeamQuota("team-b", "q", gpu=8, pools={"dev-pool": PoolGuarantee(gpu=1, cpu="1500m", memory="8Gi")}),
    TeamQuota("team-c", "q"),
]


@settings(max_examples=200, deadline=None)
@given(
    gpus=st.lists(st.integers(0, 64), min_size=1, max_size=4),
    quotas=st.lists(st.one_of(st.none(), st.integers(0, 64)), max_size=5),
)
def test_budgets_and_cohort_cover_every_gpu_unless_oversubscribed(gpus, quotas) -> None:
    """Team budgets + the Cohort's surplus = the cluster's GPUs (or the quotas, when they exceed it):
    when the cluster is full, every GPU of budget is somebody's, so a team within its quota finds the
    budget taken by a team over its own and Kueue reclaims it."""
    pools = [PoolCapacity(f"p{i}", gpu=g, cpu="1", memory="1Gi") for i, g in enumerate(gpus)]
    teams = [TeamQuota(f"t{i}", "q", gpu=g) for i, g in enumerate(quotas)]
    surplus = int(_budget(cohort(pools, teams)["spec"])["runwhere.ai/quota-gpu-840ths"]) // 840
    counted = sum(q for q in quotas if q is not None)
    assert surplus + counted == max(sum(gpus), counted)


# --- team ClusterQueues -------------------------------------------------------------------------------


def test_cluster_queue_identity_selector_and_policies() -> None:
    cq = cluster_queue(TeamQuota("team-a", "team-quotas", gpu=16), ["training-pool"])
    assert (cq["apiVersion"], cq["kind"]) == (API, "ClusterQueue")
    assert cq["metadata"] == {
        "name": "team-a",
        "labels": {**MANAGED, "runwhere.ai/team": "team-a", "runwhere.ai/quota": "team-quotas"},
    }
    spec = cq["spec"]
    assert spec["cohortName"] == "gpuctl"
    assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}
    assert spec["queueingStrategy"] == "BestEffortFIFO"
    assert spec["preemption"] == PREEMPTION
    assert list(spec) == [
        "cohortName",
        "namespaceSelector",
        "queueingStrategy",
        "preemption",
        "resourceGroups",
    ]


def test_cluster_queue_budget_is_the_quota() -> None:
    team = TeamQuota("team-a", "q", gpu=16, cpu="128", memory="1Ti", borrowing_limit=8)
    budget = _flavor(cluster_queue(team, [])["spec"], "gpuctl-budget")
    assert budget == {
        # milli-CPUs, and a CPU/memory quota is a hard cap
        "runwhere.ai/quota-cpu": {"nominalQuota": "128000", "borrowingLimit": "0"},
        "runwhere.ai/quota-memory": {"nominalQuota": "1Ti", "borrowingLimit": "0"},
        "runwhere.ai/quota-gpu-840ths": {"nominalQuota": str(16 * 840), "borrowingLimit": str(8 * 840)},
    }


def test_cluster_queue_unset_quota_is_unlimited_without_borrowing_limit() -> None:
    budget = _flavor(cluster_queue(TeamQuota("team-a", "q"), ["dev-pool"])["spec"], "gpuctl-budget")
    assert budget == {
        "runwhere.ai/quota-cpu": {"nominalQuota": "1T"},
        "runwhere.ai/quota-memory": {"nominalQuota": "1Ei"},
        "runwhere.ai/quota-gpu-840ths": {"nominalQuota": "840M"},
    }


@pytest.mark.parametrize(("limit", "expected"), [(None, None), (0, "0"), (8, str(8 * 840))])
def test_cluster_queue_borrowing_limit_only_when_set_and_only_on_gpu(limit, expected) -> None:
    spec = cluster_queue(TeamQuota("team-a", "q", gpu=4, borrowing_limit=limit), ["dev-pool"])["spec"]
    assert _flavor(spec, "gpuctl-budget")["runwhere.ai/quota-gpu-840ths"].get("borrowingLimit") == expected
    others = [q for g in spec["resourceGroups"] for f in g["flavors"] for q in f["resources"]]
    assert [q["name"] for q in others if "borrowingLimit" in q] == (
        [] if limit is None else ["runwhere.ai/quota-gpu-840ths"]
    )
    assert not any("lendingLimit" in q for q in others)


def test_cluster_queue_every_pool_at_the_pool_nominal_guarantees_annotated() -> None:
    """No job ever borrows pool quota (TAS bounds the pools), so the budget alone decides whether a
    job is within its team's quota; per-pool guarantees are kept as written, for display."""
    team = TeamQuota(
        "team-a", "q", gpu=16, pools={"training-pool": PoolGuarantee(gpu=8, cpu="95.5", memory="1Ti")}
    )
    cq = cluster_queue(team, ["training-pool", "dev-pool", "compute-pool"])
    for pool in ("training-pool", "dev-pool", "compute-pool"):
        assert _nominal(cq["spec"], pool) == {"cpu": "100k", "memory": "1Pi", "nvidia.com/gpu": "100k"}
    assert cq["metadata"]["annotations"] == {
        "runwhere.ai/pool-guarantees": '{"training-pool":{"cpu":"95.5","gpu":8,"memory":"1Ti"}}'
    }


def test_cluster_queue_lists_every_pool_sorted_then_the_budget() -> None:
    spec = cluster_queue(TeamQuota("team-b", "q", gpu=8), ["training-pool", "compute-pool", "dev-pool"])[
        "spec"
    ]
    pools, budget = spec["resourceGroups"]
    assert pools["coveredResources"] == POOL_RESOURCES
    assert [f["name"] for f in pools["flavors"]] == ["compute-pool", "dev-pool", "training-pool"]
    assert budget["coveredResources"] == BUDGET_RESOURCES
    assert [f["name"] for f in budget["flavors"]] == ["gpuctl-budget"]


def test_cluster_queue_every_flavor_lists_every_covered_resource_in_order() -> None:
    # Kueue rejects a flavor whose resources differ in number (CRD CEL rule) or order
    # (pkg/webhooks/clusterqueue_webhook.go validateFlavorQuotas) from coveredResources.
    team = TeamQuota("team-a", "q", gpu=2, borrowing_limit=0, pools={"b": PoolGuarantee(gpu=1)})
    for spec in (cluster_queue(team, ["a", "b", "c"])["spec"], cohort(POOLS, TEAMS)["spec"]):
        for group in spec["resourceGroups"]:
            for fl in group["flavors"]:
                assert [r["name"] for r in fl["resources"]] == group["coveredResources"]


def test_cluster_queue_without_pools_has_only_the_budget_group() -> None:
    spec = cluster_queue(TeamQuota("team-a", "q", gpu=4), [])["spec"]
    assert [g["coveredResources"] for g in spec["resourceGroups"]] == [BUDGET_RESOURCES]


def test_cluster_queue_description_annotation_only_when_given() -> None:
    assert "annotations" not in cluster_queue(TeamQuota("team-a", "q"), [])["metadata"]
    meta = cluster_queue(TeamQuota("team-a", "q", description="ML team"), [])["metadata"]
    assert meta["annotations"] == {"runwhere.ai/description": "ML team"}


# --- namespace objects ---------------------------------------------------------------------------------


def test_local_queue_default_points_at_the_team_queue() -> None:
    assert local_queue("team-a") == {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": {
            "name": "default",
            "labels": {**MANAGED, "runwhere.ai/team": "team-a"},
            "namespace": "team-a",
        },
        "spec": {"clusterQueue": "team-a"},
    }


def test_team_namespace_marker_and_quota_labels() -> None:
    ns = team_namespace(TeamQuota("team-a", "team-quotas", gpu=4))
    assert ns == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "team-a",
            "labels": {"runwhere.ai/namespace": "true", "runwhere.ai/quota": "team-quotas", **MANAGED},
        },
    }


def test_team_namespace_not_created_by_gpuctl_is_not_claimed() -> None:
    labels = team_namespace(TeamQuota("team-a", "q"), created_by_gpuctl=False)["metadata"]["labels"]
    assert labels == {"runwhere.ai/namespace": "true", "runwhere.ai/quota": "q"}


# --- desired_objects ------------------------------------------------------------------------------------


def _ids(objs: list[dict]) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in objs]


def test_desired_objects_in_apply_order() -> None:
    assert _ids(desired_objects(POOLS, TEAMS)) == [
        ("WorkloadPriorityClass", "gpuctl-high"),
        ("WorkloadPriorityClass", "gpuctl-medium"),
        ("WorkloadPriorityClass", "gpuctl-low"),
        ("WorkloadPriorityClass", "gpuctl-serving-floor"),
        ("WorkloadPriorityClass", "gpuctl-serving-burst"),
        ("Topology", "gpuctl-nodes"),
        ("ResourceFlavor", "gpuctl-budget"),
        ("ResourceFlavor", "dev-pool"),
        ("ResourceFlavor", "training-pool"),
        ("Cohort", "gpuctl"),
        ("ClusterQueue", "team-a"),
        ("ClusterQueue", "team-b"),
        ("ClusterQueue", "team-c"),
    ]


def test_desired_objects_do_not_depend_on_input_order() -> None:
    expected = desired_objects(POOLS, TEAMS)
    rng = random.Random(7)
    for _ in range(5):
        pools, teams = list(POOLS), list(TEAMS)
        rng.shuffle(pools)
        rng.shuffle(teams)
        assert desired_objects(pools, teams) == expected


def test_desired_objects_without_pools_or_teams() -> None:
    assert _ids(desired_objects([], [])) == [
        ("WorkloadPriorityClass", "gpuctl-high"),
        ("WorkloadPriorityClass", "gpuctl-medium"),
        ("WorkloadPriorityClass", "gpuctl-low"),
        ("WorkloadPriorityClass", "gpuctl-serving-floor"),
        ("WorkloadPriorityClass", "gpuctl-serving-burst"),
        ("Topology", "gpuctl-nodes"),
        ("ResourceFlavor", "gpuctl-budget"),
        ("Cohort", "gpuctl"),
    ]
