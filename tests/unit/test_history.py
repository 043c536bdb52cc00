"""gpuctl.domain.history: Workloads and Events -> audit records, and the bounded ring."""

from __future__ import annotations

from gpuctl.constants import (
    AUDIT_ACTIVE_SET_BY_ANNOTATION,
    AUDIT_SUBMITTED_BY_ANNOTATION,
    DEACTIVATED_MAX_RUNTIME,
    DEFRAG_MOVED_ANNOTATION,
    DEFRAG_MOVED_AT_ANNOTATION,
    MULTIKUEUE_CHECK,
)
from gpuctl.domain.history import (
    ACTOR_UNKNOWN,
    Record,
    active_manager,
    event_records,
    job_name,
    preemptor,
    submitter,
    workload_records,
)
from gpuctl.domain.history_ring import dump, load, merge

PREEMPT_MSG = (
    "Preempted to accommodate a workload (UID: u-high, JobUID: j-high) due to prioritization in the "
    "ClusterQueue; preemptor path: /gpuctl/team-a; preemptee path: /gpuctl/team-a"
)


def wl(conditions=(), *, owner=("Job", "train"), uid="u-low", annotations=None, managed=(), **meta):
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"job-{owner[1]}-abcde",
            "namespace": "team-a",
            "uid": uid,
            "creationTimestamp": "2026-11-25T10:00:00Z",
            "ownerReferences": [{"kind": owner[0], "name": owner[1], "controller": True}],
            "annotations": annotations or {},
            "managedFields": list(managed),
            **meta,
        },
        "spec": {"active": True},
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": m, "lastTransitionTime": ts}
                for t, s, r, m, ts in conditions
            ],
            "admission": {
                "clusterQueue": "team-a",
                "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "a100"}}],
            },
        },
    }


def actions(records):
    return [(r.action, r.actor) for r in records]


def test_submitted_and_admitted_with_actor_and_reason():
    w = wl([("Admitted", "True", "Admitted", "", "2026-11-25T10:00:03Z")])
    recs = workload_records(w, submitted_by="alice")
    assert actions(recs) == [("submitted", "alice"), ("admitted", "kueue")]
    assert recs[0].job == "train" and recs[0].time == "2026-11-25T10:00:00Z"
    assert recs[1].reason == "admitted by ClusterQueue team-a in pool a100"


def test_preempted_names_the_preemptor_of_the_same_team_and_only_the_team_of_another():
    conds = [
        ("Evicted", "True", "Preempted", PREEMPT_MSG, "2026-11-25T10:05:00Z"),
        ("Preempted", "True", "InClusterQueue", PREEMPT_MSG, "2026-11-25T10:05:00Z"),
    ]
    same_team = workload_records(wl(conds), uids={"u-high": ("team-a", "urgent")})
    pre = [r for r in same_team if r.action == "preempted"]
    assert len(pre) == 1
    assert pre[0].actor == "job urgent"
    assert pre[0].reason == "InClusterQueue: prioritization in the ClusterQueue"
    other = PREEMPT_MSG.replace("/gpuctl/team-a; preemptee", "/gpuctl/team-b; preemptee")
    rec = [
        r
        for r in workload_records(
            wl([("Preempted", "True", "InCohortReclamation", other, "2026-11-25T10:05:00Z")]),
            uids={"u-high": ("team-b", "secret-name")},
        )
        if r.action == "preempted"
    ]
    assert rec[0].actor == "a job of team team-b"  # another team's job name is not shown
    assert preemptor("garbage", {}, "team-a") == "kueue"


