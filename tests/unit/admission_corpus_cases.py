"""Hand-written requests of the recorded admission corpus (tests/unit/test_admission_corpus.py records them
after the drawn ones): each rule the ValidatingAdmissionPolicies carry, denied and allowed, where the drawn
requests never reach it (test_admission_cel_agreement.py needs both answers of every rule).

Each is an AdmissionReview request as an API server sends it, with a fixed uid so that recording them again
gives the same bytes.
"""

from __future__ import annotations

import copy
from typing import Any

from admission.identities import JOBSET_USER, KUEUE_USER, POD_MAKERS
from gpuctl.constants import SET_ASIDE_TAINT_KEY, Labels
from gpuctl.domain.gang import set_aside_tolerations
from tests.unit.test_admission_fixtures import PLAIN, TEAM, queued_pod, raw_pod, review, training_job

__all__ = ["requests"]

JOB_CONTROLLER = POD_MAKERS[("batch", "Job")]
POOL_TOLERATION = {"key": Labels.POOL, "operator": "Equal", "value": "a100", "effect": "NoSchedule"}
SET_ASIDE = {"key": SET_ASIDE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
EVERY_TAINT = {"operator": "Exists"}


def _container(pod: dict, **fields: Any) -> dict:
    spec = pod["spec"] if pod["kind"] == "Pod" else pod["spec"]["template"]["spec"]
    spec["containers"][0].update(fields)
    return pod


def _template(kind: str, api: str, pod: dict, **spec: Any) -> dict:
    """`pod` as the pod template of a `kind`."""
    meta = pod["metadata"]
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": dict(meta["labels"])},
        "spec": {**spec, "template": {"metadata": {"labels": dict(meta["labels"])}, "spec": pod["spec"]}},
    }


def _job(pod: dict, **spec: Any) -> dict:
    return _template("Job", "batch/v1", pod, **spec)


def _owned(pod: dict, kind: str = "Job", api: str = "batch/v1") -> dict:
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": api, "kind": kind, "name": "train", "uid": "0ba5e1", "controller": True}
    ]
    return pod


