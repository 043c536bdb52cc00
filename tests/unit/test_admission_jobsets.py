"""JobSets under gpuctl's admission (issue 31, docs/admission.md "JobSets"): the webhook reviews a JobSet's
pod templates (one per replicated job, under the JobSet's own labels: the JobSet is what Kueue queues), only
Kueue un-suspends a queued JobSet, the Jobs the JobSet controller makes are checked at their JobSet, and a
Job claiming a JobSet (or any owner Kueue leaves its Jobs to) comes from that owner's controller."""

from __future__ import annotations

import copy

import pytest

from admission.identities import JOB_MAKERS, JOBSET_USER, KCM_USER, KUEUE_USER
from admission.rule_names import GPU_QUEUE, GPU_TOPOLOGY, HOST_PATH, KUEUE_GATE, OWNER_CLAIM, POOL_EXISTS
from admission.rules import AdmissionConfig, Malformed, Verdict
from admission.rules import review as judge
from gpuctl.constants import SET_ASIDE_TAINT_KEYS, TAS_UNCONSTRAINED, Labels
from tests.unit.test_admission_fixtures import review, state, training_job

STATE = state()
JOBSET = ("jobset.x-k8s.io", "JobSet")


def check(obj: dict, **kw) -> Verdict:
    return judge(review(obj, **kw)["request"], STATE, AdmissionConfig())


def jobset(*names: str) -> dict:
    """A JobSet of gpuctl's training Job template (queued in LocalQueue default, pool a100, a topology
    request), one replicated job per name; without the Job's own set-aside tolerations (issue 45: the
    JobSet's Jobs have other names, so they would be another job's)."""
    job = training_job()
    tmpl = copy.deepcopy(job["spec"]["template"])
    tmpl["spec"]["tolerations"] = [
        t for t in tmpl["spec"].get("tolerations") or [] if t.get("key") not in SET_ASIDE_TAINT_KEYS
    ]
    replicated = [
        {"name": n, "replicas": 1, "template": {"spec": {"parallelism": 1, "template": copy.deepcopy(tmpl)}}}
        for n in names
    ]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "pair",
            "namespace": job["metadata"]["namespace"],
            "labels": dict(job["metadata"]["labels"]),  # queue, priority class, gpuctl's labels
        },
        "spec": {"suspend": True, "replicatedJobs": replicated},
    }


def pod_template(js: dict, i: int) -> dict:
    return js["spec"]["replicatedJobs"][i]["template"]["spec"]["template"]


def test_a_jobset_like_gpuctls_job_passes():
    js = jobset("leader", "workers")
    assert js["metadata"]["labels"][Labels.KUEUE_QUEUE] == "default"
    v = check(js)
    assert v.allowed and not v.violations, v.message()


def test_a_jobset_without_a_queue_is_refused_once_for_all_its_replicated_jobs():
    js = jobset("leader", "workers")
    del js["metadata"]["labels"][Labels.KUEUE_QUEUE]
    v = check(js)
    assert not v.allowed and v.rules == (GPU_QUEUE,), v.message()
    assert v.message().count(f"[{GPU_QUEUE}]") == 1
    assert v.subject == f"JobSet {js['metadata']['namespace']}/pair"


def test_each_replicated_jobs_template_is_judged_and_named():
    js = jobset("leader", "workers")
    spec = pod_template(js, 1)["spec"]
    spec["nodeSelector"][Labels.POOL] = "no-such-pool"
    spec["volumes"] = [{"name": "h", "hostPath": {"path": "/etc"}}]
    pod_template(js, 1)["metadata"]["labels"][Labels.POOL] = "no-such-pool"
    del pod_template(js, 0)["metadata"]["annotations"][TAS_UNCONSTRAINED]
    v = check(js)
    assert {POOL_EXISTS, HOST_PATH, GPU_TOPOLOGY} <= set(v.rules), v.message()
    text = " ".join(x.text() for x in v.violations)
    assert "spec.replicatedJobs[1].template.spec.template.spec.nodeSelector[runwhere.ai/pool]" in text
    assert "spec.replicatedJobs[1].template.spec.template.metadata.labels says" in text
    assert "spec.replicatedJobs[0].template.spec.template.metadata.annotations" in text
    assert "gpuctl's topology policy writes Jobs, not JobSets: add it to each replicated job" in text


def test_a_malformed_replicated_job_is_a_bad_request():
    js = jobset("leader")
    js["spec"]["replicatedJobs"][0]["template"] = "x"
    with pytest.raises(Malformed, match=r"spec\.replicatedJobs\[0\]\.template must be an object"):
        check(js)


def test_only_kueue_unsuspends_a_queued_jobset():
    queued = jobset("leader")
    started = copy.deepcopy(queued)
    started["spec"]["suspend"] = False
    v = check(started, op="UPDATE", old=queued)
    assert not v.allowed and v.rules == (KUEUE_GATE,), v.message()
    assert "un-suspends a JobSet queued in LocalQueue default" in v.message()
    assert check(started, op="UPDATE", old=queued, username=KUEUE_USER).allowed
    assert check(queued, op="UPDATE", old=started).allowed  # suspending is anyone's