def test_stop_by_gpuctl_names_the_user_kueue_stop_names_kueue():
    managed = [
        {"manager": "kueue", "time": "2026-11-25T10:00:00Z", "fieldsV1": {"f:spec": {"f:podSets": {}}}},
        {
            "manager": "gpuctl-stop:bob",
            "time": "2026-11-25T10:07:00Z",
            "fieldsV1": {"f:spec": {"f:active": {}}},
        },
    ]
    w = wl([("Requeued", "False", "Deactivated", "", "2026-11-25T10:07:01Z")], managed=managed)
    w["spec"]["active"] = False
    assert ("stopped", "bob (unverified)") in actions(workload_records(w))
    kueuectl = [
        {"manager": "kueuectl", "time": "2026-11-25T10:07:00Z", "fieldsV1": {"f:spec": {"f:active": {}}}}
    ]
    assert active_manager(wl(managed=kueuectl)) == ("via kueuectl (unverified)", "2026-11-25T10:07:00Z")
    w2 = wl([("Evicted", "True", DEACTIVATED_MAX_RUNTIME, "", "2026-11-25T11:00:00Z")])
    stop = [r for r in workload_records(w2) if r.action == "stopped"]
    assert stop[0].actor == "kueue" and "maxRuntime" in stop[0].reason


def test_resumed_and_finished_and_deleted():
    w = wl(
        [
            ("Requeued", "True", "Reactivated", "", "2026-11-25T10:09:00Z"),
            ("Finished", "True", "Succeeded", "Job finished successfully", "2026-11-25T10:30:00Z"),
        ],
        managed=[{"manager": "gpuctl-resume:bob", "time": "2026-11-25T10:08:59Z", "active": True}],
        deletionTimestamp="2026-11-25T10:40:00Z",
    )
    got = {r.action: r for r in workload_records(w)}
    assert got["resumed"].actor == "bob (unverified)"
    assert got["finished"].reason == "Succeeded: Job finished successfully"
    assert got["deleted"].actor == ACTOR_UNKNOWN and got["deleted"].time == "2026-11-25T10:40:00Z"


def test_a_move_is_moved_not_a_stop_and_resume():
    w = wl(
        [
            ("Evicted", "True", "Deactivated", "", "2026-11-25T10:10:01Z"),
            ("Requeued", "True", "Reactivated", "", "2026-11-25T10:10:06Z"),
        ],
        annotations={
            DEFRAG_MOVED_ANNOTATION: "to free node n1 for job big",
            DEFRAG_MOVED_AT_ANNOTATION: "2026-11-25T10:10:00Z",
        },
    )
    got = [a for a in actions(workload_records(w)) if a[0] in ("moved", "stopped", "resumed")]
    assert got == [("moved", "gpuctl-serve (defrag)")]
    w["metadata"]["annotations"] = {}  # the same conditions without a move: a stop and a resume
    assert [a for a, _ in actions(workload_records(w)) if a in ("stopped", "resumed")] == [
        "stopped",
        "resumed",
    ]


def test_job_name_of_a_deployments_pod_workload():
    pod_wl = wl(owner=("Pod", "serve-7d9f8b6c5d-x2x7q"))
    assert job_name(pod_wl) == "serve"
    (sub,) = workload_records(pod_wl)
    assert sub.reason == "pod serve-7d9f8b6c5d-x2x7q of Deployment serve queued"
    assert job_name(wl(owner=("StatefulSet", "nb"))) == "nb"


def test_submitter_prefers_the_annotation_then_the_first_manager():
    job = {"metadata": {"annotations": {AUDIT_SUBMITTED_BY_ANNOTATION: "alice"}}}
    assert submitter(job) == "alice"
    raw = {
        "metadata": {
            "managedFields": [
                {"manager": "kube-controller-manager", "time": "2026-11-25T10:00:05Z"},
                {"manager": "kubectl-create", "time": "2026-11-25T10:00:00Z"},
            ]
        }
    }
    assert submitter(raw) == "via kubectl-create"
    assert submitter(None) == ACTOR_UNKNOWN