def _device_access() -> list[dict]:
    privileged = _container(queued_pod("priv"), securityContext={"privileged": True})
    caps = _container(
        queued_pod("caps"), securityContext={"capabilities": {"add": ["NET_BIND_SERVICE", "SYS_ADMIN"]}}
    )
    baseline = _container(queued_pod("chown"), securityContext={"capabilities": {"add": ["CAP_CHOWN"]}})
    env = _container(queued_pod("env"), env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    dev = queued_pod("dev", volumes=[{"name": "gpu0", "hostPath": {"path": "/dev/nvidia0"}}])
    host_pid = _job(queued_pod("hostpid", hostPID=True, hostIPC=True))
    debug = queued_pod("debugged")
    debugged = copy.deepcopy(debug)
    debugged["spec"]["ephemeralContainers"] = [
        {"name": "debugger", "image": "busybox", "securityContext": {"privileged": True}}
    ]
    ephemeral = review(debugged, op="UPDATE", old=debug)["request"]
    ephemeral["subResource"] = "ephemeralcontainers"
    ephemeral["resource"]["resource"] = "pods"
    return [
        *(review(o)["request"] for o in (privileged, caps, baseline, env, dev, host_pid)),
        ephemeral,
    ]


def _gpu_resources() -> list[dict]:
    shared = queued_pod("shared", gpus=0)
    shared["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.shared"] = "1"
    renamed = queued_pod("renamed", gpus=0)
    renamed["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu-a100"] = "1"
    renamed["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu-a100"] = "1"
    init = _job(queued_pod("init", gpus=0))
    init["spec"]["template"]["spec"]["initContainers"] = [
        {"name": "warm", "image": "busybox", "resources": {"limits": {"gpu.intel.com/gpu": "1"}}}
    ]
    return [review(o)["request"] for o in (shared, renamed, init)]


def _set_aside() -> list[dict]:
    pod = queued_pod("aside", tolerations=[SET_ASIDE])
    every = queued_pod("every", tolerations=[EVERY_TAINT])
    gang = _job(
        queued_pod("gang", tolerations=[SET_ASIDE]), completionMode="Indexed", parallelism=2, completions=2
    )
    single = _job(queued_pod("single", tolerations=[SET_ASIDE]), parallelism=2, completions=2)
    return [review(o)["request"] for o in (pod, every, gang, single)]


def _own_set_aside() -> list[dict]:
    """Issue 43: a gang tolerates its own set-aside only (its namespace and its name). (Not under
    generateName: the team policy's message for an object without a name fails to evaluate, whatever the
    rule: "failed expression: ..." instead of gpuctl's words; test_admission_gangs.py has that case.)"""

    def gang(name: str, tolerations: list[dict]) -> dict:
        obj = _job(
            queued_pod(name, tolerations=tolerations), completionMode="Indexed", parallelism=2, completions=2
        )
        return obj

    own = gang("own", set_aside_tolerations(TEAM, "own"))
    theirs = gang("theirs", set_aside_tolerations("team-b", "theirs"))
    other = gang("other", set_aside_tolerations(TEAM, "someone"))
    return [review(o)["request"] for o in (own, theirs, other)]


def _kueue_gate() -> list[dict]:
    job = training_job()
    started = copy.deepcopy(job)
    started["spec"]["suspend"] = False
    gated = queued_pod("gated", schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    ungated = queued_pod("gated")
    return [
        review(started, op="UPDATE", old=job)["request"],  # a user un-suspends a queued Job
        review(started, op="UPDATE", old=job, username=KUEUE_USER)["request"],  # Kueue does
        review(job, op="UPDATE", old=job)["request"],
        review(ungated, op="UPDATE", old=gated)["request"],
        review(gated, op="UPDATE", old=gated)["request"],
    ]


def _owner_claim() -> list[dict]:
    owned = _owned(queued_pod("owned"))
    dropped = queued_pod("owned")
    relabelled = _owned(queued_pod("owned", labels={"app": "other"}))
    return [
        review(dropped, op="UPDATE", old=owned)["request"],  # a user takes the Job's pod away from it
        review(dropped, op="UPDATE", old=owned, username=JOB_CONTROLLER)["request"],  # its controller does
        review(relabelled, op="UPDATE", old=owned)["request"],  # released by a new label
        review(owned, op="UPDATE", old=owned)["request"],
        review(_owned(queued_pod("claims")))["request"],  # a user's pod claims a Job
    ]


def _orphan_delete() -> list[dict]:
    job = training_job()
    finalized = copy.deepcopy(job)
    finalized["metadata"]["finalizers"] = ["orphan"]
    unqueued = copy.deepcopy(job)
    del unqueued["metadata"]["labels"][Labels.KUEUE_QUEUE]

    def delete(obj: dict, options: dict | None, user: str = "alice") -> dict:
        request = review(obj, op="DELETE", username=user)["request"]
        request["object"], request["oldObject"] = None, obj
        request["options"] = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", **(options or {})}
        return request

    return [
        delete(job, None),  # kubectl's --cascade=orphan of old, and client-go's default: orphans a Job
        delete(job, {"propagationPolicy": "Background"}),
        delete(job, {"propagationPolicy": "Orphan"}),
        delete(job, {"orphanDependents": True}),
        delete(finalized, None),
        delete(unqueued, None),
        delete(job, None, KUEUE_USER),
    ]


def _isolation() -> list[dict]:
    """Outside team namespaces: pool tolerations and pool selectors."""
    tolerates = raw_pod("tolerates", PLAIN, tolerations=[POOL_TOLERATION])
    exists = raw_pod("exists", PLAIN, tolerations=[{"key": Labels.POOL, "operator": "Exists"}])
    every = raw_pod("every", PLAIN, tolerations=[EVERY_TAINT])
    agent = _template("DaemonSet", "apps/v1", raw_pod("agent", PLAIN, tolerations=[EVERY_TAINT]), selector={})
    gpu_agent = _template(
        "DaemonSet", "apps/v1", raw_pod("gpu-agent", PLAIN, gpus=1, tolerations=[EVERY_TAINT]), selector={}
    )
    selects = raw_pod("selects", PLAIN, gpus=1, node_selector={Labels.POOL: "a100"})
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": PLAIN},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": copy.deepcopy(selects)}}},
    }
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": Labels.POOL, "operator": "In", "values": ["a10"]}]}
                ]
            }
        }
    }
    deployment = _template(
        "Deployment", "apps/v1", raw_pod("serve", PLAIN, gpus=1, affinity=affinity), selector={}
    )
    away = copy.deepcopy(affinity)
    away["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"
    ][0] = {"key": Labels.POOL, "operator": "DoesNotExist"}
    keeps_away = raw_pod("keeps-away", PLAIN, gpus=1, affinity=away)
    rc = _template("ReplicationController", "v1", raw_pod("rc", PLAIN, tolerations=[POOL_TOLERATION]))
    relabelled = copy.deepcopy(tolerates)
    relabelled["metadata"]["labels"] = {"app": "x"}
    return [
        *(review(o)["request"] for o in (tolerates, every, agent, gpu_agent, selects, cron, deployment)),
        *(review(o)["request"] for o in (keeps_away, rc, exists)),
        review(relabelled, op="UPDATE", old=tolerates)["request"],  # kept, not new
    ]


