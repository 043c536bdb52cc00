"""Multi-node training (issue 31): the spec's `resources.nodes` / `topology` and the gang's objects."""

from __future__ import annotations

import copy

import pytest
import yaml

from gpuctl.builders import TargetPool, build
from gpuctl.builders.common import pod_template, with_labels
from gpuctl.builders.gang import gang_job_spec, topology_level
from gpuctl.constants import (
    GANG_ENV,
    GANG_PLACEMENT,
    HOSTNAME_LABEL,
    SET_ASIDE_FOR_ANNOTATION,
    SET_ASIDE_TAINT_KEY,
    TAS_PREFERRED,
    TAS_REQUIRED,
    TAS_UNCONSTRAINED,
)
from gpuctl.domain.gang import (
    default_topology,
    gang_nodes,
    gang_note,
    gang_pods,
    nodes_missing_levels,
    pool_topology,
    rank_rows,
    tolerates_set_aside,
    workload_gang,
)
from gpuctl.domain.status import gang_status
from gpuctl.spec import SpecError, load_text
from queues import TeamQuota, resource_flavor, topology, topology_name
from tests.unit.test_estimate import T0, judge, running
from tests.unit.test_explain import demand, node

RACKS = ("example.com/block", "example.com/rack")


def _doc(resources: dict, kind: str = "training", env: list | None = None, name: str = "llama") -> str:
    environment: dict = {"image": "pytorch/pytorch:2.2.0"}
    if env:
        environment["env"] = env
    res = {"pool": "training-pool", "gpu": 8, "cpu": 32, "memory": "256Gi", **resources}
    return yaml.safe_dump({"kind": kind, "job": {"name": name}, "environment": environment, "resources": res})


def _build(resources: dict, pool: TargetPool | None = None, **kw) -> list[dict]:
    (doc,) = load_text(_doc(resources, **kw))
    return build(doc.spec, "team-a", pool) if pool else build(doc.spec, "team-a")


def _env(job: dict) -> dict[str, object]:
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env}


def test_one_node_is_todays_job() -> None:
    (job,) = _build({})
    spec = job["spec"]
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (1, 1, 3)
    assert "completionMode" not in spec and "subdomain" not in spec["template"]["spec"]
    assert "env" not in spec["template"]["spec"]["containers"][0]
    assert spec["template"]["metadata"]["annotations"][TAS_UNCONSTRAINED] == "true"


def test_two_nodes_are_one_indexed_job_and_a_headless_service() -> None:
    job, svc = _build({"nodes": 2})
    spec = job["spec"]
    assert spec["suspend"] is True
    assert (spec["parallelism"], spec["completions"], spec["completionMode"]) == (2, 2, "Indexed")
    # Each pod asks for the block's amounts: they are per node.
    res = spec["template"]["spec"]["containers"][0]["resources"]
    assert res["requests"] == {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"} == res["limits"]
    assert spec["template"]["spec"]["subdomain"] == "svc-llama" == svc["metadata"]["name"]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {"batch.kubernetes.io/job-name": "llama"}
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["metadata"]["labels"]["runwhere.ai/job-type"] == "training"  # `delete job` removes it
    # No partial admission: Kueue admits all pods or none.
    assert not any("min-parallelism" in k for k in job["metadata"].get("annotations", {}))


def test_builders_return_what_they_build_and_change_nothing_they_are_given() -> None:
    """gpuctl.builders.gang.gang_job_spec reads the one-pod template the training builder made and returns
    a new spec (it rewrote that Job in place before); the Deployment builder adds its labels the same way."""
    (doc,) = load_text(
        _doc({"nodes": 2, "tolerations": ["a=b:NoSchedule"]}, env=[{"name": "X", "value": "1"}])
    )
    template = pod_template(doc.spec, "team-a", app_label=False, restart_policy="Never")
    before = copy.deepcopy(template)
    spec = gang_job_spec(doc.spec, "team-a", TargetPool(name="training-pool"), template)
    assert template == before
    tmpl = spec["template"]
    # The user's toleration and the two of the gang's own set-aside.
    assert tmpl["spec"]["subdomain"] == "svc-llama" and len(tmpl["spec"]["tolerations"]) == 3
    assert TAS_UNCONSTRAINED not in tmpl["metadata"]["annotations"]
    service = {"metadata": {"name": "s", "labels": {"a": "1"}}, "spec": {}}
    assert with_labels(service, {"b": "2"})["metadata"]["labels"] == {"a": "1", "b": "2"}
    assert service["metadata"]["labels"] == {"a": "1"}


def test_launcher_environment() -> None:
    job, _ = _build({"nodes": 3})
    env = _env(job)
    assert list(env)[: len(GANG_ENV)] == list(GANG_ENV)
    rank = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert env == {
        "PET_NNODES": "3",
        "PET_NPROC_PER_NODE": "8",
        "PET_NODE_RANK": rank,
        "PET_MASTER_ADDR": "llama-0.svc-llama",
        "PET_MASTER_PORT": "29500",
        "MASTER_ADDR": "llama-0.svc-llama",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "3",
        "NODE_RANK": rank,
    }


def test_users_own_env_wins() -> None:
    job, _ = _build({"nodes": 2}, env=[{"MASTER_PORT": "1234"}, {"NCCL_DEBUG": "INFO"}])
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == "MASTER_PORT"] == ["1234"]
    assert _env(job)["PET_MASTER_PORT"] == "29500"
    assert env[-2:] == [{"name": "MASTER_PORT", "value": "1234"}, {"name": "NCCL_DEBUG", "value": "INFO"}]


