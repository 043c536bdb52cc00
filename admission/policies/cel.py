"""CEL text for the admission policies: literals, and who sends the request."""

from __future__ import annotations

from collections.abc import Iterable

from admission.identities import KCM_USER

__all__ = ["cel_list", "from_controller", "q"]


def q(s: str) -> str:
    """A CEL string literal."""
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cel_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(q(i) for i in items) + "]"


def from_controller(user: str) -> str:
    """CEL: the request comes from this controller (its own ServiceAccount, or the shared kcm identity)."""
    return f"(request.userInfo.username == {q(user)} || request.userInfo.username == {q(KCM_USER)})"