def test_events_core_and_events_k8s_io():
    w = wl(uid="u-low")
    core = {
        "metadata": {"namespace": "team-a", "name": "e1"},
        "involvedObject": {
            "kind": "Workload",
            "name": w["metadata"]["name"],
            "namespace": "team-a",
            "uid": "u-low",
        },
        "reason": "Preempted",
        "message": PREEMPT_MSG,
        "lastTimestamp": "2026-11-25T10:05:01Z",
    }
    new = {
        "metadata": {"namespace": "team-a", "name": "e2"},
        "regarding": {"kind": "Workload", "name": "gone", "namespace": "team-a", "uid": "u-x"},
        "reason": "Admitted",
        "note": "Admitted by ClusterQueue team-a, wait time since reservation was 0s",
        "eventTime": "2026-11-25T10:00:03.123456Z",
    }
    find = {("team-a", w["metadata"]["name"]): w}.get
    (p,) = event_records(core, lambda ns, n: find((ns, n)), {"u-high": ("team-a", "urgent")})
    assert (p.action, p.actor, p.job, p.uid) == ("preempted", "job urgent", "train", "u-low")
    (a,) = event_records(new, lambda ns, n: None)
    assert (a.action, a.job, a.time, a.reason) == (
        "admitted",
        "gone",
        "2026-11-25T10:00:03Z",
        "Admitted by ClusterQueue team-a",
    )
    assert event_records({**core, "involvedObject": {"kind": "Pod"}}, lambda ns, n: None) == []


def dispatched(w: dict, cluster: str) -> dict:
    """A MultiKueue manager's Workload once its check placed it in worker `cluster` (Kueue v0.19.2)."""
    w["status"]["clusterName"] = cluster
    w["status"]["admissionChecks"] = [
        {
            "name": MULTIKUEUE_CHECK,
            "state": "Ready",
            "message": f'The workload got reservation on "{cluster}"',
        }
    ]
    return w


def test_admitted_on_a_multikueue_manager_names_the_worker_cluster():
    """From the condition and from the Event alike (whichever the ring keeps of the two)."""
    w = dispatched(wl([("Admitted", "True", "Admitted", "", "2026-11-25T10:00:03Z")]), "worker-a")
    (adm,) = [r for r in workload_records(w) if r.action == "admitted"]
    assert adm.reason == "admitted by ClusterQueue team-a in pool a100 in cluster worker-a"
    event = {
        "metadata": {"namespace": "team-a", "name": "e3"},
        "involvedObject": {"kind": "Workload", "name": w["metadata"]["name"], "namespace": "team-a"},
        "reason": "Admitted",
        "message": "Admitted by ClusterQueue team-a, wait time since reservation was 1s",
        "lastTimestamp": "2026-11-25T10:00:03Z",
    }
    (a,) = event_records(event, lambda ns, n: w)
    assert a.reason == "Admitted by ClusterQueue team-a in pool a100 in cluster worker-a"
    # Not dispatched (a local cluster's Workload): no cluster named.
    local = wl([("Admitted", "True", "Admitted", "", "2026-11-25T10:00:03Z")])
    assert next(r for r in workload_records(local) if r.action == "admitted").reason.endswith("in pool a100")


def test_evicted_for_other_reasons_than_preemption_or_a_stop_is_its_own_record():
    lost = "The workload was evicted: the admission check gpuctl-multikueue was rejected"
    w = wl([("Evicted", "True", "AdmissionCheck", lost, "2026-11-25T10:20:00Z")])
    (ev,) = [r for r in workload_records(w) if r.action == "evicted"]
    assert (ev.actor, ev.reason, ev.time) == ("kueue", f"AdmissionCheck: {lost}", "2026-11-25T10:20:00Z")
    timeout = wl([("Evicted", "True", "PodsReadyTimeout", "", "2026-11-25T10:20:00Z")])
    assert [r.reason for r in workload_records(timeout) if r.action == "evicted"] == ["PodsReadyTimeout"]
    # A preemption and a stop are their own actions, not also "evicted".
    for reason in ("Preempted", "Deactivated", DEACTIVATED_MAX_RUNTIME):
        w = wl([("Evicted", "True", reason, "", "2026-11-25T10:20:00Z")])
        assert "evicted" not in [r.action for r in workload_records(w)], reason
    assert "evicted" not in [
        r.action for r in workload_records(wl([("Evicted", "False", "x", "", "2026-11-25T10:20:00Z")]))
    ]


def rec(i, action="submitted", uid=None):
    return Record(
        f"2026-11-25T10:{i // 60:02d}:{i % 60:02d}Z", "team-a", f"j{i}", action, "a", "r", uid or f"u{i}"
    )


