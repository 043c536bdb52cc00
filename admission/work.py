"""The object under review (a Pod, or a Job, Deployment, StatefulSet or ReplicaSet with its pod template, a
JobSet with one pod template per replicated job, or a LeaderWorkerSet with its leader and worker templates),
reduced to what the team namespaces' rules read, each
part typed once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.constants import Labels
from gpuctl.domain.shape import EMPTY, item, list_at, obj_at, strmap_at

__all__ = ["Work", "queue_name", "reduce", "reduce_all"]


@dataclass(slots=True)
class Work:
    kind: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    tmpl_labels: Mapping[str, str]  # pod template metadata; empty for a Pod
    tmpl_annotations: Mapping[str, str]
    spec: Mapping[str, Any]  # the pod spec
    spec_path: str
    has_template: bool
    obj_spec: Mapping[str, Any]  # the object's own spec (a Job's suspend); a Pod's: the pod spec
    tmpl_path: str = "spec.template"  # where the pod template is (a JobSet's: in its replicated job)
    name: str = ""  # the object's metadata.name ("" under generateName: not known at admission)


def reduce(kind: str, obj: Mapping[str, Any], where: str) -> Work:
    """The Work of `obj` (at `where`: request.object or request.oldObject); Malformed for a mistyped part."""
    labels, annotations, spec = _head(obj, where)
    if kind == "Pod":
        w = Work(kind, labels, annotations, EMPTY, EMPTY, spec, "spec", False, spec)
    else:
        w = _with_template(kind, labels, annotations, spec, spec, where, "spec")
    meta = obj.get("metadata")
    name = meta.get("name") if type(meta) is dict else None
    w.name = name if type(name) is str else ""
    return w


def reduce_all(kind: str, obj: Mapping[str, Any], where: str) -> list[Work]:
    """Every Work of `obj`: one for most kinds; a JobSet's, one per replicated job (its Job template's pod
    template, under the JobSet's own labels and spec: the JobSet is what Kueue queues)."""
    if kind == "LeaderWorkerSet":
        return _groups(obj, where)
    if kind != "JobSet":
        return [reduce(kind, obj, where)]
    labels, annotations, spec = _head(obj, where)
    out = []
    for i, rj in enumerate(list_at(spec, "replicatedJobs", f"{where}.spec")):
        rjp = f"spec.replicatedJobs[{i}]"
        job = obj_at(item(rj, f"{where}.{rjp}"), "template", f"{where}.{rjp}")
        job_spec = obj_at(job, "spec", f"{where}.{rjp}.template")
        out.append(_with_template(kind, labels, annotations, job_spec, spec, where, f"{rjp}.template.spec"))
    return out


def _groups(obj: Mapping[str, Any], where: str) -> list[Work]:
    """A LeaderWorkerSet's Works: its leader template (when it has one) and its worker template, under its
    own labels and spec (Kueue queues each group of the LeaderWorkerSet, built from both: docs/serving.md)."""
    labels, annotations, spec = _head(obj, where)
    at = "spec.leaderWorkerTemplate"
    lwt = obj_at(spec, "leaderWorkerTemplate", f"{where}.spec")
    keys = (
        ("leaderTemplate", "workerTemplate") if lwt.get("leaderTemplate") is not None else ("workerTemplate",)
    )
    return [_with_template("LeaderWorkerSet", labels, annotations, lwt, spec, where, at, key) for key in keys]


def _head(
    obj: Mapping[str, Any], where: str
) -> tuple[Mapping[str, str], Mapping[str, str], Mapping[str, Any]]:
    """(labels, annotations, spec) of the object itself."""
    # Each `x = get(); if type(x) is not dict: x = obj_at(...)` is obj_at's check with the error path (and
    # its f-string) only taken when the value is missing or wrong: same results, same errors, same order.
    meta = obj.get("metadata")
    if type(meta) is not dict:
        meta = obj_at(obj, "metadata", where)
    labels = strmap_at(meta, "labels", f"{where}.metadata")
    annotations = strmap_at(meta, "annotations", f"{where}.metadata")
    spec = obj.get("spec")
    if type(spec) is not dict:
        spec = obj_at(obj, "spec", where)
    return labels, annotations, spec


def _with_template(
    kind: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    holder: Mapping[str, Any],
    obj_spec: Mapping[str, Any],
    where: str,
    at: str,
    key: str = "template",
) -> Work:
    """The Work of the pod template at `at`.`key` (`holder` is the object there)."""
    tp = f"{at}.{key}"
    tmpl = holder.get(key)
    if type(tmpl) is not dict:
        tmpl = obj_at(holder, key, f"{where}.{at}")
    tmeta = tmpl.get("metadata")
    if type(tmeta) is not dict:
        tmeta = obj_at(tmpl, "metadata", f"{where}.{tp}")
    tmpl_labels = strmap_at(tmeta, "labels", f"{where}.{tp}.metadata")
    tmpl_annotations = strmap_at(tmeta, "annotations", f"{where}.{tp}.metadata")
    pspec = tmpl.get("spec")
    if type(pspec) is not dict:
        pspec = obj_at(tmpl, "spec", f"{where}.{tp}")
    return Work(
        kind, labels, annotations, tmpl_labels, tmpl_annotations, pspec, f"{tp}.spec", True, obj_spec, tp
    )


def queue_name(w: Work) -> str:
    """The queue Kueue will use: Jobs, Deployments, StatefulSets and Pods carry it on the object; the pods of
    a bare ReplicaSet are Kueue-managed pods, so there it is the template's. Kueue still reads the
    (deprecated) annotation of the same name too."""
    src, ann = (w.tmpl_labels, w.tmpl_annotations) if w.kind == "ReplicaSet" else (w.labels, w.annotations)
    return src.get(Labels.KUEUE_QUEUE) or ann.get(Labels.KUEUE_QUEUE) or ""