def _owned_job(group: str, kind: str, uid: str = "u-1") -> dict:
    job = training_job()
    del job["metadata"]["labels"][Labels.KUEUE_QUEUE]  # as the JobSet controller makes them
    job["metadata"]["ownerReferences"] = [
        {"apiVersion": f"{group}/v1alpha2", "kind": kind, "name": "pair", "uid": uid, "controller": True}
    ]
    return job


def test_the_jobs_the_jobset_controller_makes_are_checked_at_their_jobset():
    job = _owned_job(*JOBSET)
    assert JOB_MAKERS[JOBSET] == JOBSET_USER
    v = check(job, username=JOBSET_USER)
    assert v.allowed and v.skipped == "checked at its owner (JobSet)", v
    started = copy.deepcopy(job)
    started["spec"]["suspend"] = False
    assert check(started, op="UPDATE", old=job, username=JOBSET_USER).allowed


@pytest.mark.parametrize("user", ["alice", KCM_USER, "system:serviceaccount:jobset-system:other"])
def test_a_job_claiming_a_jobset_from_anyone_else_is_refused(user):
    job = _owned_job(*JOBSET)
    job["metadata"]["labels"][Labels.KUEUE_QUEUE] = "default"  # passes gpu-queue: the claim is the hole
    v = check(job, username=user)
    assert not v.allowed and v.rules == (OWNER_CLAIM,), v.message()
    assert "names JobSet pair as its controller" in v.message()
    assert f"only {JOBSET_USER} makes such Jobs" in v.message()


def test_a_job_claiming_a_cronjob_is_no_claim():
    # Not an owner Kueue leaves its Jobs to: Kueue queues the Job itself.
    job = training_job()
    job["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "CronJob", "name": "c", "uid": "u", "controller": True}
    ]
    v = check(job)
    assert v.allowed and not v.violations, v.message()


def test_only_the_jobset_controller_takes_a_jobs_claim_away():
    made = _owned_job(*JOBSET)
    dropped = copy.deepcopy(made)
    del dropped["metadata"]["ownerReferences"]
    dropped["metadata"]["labels"][Labels.KUEUE_QUEUE] = "default"
    old = copy.deepcopy(made)
    old["metadata"]["labels"][Labels.KUEUE_QUEUE] = "default"
    v = check(dropped, op="UPDATE", old=old)
    assert not v.allowed and v.rules == (OWNER_CLAIM,), v.message()
    assert "takes away the Job's controller reference to JobSet pair" in v.message()
    assert check(dropped, op="UPDATE", old=old, username=JOBSET_USER).allowed


# ---- issue 43: a JobSet's Jobs carry no queue label, yet Kueue counts them through their JobSet.


def test_only_kueue_or_the_jobset_controller_unsuspends_a_jobsets_job():
    """Issue 43, 3: un-suspending a queued JobSet's child Job ran its pods uncounted (only owner-claim's
    "already had it" warning); now kueue-gate refuses it, whatever the old object had."""
    job = _owned_job(*JOBSET)
    job["spec"]["suspend"] = True
    started = copy.deepcopy(job)
    started["spec"]["suspend"] = False
    v = check(started, op="UPDATE", old=job, username="alice")
    assert not v.allowed and v.rules == (KUEUE_GATE,), v.message()
    assert "un-suspends a Job of JobSet pair, which Kueue queues" in v.message()
    assert check(started, op="UPDATE", old=job, username=JOBSET_USER).allowed
    assert check(started, op="UPDATE", old=job, username=KUEUE_USER).allowed
    assert check(job, op="UPDATE", old=started, username="alice").allowed  # suspending is anyone's


def _delete(obj: dict, options: dict, user: str = "alice") -> Verdict:
    group, _, version = obj["apiVersion"].rpartition("/")
    req = review(obj, op="DELETE", username=user, options=options or {"propagationPolicy": None})["request"]
    req["kind"] = {"group": group, "version": version, "kind": obj["kind"]}
    req["object"], req["oldObject"] = None, obj
    req["options"] = options
    return judge(req, STATE, AdmissionConfig())


@pytest.mark.parametrize("options", [{"propagationPolicy": "Orphan"}, {"orphanDependents": True}, {}])
def test_orphaning_deletes_of_a_jobsets_job_are_refused(options):
    """Issue 43, 1: `kubectl delete job <child> --cascade=orphan` then deleting the JobSet left its pods
    running with no Workload."""
    v = _delete(_owned_job(*JOBSET), options)
    assert not v.allowed and v.rules == ("orphan-delete",), v.message()
    assert "JobSet pair, which Kueue queues, owns it" in v.message()
    assert _delete(_owned_job(*JOBSET), {"propagationPolicy": "Background"}).allowed
    assert _delete(_owned_job(*JOBSET), options, user=KUEUE_USER).allowed


def test_orphaning_deletes_of_a_queued_jobset_are_refused():
    js = jobset("leader")
    v = _delete(js, {"propagationPolicy": "Orphan"})
    assert not v.allowed and "LocalQueue default" in v.message(), v.message()
    assert _delete(js, {}).allowed  # a JobSet's default is background
    assert _delete(js, {"propagationPolicy": "Foreground"}).allowed
