"""The rules that keep a tenant inside its quota in its own team namespace (issue 26): priority-class,
device-access, owner-claim and orphan-delete, table-driven on AdmissionReview fixtures. The API server's
verdicts on the same objects are compared in tests/integration/test_admission_policy.py."""

from __future__ import annotations

import copy

import pytest

from admission.identities import CONTROLLER_USERS, KCM_USER, KUEUE_OWNER_KINDS, KUEUE_USER, POD_MAKERS
from admission.rule_names import (
    DEVICE_ACCESS,
    KUEUE_GATE,
    ORPHAN_DELETE,
    OWNER_CLAIM,
    PRIORITY,
    PRIORITY_CLASS_RULE,
)
from admission.rules import RULES, AdmissionConfig, Mode, Verdict
from admission.rules import review as judge
from gpuctl.constants import (
    BASELINE_CAPABILITIES,
    GC_USER,
    PRIORITY_CLASS,
    Labels,
    Priority,
)
from tests.unit.test_admission_fixtures import (
    PLAIN,
    gpuctl_workload,
    pod_spec,
    queued_pod,
    raw_pod,
    review,
    state,
    training_job,
)

ENFORCE = AdmissionConfig()
STATE = state()
NEW_RULES = (PRIORITY_CLASS_RULE, DEVICE_ACCESS, OWNER_CLAIM, ORPHAN_DELETE, KUEUE_GATE)


def check(obj: dict, config: AdmissionConfig = ENFORCE, **kw) -> Verdict:
    return judge(review(obj, **kw)["request"], STATE, config)


def only(obj: dict, rule: str, **kw) -> Verdict:
    v = check(obj, **kw)
    assert not v.allowed and v.rules == (rule,), v.message() or v
    assert f"[{rule}]" in v.message() and "Fix: " in v.message()
    return v


def allowed(obj: dict, **kw) -> Verdict:
    v = check(obj, **kw)
    assert v.allowed and not v.violations, v.message()
    return v


def test_the_new_rules_are_listed():
    assert set(NEW_RULES) <= set(RULES)


@pytest.mark.parametrize("kind", ["training", "inference", "notebook", "compute"])
def test_gpuctl_own_workloads_break_none_of_them(kind):
    assert not set(check(gpuctl_workload(kind)).rules) & set(NEW_RULES)


# ---------------------------------------------------------------------------------------------------------
# priority-class


def _with_class(obj: dict, name: str | None) -> dict:
    obj = copy.deepcopy(obj)
    if name is not None:
        pod_spec(obj)["priorityClassName"] = name
    return obj


HIGH = {Labels.PRIORITY: "high", Labels.KUEUE_PRIORITY: PRIORITY_CLASS[Priority.HIGH]}


@pytest.mark.parametrize(
    ("labels", "class_name", "denied"),
    [
        ({}, None, False),
        ({}, "", False),
        (HIGH, "gpuctl-high", False),  # the earlier client's class, matching its priority
        ({}, "system-cluster-critical", True),
        ({}, "system-node-critical", True),
        (HIGH, "system-cluster-critical", True),
        ({}, "gpuctl-high", True),  # a gpuctl class without the priority that says it
        (HIGH, "gpuctl-low", True),  # another gpuctl class than its priority's
        ({}, "team-special", True),
    ],
)
def test_priority_class_name_is_empty_or_the_gpuctl_class_of_its_priority(labels, class_name, denied):
    pod = _with_class(queued_pod(labels=labels), class_name)
    if denied:
        v = only(pod, PRIORITY_CLASS_RULE)
        assert f'spec.priorityClassName is "{class_name}"' in v.message()
    else:
        allowed(pod)


def test_priority_class_name_is_judged_in_pod_templates_against_either_labels():
    job = _with_class(training_job(), "system-cluster-critical")  # a high training job
    v = only(job, PRIORITY_CLASS_RULE)
    assert "spec.template.spec.priorityClassName" in v.message() and "remove" in v.message()
    allowed(_with_class(training_job(), "gpuctl-high"))
    # The earlier client says the priority on the template too: either place names the class.
    job = _with_class(training_job(), "gpuctl-high")
    del job["metadata"]["labels"][Labels.PRIORITY]
    allowed(job)


@pytest.mark.parametrize(
    ("value", "denied"), [("gpuctl-high", False), ("default", False), ("", False), ("urgent", True)]
)
def test_the_workload_priority_class_is_gpuctls(value, denied):
    pod = queued_pod(labels={Labels.KUEUE_PRIORITY: value})
    if denied:
        v = only(pod, PRIORITY_CLASS_RULE)
        assert 'is "urgent", not a gpuctl WorkloadPriorityClass' in v.message()
    else:
        allowed(pod)
    # A misspelt gpuctl class stays the priority rule's (with its suggestion).
    assert check(queued_pod(labels={Labels.KUEUE_PRIORITY: "gpuctl-urgent"})).rules == (PRIORITY,)


