"""Each webhook validator on its own, table-driven (Kueue's pkg/webhooks style): a reduced object in, the
rules it breaks out. The whole request path (envelope, identity skips, UPDATE diff, messages) is
tests/unit/test_admission_rules.py's and test_admission_tenant_rules.py's."""

from __future__ import annotations

from typing import Any

import pytest

from admission.rule_names import (
    DEVICE_ACCESS,
    GPU_FITS_NODE,
    GPU_QUEUE,
    GPU_TOPOLOGY,
    HOST_PATH,
    JOB_TYPE,
    KUEUE_GATE,
    NODE_POOL,
    ORPHAN_DELETE,
    OWNER_CLAIM,
    POOL_EXISTS,
    POOL_PLACEMENT,
    PRIORITY,
    PRIORITY_CLASS_RULE,
    UNKNOWN_KEY,
)
from admission.validators.device_access import check_device_access
from admission.validators.host_paths import check_host_paths
from admission.validators.kueue_gate import check_kueue_gate
from admission.validators.labels import check_labels
from admission.validators.node_pool import check_node
from admission.validators.orphan_delete import check_orphan_delete
from admission.validators.owner_claim import check_owner_claim, check_owner_dropped
from admission.validators.placement import (
    check_gpu_fits_node,
    check_pool_exists,
    check_pool_placement,
    placement_of,
)
from admission.validators.priority_class import check_priority_class
from admission.validators.queue import check_queue
from admission.verdict import Violation
from admission.work import reduce
from gpuctl.constants import TAS_UNCONSTRAINED, Labels
from tests.unit.test_admission_fixtures import TEAM, state

STATE = state()
GPU = "nvidia.com/gpu"


def pod(labels: dict | None = None, annotations: dict | None = None, **spec: Any) -> dict:
    spec.setdefault("containers", [{"name": "c", "image": "x"}])
    meta: dict = {"name": "p", "namespace": TEAM, "labels": labels or {}}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def gpus(n: int) -> list[dict]:
    return [{"name": "c", "image": "x", "resources": {"limits": {GPU: str(n)}}}]


