"""Every admission rule on AdmissionReview fixtures: what passes, what is denied and with which message and
fix, warn mode, dry runs, UPDATEs judged against the old object, and malformed input."""

from __future__ import annotations

import copy

import pytest

from admission.identities import CONTROLLER_USERS, KCM_USER, KUEUE_USER
from admission.rule_names import (
    CACHE_RULES,
    DELETE_GRACE,
    EXTENDED_RESOURCE,
    GPU_FITS_NODE,
    GPU_QUEUE,
    GPU_TOPOLOGY,
    HOST_PATH,
    JOB_TYPE,
    KUEUE_GATE,
    NODE_POOL,
    POOL_EXISTS,
    POOL_PLACEMENT,
    PRIORITY,
    PRIORITY_CLASS_RULE,
    TERMINATION_GRACE,
    UNKNOWN_KEY,
)
from admission.rules import RULES, AdmissionConfig, Malformed, Mode, Verdict
from admission.rules import review as judge
from admission.state import ClusterState
from admission.validators import labels as label_rules
from gpuctl.builders import build
from gpuctl.constants import FIELD_MANAGER, GPU_RESOURCE, HOST_PATH_ROOTS, TAS_UNCONSTRAINED, Labels
from gpuctl.domain.gpus import pod_spec_gpus as pod_gpus
from gpuctl.spec import load_text
from tests.unit.test_admission_fixtures import (
    GPU_TYPE_A100,
    OTHER_TEAM,
    PLAIN,
    TEAM,
    cluster_objects,
    gpuctl_workload,
    node,
    pod_spec,
    queued_pod,
    raw_pod,
    review,
    state,
    training_job,
)

ENFORCE = AdmissionConfig()
WARN = AdmissionConfig(mode=Mode.WARN)
STATE = state()


def check(obj: dict, config: AdmissionConfig = ENFORCE, st: ClusterState = STATE, **kw) -> Verdict:
    return judge(review(obj, **kw)["request"], st, config)


def denied(obj: dict, rule: str, **kw) -> Verdict:
    """Assert `obj` is denied, among others, by `rule`; return the verdict."""
    v = check(obj, **kw)
    assert not v.allowed, f"expected a denial by {rule}, got {v}"
    assert rule in v.rules, f"expected {rule} in {v.rules}: {v.message()}"
    assert f"[{rule}]" in v.message() and "Fix: " in v.message()
    return v


def only(obj: dict, rule: str, **kw) -> Verdict:
    """Assert `obj` is denied by `rule` and nothing else."""
    v = denied(obj, rule, **kw)
    assert v.rules == (rule,), v.message()
    return v


def allowed(obj: dict, **kw) -> Verdict:
    v = check(obj, **kw)
    assert v.allowed and not v.violations, v.message()
    return v


# ---------------------------------------------------------------------------------------------------------
# What must pass.


@pytest.mark.parametrize("kind", ["training", "inference", "notebook", "compute"])
def test_gpuctl_own_workloads_pass_with_no_warning(kind):
    v = allowed(gpuctl_workload(kind))
    assert v.warnings == ()


def test_a_raw_pod_that_follows_the_rules_passes():
    allowed(queued_pod(gpus=8))


def test_cpu_only_pod_without_any_gpuctl_label_passes():
    allowed(raw_pod())


def test_unmanaged_namespace_is_not_checked():
    bad = raw_pod(namespace=PLAIN, gpus=64, labels={Labels.POOL: "nope", "runwhere.ai/typo": "x"})
    v = allowed(bad)
    assert v.skipped == "namespace not managed by gpuctl"


def test_namespace_missing_from_the_cache_is_treated_as_managed():
    # The API server only calls for namespaces its selector matches; a watch delay must not open a hole.
    only(raw_pod(namespace="brand-new", gpus=1), GPU_QUEUE)


def test_kinds_and_operations_without_rules_are_allowed():
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": TEAM}}
    assert check(cm).allowed
    bad = raw_pod(gpus=99)
    v = judge(review(bad, op="DELETE")["request"], STATE, ENFORCE)
    assert v.allowed and v.skipped == "operation DELETE"


def test_every_rule_name_is_documented_and_unique():
    assert len(set(RULES)) == len(RULES)
    assert set(RULES) >= CACHE_RULES


# ---------------------------------------------------------------------------------------------------------
# Rule 1: GPU work goes through a LocalQueue.


def test_gpu_pod_without_queue_label_is_denied_and_told_the_queue():
    v = only(raw_pod(gpus=1), GPU_QUEUE)
    assert f"add label {Labels.KUEUE_QUEUE}: default" in v.message()


def test_gpu_pod_in_a_namespace_without_localqueue_is_told_to_create_the_team():
    v = only(raw_pod(namespace=OTHER_TEAM, gpus=1), GPU_QUEUE)
    assert f"namespace {OTHER_TEAM} has no LocalQueue" in v.message()


def test_gpu_pod_naming_a_missing_localqueue_is_denied_with_the_existing_ones():
    pod = queued_pod()
    pod["metadata"]["labels"][Labels.KUEUE_QUEUE] = "defualt"
    v = only(pod, GPU_QUEUE)
    assert '"defualt" is not a LocalQueue in namespace team-a' in v.message()
    assert f"use {Labels.KUEUE_QUEUE}: default" in v.message()


def test_queue_name_annotation_counts_like_kueue_reads_it():
    pod = queued_pod()
    del pod["metadata"]["labels"][Labels.KUEUE_QUEUE]
    pod["metadata"]["annotations"][Labels.KUEUE_QUEUE] = "default"
    allowed(pod)