def test_outside_team_namespaces_nothing_is_judged():
    pod = _with_class(raw_pod(namespace=PLAIN, labels={}), "system-node-critical")
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert check(pod).allowed


# ---------------------------------------------------------------------------------------------------------
# device-access


def _container(pod: dict, **fields) -> dict:
    pod = copy.deepcopy(pod)
    pod_spec(pod)["containers"][0].update(fields)
    return pod


DEVICE_CASES = [
    ("privileged", {"securityContext": {"privileged": True}}, "is privileged"),
    ("sys-admin", {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}, "capability SYS_ADMIN"),
    ("cap-prefix", {"securityContext": {"capabilities": {"add": ["cap_sys_rawio"]}}}, "cap_sys_rawio"),
    ("all", {"securityContext": {"capabilities": {"add": ["ALL"]}}}, "capability ALL"),
    ("visible", {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}, "NVIDIA_VISIBLE_DEVICES"),
    ("mig-env", {"env": [{"name": "NVIDIA_MIG_CONFIG_DEVICES", "value": "all"}]}, "MIG_CONFIG_DEVICES"),
]


@pytest.mark.parametrize(("case", "fields", "said"), DEVICE_CASES, ids=[c[0] for c in DEVICE_CASES])
def test_containers_cannot_reach_devices_behind_their_requests(case, fields, said):
    v = only(_container(raw_pod(), **fields), DEVICE_ACCESS)  # a CPU-only pod: charged 0 GPUs
    assert said in v.message()
    # The same in a Job's template and in an init container.
    job = training_job()
    pod_spec(job)["initContainers"] = [{"name": "init", "image": "busybox", **fields}]
    assert DEVICE_ACCESS in check(job).rules


@pytest.mark.parametrize(
    "fields",
    [
        {"securityContext": {"privileged": False, "capabilities": {"add": list(BASELINE_CAPABILITIES)}}},
        {"securityContext": {"capabilities": {"add": ["CAP_NET_BIND_SERVICE"], "drop": ["ALL"]}}},
        {
            "env": [
                {"name": "NVIDIA_TF32_OVERRIDE", "value": "0"},
                {"name": "CUDA_VISIBLE_DEVICES", "value": "0"},
            ]
        },
        # Chooses driver libraries for the container's own GPUs (the earlier client's notebook sets it).
        {"env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}]},
    ],
)
def test_baseline_capabilities_and_other_env_pass(fields):
    allowed(_container(raw_pod(), **fields))


@pytest.mark.parametrize("flag", ["hostPID", "hostIPC"])
def test_host_pid_and_ipc_are_refused(flag):
    v = only(raw_pod(**{flag: True}), DEVICE_ACCESS)
    assert f"spec.{flag} is true" in v.message()
    allowed(raw_pod(**{flag: False}))


@pytest.mark.parametrize("path", ["/dev", "/dev/", "/dev/nvidia0", "//dev/./nvidiactl", "/dev/shm"])
def test_host_paths_under_dev_are_refused_unless_allowed(path):
    pod = raw_pod(volumes=[{"name": "d", "hostPath": {"path": path}}])
    v = only(pod, DEVICE_ACCESS)
    assert "holds the node's device nodes" in v.message()
    allowed(pod, config=AdmissionConfig(allowed_host_paths=("/dev/shm", "/dev/nvidia0", "/dev")))


def test_devices_next_to_dev_are_not_dev():
    allowed(raw_pod(volumes=[{"name": "d", "hostPath": {"path": "/device-data"}}]))


def test_privileged_ephemeral_container_added_by_kubectl_debug_is_refused():
    pod = queued_pod()
    debugged = copy.deepcopy(pod)
    debugged["spec"]["ephemeralContainers"] = [
        {"name": "debugger", "image": "busybox", "securityContext": {"privileged": True}}
    ]
    v = only(debugged, DEVICE_ACCESS, op="UPDATE", old=pod)
    assert "container debugger is privileged" in v.message()
    plain = copy.deepcopy(pod)
    plain["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox"}]
    allowed(plain, op="UPDATE", old=pod)


def test_warn_mode_only_warns():
    v = check(
        _container(raw_pod(), securityContext={"privileged": True}), config=AdmissionConfig(mode=Mode.WARN)
    )
    assert v.allowed and v.warnings and DEVICE_ACCESS in v.rules


# ---------------------------------------------------------------------------------------------------------
# owner-claim


