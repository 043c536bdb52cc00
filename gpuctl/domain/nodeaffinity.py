"""Which nodes a pod's nodeSelector and required node affinity admit: Kubernetes' own matching, pure.

kube-scheduler's NodeAffinity filter (k8s.io/component-helpers/scheduling/corev1/nodeaffinity): the
nodeSelector's every key must equal the node's label; of `requiredDuringSchedulingIgnoredDuringExecution`'s
nodeSelectorTerms at least one must match (terms are ORed, a term's requirements ANDed); `matchFields` knows
only `metadata.name`. A requirement whose operator is unknown matches nothing; Gt/Lt compare integers.

`skip` leaves one label key out of the matching (the webhook asks "would these pods fit a node of another
pool if the pool label did not say otherwise"). The terms must have been type-checked (strings where
strings belong), which the webhook does once per request before matching them against every node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "has_other_conditions",
    "listed_values",
    "node_matches",
    "requirement_matches",
    "term_admits",
    "term_matches",
    "term_requires",
]

Term = Mapping[str, Any]


def requirement_matches(expr: Mapping[str, Any], value: str | None) -> bool:
    """A nodeSelectorRequirement against one label value (None: the node lacks the label)."""
    op = expr.get("operator")
    values = expr.get("values") or ()
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        try:
            a, b = int(value or ""), int(values[0])
        except (ValueError, IndexError, TypeError):
            return False
        return a > b if op == "Gt" else a < b
    return False


def term_matches(term: Term, name: str, labels: Mapping[str, str], skip: str | None = None) -> bool:
    """One nodeSelectorTerm against a node (its name and labels), ignoring requirements on key `skip`."""
    for e in term.get("matchExpressions") or ():
        if type(e) is not dict or (skip is not None and e.get("key") == skip):
            continue
        if not requirement_matches(e, labels.get(e.get("key"))):  # type: ignore[arg-type]
            return False
    for e in term.get("matchFields") or ():
        if type(e) is dict and e.get("key") == "metadata.name" and not requirement_matches(e, name):
            return False
    return True


def node_matches(
    name: str,
    labels: Mapping[str, str],
    selector: Mapping[str, str],
    terms: Sequence[Term],
    skip: str | None = None,
) -> bool:
    """Whether a pod with this nodeSelector and these required terms may run on the node."""
    for k, v in selector.items():
        if k == skip:
            continue
        if labels.get(k) != v:
            return False
    if not terms:
        return True
    return any(term_matches(t, name, labels, skip) for t in terms)


def term_admits(term: Term, key: str, value: str) -> bool:
    """Whether a term's requirements on label `key` alone allow a node whose `key` is `value`."""
    for e in term.get("matchExpressions") or ():
        if type(e) is dict and e.get("key") == key and not requirement_matches(e, value):
            return False
    return True


def term_requires(term: Term, key: str) -> bool:
    """Whether the term pins label `key` to listed values (`key In [...]`)."""
    return any(
        type(e) is dict and e.get("key") == key and e.get("operator") == "In"
        for e in term.get("matchExpressions") or ()
    )


def has_other_conditions(term: Term, key: str) -> bool:
    """Whether the term says anything besides label `key` (another label, or matchFields)."""
    return bool(term.get("matchFields")) or any(
        type(e) is dict and e.get("key") != key for e in term.get("matchExpressions") or ()
    )


def listed_values(terms: Iterable[Term], key: str) -> set[str]:
    """Every value the terms list for label `key` with `In`."""
    out: set[str] = set()
    for t in terms:
        for e in t.get("matchExpressions") or ():
            if type(e) is dict and e.get("key") == key and e.get("operator") == "In":
                out.update(str(v) for v in e.get("values") or () if isinstance(v, str))
    return out
