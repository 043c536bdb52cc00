"""`pool-exists`, `pool-placement` and `gpu-fits-node`: where the pods may run, against the cached nodes.

- `pool-exists`     every `runwhere.ai/pool` (label, template label, nodeSelector, or a required node
                    affinity's `In` list: gpuctl's `pool: [P, Q]`) names a pool that exists.
- `pool-placement`  the places that name the pool agree; nodeSelector, required node affinity and nodeName
                    keep the pods on their pool's nodes (a pool label alone does not: Kueue may place them
                    on any pool). Warned, not denied: a selector no node of the pool matches *yet*.
- `gpu-fits-node`   a pod asks for no more GPUs than the largest node of its pool(s) has (else it never
                    runs); without a pool, than the largest pool node at all. Pools with no nodes are not
                    judged.

`placement_of` reads what the object says about its pool once; each rule is a small function of it. The
node matching is Kubernetes' own (gpuctl.domain.nodeaffinity).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.rule_names import GPU_FITS_NODE, POOL_EXISTS, POOL_PLACEMENT
from admission.state import ClusterState
from admission.validators.hints import did_you_mean, names
from admission.verdict import Malformed, Violation
from admission.work import Work
from gpuctl.constants import Labels
from gpuctl.domain.nodeaffinity import (
    has_other_conditions,
    listed_values,
    node_matches,
    term_admits,
    term_requires,
)
from gpuctl.domain.shape import EMPTY, item, list_at, obj_at, str_at, strmap_at

__all__ = ["Placement", "check_gpu_fits_node", "check_pool_exists", "check_pool_placement", "placement_of"]

_POOL = Labels.POOL
Terms = list[Mapping[str, Any]]


class Placement:
    """What a pod (template) says about where it runs."""

    __slots__ = ("any_pool", "conflict", "node_name", "pool", "selector", "spec_path", "terms")

    def __init__(
        self,
        spec_path: str,
        selector: Mapping[str, str],
        terms: Terms,
        node_name: str,
        pool: str | None,
        conflict: tuple[tuple[str, str], ...] = (),
        any_pool: bool = False,
    ) -> None:
        self.spec_path = spec_path
        self.selector = selector
        self.terms = terms  # required node affinity terms, typed
        self.node_name = node_name
        # The one existing pool it names, the same wherever it is said (label, template label, nodeSelector).
        self.pool = pool
        # Where a pool is named, when they disagree or name a pool that does not exist ((where, value), ...).
        self.conflict = conflict
        # No single pool, but every required affinity term lists pools (gpuctl's `pool: [P, Q]`,
        # docs/queueing.md).
        self.any_pool = any_pool

    @property
    def selector_pool(self) -> str | None:
        return self.selector.get(_POOL)


def placement_of(w: Work, state: ClusterState) -> Placement:
    spec, sp = w.spec, w.spec_path
    selector = EMPTY if spec.get("nodeSelector") is None else strmap_at(spec, "nodeSelector", sp)
    label_pool, tmpl_pool, selector_pool = w.labels.get(_POOL), w.tmpl_labels.get(_POOL), selector.get(_POOL)
    terms: Terms = (
        []
        if spec.get("affinity") is None
        else _typed_terms(_required_terms(spec, sp), f"{sp}.affinity...nodeSelectorTerms")
    )
    node_name = spec.get("nodeName")
    if node_name is None:
        node_name = ""
    elif type(node_name) is not str:
        node_name = str_at(spec, "nodeName", sp)
    said = label_pool if label_pool is not None else tmpl_pool if tmpl_pool is not None else selector_pool
    if said is None:
        any_pool = bool(terms) and all(term_requires(t, _POOL) for t in terms)
        return Placement(sp, selector, terms, node_name, None, (), any_pool)
    if (
        (tmpl_pool is None or tmpl_pool == said)
        and (selector_pool is None or selector_pool == said)
        and said in state.pools
    ):
        return Placement(sp, selector, terms, node_name, said)  # the usual case
    sources = tuple(
        (where, v)
        for where, v in (
            ("metadata.labels", label_pool),
            (f"{w.tmpl_path}.metadata.labels", tmpl_pool),
            (f"{sp}.nodeSelector", selector_pool),
        )
        if v is not None
    )
    return Placement(sp, selector, terms, node_name, None, sources)


def check_pool_exists(p: Placement, state: ClusterState) -> list[Violation]:
    """pool-exists: each pool named, by label or nodeSelector or in an any-pool affinity list, exists."""
    out: list[Violation] = []
    if p.conflict:
        for where, v in dict((v, (where, v)) for where, v in p.conflict).values():
            if v not in state.pools:
                out.append(
                    Violation(
                        POOL_EXISTS,
                        f'{where}[{_POOL}] names pool "{v}", which does not exist'
                        f"{did_you_mean(v, state.pools)}",
                        f"use an existing pool ({names(state.pools)}); `gpuctl get pools` lists them",
                        f"{POOL_EXISTS}={v}",
                    )
                )
    elif p.any_pool:
        for v in _missing(p, state):
            out.append(
                Violation(
                    POOL_EXISTS,
                    f'{p.spec_path}.affinity[{_POOL} In] names pool "{v}", which does not exist'
                    f"{did_you_mean(v, state.pools)}",
                    f"use existing pools ({names(state.pools)}); `gpuctl get pools` lists them",
                    f"{POOL_EXISTS}={v}",
                )
            )
    return out


def check_pool_placement(p: Placement, state: ClusterState, warn: list[str]) -> list[Violation]:
    """pool-placement: the pool is named one way, and the pods are kept on its nodes."""
    if p.conflict:
        if len({v for _, v in p.conflict}) <= 1:
            return []
        said = ", ".join(f'{where} says "{v}"' for where, v in p.conflict)
        return [Violation(POOL_PLACEMENT, f"the pool is ambiguous: {said}", "use one pool everywhere")]
    pool = p.pool
    if pool is None:
        return []
    out: list[Violation] = []
    sp, terms, selector_pool = p.spec_path, p.terms, p.selector_pool
    if selector_pool is None and not (terms and all(term_requires(t, _POOL) for t in terms)):
        out.append(
            Violation(
                POOL_PLACEMENT,
                f'labelled pool "{pool}" but nothing keeps the pods there: Kueue may run them on any pool',
                f"add {sp}.nodeSelector[{_POOL}]: {pool}",
            )
        )
    if terms and not any(term_admits(t, _POOL, pool) for t in terms):
        out.append(
            Violation(
                POOL_PLACEMENT,
                f'required node affinity excludes pool "{pool}"',
                f"remove the {_POOL} condition from the affinity or make it allow {pool}",
            )
        )
    if p.node_name:
        node = state.nodes.get(p.node_name)
        if node is not None and node.pool != pool:
            where = f'pool "{node.pool}"' if node.pool else "no pool"
            out.append(
                Violation(
                    POOL_PLACEMENT,
                    f'{sp}.nodeName {p.node_name} is a node of {where}, not of pool "{pool}"',
                    f"remove nodeName (the scheduler picks a node of {pool}) or name one of its nodes",
                    f"{POOL_PLACEMENT}: nodeName={p.node_name} pool={pool}",
                )
            )
    # Any nodeSelector key besides the pool's, or any other condition in the terms.
    if len(p.selector) > (selector_pool is not None) or (
        terms and any(has_other_conditions(t, _POOL) for t in terms)
    ):
        out += _selector_outside_pool(p, pool, state, warn)
    return out


def _selector_outside_pool(p: Placement, pool: str, state: ClusterState, warn: list[str]) -> list[Violation]:
    """A nodeSelector/affinity that says more than the pool and matches no node of it: denied when it matches
    other pools' nodes (the pool is wrong), warned when it matches none yet."""
    selector, terms = p.selector, p.terms
    members = state.pool_nodes.get(pool, ())
    if not members or any(node_matches(n.name, n.labels, selector, terms) for n in members):
        return []
    elsewhere = sorted(
        {
            n.pool
            for n in state.nodes.values()
            if n.pool and n.pool != pool and node_matches(n.name, n.labels, selector, terms, _POOL)
        }
    )
    if not elsewhere:
        warn.append(
            f'no node of pool "{pool}" matches the nodeSelector/affinity: the pods stay Pending '
            f"until one does"
        )
        return []
    return [
        Violation(
            POOL_PLACEMENT,
            f'nodeSelector/affinity match no node of pool "{pool}", only nodes of pool(s) '
            f"{', '.join(elsewhere)}",
            f"change the pool to {elsewhere[0]} or the selector to match nodes of {pool}",
            f"{POOL_PLACEMENT}: selector outside pool={pool}",
        )
    ]


