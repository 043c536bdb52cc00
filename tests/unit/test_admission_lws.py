"""LeaderWorkerSets under gpuctl's admission (issue 44, docs/admission.md "LeaderWorkerSets"): the webhook
reviews a LeaderWorkerSet's leader and worker templates under its own labels (Kueue queues its groups), the
StatefulSets the LeaderWorkerSet controller makes are checked at their LeaderWorkerSet, and anyone else's
StatefulSet claiming one is judged like any StatefulSet. gpuctl's own LeaderWorkerSet passes."""

from __future__ import annotations

import copy

import pytest

from admission.identities import LWS_USER, STS_MAKERS
from admission.rule_names import GPU_QUEUE, GPU_TOPOLOGY, HOST_PATH, POOL_EXISTS
from admission.rules import AdmissionConfig, Malformed, Verdict
from admission.rules import review as judge
from gpuctl.builders import build
from gpuctl.constants import Labels
from gpuctl.spec import load_text
from tests.unit.test_admission_fixtures import TEAM as NS
from tests.unit.test_admission_fixtures import review, state

STATE = state()


def check(obj: dict, **kw) -> Verdict:
    return judge(review(obj, **kw)["request"], STATE, AdmissionConfig())


def lws() -> dict:
    """What `gpuctl create` makes of a service of 2-pod replicas on the fixtures' pool a100."""
    (doc,) = load_text(
        f"kind: inference\njob: {{name: llm, namespace: {NS}}}\nenvironment: {{image: vllm}}\n"
        "service: {replicas: 2}\nresources: {pool: a100, nodes: 2, gpu: 4, cpu: 1, memory: 1Gi}\n",
        "svc.yaml",
    )
    return build(doc.spec, NS)[0]


def template(obj: dict, which: str) -> dict:
    return obj["spec"]["leaderWorkerTemplate"][which]


def test_gpuctls_leader_worker_set_passes():
    v = check(lws())
    assert v.allowed and not v.violations, v.message()


def test_a_raw_leader_worker_set_without_a_queue_is_refused_once():
    obj = lws()
    del obj["metadata"]["labels"][Labels.KUEUE_QUEUE]
    v = check(obj)
    assert not v.allowed and v.rules == (GPU_QUEUE,), v.message()
    assert v.message().count(f"[{GPU_QUEUE}]") == 1
    assert v.subject == f"LeaderWorkerSet {NS}/llm"


def test_leader_and_worker_templates_are_each_judged_and_named():
    obj = lws()
    worker = template(obj, "workerTemplate")
    worker["spec"]["nodeSelector"][Labels.POOL] = "no-such-pool"
    worker["metadata"]["labels"][Labels.POOL] = "no-such-pool"
    worker["spec"]["volumes"] = [{"name": "h", "hostPath": {"path": "/etc"}}]
    leader = template(obj, "leaderTemplate")
    for key in [k for k in leader["metadata"]["annotations"] if k.startswith("kueue.x-k8s.io/podset-")]:
        del leader["metadata"]["annotations"][key]
    v = check(obj)
    assert {POOL_EXISTS, HOST_PATH, GPU_TOPOLOGY} <= set(v.rules), v.message()
    text = " ".join(x.text() for x in v.violations)
    assert "spec.leaderWorkerTemplate.workerTemplate.spec.nodeSelector[runwhere.ai/pool]" in text
    assert "spec.leaderWorkerTemplate.leaderTemplate.metadata.annotations" in text
    assert "does not write LeaderWorkerSets" in text


def test_without_a_leader_template_the_worker_template_is_every_pod():
    obj = lws()
    del obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    del obj["metadata"]["labels"][Labels.KUEUE_QUEUE]
    v = check(obj)
    assert v.rules == (GPU_QUEUE,), v.message()


def test_a_malformed_template_is_a_bad_request():
    obj = lws()
    obj["spec"]["leaderWorkerTemplate"]["workerTemplate"] = "x"
    with pytest.raises(Malformed, match=r"spec\.leaderWorkerTemplate\.workerTemplate must be an object"):
        check(obj)


def _statefulset(owner_kind: str, owner_api: str) -> dict:
    """A StatefulSet as the LeaderWorkerSet controller makes it: the LeaderWorkerSet's template, GPUs, no
    queue label (Kueue queues the groups through their pods)."""
    tmpl = copy.deepcopy(template(lws(), "workerTemplate"))
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": "llm-0",
            "namespace": NS,
            "labels": {"leaderworkerset.sigs.k8s.io/name": "llm"},
            "ownerReferences": [
                {"apiVersion": owner_api, "kind": owner_kind, "name": "llm", "uid": "u-1", "controller": True}
            ],
        },
        "spec": {"replicas": 1, "template": tmpl},
    }


@pytest.mark.parametrize(("kind", "api"), [("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1"), ("Pod", "v1")])
def test_the_statefulsets_the_lws_controller_makes_are_checked_at_their_lws(kind, api):
    sts = _statefulset(kind, api)
    assert STS_MAKERS[(api.rpartition("/")[0], kind)] == LWS_USER
    v = check(sts, username=LWS_USER)
    assert v.allowed and v.skipped.startswith("made by the LeaderWorkerSet controller"), v
    # Anyone else's StatefulSet claiming a LeaderWorkerSet is a StatefulSet: no queue, refused.
    v = check(sts, username="system:serviceaccount:team-a:member")
    assert not v.allowed and GPU_QUEUE in v.rules, v.message()
