"""gpuctl adopt's decisions (gpuctl.service.adopt_plan.decide) on an earlier gpuctl's cluster state."""

from __future__ import annotations

import pytest

from gpuctl.constants import MANAGED_BY_VALUE, Labels
from gpuctl.domain.pools import desired_flavor, pool_taint
from gpuctl.service.adopt_plan import ADOPTED_QUOTA, KEEP, AdoptOptions, IsolationPlan, decide
from queues import resource_flavor


def node(name: str, pool: str | None = None, gpus: int = 8, taints: tuple = (), **extra: str) -> dict:
    labels = {Labels.POOL: pool} if pool else {}
    labels.update(extra)
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": list(taints)},
        "status": {"capacity": {"nvidia.com/gpu": str(gpus)}, "allocatable": {"nvidia.com/gpu": str(gpus)}},
    }


def pool_node(name: str, pool: str) -> dict:
    """A node of a pool as gpuctl leaves it since issue 26: labelled and tainted."""
    return node(name, pool, taints=(pool_taint(pool),))


def ns(name: str, team: bool = False, **labels: str) -> dict:
    lb = {Labels.NAMESPACE: "true"} if team else {}
    lb.update(labels)
    return {"metadata": {"name": name, "labels": lb}}


def rq(namespace: str, name: str, hard: dict, quota: str | None = None) -> dict:
    labels = {Labels.QUOTA: quota} if quota else {}
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": {"hard": hard}}


NODES = [
    node("a1", "training-pool", **{Labels.GPU_TYPE_LEGACY: "A100"}),
    node("a2", "training-pool", **{Labels.GPU_TYPE: "A100"}),
    node("b1", "bad_Pool!"),
    node("u1"),
    node("u2"),
    node("cpu1", gpus=0),
]
NAMESPACES = [ns("default"), ns("team-a", team=True), ns("team-b", team=True), ns("apps"), ns("kube-system")]
RQS = [
    rq(
        "team-a", "q-team-a", {"nvidia.com/gpu": "4", "cpu": "32", "memory": "128Gi", "pods": "50"}, quota="q"
    ),
    rq("team-b", "q-team-b", {"requests.nvidia.com/gpu": "2", "limits.nvidia.com/gpu": "3"}, quota="q"),
    rq("team-b", "admin-limits", {"requests.memory": "64Gi"}),
    rq("apps", "cpu-only", {"cpu": "10"}),
    rq("kube-system", "gpu", {"nvidia.com/gpu": "1"}),
    rq("default", "q-default", {"nvidia.com/gpu": "1"}, quota="q"),
]


def plan(**opts):
    return decide(
        nodes=NODES,
        flavors=[],
        namespaces=NAMESPACES,
        resource_quotas=RQS,
        team_namespaces=[],
        options=AdoptOptions(**opts),
    )


def test_label_pools_and_a_default_pool_of_the_unlabelled_gpu_nodes() -> None:
    p = plan()
    pools = {x.name: x.nodes for x in p.pools}
    assert pools == {"training-pool": {"a1": "A100", "a2": "A100"}, "default": {"u1": "", "u2": ""}}
    assert any("bad_Pool!" in n and "not a valid pool name" in n for n in p.not_converted)
    assert any("cpu1" in k for k in p.kept)  # CPU nodes without a pool are left alone, and said so
    assert [x.name for x in plan(default_pool=None).pools] == ["training-pool"]
    assert [x.name for x in plan(default_pool="legacy").pools] == ["training-pool", "legacy"]


