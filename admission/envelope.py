"""The AdmissionReview `request`, decoded once for both evaluators (admission.rules, admission.isolation).

What the API server sends (k8s.io/api admission/v1 AdmissionRequest): `kind` (the object's group, version
and kind), `operation`, `object` and, on UPDATE and DELETE, `oldObject`, `namespace`, `name`, `userInfo`,
`dryRun`, `options` (CreateOptions, UpdateOptions or DeleteOptions). Every field is typed on read
(gpuctl.domain.shape): input no API server would send is `Malformed` (HTTP 400), nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from admission.verdict import Malformed
from gpuctl.domain import objects
from gpuctl.domain.shape import item, list_at, obj_at, str_at

__all__ = ["Envelope", "controller_kind", "controller_ref", "decode", "ref_kind", "subject"]

_OBJECT_OPS: Final = ("CREATE", "UPDATE")
_OTHER_OPS: Final = ("DELETE", "CONNECT")


class Envelope:
    """One decoded request. `obj` and `old` are typed objects (old: UPDATE only); both None for DELETE and
    CONNECT, whose handling is the evaluator's."""

    __slots__ = ("gk", "group", "kind", "obj", "old", "op", "request", "user")

    def __init__(
        self,
        request: Mapping[str, Any],
        group: str,
        kind: str,
        op: str,
        obj: Mapping[str, Any] | None,
        old: Mapping[str, Any] | None,
    ) -> None:
        self.request = request
        self.group = group
        self.kind = kind
        self.gk = (group, kind)
        self.op = op
        self.obj = obj
        self.old = old
        user_info = request.get("userInfo")
        user = user_info.get("username") if type(user_info) is dict else None
        self.user: str = user if type(user) is str else ""

    def namespace(self) -> str:
        """The request's namespace, else the object's own metadata.namespace."""
        request = self.request
        ns = request.get("namespace")
        if type(ns) is not str:
            ns = str_at(request, "namespace", "request")
        if not ns:
            ns = str_at(obj_at(self.obj or {}, "metadata", "request.object"), "namespace", "metadata")
        return ns

    def field_manager(self) -> str:
        options = self.request.get("options")
        fm = options.get("fieldManager") if type(options) is dict else None
        return fm if type(fm) is str else ""


def decode(request: Any) -> Envelope:
    """The Envelope of an AdmissionReview `request`, or Malformed saying what is wrong with it."""
    if type(request) is not dict:
        raise Malformed("request must be an object")
    # `x = get(); if type(x) is not ...: x = str_at(...)`: the typed reads' checks, their error paths (and
    # f-strings) only taken for a missing or mistyped value.
    kind_ref = request.get("kind")
    if type(kind_ref) is not dict:
        kind_ref = obj_at(request, "kind", "request")
    group = kind_ref.get("group")
    if type(group) is not str:
        group = str_at(kind_ref, "group", "request.kind")
    kind = kind_ref.get("kind")
    if type(kind) is not str:
        kind = str_at(kind_ref, "kind", "request.kind")
    if not kind:
        raise Malformed("request.kind.kind is missing")
    op = request.get("operation")
    if type(op) is not str:
        op = str_at(request, "operation", "request")
    if op not in _OBJECT_OPS:
        if op in _OTHER_OPS:
            return Envelope(request, group, kind, op, None, None)
        raise Malformed(f"request.operation {op!r} is not CREATE, UPDATE, DELETE or CONNECT")
    obj = request.get("object")
    if type(obj) is not dict:
        raise Malformed(f"request.object must be an object for {op}")
    old = request.get("oldObject") if op == "UPDATE" else None
    if old is not None and type(old) is not dict:
        raise Malformed("request.oldObject must be an object")
    return Envelope(request, group, kind, op, obj, old)


def subject(kind: str, ns: str, obj: Mapping[str, Any], request: Mapping[str, Any]) -> str:
    """How denials and logs name the object: `Pod team-a/p`, `Pod team-a/gen-*` (generateName), `Node n`."""
    meta = obj.get("metadata")
    name = request.get("name") or ""
    if not name and type(meta) is dict:
        name = meta.get("name") or (f"{meta.get('generateName')}*" if meta.get("generateName") else "")
    name = name if type(name) is str and name else "<unnamed>"
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"


def controller_ref(meta: Mapping[str, Any], where: str) -> Mapping[str, Any] | None:
    """The object's controller owner reference: gpuctl.domain.objects.controller_ref (Kubernetes' rule,
    the one owner lookup), after the webhook's type check of every reference (Malformed, HTTP 400)."""
    for i, ref in enumerate(list_at(meta, "ownerReferences", where)):
        item(ref, f"{where}.ownerReferences[{i}]")
    return objects.controller_ref({"metadata": meta})


def ref_kind(ref: Mapping[str, Any]) -> tuple[str, str]:
    """(apiGroup, kind) an owner reference names ("" for a missing part; core kinds have group "")."""
    api, kind = ref.get("apiVersion"), ref.get("kind")
    api = api if type(api) is str else ""
    return (api.rpartition("/")[0] if "/" in api else "", kind if type(kind) is str else "")


def controller_kind(meta: Mapping[str, Any], where: str) -> tuple[str, str] | None:
    """(apiGroup, kind) of the controller reference, when it names both (what the identity skips read)."""
    ref = controller_ref(meta, where)
    if ref is None or type(ref.get("apiVersion")) is not str or type(ref.get("kind")) is not str:
        return None
    return ref_kind(ref)