def test_zero_gpus_is_not_gpu_work():
    pod = raw_pod()
    pod["spec"]["containers"][0]["resources"]["limits"][GPU_RESOURCE] = "0"
    allowed(pod)


def test_gpu_in_limits_only_or_in_an_init_container_is_gpu_work():
    pod = raw_pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {GPU_RESOURCE: "2"}}
    only(pod, GPU_QUEUE)
    pod = raw_pod()
    pod["spec"]["initContainers"] = [
        {"name": "warm", "image": "x", "resources": {"limits": {GPU_RESOURCE: "1"}}}
    ]
    only(pod, GPU_QUEUE)


def test_job_without_queue_label_is_denied_at_the_job():
    job = training_job()
    del job["metadata"]["labels"][Labels.KUEUE_QUEUE]
    only(job, GPU_QUEUE)


def test_bare_replicaset_reads_the_queue_from_its_pod_template():
    rs = _replicaset(queued_pod())
    allowed(rs)
    del rs["spec"]["template"]["metadata"]["labels"][Labels.KUEUE_QUEUE]
    rs["metadata"]["labels"] = {Labels.KUEUE_QUEUE: "default"}  # Kueue ignores a ReplicaSet's own labels
    only(rs, GPU_QUEUE)


def test_gpu_work_for_a_queue_with_pools_must_ask_for_a_topology():
    """Pool flavors are TAS flavors: without a topology annotation Kueue never admits the pod set (where the
    topology MutatingAdmissionPolicy is installed, the API server adds it before this webhook runs)."""
    pod = queued_pod()
    del pod["metadata"]["annotations"][TAS_UNCONSTRAINED]
    v = only(pod, GPU_TOPOLOGY)
    assert f'add annotation {TAS_UNCONSTRAINED}: "true" in metadata.annotations' in v.message()
    assert "manifests/admission/topology.yaml" in v.message()
    # A Job's pod set is its template; any topology request will do.
    job = training_job()
    tmpl = job["spec"]["template"]["metadata"]["annotations"]
    del tmpl[TAS_UNCONSTRAINED]
    assert "in spec.template.metadata.annotations" in only(job, GPU_TOPOLOGY).message()
    tmpl["kueue.x-k8s.io/podset-required-topology"] = "kubernetes.io/hostname"
    allowed(job)
    # An object that already lacked it stays updatable (the finding is not new).
    old = copy.deepcopy(pod)
    pod["metadata"]["labels"]["extra"] = "x"
    assert check(pod, op="UPDATE", old=old).allowed


def test_gpu_work_for_a_queue_without_pools_needs_no_topology():
    pod = queued_pod()
    del pod["metadata"]["annotations"][TAS_UNCONSTRAINED]
    allowed(pod, st=state(cluster_queues={TEAM: frozenset({"foreign"})}))


def test_localqueue_of_a_missing_clusterqueue_is_a_warning_not_a_denial():
    s = state(cluster_queues={})
    v = allowed(queued_pod(), st=s)
    assert any("does not exist: Kueue will not admit" in w for w in v.warnings)


# ---------------------------------------------------------------------------------------------------------
# Rule 2: pools exist and placement stays on the pool.


def test_pool_label_naming_a_missing_pool_is_denied_with_a_suggestion():
    pod = queued_pod(pool="a1000")
    v = only(pod, POOL_EXISTS)
    assert 'names pool "a1000", which does not exist (did you mean "a100"?)' in v.message()
    assert "a10, a100, empty" in v.message()


def test_node_selector_alone_naming_a_missing_pool_is_denied():
    only(raw_pod(node_selector={Labels.POOL: "h100"}), POOL_EXISTS)


@pytest.mark.parametrize("name", ["gpuctl-budget", "foreign"])
def test_flavors_that_are_not_gpuctl_pools_are_not_pools(name):
    only(queued_pod(pool=name), POOL_EXISTS)


def test_label_and_node_selector_naming_different_pools_is_denied():
    pod = queued_pod(pool="a100")
    pod["spec"]["nodeSelector"][Labels.POOL] = "a10"
    v = only(pod, POOL_PLACEMENT)
    assert 'metadata.labels says "a100"' in v.message() and 'nodeSelector says "a10"' in v.message()


def test_pool_label_without_anything_keeping_pods_there_is_denied():
    pod = queued_pod()
    del pod["spec"]["nodeSelector"]
    v = only(pod, POOL_PLACEMENT)
    assert f"add spec.nodeSelector[{Labels.POOL}]: a100" in v.message()


def test_required_affinity_pinning_the_pool_replaces_the_node_selector():
    pod = queued_pod()
    del pod["spec"]["nodeSelector"]
    pod["spec"]["affinity"] = _affinity([{"key": Labels.POOL, "operator": "In", "values": ["a100"]}])
    allowed(pod)


def test_required_affinity_excluding_the_pool_is_denied():
    pod = queued_pod()
    pod["spec"]["affinity"] = _affinity([{"key": Labels.POOL, "operator": "In", "values": ["a10"]}])
    v = only(pod, POOL_PLACEMENT)
    assert 'required node affinity excludes pool "a100"' in v.message()


def test_node_name_on_another_pools_node_is_denied_and_on_its_own_allowed():
    v = only(queued_pod(nodeName="a10-1"), POOL_PLACEMENT)
    assert 'a10-1 is a node of pool "a10", not of pool "a100"' in v.message()
    allowed(queued_pod(nodeName="a100-2", gpus=4))
    only(queued_pod(nodeName="cpu-1"), POOL_PLACEMENT)
    allowed(queued_pod(nodeName="not-yet-registered"))


