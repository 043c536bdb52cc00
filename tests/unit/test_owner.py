"""gpuctl.domain.objects.controller_ref / owner_ref: the one answer to "which object owns this" (issue 30),
over the owner references Kueue and Kubernetes actually write."""

from __future__ import annotations

import pytest

from gpuctl.domain.defrag import _job_name, _owner_kind
from gpuctl.domain.demand import job_label, pod_owner_label
from gpuctl.domain.history import job_name, owner_kind
from gpuctl.domain.objects import controller_ref, owner_ref


def ref(kind: str, name: str, *, controller: bool | None = None) -> dict:
    out = {
        "apiVersion": "v1" if kind == "Pod" else "batch/v1",
        "kind": kind,
        "name": name,
        "uid": f"u-{name}",
    }
    if controller is not None:
        out["controller"] = controller
    return out


def obj(*refs: dict, name: str = "wl") -> dict:
    return {"metadata": {"name": name, "namespace": "team-a", "ownerReferences": list(refs)}}


# (case, owner references, controller_ref's name, owner_ref's name)
CASES = [
    ("job-workload", [ref("Job", "train", controller=True)], "train", "train"),
    ("pod-own-workload", [ref("Pod", "web-5d4f-abcde", controller=True)], "web-5d4f-abcde", "web-5d4f-abcde"),
    # Kueue's statefulset integration: a plain reference to the StatefulSet, then one per pod of the group.
    (
        "statefulset-workload",
        [ref("StatefulSet", "nb"), ref("Pod", "nb-0"), ref("Pod", "nb-1")],
        None,
        "nb",
    ),
    ("pod-group-workload", [ref("Pod", "g-0"), ref("Pod", "g-1")], None, "g-0"),
    ("controller-not-first", [ref("Pod", "p"), ref("Job", "j", controller=True)], "j", "j"),
    ("controller-false", [ref("Job", "j", controller=False)], None, "j"),
    ("no-owner", [], None, None),
]


@pytest.mark.parametrize(("refs", "ctrl", "owner"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_controller_and_owner(refs, ctrl, owner) -> None:
    o = obj(*refs)
    assert (controller_ref(o) or {}).get("name") == ctrl
    assert (owner_ref(o) or {}).get("name") == owner


def test_malformed_references_are_skipped_not_raised_on() -> None:
    o = {"metadata": {"ownerReferences": ["junk", None, ref("Job", "j", controller=True)]}}
    assert controller_ref(o)["name"] == "j"
    assert owner_ref({"metadata": {"ownerReferences": "junk"}}) is None
    assert controller_ref(None) is None


def test_every_workload_reader_names_the_statefulset() -> None:
    """A StatefulSet's Workload is the StatefulSet's job in the audit trail, defragmentation and explain
    alike (each used to pick the first owner, the only owner, or the controller, and disagreed)."""
    wl = obj(ref("StatefulSet", "nb"), ref("Pod", "nb-0"), name="statefulset-nb-123")
    assert job_name(wl) == "nb" and owner_kind(wl) == "StatefulSet"
    assert _job_name(wl) == "team-a/nb" and _owner_kind(wl) == "StatefulSet"
    pod = obj(ref("StatefulSet", "nb", controller=True), name="nb-0")
    assert job_label(wl) == pod_owner_label(pod) == "team-a/nb"


def test_a_deployments_pod_workload_is_the_deployments_job() -> None:
    wl = obj(ref("Pod", "web-5d4f9c-x1y2z", controller=True))
    assert (job_name(wl), owner_kind(wl)) == ("web", "Deployment")
