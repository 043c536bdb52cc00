"""`unknown-key`, `job-type` and `priority`: what gpuctl's labels and annotations say, said right.

- `unknown-key`  no `runwhere.ai/` label or annotation key gpuctl does not know
                 (`constants.KNOWN_RUNWHERE_KEYS` + `EXTRA_`, `AUDIT_`, `IDLE_RUNWHERE_KEYS`): a typo
                 would otherwise be silently ignored. On workloads and on Nodes.
- `job-type`     `runwhere.ai/job-type` is one of gpuctl's four job kinds.
- `priority`     `runwhere.ai/priority` is high/medium/low, the same on object and pod template, and agrees
                 with `kueue.x-k8s.io/priority-class` (`gpuctl-<priority>`, on the object); no misspelt
                 `gpuctl-*` class. An autoscaled service's tier (`runwhere.ai/serving-tier: floor|burst`,
                 docs/serving.md) and its class (`gpuctl-serving-floor|burst`) go together.

Python (`check_labels`) and CEL (`cel_variables`: the team policy's `unknownKey`, `jobType`, `priority`)
side by side; the fixes the policy states are UNKNOWN_KEY_FIX, JOB_TYPE_FIX, PRIORITY_FIX (the webhook's
findings name the nearest key or the matching class where it knows them).

Written for CPU per request: job-type and priority read six label values and nothing else, so their
findings are memoised on them; "is there an unknown key" is memoised on the run of keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Final

from admission.policies.cel import TeamCel, cel_list, q, var, var_name
from admission.rule_names import JOB_TYPE, PRIORITY, UNKNOWN_KEY
from admission.validators.hints import closest_memo, did_you_mean, names
from admission.verdict import Violation
from admission.work import Work
from gpuctl.constants import (
    AUDIT_RUNWHERE_KEYS,
    EXTRA_RUNWHERE_KEYS,
    IDLE_RUNWHERE_KEYS,
    JOB_KINDS,
    KNOWN_RUNWHERE_KEYS,
    PRIORITY_CLASS,
    SERVING_CLASS,
    Labels,
    Priority,
    Tier,
)

__all__ = [
    "CLASS_PREFIX",
    "JOB_TYPES",
    "JOB_TYPE_CEL",
    "JOB_TYPE_FIX",
    "KNOWN_KEYS",
    "PRIORITY_CEL",
    "PRIORITY_CLASSES",
    "PRIORITY_FIX",
    "PRIORITY_VALUES",
    "UNKNOWN_KEY_CEL",
    "UNKNOWN_KEY_FIX",
    "check_labels",
    "check_unknown_keys",
    "class_of",
]

PRIORITY_VALUES: Final = tuple(p.value for p in Priority)
JOB_TYPES: Final = tuple(k.value for k in JOB_KINDS)
_ALL_KEYS: Final = (*KNOWN_RUNWHERE_KEYS, *EXTRA_RUNWHERE_KEYS, *AUDIT_RUNWHERE_KEYS, *IDLE_RUNWHERE_KEYS)
KNOWN_KEYS: Final = frozenset(_ALL_KEYS)
_KNOWN_SUFFIXES: Final = tuple(k.removeprefix(Labels.PREFIX) for k in _ALL_KEYS)
PRIORITY_CLASSES: Final = frozenset(PRIORITY_CLASS.values())
# An autoscaled service's tiers (docs/serving.md): each class only with its runwhere.ai/serving-tier.
TIERS: Final = tuple(t.value for t in Tier)
SERVING_CLASSES: Final = frozenset(SERVING_CLASS.values())
_TIER_OF_CLASS: Final = {cls: t.value for t, cls in SERVING_CLASS.items()}
_TIER: Final = Labels.SERVING_TIER
CLASS_PREFIX: Final = PRIORITY_CLASS[Priority.HIGH].removesuffix(Priority.HIGH.value)  # "gpuctl-"
# Label keys read on every request, as module constants (a class attribute lookup per use adds up).
_PREFIX: Final = Labels.PREFIX
_JOB_TYPE: Final = Labels.JOB_TYPE
_PRIORITY: Final = Labels.PRIORITY
_KUEUE_PRIORITY: Final = Labels.KUEUE_PRIORITY
_CLASS_OF: Final = ", ".join(f"{p.value}: {PRIORITY_CLASS[p]}" for p in Priority)

UNKNOWN_KEY_FIX: Final = "remove or rename it (`gpuctl` lists its keys in docs/admission.md)"
JOB_TYPE_FIX: Final = f"use one of {', '.join(JOB_TYPES)}"
PRIORITY_FIX: Final = (
    f"use one of {', '.join(PRIORITY_VALUES)} with the matching {Labels.KUEUE_PRIORITY} ({_CLASS_OF}), the "
    "same on object and template"
)


def check_unknown_keys(places: Iterable[tuple[str, Mapping[str, str]]]) -> list[Violation]:
    """unknown-key, for workloads and Nodes alike: (where, labels or annotations) pairs."""
    out: list[Violation] = []
    for where, m in places:
        for key in m:
            if key.startswith(Labels.PREFIX) and key not in KNOWN_KEYS:
                # Compare what follows the shared prefix, or every key looks "close" to every other.
                hit = closest_memo(key.removeprefix(Labels.PREFIX), _KNOWN_SUFFIXES)
                hit = f"{Labels.PREFIX}{hit}" if hit else None
                fix = f"rename it to {hit}" if hit else f"remove it (gpuctl's keys: {names(KNOWN_KEYS, 12)})"
                hint = f' (did you mean "{hit}"?)' if hit else ""
                out.append(
                    Violation(UNKNOWN_KEY, f"unknown key {key} in {where}{hint}", fix, f"{UNKNOWN_KEY}={key}")
                )
    return out


# Whether a run of label and annotation keys holds a runwhere.ai/ key gpuctl does not know, memoised on the
# keys: they recur (every object gpuctl or a controller makes carries the same ones), so a lookup replaces a
# pass over them. Bounded: input that never repeats only misses, and the table starts over when full.
KEYS_SEEN: Final[dict[tuple[str, ...], bool]] = {}
KEYS_SEEN_MAX: Final = 4096


def _has_unknown_key(keys: tuple[str, ...]) -> bool:
    """Whether check_unknown_keys would find anything among `keys`."""
    hit = KEYS_SEEN.get(keys)
    if hit is None:
        hit = any(k.startswith(_PREFIX) and k not in KNOWN_KEYS for k in keys)
        if len(KEYS_SEEN) >= KEYS_SEEN_MAX:
            KEYS_SEEN.clear()
        KEYS_SEEN[keys] = hit
    return hit


def check_labels(w: Work) -> list[Violation]:
    """unknown-key, job-type, priority of a workload (object and pod template)."""
    labels, tl = w.labels, w.tmpl_labels
    out: list[Violation] = []
    if _has_unknown_key((*labels, *w.annotations, *tl, *w.tmpl_annotations)):
        out = check_unknown_keys(
            (
                ("metadata.labels", labels),
                ("metadata.annotations", w.annotations),
                (f"{w.tmpl_path}.metadata.labels", tl),
                (f"{w.tmpl_path}.metadata.annotations", w.tmpl_annotations),
            )
        )
    found = _label_rules(
        labels.get(_JOB_TYPE),
        tl.get(_JOB_TYPE),
        labels.get(_PRIORITY),
        tl.get(_PRIORITY),
        labels.get(_KUEUE_PRIORITY),
        tl.get(_KUEUE_PRIORITY),
        w.tmpl_path,
        labels.get(_TIER),
        tl.get(_TIER),
    )
    if found:
        out += found
    return out


@lru_cache(maxsize=1024)
def _label_rules(
    jt: str | None,
    tmpl_jt: str | None,
    p: str | None,
    tmpl_p: str | None,
    cls: str | None,
    tmpl_cls: str | None,
    tmpl_path: str,
    tier: str | None = None,
    tmpl_tier: str | None = None,
) -> tuple[Violation, ...]:
    """job-type and priority, from the object's and its pod template's label values (None: no label)."""
    out: list[Violation] = []
    places = ("metadata.labels", f"{tmpl_path}.metadata.labels")
    for where, v in zip(places, (jt, tmpl_jt), strict=True):
        if v is not None and v not in JOB_TYPES:
            out.append(
                Violation(
                    JOB_TYPE,
                    f'{where}[{Labels.JOB_TYPE}] is "{v}"{did_you_mean(v, JOB_TYPES)}',
                    JOB_TYPE_FIX,
                )
            )
    found = _priority(((p, cls), (tmpl_p, tmpl_cls)), places, (tier, tmpl_tier))
    if found is not None:
        out.append(found)
    return tuple(out)


def _priority(
    levels: tuple[tuple[str | None, str | None], ...],
    places: tuple[str, str],
    tiers: tuple[str | None, str | None] = (None, None),
) -> Violation | None:
    """The first priority finding, from (runwhere.ai/priority, kueue.x-k8s.io/priority-class) of the object,
    then of its pod template: each level that says one must say a valid one, the levels must agree, and
    Kueue's priority class (what Kueue actually schedules by) must be the matching gpuctl class. An
    autoscaled service's tier (runwhere.ai/serving-tier, per level) and its serving class go together."""
    said: str | None = None
    for where, (p, _) in zip(places, levels, strict=True):
        if p is None:
            continue
        if p not in PRIORITY_VALUES:
            return Violation(
                PRIORITY,
                f'{where}[{Labels.PRIORITY}] is "{p}"{did_you_mean(p, PRIORITY_VALUES)}',
                f"use one of {', '.join(PRIORITY_VALUES)}",
            )
        if said is not None and p != said:
            return Violation(
                PRIORITY,
                f'{Labels.PRIORITY} is "{said}" on the object but "{p}" on its pod template',
                "use the same priority in both places",
            )
        said = p
    for where, t in zip(places, tiers, strict=True):
        if t is not None and t not in TIERS:
            return Violation(
                PRIORITY,
                f'{where}[{_TIER}] is "{t}"{did_you_mean(t, TIERS)}',
                "use floor or burst (gpuctl writes it on an autoscaled service: docs/serving.md)",
            )
    for where, (_, cls), t in zip(places, levels, tiers, strict=True):
        if cls is None:
            continue
        if cls.startswith(CLASS_PREFIX) and cls not in PRIORITY_CLASSES and cls not in SERVING_CLASSES:
            return Violation(
                PRIORITY,
                f'{where}[{Labels.KUEUE_PRIORITY}] is "{cls}", not a gpuctl priority class'
                f"{did_you_mean(cls, PRIORITY_CLASSES | SERVING_CLASSES)}",
                f"use one of {', '.join(sorted(PRIORITY_CLASSES))}",
            )
        if cls in SERVING_CLASSES and t != _TIER_OF_CLASS[cls]:
            return Violation(
                PRIORITY,
                f'{where}[{Labels.KUEUE_PRIORITY}] is "{cls}" but {where}[{_TIER}] is '
                + (f'"{t}"' if t is not None else "not set"),
                f"an autoscaled service's class goes with its tier ({_TIER}: {_TIER_OF_CLASS[cls]}); create "
                "the service with service.autoscaling (docs/serving.md), or use gpuctl-high|medium|low",
            )
        if said is not None and cls != PRIORITY_CLASS[Priority(said)]:
            return Violation(
                PRIORITY,
                f'{Labels.PRIORITY} is "{said}" but {where}[{Labels.KUEUE_PRIORITY}] is "{cls}"',
                f"set {Labels.KUEUE_PRIORITY}: {PRIORITY_CLASS[Priority(said)]} "
                f"(or change {Labels.PRIORITY})",
            )
    tier, cls = tiers[0], levels[0][1]
    if tier in TIERS and cls != SERVING_CLASS[Tier(tier)]:
        return Violation(
            PRIORITY,
            f'{places[0]}[{_TIER}] is "{tier}" but {places[0]}[{Labels.KUEUE_PRIORITY}] is '
            + (f'"{cls}"' if cls is not None else "not set"),
            f"set {Labels.KUEUE_PRIORITY}: {SERVING_CLASS[Tier(tier)]} (an autoscaled service's {tier})",
        )
    if said is not None and levels[0][1] is None:
        return Violation(
            PRIORITY,
            f'{Labels.PRIORITY} is "{said}" but the object has no {Labels.KUEUE_PRIORITY} label, '
            f"so Kueue would schedule it at the default priority",
            f"add label {Labels.KUEUE_PRIORITY}: {PRIORITY_CLASS[Priority(said)]}",
        )
    return None