def test_merge_dedupes_an_event_and_a_condition_seconds_apart():
    a = rec(1, "preempted", uid="u")
    b = Record("2026-11-25T10:00:04Z", "team-a", "j1", "preempted", "other", "r", "u")
    ring, n = merge([a], [b])
    assert (ring, n) == ([a], 0)
    ring, n = merge(ring, [rec(100, "preempted", uid="u")])  # a second preemption, later: kept
    assert n == 1 and len(ring) == 2


def test_merge_keeps_the_newest_within_the_bounds_and_never_resurrects_older():
    ring, n = merge([], [rec(i) for i in range(10)], max_records=5)
    assert [r.job for r in ring] == ["j5", "j6", "j7", "j8", "j9"] and n == 5
    again, n = merge(ring, [rec(i) for i in range(10)], max_records=5)  # a restart reads it all again
    assert again == ring and n == 0
    small, _ = merge([], [rec(i) for i in range(10)], max_bytes=3 * (len(rec(0).line()) + 1))
    assert len(small) == 3


def test_dump_load_round_trip_skips_foreign_lines():
    rs = [rec(1), rec(2)]
    assert load(dump(rs) + "not json\n{}\n") == rs


def test_one_second_keeps_a_jobs_order():
    sub = Record("2026-11-25T10:00:00Z", "team-a", "j", "submitted", "a", "r", "u")
    adm = Record("2026-11-25T10:00:00Z", "team-a", "j", "admitted", "kueue", "r", "u")
    ring, _ = merge([], [adm, sub])
    assert [r.action for r in ring] == ["submitted", "admitted"]


# ----------------------------------------------------------------------------- issue 33: claims and leaks
def test_a_field_manager_named_kueue_is_a_claim_not_kueue():
    """A tenant's `kubectl patch --field-manager=kueue` of spec.active used to read as Kueue's stop."""
    forged = [{"manager": "kueue", "time": "2026-11-25T10:07:00Z", "fieldsV1": {"f:spec": {"f:active": {}}}}]
    w = wl([("Requeued", "False", "Deactivated", "", "2026-11-25T10:07:01Z")], managed=forged)
    w["spec"]["active"] = False
    (stop,) = [r for r in workload_records(w) if r.action == "stopped"]
    assert stop.actor == "via kueue (unverified)" and stop.actor != "kueue"
    bob = [
        {
            "manager": "gpuctl-stop:bob",
            "time": "2026-11-25T10:07:00Z",
            "fieldsV1": {"f:spec": {"f:active": {}}},
        }
    ]
    assert active_manager(wl(managed=bob))[0] == "bob (unverified)"


def test_the_stop_actor_stamped_by_admission_is_shown_unmarked_whatever_the_field_manager_says():
    """runwhere.ai/active-set-by is the API server's word (the gpuctl-active-set-by policy): it wins over
    the field manager, which a client chooses (here a forged `kueue`), when it was written no earlier than
    the last change of spec.active (managedFields' times)."""
    key = AUDIT_ACTIVE_SET_BY_ANNOTATION
    both = {"f:spec": {"f:active": {}}, "f:metadata": {"f:annotations": {f"f:{key}": {}}}}
    forged = [{"manager": "kueue", "time": "2026-11-25T10:07:00Z", "fieldsV1": both}]
    w = wl(
        [("Requeued", "False", "Deactivated", "", "2026-11-25T10:07:01Z")],
        managed=forged,
        annotations={key: "alice"},
    )
    w["spec"]["active"] = False
    (stop,) = [r for r in workload_records(w) if r.action == "stopped"]
    assert stop.actor == "alice"
    assert active_manager(w) == ("alice", "2026-11-25T10:07:00Z")
    # serve's cache keeps only a marker of it (gpuctl.server.cache.trim_workload).
    trimmed = [
        {"manager": "kueue", "time": "2026-11-25T10:07:00Z", "active": True},
        {"stamp": "2026-11-25T10:07:00Z"},
    ]
    assert active_manager(wl(managed=trimmed, annotations={key: "alice"}))[0] == "alice"


