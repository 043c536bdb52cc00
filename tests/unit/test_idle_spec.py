"""`idle:` of kind pool and quota (issue 40): accepted, refused with the field and the fix, stored as the
policy serve reads; the audit trail's records of serve's idle actions; the keep's cap."""

from __future__ import annotations

import json

import pytest

from gpuctl.constants import (
    ACTOR_IDLE,
    IDLE_POLICY_ANNOTATION,
    IDLE_REPORTED_REASON,
    IDLE_STOPPED_ANNOTATION,
    IDLE_STOPPED_AT_ANNOTATION,
    IDLE_STOPPED_REASON,
    KEEP_UNTIL_ANNOTATION,
)
from gpuctl.domain.history import event_records, workload_records
from gpuctl.domain.idle import read_policy
from gpuctl.service.idle_policy import flavor_annotations, job_policy, of_spec
from gpuctl.spec import SpecError, load_text

POOL = """kind: pool
pool: {name: a100}
idle:
  after: 30m
  floor: 2%
  keepMax: 4h
  notebook: {after: 10m}
  inference: {action: zero}
  training: {action: stop}
"""


def _idle(text: str):
    return load_text(text, "p.yaml")[0].spec.idle


def test_a_pool_policy_is_stored_whole_for_serve() -> None:
    annotations = flavor_annotations(_idle(POOL), "a100")
    stored = json.loads(annotations[IDLE_POLICY_ANNOTATION])
    assert stored == {
        "dryRun": False,
        "keepMax": 14400,
        "kinds": {
            "compute": {"action": "floor", "after": 1800, "floor": 0.02},
            "inference": {"action": "zero", "after": 1800, "floor": 0.02},
            "notebook": {"action": "stop", "after": 600, "floor": 0.02},
            "training": {"action": "stop", "after": 1800, "floor": 0.02},
        },
    }
    flavor = {"metadata": {"name": "a100", "annotations": annotations}}
    assert read_policy(flavor, "pool a100").rule("notebook").after == 600


def test_no_block_is_off() -> None:
    assert of_spec(_idle("kind: pool\npool: {name: a}\n"), "pool a") is None
    assert flavor_annotations(None, "a") == {}


@pytest.mark.parametrize(
    ("block", "field", "fix"),
    [
        ("{floor: 150%}", "idle.floor", "between 0 and 1"),
        ("{floor: often}", "idle.floor", "a percentage such as 1%"),
        ("{after: soon}", "idle.after", "a duration such as 30m"),
        ("{after: 0s}", "idle.after", "a duration"),
        ("{notebook: {action: floor}}", "idle.notebook.action", "stop, report, none"),
        ("{inference: {action: stop}}", "idle.inference.action", "floor, zero, report, none"),
        ("{keepMax: forever}", "idle.keepMax", "a duration"),
    ],
)
def test_a_bad_field_is_refused_naming_it_and_the_fix(block: str, field: str, fix: str) -> None:
    with pytest.raises(SpecError) as e:
        _idle(f"kind: quota\nquota: {{name: q}}\nnamespace: {{team-a: {{gpu: 4}}}}\nidle: {block}\n")
    text = str(e.value)
    assert field in text and fix in text, text


def test_the_quota_policy_wins_and_a_hand_edited_one_stops_everything() -> None:
    pool = {"metadata": {"name": "a100", "annotations": flavor_annotations(_idle(POOL), "a100")}}
    quota = {
        "metadata": {
            "name": "team-a",  # the team's ClusterQueue; the quota document's name is its label
            "labels": {"runwhere.ai/quota": "research"},
            "annotations": {IDLE_POLICY_ANNOTATION: '{"dryRun": true}'},
        }
    }
    pol, why = job_policy(quota, pool)
    assert pol is not None and pol.source == "quota research" and pol.dry_run and not why
    assert job_policy(None, pool)[0].source == "pool a100"
    broken = {"metadata": {"name": "team-a", "annotations": {IDLE_POLICY_ANNOTATION: "[1]"}}}
    pol, why = job_policy(broken, pool)
    assert pol is None and "quota team-a" in why


# ----------------------------------------------------------------------------- the audit trail
WL = {
    "metadata": {
        "name": "statefulset-nb-1",
        "namespace": "team-a",
        "uid": "w1",
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "ownerReferences": [{"kind": "StatefulSet", "name": "nb", "uid": "s1"}],
        "annotations": {
            IDLE_STOPPED_ANNOTATION: "GPU activity peak 0%, mean 0% over 10m",
            IDLE_STOPPED_AT_ANNOTATION: "2026-01-01T01:00:00Z",
        },
    },
    "status": {
        "conditions": [
            {"type": "Requeued", "status": "False", "reason": "DeactivatedDueToInactive",
             "lastTransitionTime": "2026-01-01T01:00:01Z"},
        ]
    },
}  # fmt: skip


def test_an_idle_stop_is_serves_with_its_evidence_not_a_users() -> None:
    stopped = [r for r in workload_records(WL) if r.action == "stopped"]
    assert [(r.actor, r.reason) for r in stopped] == [
        (ACTOR_IDLE, "idle, GPU activity peak 0%, mean 0% over 10m")
    ]
    # The same Workload stopped a day later by hand is the user's again.
    later = json.loads(json.dumps(WL))
    later["status"]["conditions"][0]["lastTransitionTime"] = "2026-01-02T01:00:00Z"
    assert [r.actor for r in workload_records(later) if r.action == "stopped"] != [ACTOR_IDLE]


def test_serves_idle_events_are_records_with_the_evidence() -> None:
    def ev(reason: str, message: str) -> dict:
        return {
            "metadata": {"namespace": "team-a", "name": "e"},
            "involvedObject": {"kind": "Workload", "name": "statefulset-nb-1", "namespace": "team-a"},
            "reason": reason,
            "message": message,
            "lastTimestamp": "2026-01-01T01:00:00Z",
        }

    stop = event_records(ev(IDLE_STOPPED_REASON, "stopped: idle, GPU activity peak 0%"), lambda ns, n: WL)
    assert [(r.job, r.action, r.actor, r.reason) for r in stop] == [
        ("nb", "stopped", ACTOR_IDLE, "idle, GPU activity peak 0%")
    ]
    report = event_records(ev(IDLE_REPORTED_REASON, "idle, report due (report only): x"), lambda ns, n: WL)
    assert [(r.action, r.actor) for r in report] == [("idle", ACTOR_IDLE)]


def test_the_keep_annotation_is_a_known_key_for_admission() -> None:
    from admission.validators.labels import KNOWN_KEYS

    assert KEEP_UNTIL_ANNOTATION in KNOWN_KEYS
