"""CEL text for the admission policies: literals, who sends the request, the object's pod spec, a gang, and
the shape of a rule's twin in a policy (`TeamCel`, `IsolationCel`): each rule's own CEL lives in its validator
file (admission/validators/), beside its Python check; admission.registry names which rule has which."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from admission.identities import KCM_USER

__all__ = [
    "POD_SPEC_PATH",
    "DeleteCel",
    "IsolationCel",
    "TeamCel",
    "Variables",
    "cel_list",
    "from_controller",
    "gang",
    "old_skip",
    "pod_spec",
    "q",
    "var",
    "var_name",
]

# Variables of a rule, for one root (object or oldObject): (root, pre) -> [(name, expression), ...].
Variables = Callable[[str, str], list[tuple[str, str]]]


@dataclass(frozen=True)
class TeamCel:
    """A team-namespace rule's twin in the `gpuctl-admission` ValidatingAdmissionPolicy
    (admission.policies.team).

    `variables(root, pre)` builds the rule's variables for `object` (pre "") and `oldObject` (pre "old"),
    in order (a variable reads only earlier ones; rules sharing one builder list the same function, and it is
    emitted once); `finding` names the one holding the findings (strings naming place and value: on UPDATE
    only findings the old object did not have deny). `change()`, for rules judged on what an UPDATE
    changes, builds one variable after every object's: its entries deny whatever the old object had."""

    finding: str = ""
    variables: Variables | None = None
    change: Callable[[], tuple[str, str]] | None = None


@dataclass(frozen=True)
class IsolationCel:
    """An isolation rule's twin in the `gpuctl-isolation` ValidatingAdmissionPolicy
    (admission.policies.isolation): `finding(spec, gpus)` is the CEL list of findings of one pod spec (the
    variables `spec` and `gpus` of the root), named `name` (old: `oldName`)."""

    name: str
    finding: Callable[[str, str], str]


@dataclass(frozen=True)
class DeleteCel:
    """A DELETE rule's twin in the `gpuctl-admission-delete` policy (admission.policies.deletes): the kinds
    it judges (`(group, kind, version)`), its variables (over `oldObject` and `request.options`: `object` is
    null on DELETE; the admin's `variables.maxTerminationGrace` comes first) and its validation (applied to
    its kinds only)."""

    kinds: tuple[tuple[str, str, str], ...]
    variables: Callable[[], list[dict]]
    validation: Callable[[], dict]


def q(s: str) -> str:
    """A CEL string literal."""
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cel_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(q(i) for i in items) + "]"


def var_name(pre: str, base: str) -> str:
    """A variable's name: `labels` for the object, `oldLabels` for the old object."""
    return f"{pre}{base[0].upper()}{base[1:]}" if pre else base


def var(pre: str, base: str) -> str:
    return f"variables.{var_name(pre, base)}"


def old_skip(root: str) -> str:
    """CEL prefix: no findings of oldObject on CREATE (it is null)."""
    return "request.operation != 'UPDATE' ? [] : " if root == "oldObject" else ""


def pod_spec(root: str) -> str:
    """CEL: the pod spec of `root` (object or oldObject), a Pod's or its pod template's."""
    return f"(request.kind.kind == 'Pod' ? {root}.spec : {root}.spec.template.spec)"


# CEL: where that pod spec is, as findings name it.
POD_SPEC_PATH: Final = "(request.kind.kind == 'Pod' ? 'spec' : 'spec.template.spec')"


def from_controller(user: str) -> str:
    """CEL: the request comes from this controller (its own ServiceAccount, or the shared kcm identity)."""
    return f"(request.userInfo.username == {q(user)} || request.userInfo.username == {q(KCM_USER)})"


def gang(root: str) -> str:
    """CEL twin of `gpuctl.domain.gang.gang_nodes(job) >= 2`, the one definition of a gang (a multi-node job):
    `root` (object or oldObject) is a Job in Indexed completion mode with min(parallelism, completions) >= 2
    (parallelism defaults to 1, completions to parallelism). The topology policy's gang mutation and
    set-aside-toleration's CEL (admission.validators.set_aside) read it here."""
    par = f"(has({root}.spec.parallelism) ? {root}.spec.parallelism : 1)"
    comp = f"(has({root}.spec.completions) ? {root}.spec.completions : {par})"
    return (
        f"request.kind.kind == 'Job' && has({root}.spec.completionMode) && "
        f"{root}.spec.completionMode == 'Indexed' && {par} >= 2 && {comp} >= 2"
    )