def test_selector_matching_only_another_pools_nodes_is_denied():
    pod = queued_pod()
    pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] = "a10-1"
    v = only(pod, POOL_PLACEMENT)
    assert 'match no node of pool "a100", only nodes of pool(s) a10' in v.message()


def test_affinity_matching_only_another_pools_nodes_is_denied():
    pod = queued_pod()
    pod["spec"]["affinity"] = _affinity([{"key": Labels.GPU_TYPE, "operator": "In", "values": ["a10-24g"]}])
    only(pod, POOL_PLACEMENT)
    pod["spec"]["affinity"] = _affinity(
        [{"key": Labels.GPU_TYPE, "operator": "In", "values": [GPU_TYPE_A100]}]
    )
    allowed(pod)


def test_selector_matching_no_node_at_all_is_only_a_warning():
    pod = queued_pod()
    pod["spec"]["nodeSelector"][Labels.GPU_TYPE] = "h100"
    v = allowed(pod)
    assert any('no node of pool "a100" matches' in w for w in v.warnings)


# ---------------------------------------------------------------------------------------------------------
# Rule 3: gpuctl's own label keys and values.


def test_priority_must_be_one_of_three():
    job = training_job()
    job["metadata"]["labels"][Labels.PRIORITY] = "urgent"
    v = only(job, PRIORITY)
    assert "use one of high, medium, low" in v.message()


def test_priority_must_agree_with_kueue_priority_class():
    job = training_job()  # high
    job["metadata"]["labels"][Labels.KUEUE_PRIORITY] = "gpuctl-low"
    v = only(job, PRIORITY)
    assert f"set {Labels.KUEUE_PRIORITY}: gpuctl-high" in v.message()


def test_priority_without_kueue_priority_class_is_denied():
    job = training_job()
    del job["metadata"]["labels"][Labels.KUEUE_PRIORITY]
    v = only(job, PRIORITY)
    assert f"add label {Labels.KUEUE_PRIORITY}: gpuctl-high" in v.message()


def test_misspelt_gpuctl_priority_class_is_denied_with_a_suggestion():
    pod = queued_pod(labels={Labels.KUEUE_PRIORITY: "gpuctl-hihg"})
    v = only(pod, PRIORITY)
    assert '(did you mean "gpuctl-high"?)' in v.message()
    # Another WorkloadPriorityClass is the priority-class rule's: a team orders its work by gpuctl's only.
    only(queued_pod(labels={Labels.KUEUE_PRIORITY: "team-special"}), PRIORITY_CLASS_RULE)


def test_template_priority_must_match_the_objects():
    job = training_job()
    job["spec"]["template"]["metadata"]["labels"][Labels.PRIORITY] = "low"
    v = only(job, PRIORITY)
    assert 'is "high" on the object but "low" on its pod template' in v.message()


def test_job_type_must_be_a_gpuctl_kind():
    job = training_job()
    job["metadata"]["labels"][Labels.JOB_TYPE] = "trainig"
    v = only(job, JOB_TYPE)
    assert '(did you mean "training"?)' in v.message()


@pytest.mark.parametrize(
    ("where", "key", "suggestion"),
    [
        ("labels", "runwhere.ai/gpu_type", "runwhere.ai/gpu-type"),
        ("annotations", "runwhere.ai/descripton", "runwhere.ai/description"),
        ("template-labels", "runwhere.ai/poool", "runwhere.ai/pool"),
    ],
)
def test_unknown_runwhere_key_is_denied_with_the_nearest_known_key(where, key, suggestion):
    job = training_job()
    meta = job["spec"]["template"]["metadata"] if where.startswith("template") else job["metadata"]
    meta.setdefault("annotations" if where == "annotations" else "labels", {})[key] = "x"
    v = only(job, UNKNOWN_KEY)
    assert f"unknown key {key}" in v.message() and f"rename it to {suggestion}" in v.message()


def test_unknown_runwhere_key_far_from_any_known_one_lists_them():
    v = only(queued_pod(labels={"runwhere.ai/zzzzzzzz": "1"}), UNKNOWN_KEY)
    assert "remove it (gpuctl's keys:" in v.message()


def test_known_keys_and_foreign_prefixes_pass():
    pod = queued_pod(labels={Labels.TEAM: TEAM, "example.com/runwhere.ai-ish": "x"})
    pod["metadata"]["annotations"][Labels.DESCRIPTION] = "hello"
    allowed(pod)


def test_the_memo_of_key_runs_stays_bounded_and_never_changes_a_verdict():
    # Whether a run of keys holds an unknown runwhere.ai/ key is memoised per run: flood it with runs that
    # never repeat, then the same runs with and without an unknown key must still be judged right.
    for i in range(label_rules.KEYS_SEEN_MAX + 100):
        allowed(queued_pod(labels={f"example.com/k{i}": "x"}))
        assert len(label_rules.KEYS_SEEN) <= label_rules.KEYS_SEEN_MAX
    allowed(queued_pod(labels={"example.com/k1": "x"}))
    only(queued_pod(labels={"example.com/k1": "x", "runwhere.ai/k1": "x"}), UNKNOWN_KEY)
    allowed(queued_pod(labels={"example.com/k1": "x"}))


# ---------------------------------------------------------------------------------------------------------
# Rule 4: a pod never asks for more GPUs than the pool's largest node has.


def test_more_gpus_than_the_largest_pool_node_is_denied():
    v = only(queued_pod(gpus=9), GPU_FITS_NODE)
    assert 'largest node of pool "a100" has 8' in v.message()
    allowed(queued_pod(gpus=8))
    only(queued_pod(pool="a10", gpus=5), GPU_FITS_NODE)