def test_a_stamp_written_by_admission_is_owned_by_nobody_and_is_the_actor():
    """The policy's mutation appears in no managedFields entry (as the API server records it): the stamp
    of `gpuctl stop` (whose patch carries no annotation) is the stop's actor."""
    active = {"f:spec": {"f:active": {}}}
    managed = [{"manager": "gpuctl-stop:bob", "time": "2026-11-25T10:07:00Z", "fieldsV1": active}]
    w = wl(managed=managed, annotations={AUDIT_ACTIVE_SET_BY_ANNOTATION: "bob-the-user"})
    assert active_manager(w) == ("bob-the-user", "2026-11-25T10:07:00Z")


def test_a_stamp_left_by_an_earlier_change_is_not_the_last_changes_actor():
    """Where no policy stamps (Kubernetes < 1.36), a stop by kueuectl after an API stop that named alice
    leaves alice's stamp behind: the later change's own field manager is shown, unverified."""
    key = AUDIT_ACTIVE_SET_BY_ANNOTATION
    both = {"f:spec": {"f:active": {}}, "f:metadata": {"f:annotations": {f"f:{key}": {}}}}
    managed = [
        {"manager": "gpuctl-stop:alice", "time": "2026-11-25T10:00:00Z", "fieldsV1": both},
        {"manager": "kueuectl", "time": "2026-11-25T10:07:00Z", "fieldsV1": {"f:spec": {"f:active": {}}}},
    ]
    w = wl(managed=managed, annotations={key: "alice"})
    assert active_manager(w) == ("via kueuectl (unverified)", "2026-11-25T10:07:00Z")


def test_an_event_about_another_namespaces_workload_writes_nothing():
    """An events.k8s.io Event in team-a `regarding` team-b's Workload wrote team-b's job and Workload UID
    into team-a's history."""
    other = wl([], uid="u-b")
    other["metadata"]["namespace"] = "team-b"

    def workloads(ns, n):
        return other if (ns, n) == ("team-b", other["metadata"]["name"]) else None

    ev = {
        "metadata": {"name": "x", "namespace": "team-a"},
        "regarding": {
            "kind": "Workload",
            "name": other["metadata"]["name"],
            "namespace": "team-b",
            "uid": "u-b",
        },
        "reason": "Admitted",
        "note": "Admitted by ClusterQueue team-b",
        "eventTime": "2026-11-25T10:00:00.000000Z",
    }
    assert event_records(ev, workloads) == []
    same_ns = {**ev, "metadata": {"name": "x", "namespace": "team-b"}}
    (rec,) = event_records(same_ns, workloads)
    assert (rec.namespace, rec.uid, rec.action) == ("team-b", "u-b", "admitted")


def test_serve_set_aside_events_are_records_of_the_gang():
    """Issue 43: a set-aside and its end are said on the gang's Workload, and the audit trail keeps both."""
    w = wl(uid="u-gang")
    find = {("team-a", w["metadata"]["name"]): w}.get
    base = {
        "metadata": {"namespace": "team-a", "name": "e"},
        "involvedObject": {"kind": "Workload", "name": w["metadata"]["name"], "namespace": "team-a"},
        "lastTimestamp": "2026-11-25T11:00:00Z",
    }
    out = [
        event_records({**base, "reason": reason, "message": msg}, lambda ns, n: find((ns, n)))
        for reason, msg in (
            ("GpuctlSetAside", "gpuctl serve set nodes n1, n2 aside for this job"),
            (
                "GpuctlSetAsideEnded",
                "gpuctl serve gave back the nodes set aside for this job: it lasted 7200s",
            ),
        )
    ]
    assert [(r.action, r.actor, r.job, r.uid) for (r,) in out] == [
        ("set-aside", "gpuctl-serve (set-aside)", "train", "u-gang"),
        ("set-aside-ended", "gpuctl-serve (set-aside)", "train", "u-gang"),
    ]
    assert "it lasted 7200s" in out[1][0].reason