def _jobset() -> dict:
    """A JobSet in a team namespace that mounts /etc: the webhook judges JobSets, the policies match none."""
    pod = raw_pod("js", TEAM, volumes=[{"name": "etc", "hostPath": {"path": "/etc"}}])
    return review(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "js", "namespace": TEAM, "labels": {Labels.KUEUE_QUEUE: "default"}},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "workers",
                        "replicas": 1,
                        "template": {"spec": {"template": {"spec": pod["spec"]}}},
                    }
                ]
            },
        }
    )["request"]


def _issue_43() -> list[dict]:
    """Termination grace, extended resources, writable host paths, a JobSet's Jobs (un-suspend, orphaning
    delete, a claim), each denied and allowed."""
    long = queued_pod("long", terminationGracePeriodSeconds=7200)
    short = queued_pod("short", terminationGracePeriodSeconds=300)
    long_job = _job(queued_pod("long-job", terminationGracePeriodSeconds=3600))

    def requesting(name: str, resource: str) -> dict:
        pod = queued_pod(name)
        for m in pod["spec"]["containers"][0]["resources"].values():
            m[resource] = "2"
        return pod

    def mounted(name: str, path: str, read_only: bool) -> dict:
        pod = queued_pod(name, volumes=[{"name": "h", "hostPath": {"path": path}}])
        return _container(pod, volumeMounts=[{"name": "h", "mountPath": "/h", "readOnly": read_only}])

    child = training_job()
    del child["metadata"]["labels"][Labels.KUEUE_QUEUE]
    child["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "name": "js",
            "uid": "75e7",
            "controller": True,
        }
    ]
    started = copy.deepcopy(child)
    started["spec"]["suspend"] = False
    orphaning = review(child, op="DELETE")["request"]
    orphaning["object"], orphaning["oldObject"] = None, child
    orphaning["options"] = {
        "kind": "DeleteOptions",
        "apiVersion": "meta.k8s.io/v1",
        "propagationPolicy": "Orphan",
    }
    return [
        *(review(o)["request"] for o in (long, short, long_job)),
        *(
            review(requesting(n, r))["request"]
            for n, r in (
                ("gaudi", "habana.ai/gaudi"),
                ("passthrough", "nvidia.com/GA100_A100_SXM4_80GB"),
                ("rdma", "rdma/hca_shared_devices_a"),
                ("hugepages", "hugepages-2Mi"),
            )
        ),
        *(
            review(mounted(n, p, ro))["request"]
            for n, p, ro in (
                ("rw-mnt", "/mnt/x", False),
                ("ro-mnt", "/mnt/x", True),
                ("rw-data", "/data/team-a", False),
                ("ro-cni", "/opt/cni/bin", True),
            )
        ),
        review(started, op="UPDATE", old=child)["request"],  # a member un-suspends a JobSet's Job
        review(started, op="UPDATE", old=child, username=JOBSET_USER)["request"],  # its controller does
        orphaning,
        review(child)["request"],  # a member's Job claims a JobSet
        review(child, username=JOBSET_USER)["request"],
        *(_delete_pod(g) for g in (7200, 300, None)),  # kubectl delete pod --grace-period=N
    ]


def _delete_pod(grace: int | None) -> dict:
    pod = queued_pod("stopping")
    request = review(pod, op="DELETE")["request"]
    request["object"], request["oldObject"] = None, pod
    request["options"] = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}
    if grace is not None:
        request["options"]["gracePeriodSeconds"] = grace
    return request


def requests() -> list[dict]:
    """The hand-written requests, in recording order, each with its fixed uid."""
    out = [
        *_device_access(),
        *_gpu_resources(),
        *_set_aside(),
        *_kueue_gate(),
        *_owner_claim(),
        *_orphan_delete(),
        *_isolation(),
        _jobset(),
        *_issue_43(),
        *_own_set_aside(),
    ]
    for i, request in enumerate(out):
        request["uid"] = f"00000000-0000-4000-8000-{i:012d}"
    return out