def test_gpu_limit_is_checked_on_the_template_of_a_job():
    job = training_job()
    res = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    res["requests"][GPU_RESOURCE] = res["limits"][GPU_RESOURCE] = "16"
    only(job, GPU_FITS_NODE)


def test_pool_without_nodes_does_not_deny_on_size():
    allowed(queued_pod(pool="empty", gpus=64))


def test_without_a_pool_the_largest_node_of_any_pool_is_the_limit():
    pod = raw_pod(gpus=9, labels={Labels.KUEUE_QUEUE: "default"})
    pod["metadata"]["annotations"] = {TAS_UNCONSTRAINED: "true"}
    v = only(pod, GPU_FITS_NODE)
    assert 'no pool has a node that big (largest: 8 in pool "a100")' in v.message()
    ok = raw_pod(gpus=8, labels={Labels.KUEUE_QUEUE: "default"})
    ok["metadata"]["annotations"] = {TAS_UNCONSTRAINED: "true"}
    allowed(ok)


def test_pod_gpus_counts_containers_sidecars_and_the_largest_init_container():
    c = lambda n: {"name": "c", "resources": {"limits": {GPU_RESOURCE: str(n)}}}  # noqa: E731
    assert pod_gpus({"containers": [c(1), c(2)]}) == 3
    assert pod_gpus({"containers": [c(1)], "initContainers": [c(5), c(2)]}) == 5
    sidecar = {**c(2), "restartPolicy": "Always"}
    # The sidecar keeps running while the later init container runs: 2 + 2 during init (Kubernetes'
    # PodRequests), more than 1 + 2 afterwards. The webhook once said 3 here, the metrics 4.
    assert pod_gpus({"containers": [c(1)], "initContainers": [sidecar, c(2)]}) == 4
    assert pod_gpus({"containers": [c(1)], "initContainers": [c(2), sidecar]}) == 3
    assert pod_gpus({"containers": [{"name": "x", "resources": {"requests": {GPU_RESOURCE: "1e1"}}}]}) == 10


# ---------------------------------------------------------------------------------------------------------
# Rule 5: hostPath.


@pytest.mark.parametrize(
    "path", ["/etc", "/etc/kubernetes", "/", "/var/run/docker.sock", "/data/../proc/1", "//etc/ssl", "/root/"]
)
def test_host_paths_in_the_deny_list_are_denied(path):
    v = only(queued_pod(volumes=[{"name": "h", "hostPath": {"path": path}}]), HOST_PATH)
    assert "is a system location" in v.message() and "never mounted" in v.message()


def _mounted(path: str, read_only: bool = False) -> dict:
    pod = queued_pod(volumes=[{"name": "h", "hostPath": {"path": path}}])
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "h", "mountPath": "/x", "readOnly": read_only}]
    return pod


@pytest.mark.parametrize(
    "path",
    [
        "/opt/cni/bin",
        "/usr",
        "/lib/modules",
        "/boot",
        "/var/log/pods",
        "/var/lib/containers",
        "/usr/local/bin",
    ],
)
def test_system_locations_are_denied_read_only_too_whatever_the_admin_allows(path):
    """Issue 43, 5: root on a pool node (CNI plugins run as root) and other teams' logs."""
    config = AdmissionConfig(allowed_host_paths=(path, "/"))
    for read_only in (False, True):
        v = only(_mounted(path, read_only), HOST_PATH, config=config)
        assert "is a system location" in v.message(), v.message()


@pytest.mark.parametrize("path", ["/data", "/data/team-a", "/output/run-1", "/models"])
def test_writable_host_paths_under_the_data_roots_are_allowed(path):
    allowed(_mounted(path))


@pytest.mark.parametrize("path", ["/mnt/datasets", "/etcetera", "/var/lib/datasets", "/home/u", "/dataset"])
def test_writable_host_paths_outside_the_data_roots_are_denied_read_only_ones_allowed(path):
    v = only(_mounted(path), HOST_PATH)
    roots = ", ".join(HOST_PATH_ROOTS)
    assert f"writable outside the data roots ({roots})" in v.message(), v.message()
    allowed(_mounted(path, read_only=True))
    allowed(queued_pod(volumes=[{"name": "h", "hostPath": {"path": path}}]))  # mounted by no container


def test_the_admin_adds_data_roots():
    config = AdmissionConfig(allowed_host_paths=("/scratch",))
    allowed(_mounted("/scratch/team-a"), config=config)
    v = only(_mounted("/scratchy"), HOST_PATH, config=config)
    assert f"({', '.join(HOST_PATH_ROOTS)}, /scratch)" in v.message()


def test_relative_host_path_is_denied():
    only(queued_pod(volumes=[{"name": "h", "hostPath": {"path": "data"}}]), HOST_PATH)


def test_host_path_is_checked_in_pod_templates():
    job = training_job()
    job["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"] = "/proc"
    only(job, HOST_PATH)


# ---------------------------------------------------------------------------------------------------------
# Rule 6: Nodes.


def test_node_pool_label_must_name_an_existing_pool():
    v = only(node("gpu-9", "a1000", 8), NODE_POOL)
    assert '(did you mean "a100"?)' in v.message()
    allowed(node("gpu-9", "a100", 8))
    allowed(node("gpu-9", None, 8))