def affinity(*exprs: dict) -> dict:
    terms = [{"matchExpressions": list(exprs)}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def rules_of(found: list[Violation]) -> list[str]:
    return [v.rule for v in found]


QUEUED = {Labels.KUEUE_QUEUE: "default"}
TAS = {TAS_UNCONSTRAINED: "true"}


@pytest.mark.parametrize(
    ("case", "obj", "want", "warned"),
    [
        ("queued, topology asked", pod(QUEUED, TAS, containers=gpus(1)), [], False),
        ("no queue label", pod({}, TAS, containers=gpus(1)), [GPU_QUEUE], False),
        (
            "not a LocalQueue here",
            pod({Labels.KUEUE_QUEUE: "defualt"}, TAS, containers=gpus(1)),
            [GPU_QUEUE],
            False,
        ),
        ("TAS queue, no topology", pod(QUEUED, containers=gpus(1)), [GPU_TOPOLOGY], False),
    ],
)
def test_queue(case, obj, want, warned):
    w = reduce("Pod", obj, "request.object")
    warn: list[str] = []
    assert rules_of(check_queue(w, TEAM, 1, STATE, warn)) == want, case
    assert bool(warn) is warned, case


@pytest.mark.parametrize(
    ("case", "obj", "exists", "placement", "fits"),
    [
        (
            "selector pins an existing pool",
            pod({Labels.POOL: "a100"}, nodeSelector={Labels.POOL: "a100"}),
            [],
            [],
            [],
        ),
        ("label only: nothing keeps it there", pod({Labels.POOL: "a100"}), [], [POOL_PLACEMENT], []),
        (
            "no such pool",
            pod({Labels.POOL: "a1000"}, nodeSelector={Labels.POOL: "a1000"}),
            [POOL_EXISTS],
            [],
            [],
        ),
        (
            "label and selector disagree",
            pod({Labels.POOL: "a100"}, nodeSelector={Labels.POOL: "a10"}),
            [],
            [POOL_PLACEMENT],
            [],
        ),
        (
            "affinity excludes the pool",
            pod(
                {Labels.POOL: "a100"},
                nodeSelector={Labels.POOL: "a100"},
                affinity=affinity({"key": Labels.POOL, "operator": "NotIn", "values": ["a100"]}),
            ),
            [],
            [POOL_PLACEMENT],
            [],
        ),
        (
            "nodeName in another pool",
            pod(nodeSelector={Labels.POOL: "a100"}, nodeName="a10-1"),
            [],
            [POOL_PLACEMENT],
            [],
        ),
        (
            "9 GPUs, largest a100 node 8",
            pod(nodeSelector={Labels.POOL: "a100"}, containers=gpus(9)),
            [],
            [],
            [GPU_FITS_NODE],
        ),
        ("empty pool: not judged", pod(nodeSelector={Labels.POOL: "empty"}, containers=gpus(99)), [], [], []),
        ("no pool, bigger than every node", pod(containers=gpus(9)), [], [], [GPU_FITS_NODE]),
        (
            "any-pool list with a missing pool",
            pod(
                affinity=affinity({"key": Labels.POOL, "operator": "In", "values": ["a10", "nope"]}),
                containers=gpus(1),
            ),
            [POOL_EXISTS],
            [],
            [],
        ),
        (
            "any-pool list, 8 GPUs fit a100",
            pod(
                affinity=affinity({"key": Labels.POOL, "operator": "In", "values": ["a10", "a100"]}),
                containers=gpus(8),
            ),
            [],
            [],
            [],
        ),
        (
            "any-pool list, 5 GPUs fit only a100, not listed",
            pod(
                affinity=affinity({"key": Labels.POOL, "operator": "In", "values": ["a10"]}),
                containers=gpus(5),
            ),
            [],
            [],
            [GPU_FITS_NODE],
        ),
    ],
)
def test_placement(case, obj, exists, placement, fits):
    w = reduce("Pod", obj, "request.object")
    p = placement_of(w, STATE)
    n = sum(int(c["resources"]["limits"][GPU]) for c in obj["spec"]["containers"] if "resources" in c)
    assert rules_of(check_pool_exists(p, STATE)) == exists, case
    assert rules_of(check_pool_placement(p, STATE, [])) == placement, case
    assert rules_of(check_gpu_fits_node(p, n, STATE)) == fits, case


def test_placement_warns_when_no_node_of_the_pool_matches_yet():
    obj = pod(nodeSelector={Labels.POOL: "a100", "disk": "ssd"})
    warn: list[str] = []
    assert check_pool_placement(placement_of(reduce("Pod", obj, "o"), STATE), STATE, warn) == []
    assert warn and "no node of pool" in warn[0]


@pytest.mark.parametrize(
    ("case", "labels", "want"),
    [
        (
            "gpuctl's own",
            {Labels.PRIORITY: "high", Labels.KUEUE_PRIORITY: "gpuctl-high", Labels.JOB_TYPE: "training"},
            [],
        ),
        ("typo in a key", {"runwhere.ai/prority": "high"}, [UNKNOWN_KEY]),
        ("bad job type", {Labels.JOB_TYPE: "trainig"}, [JOB_TYPE]),
        ("bad priority", {Labels.PRIORITY: "urgent"}, [PRIORITY]),
        ("priority without Kueue's class", {Labels.PRIORITY: "low"}, [PRIORITY]),
        ("class disagrees", {Labels.PRIORITY: "low", Labels.KUEUE_PRIORITY: "gpuctl-high"}, [PRIORITY]),
    ],
)
def test_labels(case, labels, want):
    assert rules_of(check_labels(reduce("Pod", pod(labels), "o"))) == want, case


@pytest.mark.parametrize(
    ("case", "path", "allowed", "want"),
    [
        ("data dir", "/data/team-a", (), []),
        ("/etc", "/etc", (), [HOST_PATH]),
        ("below /var/lib/kubelet", "/var/lib/kubelet/pods", (), [HOST_PATH]),
        ("relative", "data", (), [HOST_PATH]),
        ("/etc allowed by the admin: a system location all the same", "/etc/ssl", ("/etc/ssl",), [HOST_PATH]),
        ("writable outside the data roots", "/scratch/a", (), [HOST_PATH]),
        ("writable under a root the admin adds", "/scratch/a", ("/scratch",), []),
    ],
)
def test_host_paths(case, path, allowed, want):
    obj = pod(volumes=[{"name": "h", "hostPath": {"path": path}}])
    obj["spec"]["containers"] = [{"name": "c", "volumeMounts": [{"name": "h", "mountPath": "/h"}]}]
    assert rules_of(check_host_paths(reduce("Pod", obj, "o"), allowed)) == want, case


@pytest.mark.parametrize(
    ("case", "labels", "pcn", "want"),
    [
        ("none", {}, None, []),
        ("gpuctl's class of its priority", {Labels.PRIORITY: "high"}, "gpuctl-high", []),
        (
            "gpuctl's class of another priority",
            {Labels.PRIORITY: "low"},
            "gpuctl-high",
            [PRIORITY_CLASS_RULE],
        ),
        ("a system class", {}, "system-node-critical", [PRIORITY_CLASS_RULE]),
        ("a foreign WorkloadPriorityClass", {Labels.KUEUE_PRIORITY: "vip"}, None, [PRIORITY_CLASS_RULE]),
    ],
)
def test_priority_class(case, labels, pcn, want):
    obj = pod(labels) if pcn is None else pod(labels, priorityClassName=pcn)
    assert rules_of(check_priority_class(reduce("Pod", obj, "o"))) == want, case


@pytest.mark.parametrize(
    ("case", "spec", "want"),
    [
        ("plain", {}, []),
        (
            "privileged",
            {"containers": [{"name": "c", "securityContext": {"privileged": True}}]},
            [DEVICE_ACCESS],
        ),
        (
            "CAP_SYS_ADMIN",
            {"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["CAP_SYS_ADMIN"]}}}]},
            [DEVICE_ACCESS],
        ),
        (
            "baseline's CHOWN",
            {"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["chown"]}}}]},
            [],
        ),
        (
            "NVIDIA_VISIBLE_DEVICES",
            {"containers": [{"name": "c", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]},
            [DEVICE_ACCESS],
        ),
        ("hostPID", {"hostPID": True}, [DEVICE_ACCESS]),
        (
            "hostPath /dev",
            {"volumes": [{"name": "d", "hostPath": {"path": "/dev/nvidia0"}}]},
            [DEVICE_ACCESS],
        ),
        (
            "debug container, privileged",
            {"ephemeralContainers": [{"name": "d", "securityContext": {"privileged": True}}]},
            [DEVICE_ACCESS],
        ),
    ],
)
def test_device_access(case, spec, want):
    assert rules_of(check_device_access(reduce("Pod", pod(**spec), "o"), ())) == want, case


def _owned(api: str, kind: str) -> dict:
    obj = pod()
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": api, "kind": kind, "name": "o", "uid": "u1", "controller": True}
    ]
    return obj


@pytest.mark.parametrize(
    ("case", "obj", "want"),
    [
        ("no owner", pod(), []),
        ("claims a Job", _owned("batch/v1", "Job"), [OWNER_CLAIM]),
        ("claims a RayJob", _owned("ray.io/v1", "RayJob"), [OWNER_CLAIM]),
        ("a foreign kind Kueue does not manage", _owned("example.com/v1", "Thing"), []),
    ],
)
def test_owner_claim(case, obj, want):
    assert rules_of(check_owner_claim(obj, "o")) == want, case


@pytest.mark.parametrize(
    ("case", "user", "drop", "want"),
    [
        ("a user drops the Job reference", "alice", True, [OWNER_CLAIM]),
        (
            "the garbage collector drops it",
            "system:serviceaccount:kube-system:generic-garbage-collector",
            True,
            [],
        ),
        ("a user relabels a Job's pod", "alice", False, [OWNER_CLAIM]),
        ("the job controller relabels it", "system:serviceaccount:kube-system:job-controller", False, []),
    ],
)
def test_owner_dropped(case, user, drop, want):
    old = _owned("batch/v1", "Job")
    new = pod({"x": "y"})
    if not drop:
        new["metadata"]["ownerReferences"] = old["metadata"]["ownerReferences"]
    assert rules_of(check_owner_dropped(new, old, user)) == want, case


@pytest.mark.parametrize(
    ("case", "old_gates", "new_gates", "want"),
    [
        ("Kueue's gate kept", ["kueue.x-k8s.io/admission"], ["kueue.x-k8s.io/admission"], []),
        ("Kueue's gate lifted", ["kueue.x-k8s.io/admission"], [], [KUEUE_GATE]),
        ("another gate lifted", ["example.com/gate"], [], []),
    ],
)
def test_kueue_gate_pods(case, old_gates, new_gates, want):
    old = reduce("Pod", pod(schedulingGates=[{"name": g} for g in old_gates]), "o")
    new = reduce("Pod", pod(schedulingGates=[{"name": g} for g in new_gates]), "o")
    assert rules_of(check_kueue_gate(new, old, "default")) == want, case


def _job(suspend: bool) -> dict:
    spec = {"suspend": suspend, "template": {"spec": {"containers": [{"name": "c"}]}}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": spec}


@pytest.mark.parametrize(
    ("case", "queue", "want"), [("queued", "default", [KUEUE_GATE]), ("no queue", "", [])]
)
def test_kueue_gate_jobs(case, queue, want):
    old, new = reduce("Job", _job(True), "o"), reduce("Job", _job(False), "o")
    assert rules_of(check_kueue_gate(new, old, queue)) == want, case


@pytest.mark.parametrize(
    ("case", "options", "labels", "user", "want"),
    [
        ("Orphan", {"propagationPolicy": "Orphan"}, QUEUED, "alice", [ORPHAN_DELETE]),
        ("Background", {"propagationPolicy": "Background"}, QUEUED, "alice", []),
        ("no policy: batch/v1 orphans", {}, QUEUED, "alice", [ORPHAN_DELETE]),
        ("not queued", {"propagationPolicy": "Orphan"}, {}, "alice", []),
        ("Kueue itself", {"propagationPolicy": "Orphan"}, QUEUED, "kueue", []),
    ],
)
def test_orphan_delete(case, options, labels, user, want):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "labels": labels}}
    request = {
        "kind": {"group": "batch", "version": "v1", "kind": "Job"},
        "namespace": TEAM,
        "oldObject": job,
        "options": options,
    }
    assert rules_of(check_orphan_delete(request, ("batch", "Job"), user, STATE, "kueue")) == want, case


@pytest.mark.parametrize(
    ("case", "labels", "want"),
    [
        ("an existing pool", {Labels.POOL: "a100"}, []),
        ("no such pool", {Labels.POOL: "a1000"}, [NODE_POOL]),
        ("a typo key", {"runwhere.ai/pol": "a100"}, [UNKNOWN_KEY]),
    ],
)
def test_node_pool(case, labels, want):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": labels}}
    assert rules_of(check_node(node, "o", STATE)) == want, case
