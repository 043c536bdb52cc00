"""queues/: the Kueue objects for pools, team quotas and priorities, checked value by value."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctl.constants import BORROW_PREEMPT_THRESHOLD, PRIORITY_VALUE, Priority
from gpuctl.quantity import parse_quantity
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
BUDGET_RESOURCES = ["runwhere.ai/quota-cpu", "runwhere.ai/quota-memory", "runwhere.ai/quota-gpu"]
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
        "spec": {"nodeLabels": {"runwhere.ai/pool": "training-pool"}},
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
    ]


def test_borrow_preemption_threshold_is_medium() -> None:
    # Borrowing work may preempt other teams' medium and low work, never their high work.
    assert BORROW_PREEMPT_THRESHOLD == PRIORITY_VALUE[Priority.MEDIUM] == 500_000
    assert PRIORITY_VALUE[Priority.LOW] <= BORROW_PREEMPT_THRESHOLD < PRIORITY_VALUE[Priority.HIGH]


# --- the Cohort: pool capacity less guarantees ------------------------------------------------------


def test_cohort_holds_capacity_minus_guarantees() -> None:
    pools = [PoolCapacity("training-pool", gpu=16, cpu="192", memory="2Ti")]
    teams = [
        TeamQuota("team-a", "q", pools={"training-pool": PoolGuarantee(gpu=8, cpu="96", memory="1Ti")}),
        TeamQuota("team-b", "q", pools={"training-pool": PoolGuarantee(gpu=2, cpu="10", memory="100Gi")}),
        TeamQuota("team-c", "q"),
    ]
    co = cohort(pools, teams)
    assert (co["apiVersion"], co["kind"], co["metadata"]) == (
        API,
        "Cohort",
        {"name": "gpuctl", "labels": MANAGED},
    )
    assert co["spec"]["resourceGroups"][0]["coveredResources"] == POOL_RESOURCES
    assert _nominal(co["spec"], "training-pool") == {
        "cpu": "86",
        "memory": str(2 * 2**40 - 2**40 - 100 * 2**30),
        "nvidia.com/gpu": "6",
    }


def test_cohort_without_guarantees_holds_the_whole_pool() -> None:
    co = cohort(
        [PoolCapacity("dev-pool", gpu=4, cpu="32", memory="128Gi")], [TeamQuota("team-a", "q", gpu=4)]
    )
    assert _nominal(co["spec"], "dev-pool") == {
        "cpu": "32",
        "memory": str(128 * 2**30),
        "nvidia.com/gpu": "4",
    }


def test_cohort_floors_at_zero_when_guarantees_exceed_capacity() -> None:
    pools = [PoolCapacity("dev-pool", gpu=4, cpu="8", memory="16Gi")]
    teams = [TeamQuota("team-a", "q", pools={"dev-pool": PoolGuarantee(gpu=6, cpu="9", memory="17Gi")})]
    assert _nominal(cohort(pools, teams)["spec"], "dev-pool") == {
        "cpu": "0",
        "memory": "0",
        "nvidia.com/gpu": "0",
    }


@pytest.mark.parametrize(
    ("capacity", "guaranteed", "expected"),
    [
        ("8", "500m", "7500m"),
        ("7.5", "250m", "7250m"),
        ("8", "2", "6"),
        ("8000m", "1", "7"),
        ("1.0005", "0", "1000m"),  # sub-milli remainder is rounded down, never up
        # the guarantee itself rounds down to 1999m (on the team's queue too), so the sum is still 2
        ("2", "1.9999", "1m"),
    ],
)
def test_cohort_cpu_is_whole_or_milli_units(capacity: str, guaranteed: str, expected: str) -> None:
    pools = [PoolCapacity("p", gpu=0, cpu=capacity, memory="1Gi")]
    teams = [TeamQuota("t", "q", pools={"p": PoolGuarantee(cpu=guaranteed)})]
    assert _nominal(cohort(pools, teams)["spec"], "p")["cpu"] == expected


def test_cohort_flavors_are_sorted_by_pool_name() -> None:
    pools = [
        PoolCapacity(n, gpu=1, cpu="1", memory="1Gi") for n in ("training-pool", "compute-pool", "dev-pool")
    ]
    flavors = cohort(pools)["spec"]["resourceGroups"][0]["flavors"]
    assert [f["name"] for f in flavors] == ["compute-pool", "dev-pool", "training-pool"]


def test_cohort_without_pools_has_no_resource_groups() -> None:
    assert cohort([], [TeamQuota("team-a", "q", gpu=4)])["spec"] == {}


def test_cohort_ignores_guarantees_in_pools_it_does_not_know() -> None:
    pools = [PoolCapacity("dev-pool", gpu=4, cpu="32", memory="128Gi")]
    teams = [TeamQuota("team-a", "q", pools={"no-such-pool": PoolGuarantee(gpu=4)})]
    assert _nominal(cohort(pools, teams)["spec"], "dev-pool")["nvidia.com/gpu"] == "4"


POOLS = [
    PoolCapacity("training-pool", gpu=16, cpu="192", memory="2Ti"),
    PoolCapacity("dev-pool", gpu=4, cpu="31500m", memory="126Gi"),
]
TEAMS = [
    TeamQuota("team-a", "q", gpu=16, pools={"training-pool": PoolGuarantee(gpu=8, cpu="95.5", memory="1Ti")}),
    TeamQuota("team-b", "q", gpu=8, pools={"dev-pool": PoolGuarantee(gpu=1, cpu="1500m", memory="8Gi")}),
    TeamQuota("team-c", "q"),
]


def test_cohort_plus_team_nominals_equal_each_pools_capacity() -> None:
    """The invariant that keeps Kueue from admitting more than a pool's nodes hold."""
    co = cohort(POOLS, TEAMS)["spec"]
    cqs = [cluster_queue(t, [p.name for p in POOLS])["spec"] for t in TEAMS]
    for p in POOLS:
        capacity = {"cpu": parse_quantity(p.cpu), "memory": parse_quantity(p.memory), "nvidia.com/gpu": p.gpu}
        for res, cap in capacity.items():
            total = parse_quantity(_nominal(co, p.name)[res]) + sum(
                parse_quantity(_nominal(cq, p.name)[res]) for cq in cqs
            )
            assert total == cap, (p.name, res)