def test_node_unknown_runwhere_keys_are_denied_and_the_gpu_type_alias_is_known():
    n = node("gpu-9", "a100", 8)
    n["metadata"]["labels"]["runwhere.ai/gpu-typ"] = "A100"
    v = only(n, UNKNOWN_KEY)
    assert '(did you mean "runwhere.ai/gpu-type"?)' in v.message()
    n = node("gpu-9", "a100", 8)
    n["metadata"]["annotations"] = {"runwhere.ai/pol": "x"}
    only(n, UNKNOWN_KEY)
    n = node("gpu-9", "a100", 8)
    n["metadata"]["labels"].update({"runwhere.ai/gpuType": "A100", "runwhere.ai/gpu-type": "A100"})
    allowed(n)
    # An existing node that already carried the typo is not wedged by later updates.
    old = node("gpu-9", "a100", 8)
    old["metadata"]["labels"]["runwhere.ai/typo"] = "1"
    new = node("gpu-9", "a100", 8)
    new["metadata"]["labels"]["runwhere.ai/typo"] = "1"
    assert check(new, op="UPDATE", old=old).allowed


def test_node_update_is_denied_only_when_the_pool_label_changes_to_a_missing_pool():
    old = node("gpu-9", "a100", 8)
    only(node("gpu-9", "nope", 8), NODE_POOL, op="UPDATE", old=old)
    stale = node("gpu-9", "retired", 8)
    v = check(node("gpu-9", "retired", 8), op="UPDATE", old=stale)  # e.g. kubelet touching labels
    assert v.allowed and any("already had it" in w for w in v.warnings)


def test_gpuctls_own_dry_run_of_a_new_pool_is_warned_not_denied():
    options = {"kind": "PatchOptions", "fieldManager": FIELD_MANAGER, "dryRun": ["All"]}
    v = check(
        node("gpu-9", "newpool", 8), op="UPDATE", old=node("gpu-9", None, 8), dry_run=True, options=options
    )
    assert v.allowed and v.warnings and "dry run" in v.warnings[0]
    # The same dry run from kubectl is judged like the real thing.
    denied(node("gpu-9", "newpool", 8), NODE_POOL, op="UPDATE", old=node("gpu-9", None, 8), dry_run=True)


# ---------------------------------------------------------------------------------------------------------
# Checked once, at the owner.


def _owned(obj: dict, kind: str, api: str, controller: bool = True) -> dict:
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": api, "kind": kind, "name": "o", "uid": "u-1", "controller": controller}
    ]
    return obj


OWNERS = [("Job", "batch/v1"), ("ReplicaSet", "apps/v1"), ("StatefulSet", "apps/v1")]


@pytest.mark.parametrize(("kind", "api"), OWNERS)
def test_pods_made_by_their_controller_are_skipped(kind, api):
    bad = _owned(raw_pod(gpus=64), kind, api)
    user = CONTROLLER_USERS[(api.split("/")[0], kind)]
    for op in ("CREATE", "UPDATE"):
        # Its own ServiceAccount, or kube-controller-manager's shared identity (no per-controller accounts).
        for who in (user, KCM_USER):
            v = allowed(bad, username=who, op=op, old=raw_pod(gpus=64) if op == "UPDATE" else None)
            assert v.skipped == f"checked at its owner ({kind})"


@pytest.mark.parametrize(("kind", "api"), OWNERS)
def test_a_forged_owner_reference_skips_nothing(kind, api):
    # A user writes a controller reference to a Job (ReplicaSet, StatefulSet) of his own: still reviewed.
    bad = _owned(raw_pod(gpus=64), kind, api)
    v = denied(bad, GPU_QUEUE)
    assert not v.skipped
    # Nor does another controller's identity: the job-controller does not make ReplicaSet pods.
    others = [u for gk, u in CONTROLLER_USERS.items() if gk != (api.split("/")[0], kind)]
    for user in [*others, "system:serviceaccount:kube-system:default", "system:admin"]:
        assert not check(bad, username=user).allowed, user


def test_pods_of_other_owners_or_non_controller_refs_are_checked():
    job_user = CONTROLLER_USERS[("batch", "Job")]
    only(_owned(raw_pod(gpus=1), "DaemonSet", "apps/v1"), GPU_QUEUE)
    only(_owned(raw_pod(gpus=1), "Job", "batch/v1", controller=False), GPU_QUEUE, username=job_user)
    only(_owned(raw_pod(gpus=1), "Job", "example.com/v1"), GPU_QUEUE, username=job_user)
    # The job-controller sending a pod with no owner at all is reviewed too.
    only(raw_pod(gpus=1), GPU_QUEUE, username=job_user)


def test_replicasets_of_deployments_are_skipped_only_when_the_deployment_controller_sends_them():
    rs = _replicaset(raw_pod(gpus=1))
    only(rs, GPU_QUEUE)
    owned = _owned(rs, "Deployment", "apps/v1")
    user = CONTROLLER_USERS[("apps", "Deployment")]
    assert allowed(owned, username=user).skipped == "checked at its owner (Deployment)"
    only(owned, GPU_QUEUE)  # forged: alice wrote the reference
    only(owned, GPU_QUEUE, username=CONTROLLER_USERS[("apps", "ReplicaSet")])


def test_update_findings_are_compared_exactly_not_per_rule():
    # An object that already breaks a rule (made before the webhook, or in warn mode) stays updatable, but a
    # different finding of the same rule is new: another pool, another host path, another bad priority.
    pod = raw_pod(gpus=1, labels={Labels.KUEUE_QUEUE: "default", Labels.POOL: "a100"})  # not pinned
    moved = raw_pod(
        gpus=1,
        labels={Labels.KUEUE_QUEUE: "default", Labels.POOL: "a100"},
        node_selector={Labels.POOL: "a10"},
    )
    v = check(moved, op="UPDATE", old=pod)
    assert not v.allowed and v.rules == (POOL_PLACEMENT,), v.message()
    same = copy.deepcopy(pod)
    same["metadata"]["labels"]["app"] = "x"
    v = check(same, op="UPDATE", old=pod)
    assert v.allowed and any("already had it" in w for w in v.warnings)
    prio = raw_pod(labels={Labels.PRIORITY: "hihg"})
    v = check(raw_pod(labels={Labels.PRIORITY: "urgent"}), op="UPDATE", old=prio)
    assert not v.allowed and v.rules == (PRIORITY,)