# ---------------------------------------------------------------------------------------------------------
# CEL (the team policy): the same keys, kinds and classes; priority's findings in the same order (the first).

_PLACES: Final = (
    ("metadata.labels", "labels"),
    ("metadata.annotations", "annotations"),
    ("spec.template.metadata.labels", "tmplLabels"),
    ("spec.template.metadata.annotations", "tmplAnnotations"),
)


def cel_variables(root: str, pre: str) -> list[tuple[str, str]]:
    """`unknownKey`, `jobType` and `priority` (with its steps) of one root."""
    known = cel_list(sorted(KNOWN_KEYS))
    unknown = " +\n".join(
        f"{var(pre, v)}.filter(k, k.startsWith({q(Labels.PREFIX)}) && !(k in {known}))"
        f".map(k, 'unknown key ' + k + ' in {where}')"
        for where, v in _PLACES
    )
    jt, types = q(Labels.JOB_TYPE), cel_list(JOB_TYPES)
    job_type = " +\n".join(
        f"({jt} in {var(pre, v)} && !({var(pre, v)}[{jt}] in {types}) ? "
        f"['{where}[{Labels.JOB_TYPE}] is \"' + {var(pre, v)}[{jt}] + '\"'] : [])"
        for where, v in (("metadata.labels", "labels"), ("spec.template.metadata.labels", "tmplLabels"))
    )
    return [
        (var_name(pre, "unknownKey"), unknown),
        (var_name(pre, "jobType"), job_type),
        *_priority_vars(pre),
    ]