def _owned(obj: dict, group: str, kind: str, uid: str = "u-1", controller: bool = True) -> dict:
    obj = copy.deepcopy(obj)
    api = f"{group}/v1" if group else "v1"
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": api, "kind": kind, "name": "o", "uid": uid, "controller": controller}
    ]
    return obj


@pytest.mark.parametrize(("group", "kind"), sorted(KUEUE_OWNER_KINDS))
def test_a_pod_claiming_an_owner_kueue_leaves_it_to_must_come_from_that_owners_controller(group, kind):
    pod = _owned(queued_pod(), group, kind)  # a pod that would pass every other rule
    v = only(pod, OWNER_CLAIM)
    assert f"names {kind} o as its controller" in v.message() and "outside the team's quota" in v.message()
    maker = POD_MAKERS.get((group, kind))
    if maker:  # the controller itself is trusted (checked at its owner)
        for user in (maker, KCM_USER):
            assert check(pod, username=user).allowed
        # ... but no other controller
        others = [u for u in POD_MAKERS.values() if u != maker]
        assert OWNER_CLAIM in check(pod, username=others[0]).rules
    else:
        assert OWNER_CLAIM in check(pod, username=KCM_USER).rules
    assert check(pod, username=KUEUE_USER).allowed


@pytest.mark.parametrize(
    ("group", "kind", "controller"),
    [("apps", "DaemonSet", True), ("", "ReplicationController", True), ("batch", "Job", False),
     ("example.com", "Job", True), ("batch", "CronJob", True)],
)  # fmt: skip
def test_pods_of_owners_kueue_gates_are_no_claim(group, kind, controller):
    # Kueue's pod webhook gates these (not an integration's kind, or not a controller reference).
    allowed(_owned(queued_pod(), group, kind, controller=controller))


def test_an_update_keeps_the_claim_its_controller_made_but_cannot_move_or_drop_it():
    job_user = CONTROLLER_USERS[("batch", "Job")]
    made = _owned(queued_pod(), "batch", "Job", uid="u-1")  # made by the job-controller
    annotated = copy.deepcopy(made)
    annotated["metadata"]["annotations"]["team-note"] = "x"
    allowed(annotated, op="UPDATE", old=made)  # the claim is not new
    moved = _owned(queued_pod(), "batch", "Job", uid="u-2")
    assert OWNER_CLAIM in check(moved, op="UPDATE", old=made).rules
    dropped = copy.deepcopy(made)
    del dropped["metadata"]["ownerReferences"]
    v = only(dropped, OWNER_CLAIM, op="UPDATE", old=made)
    assert "takes away the pod's controller reference to Job o" in v.message()
    # The controller releasing its pod, the garbage collector orphaning it, and Kueue may.
    for user in (job_user, KCM_USER, GC_USER, KUEUE_USER):
        assert check(dropped, op="UPDATE", old=made, username=user).allowed, user
    # Another controller may not.
    assert (
        OWNER_CLAIM
        in check(dropped, op="UPDATE", old=made, username=POD_MAKERS[("apps", "ReplicaSet")]).rules
    )