def test_cpu_only_gang_runs_one_process_per_pod() -> None:
    job, _ = _build({"nodes": 2, "gpu": 0})
    assert _env(job)["PET_NPROC_PER_NODE"] == "1"


def test_failure_policy_fails_the_whole_gang_but_not_on_disruption() -> None:
    job, _ = _build({"nodes": 2})
    spec = job["spec"]
    assert spec["backoffLimit"] == 0 and spec["podReplacementPolicy"] == "Failed"
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    assert rules[1]["action"] == "FailJob" and rules[1]["onExitCodes"]["operator"] == "NotIn"


@pytest.mark.parametrize(
    ("resources", "pool", "annotation"),
    [
        # One node preferred, then each level up, in any pool (and the same for a raw Indexed Job).
        ({"nodes": 2}, TargetPool(topology=RACKS), GANG_PLACEMENT),
        ({"nodes": 2}, TargetPool(topology=()), GANG_PLACEMENT),
        ({"nodes": 2}, None, {TAS_PREFERRED: HOSTNAME_LABEL}),
        ({"nodes": 2, "topology": "rack"}, TargetPool(topology=RACKS), {TAS_REQUIRED: "example.com/rack"}),
        ({"nodes": 2, "topology": "block"}, TargetPool(topology=RACKS), {TAS_REQUIRED: "example.com/block"}),
        ({"nodes": 2, "topology": "rack"}, None, {TAS_REQUIRED: "rack"}),  # pool unknown: as written
    ],
)
def test_placement_annotation(resources: dict, pool: TargetPool | None, annotation: dict) -> None:
    job, _ = _build(resources, pool)
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert {k: v for k, v in annotations.items() if k.startswith("kueue.x-k8s.io/")} == annotation


def test_topology_level_names() -> None:
    assert topology_level("rack", RACKS) == "example.com/rack"
    assert topology_level("example.com/block", RACKS) == "example.com/block"
    assert topology_level("rack", ("cloud.provider.com/topology-rack",)) == "cloud.provider.com/topology-rack"
    assert topology_level("zone", RACKS) is None


