"""CEL text for the admission policies: literals, and who sends the request."""

from __future__ import annotations

from collections.abc import Iterable

from admission.identities import KCM_USER

__all__ = ["cel_list", "from_controller", "gang", "q"]


def q(s: str) -> str:
    """A CEL string literal."""
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cel_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(q(i) for i in items) + "]"


def from_controller(user: str) -> str:
    """CEL: the request comes from this controller (its own ServiceAccount, or the shared kcm identity)."""
    return f"(request.userInfo.username == {q(user)} || request.userInfo.username == {q(KCM_USER)})"


def gang(root: str) -> str:
    """CEL: `root` (object or oldObject) is a multi-node job, as gpuctl.domain.gang.gang_nodes counts: a Job
    in Indexed completion mode with min(parallelism, completions) >= 2 (parallelism defaults to 1,
    completions to parallelism)."""
    par = f"(has({root}.spec.parallelism) ? {root}.spec.parallelism : 1)"
    comp = f"(has({root}.spec.completions) ? {root}.spec.completions : {par})"
    return (
        f"request.kind.kind == 'Job' && has({root}.spec.completionMode) && "
        f"{root}.spec.completionMode == 'Indexed' && {par} >= 2 && {comp} >= 2"
    )