@pytest.mark.parametrize("change", ["modify", "remove", "add"])
def test_a_jobs_pod_keeps_its_labels_or_its_job_would_release_it_and_make_another(change):
    made = _owned(queued_pod(), "batch", "Job")
    made["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = "u-1"
    relabelled = copy.deepcopy(made)
    labels = relabelled["metadata"]["labels"]
    if change == "modify":
        labels["batch.kubernetes.io/controller-uid"] = "x"
    elif change == "remove":
        del labels["batch.kubernetes.io/controller-uid"]
    else:  # a manual selector may say DoesNotExist
        labels["quarantine"] = "true"
    v = only(relabelled, OWNER_CLAIM, op="UPDATE", old=made)
    assert "changes the labels of a pod its Job o controls" in v.message()
    for user in (CONTROLLER_USERS[("batch", "Job")], KCM_USER, KUEUE_USER):
        assert check(relabelled, op="UPDATE", old=made, username=user).allowed, user
    # A Deployment's or StatefulSet's pod keeps its own Workload when released: relabelling escapes nothing.
    for group, kind in (("apps", "ReplicaSet"), ("apps", "StatefulSet")):
        old = _owned(made, group, kind)
        allowed(_owned(relabelled, group, kind), op="UPDATE", old=old)


def test_claims_on_non_pods_are_not_judged():
    allowed(_owned(gpuctl_workload("inference"), "apps", "StatefulSet"))  # a Deployment's ownerReferences
    # (A Job's claim on a JobSet, a Job, ...: tests/unit/test_admission_jobsets.py.)


# ---------------------------------------------------------------------------------------------------------
# orphan-delete


def _delete(obj: dict, options: dict | None, *, version: str = "v1", username: str = "alice") -> Verdict:
    r = review(obj, op="DELETE", username=username)["request"]
    r["oldObject"], r["object"] = obj, None
    r["kind"]["version"] = version
    r["options"] = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", **(options or {})}
    return judge(r, STATE, ENFORCE)


@pytest.mark.parametrize(
    ("options", "finalizers", "denied"),
    [
        ({"propagationPolicy": "Orphan"}, [], True),  # kubectl delete --cascade=orphan
        ({"orphanDependents": True}, [], True),
        (None, [], True),  # no policy: batch/v1's default is orphaning (the Python client's default)
        (None, ["orphan"], True),
        (None, ["foregroundDeletion"], False),
        ({"propagationPolicy": "Background"}, [], False),  # kubectl's and the earlier client's
        ({"propagationPolicy": "Foreground"}, ["orphan"], False),  # explicit beats the finalizer
        ({"orphanDependents": False}, [], False),
    ],
)
def test_orphaning_deletes_of_a_queued_job_are_refused(options, finalizers, denied):
    job = training_job()
    job["metadata"]["finalizers"] = finalizers
    v = _delete(job, options)
    if denied:
        assert not v.allowed and v.rules == (ORPHAN_DELETE,), v
        assert "would leave its pods running while Kueue stops counting them" in v.message()
        assert "propagationPolicy Background" in v.message()
    else:
        assert v.allowed and v.skipped == "operation DELETE", v


def test_deployments_replicasets_statefulsets_and_unqueued_jobs_may_orphan():
    # A Deployment's (and a bare ReplicaSet's) pods are each their own Workload, a StatefulSet's pod group's
    # Workload is owned by its pods too: they stay counted (measured on Kueue v0.19.2).
    for obj in (gpuctl_workload("inference"), gpuctl_workload("compute"), gpuctl_workload("notebook")):
        assert _delete(obj, {"propagationPolicy": "Orphan"}).allowed
    rs = gpuctl_workload("inference")
    rs["kind"] = "ReplicaSet"
    assert _delete(rs, {"propagationPolicy": "Orphan"}).allowed
    job = training_job()
    del job["metadata"]["labels"][Labels.KUEUE_QUEUE]  # Kueue does not count it
    assert _delete(job, {"propagationPolicy": "Orphan"}).allowed
    # Nor in a namespace gpuctl does not manage, nor Kueue's own requests.
    assert _delete(training_job(namespace=PLAIN), {"propagationPolicy": "Orphan"}).allowed
    assert _delete(training_job(), {"propagationPolicy": "Orphan"}, username=KUEUE_USER).allowed


def test_an_unsynced_cache_never_refuses_a_delete():
    r = review(training_job(), op="DELETE")["request"]
    r["oldObject"], r["object"], r["options"] = training_job(), None, {"propagationPolicy": "Orphan"}
    v = judge(r, state(synced=False), ENFORCE)
    assert v.allowed


# ---------------------------------------------------------------------------------------------------------
# kueue-gate


def test_only_kueue_unsuspends_a_queued_job():
    queued = training_job()  # suspended, LocalQueue default
    started = copy.deepcopy(queued)
    started["spec"]["suspend"] = False
    v = only(started, KUEUE_GATE, op="UPDATE", old=queued)
    assert "un-suspends a Job queued in LocalQueue default" in v.message()
    del started["spec"]["suspend"]  # dropping the field is the same
    only(started, KUEUE_GATE, op="UPDATE", old=queued)
    assert check(started, op="UPDATE", old=queued, username=KUEUE_USER).allowed
    # Suspending is anyone's to do; a Job no queue counts is not ours to judge.
    allowed(queued, op="UPDATE", old=started)
    unqueued, unqueued_started = copy.deepcopy(queued), copy.deepcopy(started)
    for j in (unqueued, unqueued_started):
        del j["metadata"]["labels"][Labels.KUEUE_QUEUE]
    assert KUEUE_GATE not in check(unqueued_started, op="UPDATE", old=unqueued).rules


@pytest.mark.parametrize("gate", ["kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology"])
def test_only_kueue_lifts_its_scheduling_gates(gate):
    gated = queued_pod(schedulingGates=[{"name": gate}, {"name": "example.com/other"}])
    lifted = queued_pod(schedulingGates=[{"name": "example.com/other"}])
    v = only(lifted, KUEUE_GATE, op="UPDATE", old=gated)
    assert f"removes Kueue's scheduling gate {gate}" in v.message()
    assert check(lifted, op="UPDATE", old=gated, username=KUEUE_USER).allowed
    # Another gate is the user's own.
    allowed(queued_pod(schedulingGates=[{"name": gate}]), op="UPDATE", old=gated)