@pytest.mark.parametrize(
    ("resources", "kind", "field", "words"),
    [
        ({"replicas": 2}, "training", "resources.replicas", "resources.nodes: N"),
        ({"nodes": 2}, "notebook", "resources.nodes", "only `kind: training` and `kind: inference`"),
        ({"topology": "rack"}, "compute", "resources.topology", "only `kind: training`"),
        ({"nodes": 0}, "training", "resources.nodes", "at least 1"),
        ({"topology": "rack"}, "training", "resources.topology", "one node"),
    ],
)
def test_refused(resources: dict, kind: str, field: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        load_text(_doc(resources, kind=kind))
    (issue,) = err.value.issues
    assert issue.field == field
    assert words in f"{issue.message} {issue.fix}"


def test_numnodes_alias_and_name_length() -> None:
    (doc,) = load_text(_doc({"numNodes": 4}))
    assert doc.spec.resources.nodes == 4
    with pytest.raises(SpecError) as err:
        load_text(_doc({"nodes": 2}, name="x" * 60))
    assert err.value.issues[0].field == "job.name"
    (doc,) = load_text(_doc({}, name="x" * 63))  # one node: no Service, the usual limit
    assert doc.spec.job.name == "x" * 63


# ----------------------------------------------------------------------------- pools' topology
def _pool(topology: object) -> str:
    return yaml.safe_dump({"kind": "pool", "pool": {"name": "p"}, "nodes": {"n1": {}}, "topology": topology})


def test_pool_topology_levels() -> None:
    (doc,) = load_text(_pool(["example.com/block", "example.com/rack"]))
    assert doc.spec.topology == ["example.com/block", "example.com/rack"]
    (doc,) = load_text(_pool("example.com/rack"))
    assert doc.spec.topology == ["example.com/rack"]
    (doc,) = load_text(yaml.safe_dump({"kind": "pool", "pool": {"name": "p"}}))
    assert doc.spec.topology is None  # the well-known levels its nodes carry, at creation


@pytest.mark.parametrize(
    ("levels", "field", "words"),
    [
        (["example.com/rack", "bad key!"], "topology[1]", "not a node label key"),
        (["kubernetes.io/hostname"], "topology[0]", "always the lowest level"),
        (["example.com/rack", "example.com/rack"], "topology[1]", "twice"),
        ([f"example.com/l{i}" for i in range(16)], "topology", "at most 15"),
    ],
)
def test_pool_topology_refused(levels: list[str], field: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        load_text(_pool(levels))
    (issue,) = err.value.issues
    assert issue.field == field and words in issue.message


def test_topology_needs_one_pool() -> None:
    with pytest.raises(SpecError) as err:
        load_text(_doc({"nodes": 2, "topology": "rack", "pool": ["a", "b"]}))
    assert err.value.issues[0].field == "resources.topology"


def test_kueue_topology_and_flavor_of_a_pool() -> None:
    flat, racks = topology(), topology(RACKS)
    assert flat["metadata"]["name"] == "gpuctl-nodes" == topology_name(())
    assert flat["spec"]["levels"] == [{"nodeLabel": "kubernetes.io/hostname"}]
    assert [lv["nodeLabel"] for lv in racks["spec"]["levels"]] == [*RACKS, "kubernetes.io/hostname"]
    assert racks["metadata"]["name"].startswith("gpuctl-topology-")
    assert topology_name(RACKS) != topology_name(RACKS[::-1])  # levels are ordered
    rf = resource_flavor("p", levels=RACKS)
    assert rf["spec"]["topologyName"] == racks["metadata"]["name"]
    assert pool_topology(rf) == RACKS
    assert pool_topology(resource_flavor("p")) == ()


def _node(name: str, **node_labels: str) -> dict:
    return {"metadata": {"name": name, "labels": node_labels}}


def test_default_topology_is_a_well_known_hierarchy_every_node_carries() -> None:
    gke = {"cloud.google.com/gce-topology-block": "b1", "cloud.google.com/gce-topology-subblock": "s1"}
    assert default_topology([_node("a", **gke), _node("b", **gke)]) == tuple(gke)
    assert default_topology([_node("a", **gke), _node("b")]) == ()
    assert default_topology([]) == ()
    assert nodes_missing_levels([_node("a", **{RACKS[0]: "b"}), _node("b")], RACKS) == {
        "a": [RACKS[1]],
        "b": list(RACKS),
    }


# ----------------------------------------------------------------------------- gangs as read back
def _pod(name: str, rank: int | None, owner: str = "u1", phase: str = "Running", node: str = "") -> dict:
    ann = {} if rank is None else {"batch.kubernetes.io/job-completion-index": str(rank)}
    owners = [{"uid": owner, "controller": True}]
    return {
        "metadata": {"name": name, "annotations": ann, "ownerReferences": owners},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


def test_gang_size_ranks_and_words() -> None:
    (job, _svc) = _build({"nodes": 2})
    job["metadata"]["uid"] = "u1"
    assert gang_nodes(job) == 2 and gang_note(job) == " (2 nodes x 8 GPUs = 16 GPUs)"
    (one,) = _build({})
    assert gang_nodes(one) == 1 and gang_note(one) == ""
    assert gang_nodes({"spec": {"completionMode": "Indexed", "parallelism": 4, "completions": 2}}) == 2
    pods = [
        _pod("j-1-x", 1),
        _pod("old-0", 0, owner="u0"),
        _pod("j-0-y", 0),
        _pod("j-0-z", 0, phase="Failed"),
    ]
    assert [p["metadata"]["name"] for p in gang_pods(job, pods)] == ["j-0-y", "j-1-x"]
    assert gang_status("Pending", ["Running", "Running"]) == "Running"
    assert gang_status("Pending", ["Running", "Pending"]) == "Partially Running"
    assert gang_status("Pending", ["Running", "ImagePullBackOff"]) == "ImagePullBackOff"
    assert gang_status("Queued", ["Queued"]) == "Queued"


def _owned_wl(kind: str, *counts: int) -> dict:
    ref = {"apiVersion": "batch/v1" if kind == "Job" else "jobset.x-k8s.io/v1alpha2", "kind": kind}
    sets = [{"name": f"s{i}", "count": c, "template": {"spec": {}}} for i, c in enumerate(counts)]
    return {
        "metadata": {"ownerReferences": [{**ref, "name": "j", "uid": "u", "controller": True}]},
        "spec": {"podSets": sets},
    }


def test_one_definition_of_a_gang_for_jobs_and_their_workloads() -> None:
    """gpuctl.domain.gang.gang_nodes: an Indexed Job of N >= 2 pods and its Workload (one pod set of N owned
    by the Job) are gangs; a JobSet, its Workload (even of one replicated job of 2 pods) and its Jobs' pods
    are not, nor a Workload of several pod sets."""
    (job, _svc) = _build({"nodes": 3})
    assert gang_nodes(job) == 3 and gang_nodes(_owned_wl("Job", 3)) == 3
    assert workload_gang(_owned_wl("Job", 3)) == (3, 0)
    assert gang_nodes(_owned_wl("JobSet", 2)) == 1 and workload_gang(_owned_wl("JobSet", 2)) is None
    assert gang_nodes(_owned_wl("Job", 1)) == 1 and gang_nodes(_owned_wl("JobSet", 1, 1)) == 1
    jobset = {"kind": "JobSet", "spec": {"replicatedJobs": [{"name": "w", "replicas": 2}]}}
    assert gang_nodes(jobset) == 1
    unowned = _owned_wl("Job", 2)
    unowned["metadata"] = {}
    assert gang_nodes(unowned) == 1  # a pod group's Workload (owned by its pods, or by nothing)


def test_rank_rows_name_each_ranks_domains() -> None:
    nodes = {"n1": _node("n1", **{RACKS[0]: "b1", RACKS[1]: "r1"}), "n2": _node("n2", **{RACKS[0]: "b1"})}
    rows = rank_rows([_pod("p1", 1, node="n2"), _pod("p0", 0, node="n1")], nodes, RACKS)
    assert rows == [
        {"rank": 0, "pod": "p0", "node": "n1", "domains": {RACKS[0]: "b1", RACKS[1]: "r1"}},
        {"rank": 1, "pod": "p1", "node": "n2", "domains": {RACKS[0]: "b1", RACKS[1]: "-"}},
    ]


def test_estimate_of_a_gang_whose_nodes_are_set_aside() -> None:
    """`describe job` of a waiting gang: once `serve --defrag` set its nodes aside, it starts at the latest
    when the last job on them ends (plus the step slack), not after the queue's play (issue 31)."""

    nodes = [node("gpu-node-1"), node("gpu-node-2"), node("gpu-node-3")]
    wls = [
        running("team-b", "small", 2, {"gpu-node-2": 1}, since=-100, limit=400),
        running("team-b", "long", 8, {"gpu-node-3": 1}, since=-100, limit=9000),
    ]
    gang = demand("team-a", 8, pods=2)
    teams = (TeamQuota("team-a", "q", gpu=16), TeamQuota("team-b", "q", gpu=16))
    before = judge(wls, gang, teams=teams, nodes=nodes)
    assert before.summary() == "starts by +330s at the latest (team-b/small ends by +300s, then position 1)"
    for n in nodes[:2]:
        n["metadata"]["annotations"] = {SET_ASIDE_FOR_ANNOTATION: "team-a/new"}
        n["spec"]["taints"] = [{"key": SET_ASIDE_TAINT_KEY, "value": "team-a", "effect": "NoSchedule"}]
    e = judge(wls, gang, teams=teams, nodes=nodes)
    assert e.starts_by == T0 + 300 + 30
    assert e.summary() == (
        "starts by +330s at the latest (nodes gpu-node-1, gpu-node-2 are set aside for it; "
        "team-b/small, the last job on them, ends by +300s)"
    )


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        ([{"key": SET_ASIDE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}], True),
        ([{"key": SET_ASIDE_TAINT_KEY, "operator": "Equal", "value": "team-a"}], True),
        ([{"operator": "Exists"}], True),  # every taint
        ([{"key": SET_ASIDE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}], False),
        ([{"key": "runwhere.ai/pool", "operator": "Exists"}], False),
        ([], False),
    ],
)
def test_tolerates_set_aside(tolerations: list, expected: bool) -> None:
    assert tolerates_set_aside({"tolerations": tolerations}) is expected


def test_a_gang_of_slices_reports_its_slices_not_0_gpus() -> None:
    """Issue 43: `nodes: 2` with `gpu-share` said "2 nodes x 0 GPUs = 0 GPUs" in create/dry-run lines and
    describe, and get jobs' gang row counted 0 GPUs with nothing else."""
    from gpuctl.domain.gang import gang_text

    mig = "nvidia.com/mig-1g.10gb"
    pool = TargetPool(name="training-pool", slice_resource=mig)
    job, _svc = _build({"nodes": 2, "gpu": 1, "gpu-share": "1g.10gb"}, pool)
    res = job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert res[mig] == "1" and "nvidia.com/gpu" not in res
    assert gang_note(job) == f" (2 nodes x 1 {mig} = 2 {mig})"
    assert gang_text(2, {"nvidia.com/gpu": 8}) == "2 nodes x 8 GPUs = 16 GPUs"
    assert gang_text(3, {}) == "3 nodes x 0 GPUs = 0 GPUs"
    assert gang_text(2, {"nvidia.com/gpu": 1, "nvidia.com/gpu.shared": 2}) == (
        "2 nodes x 1 GPUs + 2 nvidia.com/gpu.shared = 2 GPUs + 4 nvidia.com/gpu.shared"
    )


def test_a_gang_tolerates_its_own_set_aside_and_no_other() -> None:
    """Issue 43: gpuctl's builder writes what gpuctl.domain.gang.set_aside_taints puts on the nodes held for
    this gang, exactly (the builder cannot import the domain: the two are kept equal here)."""
    from gpuctl.domain.gang import (
        own_set_aside_tolerations,
        set_aside_taints,
        set_aside_tolerations,
        tolerates_gangs_set_aside,
    )

    job, _svc = _build({"nodes": 2})
    spec = job["spec"]["template"]["spec"]
    assert [t for t in spec["tolerations"] if "set-aside" in t["key"]] == set_aside_tolerations(
        "team-a", "llama"
    )
    assert own_set_aside_tolerations(spec, "team-a", "llama")
    assert tolerates_gangs_set_aside(spec, "team-a/llama")
    assert not tolerates_gangs_set_aside(spec, "team-a/other") and not tolerates_gangs_set_aside(
        spec, "b/llama"
    )
    assert [t["value"] for t in set_aside_taints("team-a/llama")] == ["team-a", "llama"]
    # Every set-aside (the topology policy's toleration before issue 43) is not its own.
    legacy = {"tolerations": [{"key": SET_ASIDE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]}
    assert not own_set_aside_tolerations(legacy, "team-a", "llama")
    assert not own_set_aside_tolerations(
        {"tolerations": [*spec["tolerations"], {"operator": "Exists"}]}, "team-a", "llama"
    )