def test_quotas_move_out_of_the_earlier_resource_quotas_and_foreign_ones_keep_enforcing() -> None:
    p = plan()
    quotas = {q.team.namespace: q.team for q in p.quotas}
    assert set(quotas) == {"team-a", "team-b"}  # not default (not asked), not apps (no GPUs), not kube-*
    a, b = quotas["team-a"], quotas["team-b"]
    assert (a.quota_name, a.gpu, a.cpu, a.memory, a.borrowing_limit) == ("q", 4, "32", "128Gi", 0)
    # requests/limits both given: the smaller one enforces; memory stays with the admin's ResourceQuota.
    assert (b.gpu, b.cpu, b.memory) == (2, None, None)
    changes = {(c.namespace, c.name): c for c in p.resource_quotas}
    assert set(changes) == {("team-a", "q-team-a"), ("team-b", "q-team-b")}
    assert changes["team-a", "q-team-a"].remove_keys == ["cpu", "memory", "nvidia.com/gpu"]
    assert not changes["team-a", "q-team-a"].delete  # pods=50 stays, and is reported
    assert changes["team-b", "q-team-b"].delete
    assert any("pods=50 not converted" in n for n in p.not_converted)
    assert any("admin-limits keeps enforcing requests.memory" in k for k in p.kept)
    assert any("namespace default" in k and "--default-quota" in k for k in p.kept)


def test_keep_mode_changes_no_resource_quota_and_leaves_their_resources_unlimited() -> None:
    p = plan(resource_quotas=KEEP)
    assert p.resource_quotas == []
    assert {(q.team.namespace, q.team.gpu, q.team.cpu, q.team.memory) for q in p.quotas} == {
        ("team-a", None, None, None),
        ("team-b", None, None, None),
    }


def test_a_namespace_being_deleted_is_not_adopted() -> None:
    going = ns("team-gone", team=True)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    p = decide(nodes=[], flavors=[], namespaces=[going], resource_quotas=[], team_namespaces=[])
    assert p.empty


def test_default_gets_a_quota_only_when_asked() -> None:
    p = plan(include_default=True)
    d = next(q.team for q in p.quotas if q.team.namespace == "default")
    assert (d.quota_name, d.gpu) == ("q", 1)
    # Without a ResourceQuota, default's quota is unlimited and named after the adoption.
    nss = [ns("default")]
    p = decide(
        nodes=[],
        flavors=[],
        namespaces=nss,
        resource_quotas=[],
        team_namespaces=[],
        options=AdoptOptions(include_default=True),
    )
    assert [(q.team.namespace, q.team.quota_name, q.team.gpu) for q in p.quotas] == [
        ("default", ADOPTED_QUOTA, None)
    ]


def test_a_second_run_plans_nothing() -> None:
    gpuctl_flavors = [desired_flavor("training-pool", []), desired_flavor("default", [])]
    adopted_nodes = [
        pool_node("a1", "training-pool"),
        pool_node("a2", "training-pool"),
        pool_node("u1", "default"),
        pool_node("u2", "default"),
        node("cpu1", gpus=0),
    ]
    remaining = [r for r in RQS if r["metadata"]["name"] not in ("q-team-a", "q-team-b")]
    stripped = rq("team-a", "q-team-a", {"pods": "50"}, quota="q")
    p = decide(
        nodes=adopted_nodes,
        flavors=gpuctl_flavors,
        namespaces=NAMESPACES,
        resource_quotas=[*remaining, stripped],
        team_namespaces=["team-a", "team-b"],
        options=AdoptOptions(),
    )
    assert p.empty, p


def test_a_foreign_flavor_of_the_same_name_is_not_taken_over() -> None:
    foreign = {"metadata": {"name": "training-pool", "labels": {}}, "spec": {}}
    p = decide(nodes=NODES, flavors=[foreign], namespaces=[], resource_quotas=[], team_namespaces=[])
    assert "training-pool" not in [x.name for x in p.pools]
    assert any("did not create" in n for n in p.not_converted)
    ours = resource_flavor("training-pool")
    assert ours["metadata"]["labels"][Labels.MANAGED_BY] == MANAGED_BY_VALUE