# ---------------------------------------------------------------------------------------------------------
# Modes, dry runs, UPDATE.


def test_warn_mode_allows_and_returns_one_warning_per_violation():
    bad = queued_pod(pool="a1000", labels={"runwhere.ai/poool": "x"})
    v = check(bad, config=WARN)
    assert v.allowed
    assert set(v.rules) == {POOL_EXISTS, UNKNOWN_KEY}
    assert len(v.warnings) == 2
    assert all(w.startswith("gpuctl would deny Pod team-a/p: [") for w in v.warnings)
    assert all(len(w) <= 256 for w in v.warnings)


def test_dry_run_gets_the_same_verdict():
    bad = raw_pod(gpus=1)
    assert check(bad, dry_run=True) == check(bad)
    good = queued_pod()
    assert check(good, dry_run=True).allowed


def test_update_adding_a_violation_is_denied():
    old = queued_pod()
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["runwhere.ai/gpu_type"] = "x"
    only(new, UNKNOWN_KEY, op="UPDATE", old=old)


def test_update_keeping_an_existing_violation_is_allowed_with_a_warning():
    # An object created before the webhook (or in warn mode) must stay updatable, e.g. by Kueue.
    old = raw_pod(gpus=1)  # no queue label
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["app"] = "x"
    v = check(new, op="UPDATE", old=old)
    assert v.allowed and any("already had it" in w and GPU_QUEUE in w for w in v.warnings)


def test_kueue_injecting_a_flavor_into_a_legacy_job_is_not_blocked():
    legacy = training_job()
    del legacy["spec"]["template"]["spec"]["nodeSelector"]  # labelled a100, nothing pinning it
    assert POOL_PLACEMENT in check(legacy).rules
    admitted = copy.deepcopy(legacy)
    admitted["spec"]["template"]["spec"]["nodeSelector"] = {Labels.POOL: "a10"}  # Kueue picked a10
    admitted["spec"]["suspend"] = False
    v = check(admitted, op="UPDATE", old=legacy, username=KUEUE_USER)
    assert v.allowed and v.skipped == "Kueue's own request"
    # The same change from a user pins the work to another pool than its label says: a new finding; and
    # only Kueue un-suspends a queued Job (kueue-gate).
    v = check(admitted, op="UPDATE", old=legacy)
    assert not v.allowed and v.rules == (POOL_PLACEMENT, KUEUE_GATE)


def test_update_with_a_malformed_old_object_is_judged_on_its_own():
    old = queued_pod()
    old["metadata"]["labels"] = ["not", "a", "map"]
    new = raw_pod(gpus=1)
    only(new, GPU_QUEUE, op="UPDATE", old=old)
    allowed(queued_pod(), op="UPDATE", old=old)


def test_not_synced_cache_denies_in_enforce_and_warns_in_warn_mode():
    empty = ClusterState()
    v = judge(review(queued_pod())["request"], empty, ENFORCE)
    assert not v.allowed and v.code == 503 and "not loaded the cluster state" in v.message()
    w = judge(review(queued_pod())["request"], empty, WARN)
    assert w.allowed and "could not check" in w.warnings[0]


def test_cache_dependent_flag_covers_only_cache_rules():
    assert check(queued_pod(pool="nope")).cache_dependent
    assert not check(queued_pod(labels={"runwhere.ai/x": "1"})).cache_dependent
    assert not check(queued_pod()).cache_dependent  # allowed


def test_one_message_lists_every_broken_rule():
    bad = raw_pod(
        gpus=64,
        labels={Labels.POOL: "a100", Labels.PRIORITY: "urgent", "runwhere.ai/poool": "x"},
        node_selector={Labels.POOL: "a100"},
        volumes=[{"name": "h", "hostPath": {"path": "/etc"}}],
    )
    v = check(bad)
    assert set(v.rules) == {GPU_QUEUE, GPU_FITS_NODE, PRIORITY, UNKNOWN_KEY, HOST_PATH}
    assert v.message().startswith("gpuctl: Pod team-a/p breaks 5 rule(s): ")


# ---------------------------------------------------------------------------------------------------------
# Malformed input is Malformed (HTTP 400), never another exception.


@pytest.mark.parametrize(
    ("mutate", "text"),
    [
        (lambda r: r.update(kind="Pod"), "request.kind must be an object"),
        (lambda r: r.update(kind={}), "request.kind.kind is missing"),
        (lambda r: r.update(operation="PATCH"), "request.operation 'PATCH'"),
        (lambda r: r.update(object=None), "request.object must be an object"),
        (lambda r: r.update(operation="UPDATE", oldObject=[1]), "request.oldObject must be an object"),
        (lambda r: r["object"]["metadata"].update(labels=[]), "metadata.labels must be an object"),
        (lambda r: r["object"]["metadata"]["labels"].update(x=1), "must be a string"),
        (lambda r: r["object"]["spec"].update(containers={}), "spec.containers must be a list"),
        (lambda r: r["object"]["spec"]["containers"].append("x"), "containers[1] must be an object"),
        (lambda r: _gpu(r, "lots"), "is not a Kubernetes quantity"),
        (
            lambda r: (
                _gpu(r, None)
                or r["object"]["spec"]["containers"][0]["resources"]["limits"].update({GPU_RESOURCE: []})
            ),
            "must be a quantity string",
        ),
        (
            lambda r: r["object"]["spec"].update(volumes=[{"hostPath": {"path": 1}}]),
            "hostPath.path must be a string",
        ),
        (lambda r: r["object"]["spec"].update(affinity=_affinity([{"key": 1}])), "key must be a string"),
    ],
)
def test_malformed_requests_raise_malformed_with_the_place(mutate, text):
    request = review(queued_pod())["request"]
    mutate(request)
    with pytest.raises(Malformed, match=None) as exc:
        judge(request, STATE, ENFORCE)
    assert text in str(exc.value)