def class_of() -> str:
    """CEL: the map priority -> its gpuctl class."""
    return "{" + ", ".join(f"{q(p.value)}: {q(PRIORITY_CLASS[p])}" for p in Priority) + "}"


def _priority_vars(pre: str) -> list[tuple[str, str]]:
    """_priority's findings: the first in the same order, or none."""
    pk, ck = q(Labels.PRIORITY), q(Labels.KUEUE_PRIORITY)
    values, classes = cel_list(PRIORITY_VALUES), cel_list(sorted(PRIORITY_CLASSES))
    lp, tp = var(pre, "priorityObj"), var(pre, "priorityTmpl")
    lc, tc = var(pre, "classObj"), var(pre, "classTmpl")
    said = var(pre, "prioritySaid")
    labels, tmpl = var(pre, "labels"), var(pre, "tmplLabels")
    lt, tt = var(pre, "tierObj"), var(pre, "tierTmpl")
    tiers, serving = cel_list(TIERS), cel_list(sorted(SERVING_CLASSES))
    tier_of = "{" + ", ".join(f"{q(c)}: {q(t)}" for c, t in sorted(_TIER_OF_CLASS.items())) + "}"
    class_of_tier = "{" + ", ".join(f"{q(t.value)}: {q(SERVING_CLASS[t])}" for t in Tier) + "}"
    where_l, where_t = "metadata.labels", "spec.template.metadata.labels"
    steps = [
        (f"{lp} != '' && !({lp} in {values})", f"'{where_l}[{Labels.PRIORITY}] is \"' + {lp} + '\"'"),
        (f"{tp} != '' && !({tp} in {values})", f"'{where_t}[{Labels.PRIORITY}] is \"' + {tp} + '\"'"),
        (
            f"{lp} != '' && {tp} != '' && {lp} != {tp}",
            f"'{Labels.PRIORITY} is \"' + {lp} + '\" on the object but \"' + {tp} + '\" on its pod template'",
        ),
        (f"{lt} != '' && !({lt} in {tiers})", f"'{where_l}[{_TIER}] is \"' + {lt} + '\"'"),
        (f"{tt} != '' && !({tt} in {tiers})", f"'{where_t}[{_TIER}] is \"' + {tt} + '\"'"),
    ]
    for where, c, t in ((where_l, lc, lt), (where_t, tc, tt)):
        steps += [
            (
                f"{c}.startsWith({q(CLASS_PREFIX)}) && !({c} in {classes}) && !({c} in {serving})",
                f"'{where}[{Labels.KUEUE_PRIORITY}] is \"' + {c} + '\", not a gpuctl priority class'",
            ),
            (
                f"{c} in {serving} && {tier_of}[{c}] != {t}",
                f"'{where}[{Labels.KUEUE_PRIORITY}] is \"' + {c} + '\" but {where}[{_TIER}] is ' + "
                f"({t} != '' ? '\"' + {t} + '\"' : 'not set')",
            ),
            (
                f"{said} != '' && {c} != '' && {c} != {class_of()}[{said}]",
                f"'{Labels.PRIORITY} is \"' + {said} + '\" but {where}[{Labels.KUEUE_PRIORITY}] is \"' + "
                f"{c} + '\"'",
            ),
        ]
    steps.append(
        (
            f"{lt} in {tiers} && {lc} != {class_of_tier}[{lt}]",
            f"'{where_l}[{_TIER}] is \"' + {lt} + '\" but {where_l}[{Labels.KUEUE_PRIORITY}] is ' + "
            f"({lc} != '' ? '\"' + {lc} + '\"' : 'not set')",
        )
    )
    steps.append(
        (
            f"{said} != '' && !({ck} in {labels})",
            f"'{Labels.PRIORITY} is \"' + {said} + '\" but the object has no {Labels.KUEUE_PRIORITY} label'",
        )
    )
    chain = "".join(f"{cond} ? [{msg}] :\n" for cond, msg in steps) + "[]"
    return [
        (var_name(pre, "priorityObj"), f"{pk} in {labels} ? {labels}[{pk}] : ''"),
        (var_name(pre, "priorityTmpl"), f"{pk} in {tmpl} ? {tmpl}[{pk}] : ''"),
        (var_name(pre, "classObj"), f"{ck} in {labels} ? {labels}[{ck}] : ''"),
        (var_name(pre, "classTmpl"), f"{ck} in {tmpl} ? {tmpl}[{ck}] : ''"),
        (var_name(pre, "prioritySaid"), f"{lp} != '' ? {lp} : {tp}"),
        (var_name(pre, "tierObj"), f"{q(_TIER)} in {labels} ? {labels}[{q(_TIER)}] : ''"),
        (var_name(pre, "tierTmpl"), f"{q(_TIER)} in {tmpl} ? {tmpl}[{q(_TIER)}] : ''"),
        (var_name(pre, "priority"), chain),
    ]


UNKNOWN_KEY_CEL: Final = TeamCel("unknownKey", cel_variables)
JOB_TYPE_CEL: Final = TeamCel("jobType", cel_variables)
PRIORITY_CEL: Final = TeamCel("priority", cel_variables)