def test_earlier_workloads_are_reported_as_running_untouched() -> None:
    job = {"metadata": {"name": "old", "namespace": "default", "labels": {Labels.JOB_TYPE: "training"}}}
    new = {
        "metadata": {
            "name": "new",
            "namespace": "default",
            "labels": {Labels.JOB_TYPE: "training", Labels.KUEUE_QUEUE: "default"},
        }
    }
    p = decide(
        nodes=[],
        flavors=[],
        namespaces=[],
        resource_quotas=[],
        team_namespaces=[],
        controllers=[("Job", job), ("Job", new)],
    )
    (note,) = p.kept
    assert "default/old (Job)" in note and "new" not in note


def test_bad_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="remove, keep"):
        decide(
            nodes=[],
            flavors=[],
            namespaces=[],
            resource_quotas=[],
            team_namespaces=[],
            options=AdoptOptions(resource_quotas="drop"),
        )


def test_pools_of_an_earlier_gpuctl_get_the_pool_taint_and_their_flavors_tolerate_it() -> None:
    """Issue 26 on an existing cluster: flavors made before the pool taint (no toleration), nodes labelled
    but never tainted, a taint left on a node that left its pool. New pools are tainted by apply_pool."""
    GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    nodes = [
        node("a1", "training-pool", taints=(GPU,)),  # old: untainted by gpuctl
        pool_node("a2", "training-pool"),  # already right
        node("i1", "inference-pool", taints=(pool_taint("training-pool"),)),  # another pool's taint
        pool_node("d1", "dev-pool"),
        node("gone", None, gpus=0, taints=(pool_taint("dev-pool"), GPU)),  # left its pool, taint stayed
        node("u1", None, taints=(pool_taint("dev-pool"),)),  # an unlabelled GPU node: joins pool default
        node("new1", "new-pool"),  # no flavor yet: adopt creates the pool (apply_pool taints it)
    ]
    flavors = [
        resource_flavor("training-pool"),  # the earlier gpuctl's flavor: no toleration
        desired_flavor("inference-pool", []),
        desired_flavor("dev-pool", []),  # nothing to do
    ]
    pods = [
        {"metadata": {"name": "old-job-0", "namespace": "default"}, "spec": {"nodeName": "a1"}},
        {  # tolerates everything: stays where it is and is not listed
            "metadata": {"name": "agent-x", "namespace": "monitoring"},
            "spec": {"nodeName": "a1", "tolerations": [{"operator": "Exists"}]},
        },
        {
            "metadata": {
                "name": "exporter-abc",
                "namespace": "monitoring",
                "ownerReferences": [{"kind": "DaemonSet", "name": "exporter", "controller": True}],
            },
            "spec": {"nodeName": "new1"},
        },
        {"metadata": {"name": "elsewhere", "namespace": "default"}, "spec": {"nodeName": "gone"}},
    ]
    p = decide(nodes=nodes, flavors=flavors, namespaces=[], resource_quotas=[], team_namespaces=[], pods=pods)
    assert [(x.name, sorted(x.nodes)) for x in p.pools] == [("new-pool", ["new1"]), ("default", ["u1"])]
    assert p.isolation == [
        IsolationPlan("inference-pool", flavor=False, nodes=["i1"]),
        IsolationPlan("training-pool", flavor=True, nodes=["a1"]),
    ]
    assert p.untaint == ["gone"]
    assert not p.empty
    (running, daemonsets, default) = p.kept[-3:]
    assert "default/old-job-0 on a1" in running and "agent-x" not in running and "elsewhere" not in running
    assert "monitoring/exporter" in daemonsets and "operator: Exists" in daemonsets
    assert "--default-quota" in default
    # --default-quota makes default a team namespace: the earlier client's jobs queue there, no note.
    p = decide(
        nodes=nodes,
        flavors=flavors,
        namespaces=[ns("default")],
        resource_quotas=[],
        team_namespaces=[],
        options=AdoptOptions(include_default=True),
    )
    assert not any("--default-quota" in k for k in p.kept)
    assert [q.team.namespace for q in p.quotas] == ["default"]