def test_sub_milli_guarantees_never_add_up_to_more_than_the_pool() -> None:
    # Each team's guarantee and the sum subtracted from the pool are rounded down to milli-CPU
    # separately: the total may fall short of the capacity by a few milli-CPU, never exceed it.
    pools = [PoolCapacity("p", gpu=0, cpu="2", memory="1Gi")]
    teams = [TeamQuota(t, "q", pools={"p": PoolGuarantee(cpu="0.0006")}) for t in ("t1", "t2")]
    cohort_cpu = _nominal(cohort(pools, teams)["spec"], "p")["cpu"]
    team_cpu = [_nominal(cluster_queue(t, ["p"])["spec"], "p")["cpu"] for t in teams]
    assert (cohort_cpu, team_cpu) == ("1999m", ["0m", "0m"])
    assert sum(parse_quantity(q) for q in [cohort_cpu, *team_cpu]) == Decimal("1.999")


@settings(max_examples=200, deadline=None)
@given(
    gpus=st.integers(0, 64),
    cpu_milli=st.integers(0, 512_000),
    mem_mi=st.integers(0, 4 * 2**20),
    shares=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 64_000), st.integers(0, 2**19)), max_size=4),
)
def test_cohort_never_holds_more_than_capacity_minus_guarantees(gpus, cpu_milli, mem_mi, shares) -> None:
    pool = PoolCapacity("p", gpu=gpus, cpu=f"{cpu_milli}m", memory=f"{mem_mi}Mi")
    teams = [
        TeamQuota(f"t{i}", "q", pools={"p": PoolGuarantee(gpu=g, cpu=f"{c}m", memory=f"{m}Mi")})
        for i, (g, c, m) in enumerate(shares)
    ]
    got = {k: parse_quantity(v) for k, v in _nominal(cohort([pool], teams)["spec"], "p").items()}
    want = {
        "cpu": Decimal(cpu_milli - sum(c for _, c, _ in shares)) / 1000,
        "memory": Decimal((mem_mi - sum(m for _, _, m in shares)) * 2**20),
        "nvidia.com/gpu": Decimal(gpus - sum(g for g, _, _ in shares)),
    }
    assert got == {k: max(v, Decimal(0)) for k, v in want.items()}


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
        "runwhere.ai/quota-gpu": {"nominalQuota": "16", "borrowingLimit": "8"},
    }


def test_cluster_queue_unset_quota_is_unlimited_without_borrowing_limit() -> None:
    budget = _flavor(cluster_queue(TeamQuota("team-a", "q"), ["dev-pool"])["spec"], "gpuctl-budget")
    assert budget == {
        "runwhere.ai/quota-cpu": {"nominalQuota": "1T"},
        "runwhere.ai/quota-memory": {"nominalQuota": "1Ei"},
        "runwhere.ai/quota-gpu": {"nominalQuota": "1M"},
    }


@pytest.mark.parametrize(("limit", "expected"), [(None, None), (0, "0"), (8, "8")])
def test_cluster_queue_borrowing_limit_only_when_set_and_only_on_gpu(limit, expected) -> None:
    spec = cluster_queue(TeamQuota("team-a", "q", gpu=4, borrowing_limit=limit), ["dev-pool"])["spec"]
    assert _flavor(spec, "gpuctl-budget")["runwhere.ai/quota-gpu"].get("borrowingLimit") == expected
    others = [q for g in spec["resourceGroups"] for f in g["flavors"] for q in f["resources"]]
    assert [q["name"] for q in others if "borrowingLimit" in q] == (
        [] if limit is None else ["runwhere.ai/quota-gpu"]
    )
    assert not any("lendingLimit" in q for q in others)


def test_cluster_queue_guarantees_land_on_their_pool_only() -> None:
    team = TeamQuota(
        "team-a", "q", gpu=16, pools={"training-pool": PoolGuarantee(gpu=8, cpu="95.5", memory="1Ti")}
    )
    spec = cluster_queue(team, ["training-pool", "dev-pool", "compute-pool"])["spec"]
    assert _nominal(spec, "training-pool") == {"cpu": "95500m", "memory": str(2**40), "nvidia.com/gpu": "8"}
    for pool in ("dev-pool", "compute-pool"):
        assert _nominal(spec, pool) == {"cpu": "0", "memory": "0", "nvidia.com/gpu": "0"}


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
        ("ResourceFlavor", "gpuctl-budget"),
        ("Cohort", "gpuctl"),
    ]