def test_non_dict_request_is_malformed():
    with pytest.raises(Malformed):
        judge([], STATE, ENFORCE)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------
# Helpers.


def _affinity(exprs: list[dict]) -> dict:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": exprs}]
            }
        }
    }


def _gpu(request: dict, value) -> None:
    res = request["object"]["spec"]["containers"][0]["resources"]
    res["requests"].pop(GPU_RESOURCE, None)
    if value is None:
        res["limits"].pop(GPU_RESOURCE, None)
    else:
        res["limits"][GPU_RESOURCE] = value


def _replicaset(pod: dict) -> dict:
    meta = pod["metadata"]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "rs", "namespace": meta["namespace"]},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "rs"}},
            "template": {
                "metadata": {
                    "labels": {**meta["labels"], "app": "rs"},
                    "annotations": meta.get("annotations", {}),
                },
                "spec": pod_spec(pod),
            },
        },
    }


def test_every_runwhere_key_gpuctl_itself_writes_is_known():
    # gpuctl's submission path annotates workloads with a spec hash; refusing it would refuse gpuctl.
    from gpuctl.service.lifecycle import SPEC_HASH

    job = training_job()
    job["metadata"]["annotations"] = {SPEC_HASH: "0123abcd"}
    allowed(job)


# ---------------------------------------------------------------------------------------------------------
# Issue 23: jobs that may run in any of several pools (no pool label or selector, pool affinity).


def _any_pool_job(pools: str, gpus: int = 1, gpu_type: str = "") -> dict:
    extra = f"gpu-type: {gpu_type}, " if gpu_type else ""
    (doc,) = load_text(
        f"kind: training\njob: {{name: j, namespace: {TEAM}}}\nenvironment: {{image: busybox}}\n"
        f"resources: {{pool: {pools}, {extra}gpu: {gpus}, cpu: 1, memory: 1Gi}}\n"
    )
    return build(doc.spec, TEAM)[0]


def test_any_pool_job_of_existing_pools_passes():
    allowed(_any_pool_job("[a100, a10]", 4))
    allowed(_any_pool_job("[a100, a10]", 4, gpu_type=GPU_TYPE_A100))


def test_any_pool_job_naming_a_missing_pool_is_denied_with_a_suggestion():
    v = only(_any_pool_job("[a100, a1000]"), POOL_EXISTS)
    assert 'names pool "a1000", which does not exist (did you mean "a100"?)' in v.message()


def test_any_pool_job_bigger_than_every_listed_pools_node_is_denied():
    v = only(_any_pool_job("[a10, empty]", 8), GPU_FITS_NODE)
    assert 'has 4 (pool "a10")' in v.message()
    allowed(_any_pool_job("[a10, a100]", 8))


# ---------------------------------------------------------------------------------------------------------
# Issue 43, 4: accelerators under other names; 2: long termination grace.


def _requesting(**resources: str) -> dict:
    pod = queued_pod()
    for m in pod["spec"]["containers"][0]["resources"].values():
        m.update(resources)
    return pod


@pytest.mark.parametrize("name", ["habana.ai/gaudi", "nvidia.com/GA100_A100_SXM4_80GB", "example.com/fpga"])
def test_extended_resources_kueue_does_not_charge_are_refused_naming_them(name):
    v = only(_requesting(**{name: "2"}), EXTENDED_RESOURCE)
    assert f"requests {name}: extended resource(s) Kueue does not charge" in v.message(), v.message()
    assert "--allowed-extended-resource" in v.message()


@pytest.mark.parametrize("name", ["rdma/hca_shared_devices_a", "hugepages-2Mi", "ephemeral-storage"])
def test_the_default_list_allows_rdma_devices_and_hugepages(name):
    allowed(_requesting(**{name: "1"}))


def test_the_admin_sets_the_extended_resources_list():
    config = AdmissionConfig(allowed_extended_resources=("example.com/fpga",))
    allowed(_requesting(**{"example.com/fpga": "1"}), config=config)
    only(_requesting(**{"rdma/hca_shared_devices_a": "1"}), EXTENDED_RESOURCE, config=config)


def test_termination_grace_above_the_bound_is_refused():
    pod = queued_pod(terminationGracePeriodSeconds=7200)
    v = only(pod, TERMINATION_GRACE)
    assert "terminationGracePeriodSeconds is 7200" in v.message() and "at most 300 s" in v.message()
    allowed(queued_pod(terminationGracePeriodSeconds=300))
    allowed(pod, config=AdmissionConfig(max_termination_grace=7200))


def _delete_pod(grace: int | None, user: str = "alice") -> Verdict:
    pod = queued_pod()
    req = review(pod, op="DELETE", username=user)["request"]
    req["object"], req["oldObject"] = None, pod
    req["options"] = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}
    if grace is not None:
        req["options"]["gracePeriodSeconds"] = grace
    return judge(req, STATE, AdmissionConfig())


