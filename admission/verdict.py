"""The answer to one AdmissionReview: findings (`Violation`), the verdict, and the UPDATE diff.

Both evaluators (admission.rules for team namespaces and Nodes, admission.isolation for every other
namespace) end here: `decide` applies the mode and the UPDATE rule, `judge` runs it with the old object's
findings computed only when the new object has any.

On UPDATE only violations the old object did not already have are denied (compared by `Violation.identity`,
the rule and the exact finding): objects created before the webhook existed (or in warn mode) stay
updatable, but a *different* finding of the same rule (another foreign pool, another host path) is new.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, NamedTuple

from admission.identities import KUEUE_USER
from admission.rule_names import CACHE_RULES
from gpuctl.constants import (
    DEFAULT_ALLOWED_EXTENDED_RESOURCES,
    EXEMPT_NAMESPACES,
    MAX_TERMINATION_GRACE_SECONDS,
)
from gpuctl.domain.shape import ShapeError

__all__ = [
    "ALLOW",
    "MAX_WARNING_CHARS",
    "AdmissionConfig",
    "Malformed",
    "Mode",
    "Verdict",
    "Violation",
    "clip",
    "decide",
    "judge",
    "not_ready",
]

# Not a well-formed AdmissionReview request; the server answers HTTP 400 with its text. The typed reads of
# gpuctl.domain.shape (and gpuctl.domain.gpus) raise it, so a client's bad field is one error everywhere.
Malformed = ShapeError

# Kubernetes truncates longer warnings; one violation per warning keeps each readable.
MAX_WARNING_CHARS: Final = 256


class Mode(StrEnum):
    ENFORCE = "enforce"  # violations deny the request
    WARN = "warn"  # violations become AdmissionReview warnings; everything is allowed


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """Webhook settings that change verdicts."""

    mode: Mode = Mode.ENFORCE
    # hostPath prefixes the admin allows despite constants.DENIED_HOST_PATHS (normalised absolute paths).
    allowed_host_paths: tuple[str, ...] = ()
    # Who Kueue's controller is (`--kueue-user`; the chart's kueue.namespace/serviceAccountName): its
    # requests are never judged. Only this identity: a default-named ServiceAccount in a namespace Kueue
    # does not run in is an ordinary user.
    kueue_user: str = KUEUE_USER
    # Namespaces whose pods may run on pool nodes (`--exempt-namespace`; the chart's
    # exemptNamespaces): the isolation rules skip them, as the policy's binding does.
    exempt_namespaces: tuple[str, ...] = EXEMPT_NAMESPACES
    # The longest terminationGracePeriodSeconds a team pod may ask (`--max-termination-grace`).
    max_termination_grace: int = MAX_TERMINATION_GRACE_SECONDS
    # Extended resources a team pod may request though Kueue does not charge them
    # (`--allowed-extended-resource`: `name` or `prefix*`).
    allowed_extended_resources: tuple[str, ...] = DEFAULT_ALLOWED_EXTENDED_RESOURCES


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: what is wrong and how to fix it, in words a `kubectl apply` user can act on.

    `key` identifies the violation across an UPDATE's old and new object (see module docstring); it defaults
    to the rule name.
    """

    rule: str
    message: str
    fix: str
    key: str = ""

    @property
    def identity(self) -> str:
        """What makes two findings the same across an UPDATE: the key where the message quotes cluster state
        that may change between the two (sizes, node names), else the rule and its message."""
        return self.key or f"{self.rule}: {self.message}"

    def text(self) -> str:
        return f"[{self.rule}] {self.message}. Fix: {self.fix}"


class Verdict(NamedTuple):
    """The answer to one request. `violations` are what the rules found whatever the mode; `allowed` applies
    the mode; `warnings` are what the API server will show the client (kubectl prints them).

    Immutable like a frozen dataclass, but a tuple: one is made per request, and a frozen dataclass's
    field-by-field object.__setattr__ cost more than some rules."""

    allowed: bool
    subject: str = ""
    violations: tuple[Violation, ...] = ()
    warnings: tuple[str, ...] = ()
    # Why no rule ran (unmanaged namespace, pod checked at its owner, ...), for logs and metrics.
    skipped: str = ""
    # HTTP-style code and reason of the AdmissionResponse status when denied.
    code: int = 200

    @property
    def cache_dependent(self) -> bool:
        """Denied only by rules that read the cache (see CACHE_RULES)."""
        found = self.violations
        return not self.allowed and bool(found) and all(v.rule in CACHE_RULES for v in found)

    @property
    def rules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v.rule for v in self.violations))

    def message(self) -> str:
        """The denial text (kubectl prints it after `admission webhook ... denied the request:`)."""
        if not self.violations:
            return ""
        parts = "; ".join(v.text() for v in self.violations)
        return f"gpuctl: {self.subject} breaks {len(self.violations)} rule(s): {parts}"


ALLOW: Final = Verdict(allowed=True)


def decide(
    subject: str, found: list[Violation], warn: list[str], before: list[Violation], config: AdmissionConfig
) -> Verdict:
    """The verdict on `found` (and warnings), given the old object's findings `before` (UPDATE; else [])."""
    if before:
        known = {v.identity for v in before}
        kept = [v for v in found if v.identity in known]
        found = [v for v in found if v.identity not in known]
        warn = warn + [f"not denied because the object already had it: {v.text()}" for v in kept]
    if not found:
        return Verdict(allowed=True, subject=subject, warnings=clip(warn)) if warn else Verdict(True, subject)
    if config.mode is Mode.WARN:
        texts = [f"gpuctl would deny {subject}: {v.text()}" for v in found]
        return Verdict(allowed=True, subject=subject, violations=tuple(found), warnings=clip(texts + warn))
    return Verdict(allowed=False, subject=subject, violations=tuple(found), warnings=clip(warn), code=403)


def judge(
    subject: str,
    found: list[Violation],
    warn: list[str],
    old_findings: Callable[[], list[Violation]] | None,
    config: AdmissionConfig,
) -> Verdict:
    """decide(), with the old object's findings (`old_findings`, None on CREATE) computed only when the new
    object has any: a clean object is allowed whatever the old one had. A malformed old object is judged as
    none: the new object is judged on its own."""
    if not found and not warn:
        return Verdict(True, subject)
    before: list[Violation] = []
    if old_findings is not None:
        try:
            before = old_findings()
        except Malformed:
            before = []
    return decide(subject, found, warn, before, config)


def not_ready(config: AdmissionConfig, subject: str) -> Verdict:
    """The answer while the cache has not listed everything yet (enforce: 503, warn: a warning)."""
    text = "the gpuctl webhook has not loaded the cluster state yet; retry in a few seconds"
    if config.mode is Mode.WARN:
        return Verdict(
            allowed=True,
            subject=subject,
            warnings=(f"gpuctl could not check {subject}: {text}",),
            skipped="cache not synced",
        )
    v = Violation("not-ready", text, "retry; if it persists, check the webhook pods' logs")
    return Verdict(allowed=False, subject=subject, violations=(v,), skipped="cache not synced", code=503)


def clip(texts: list[str]) -> tuple[str, ...]:
    return tuple(t if len(t) <= MAX_WARNING_CHARS else t[: MAX_WARNING_CHARS - 1] + "…" for t in texts)