def check_gpu_fits_node(p: Placement, gpus: int, state: ClusterState) -> list[Violation]:
    """gpu-fits-node: one pod's `gpus` fit the largest node of its pool (or pools, or of any pool)."""
    if p.conflict or not gpus:
        return []  # a pool that does not exist, or is named two ways: pool-exists / pool-placement say so
    if p.any_pool:
        return _fits_listed(p, gpus, state)
    pool = p.pool
    if pool is not None:
        if not state.pool_nodes.get(pool):
            return []  # no nodes yet (or scaled to zero): nothing proves it can never run
        biggest = state.pool_max_gpu.get(pool, 0)
        if gpus <= biggest:
            return []
        return [
            Violation(
                GPU_FITS_NODE,
                f'a pod asks for {gpus} GPUs but the largest node of pool "{pool}" has {biggest}, '
                f"so it could never run",
                f"ask for at most {biggest} GPUs per pod (split the work across pods) or use a pool with "
                f"bigger nodes",
                f"{GPU_FITS_NODE}={gpus}@{pool}",
            )
        ]
    if not state.pool_max_gpu:
        return []
    best_pool, biggest = max(state.pool_max_gpu.items(), key=lambda kv: (kv[1], kv[0]))
    if gpus <= biggest:
        return []
    return [
        Violation(
            GPU_FITS_NODE,
            f"a pod asks for {gpus} GPUs but no pool has a node that big (largest: {biggest} in pool "
            f'"{best_pool}"), so it could never run',
            f"ask for at most {biggest} GPUs per pod",
            f"{GPU_FITS_NODE}={gpus}",
        )
    ]