def test_deleting_a_pod_with_a_grace_above_the_bound_is_refused():
    """`kubectl delete pod --grace-period=7200`: the API server takes the DELETE's grace over the pod's."""
    v = _delete_pod(7200)
    assert not v.allowed and v.rules == (DELETE_GRACE,), v.message()
    assert "gracePeriodSeconds 7200" in v.message() and "at most 300 s" in v.message()
    for ok in (None, 0, 30, 300):
        assert _delete_pod(ok).allowed, ok
    assert _delete_pod(7200, user=KUEUE_USER).allowed


AUTOSCALED = """
kind: inference
job: {name: llm}
environment: {image: vllm/vllm-openai:v0.12.0}
service: {port: 8000, autoscaling: {minReplicas: 1, maxReplicas: 3, targetConcurrency: 4}}
resources: {pool: a10, gpu: 1, cpu: 8, memory: 32Gi}
"""


def _autoscaled(namespace: str = TEAM) -> list[dict]:
    """The floor and burst Deployments gpuctl builds for an autoscaled service (docs/serving.md)."""
    floor, burst, *_ = build(load_text(AUTOSCALED)[0].spec, namespace)
    return [floor, burst]


def test_an_autoscaled_services_tiers_carry_their_own_classes() -> None:
    """gpuctl-serving-floor|burst go with runwhere.ai/serving-tier floor|burst; a class without its tier, a
    tier without its class or a misspelt tier is the `priority` rule's (Python here, the same CEL in
    the team policy: tests/integration/test_admission_policy.py)."""
    floor, burst = _autoscaled()
    allowed(floor)
    allowed(burst)
    swapped = copy.deepcopy(floor)
    swapped["metadata"]["labels"][Labels.KUEUE_PRIORITY] = "gpuctl-serving-burst"
    assert f'but metadata.labels[{Labels.SERVING_TIER}] is "floor"' in only(swapped, PRIORITY).message()
    untiered = copy.deepcopy(burst)
    del untiered["metadata"]["labels"][Labels.SERVING_TIER]
    assert f"metadata.labels[{Labels.SERVING_TIER}] is not set" in only(untiered, PRIORITY).message()
    typo = copy.deepcopy(floor)
    typo["spec"]["template"]["metadata"]["labels"][Labels.SERVING_TIER] = "flor"
    assert 'is "flor" (did you mean "floor"?)' in only(typo, PRIORITY).message()
    classless = copy.deepcopy(floor)
    del classless["metadata"]["labels"][Labels.KUEUE_PRIORITY]
    msg = only(classless, PRIORITY).message()
    assert f'{Labels.SERVING_TIER}] is "floor" but metadata.labels[{Labels.KUEUE_PRIORITY}] is not set' in msg
    # The floor's class on a job that is not a service's floor is refused whatever else it says.
    job = training_job()
    job["metadata"]["labels"][Labels.KUEUE_PRIORITY] = "gpuctl-serving-floor"
    del job["metadata"]["labels"][Labels.PRIORITY]
    del job["spec"]["template"]["metadata"]["labels"][Labels.PRIORITY]
    only(job, PRIORITY)


def test_an_hpa_may_scale_only_gpu_work_kueue_queues() -> None:
    """hpa-queued (docs/serving.md): an HPA of a GPU Deployment Kueue does not queue is refused (its replicas
    would run outside the quota); one of a queued Deployment is allowed, with a warning when its
    maxReplicas (a service's burst HPA: with its floor) pass the team's quota 4 + borrowingLimit 2; a
    target the cache has not seen, or CPU-only, is not judged; on UPDATE only a new finding denies."""
    from dataclasses import replace

    from admission.state import CachedDeployment, TeamCap

    floor, burst = _autoscaled()
    raw = copy.deepcopy(floor)
    raw["metadata"]["name"] = "raw"
    raw["metadata"]["labels"] = {}
    st = ClusterState.from_objects([*cluster_objects(), floor, burst, raw])
    st = replace(st, team_caps={**st.team_caps, TEAM: TeamCap(4, 2)})
    assert st.deployments[(TEAM, "llm")] == CachedDeployment(1, 1, "floor", "llm", "default")
    assert st.deployments[(TEAM, "raw")] == CachedDeployment(1, 1, None, None, None)

    def hpa(target: str, high: int) -> dict:
        return {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h", "namespace": TEAM},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                "minReplicas": 1,
                "maxReplicas": high,
            },
        }

    v = only(hpa("raw", 2), "hpa-queued", st=st)
    assert "which Kueue does not queue (no kueue.x-k8s.io/queue-name)" in v.message()
    assert "add the label kueue.x-k8s.io/queue-name: default" in v.message()
    # The service's burst HPA: floor 1 + burst 5 = 6 fits the cap silently; 6 more is allowed and warned.
    assert check(hpa("llm-burst", 5), st=st).warnings == ()
    over = check(hpa("llm-burst", 6), st=st)
    assert over.allowed and over.violations == ()
    (warning,) = over.warnings
    assert "with its service's floor of 1" in warning and "= 7 GPUs, more than team" in warning
    # Not judged: a target the cache has not seen.
    assert check(hpa("not-yet", 100), st=st).allowed
    # UPDATE: an HPA of an unqueued Deployment already is not refused for another change; a new one is.
    assert check(hpa("raw", 3), st=st, op="UPDATE", old=hpa("raw", 2)).allowed
    only(hpa("raw", 3), "hpa-queued", st=st, op="UPDATE", old=hpa("not-yet", 2))