def _missing(p: Placement, state: ClusterState) -> list[str]:
    return [v for v in sorted(listed_values(p.terms, _POOL)) if v not in state.pools]


def _fits_listed(p: Placement, gpus: int, state: ClusterState) -> list[Violation]:
    """A pod of an any-pool job fits the largest node of one of its pools (when they all exist)."""
    listed = sorted(listed_values(p.terms, _POOL))
    if any(v not in state.pools for v in listed):
        return []
    sized = {v: state.pool_max_gpu.get(v, 0) for v in listed if state.pool_nodes.get(v)}
    if not sized or gpus <= max(sized.values()):
        return []
    best, biggest = max(sized.items(), key=lambda kv: (kv[1], kv[0]))
    return [
        Violation(
            GPU_FITS_NODE,
            f"a pod asks for {gpus} GPUs but the largest node of its pools ({', '.join(listed)}) has "
            f'{biggest} (pool "{best}"), so it could never run',
            f"ask for at most {biggest} GPUs per pod or list a pool with bigger nodes",
            f"{GPU_FITS_NODE}={gpus}",
        )
    ]


def _required_terms(spec: Mapping[str, Any], where: str) -> Terms:
    aff = obj_at(obj_at(spec, "affinity", where), "nodeAffinity", f"{where}.affinity")
    req = obj_at(aff, "requiredDuringSchedulingIgnoredDuringExecution", f"{where}.affinity.nodeAffinity")
    path = f"{where}.affinity.nodeAffinity.required"
    return [
        item(t, f"{path}.nodeSelectorTerms[{i}]")
        for i, t in enumerate(list_at(req, "nodeSelectorTerms", path))
    ]


def _typed_terms(terms: Terms, where: str) -> Terms:
    """Type-check the parts of the terms the matchers read, once, so matching can trust them."""
    for i, t in enumerate(terms):
        for part in ("matchExpressions", "matchFields"):
            for j, e in enumerate(list_at(t, part, f"{where}[{i}]")):
                ew = f"{where}[{i}].{part}[{j}]"
                e = item(e, ew)
                str_at(e, "key", ew)
                str_at(e, "operator", ew)
                for k, v in enumerate(list_at(e, "values", ew)):
                    if type(v) is not str:
                        raise Malformed(f"{ew}.values[{k}] must be a string")
    return terms
