"""The idle policies (docs/utilisation.md): written from `idle:` of the pool and quota documents
onto the Kueue objects that stand for them, read back for serve's reclaimer, `describe job` and `keep`.

Where: the pool's ResourceFlavor and each team's ClusterQueue carry the policy as JSON under
runwhere.ai/idle-policy (gpuctl.domain.idle's stored form). Both are cluster-scoped: only an admin (who may
patch them: gpuctl-admin) sets or changes a policy; a team member reads them (gpuctl-pool-viewer). The
flavor's annotation is part of the pool's desired flavor (as its description); the ClusterQueue's is
patched with its own field manager (constants.IDLE_FIELD_MANAGER), since gpuctl rebuilds team queues from
their quota when pools change and would otherwise drop it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuctl.cluster import Cluster, path
from gpuctl.constants import IDLE_FIELD_MANAGER, IDLE_POLICY_ANNOTATION, Labels
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.idle import IdlePolicy, PolicyError, effective, policy, read_policy
from gpuctl.domain.objects import annotations, labels
from gpuctl.service.errors import ServiceError

if TYPE_CHECKING:  # annotations only: reads never load pydantic
    from gpuctl.spec.idle import IdleSpec


def of_spec(idle: IdleSpec | None, source: str) -> IdlePolicy | None:
    """The policy an `idle:` block stands for (None: no block, off)."""
    if idle is None:
        return None
    try:
        return policy(
            idle.kinds(),
            after=idle.after,
            floor=idle.floor,
            dry_run=idle.dry_run,
            keep_max=idle.keep_max,
            source=source,
        )
    except PolicyError as e:  # the spec checks actions already; kept for a policy built elsewhere
        raise ServiceError(f"{source}: idle: {e}") from None


def flavor_annotations(idle: IdleSpec | None, pool: str) -> dict[str, str]:
    """The pool flavor's annotation for its `idle:` block ({} without one: applying the flavor drops it)."""
    p = of_spec(idle, f"pool {pool}")
    return {IDLE_POLICY_ANNOTATION: p.annotation()} if p is not None else {}


def write_queue_policy(
    cluster: Cluster, namespace: str, idle: IdleSpec | None, cq: dict | None, quota: str, *, dry_run: DryRun
) -> str | None:
    """Set (or, without a block, remove) the policy on team `namespace`'s ClusterQueue; `cq`: the queue as
    it was before this command (None: created by it). Returns a line for the user when it changes."""
    p = of_spec(idle, f"quota {quota}")
    want = p.annotation() if p is not None else None
    have = annotations(cq).get(IDLE_POLICY_ANNOTATION) if cq is not None else None
    if want == have:
        return None
    if dry_run.writes and not (cq is None and dry_run is DryRun.SERVER):  # a server dry run made no queue
        cluster.merge_patch(
            path("ClusterQueue", namespace),
            {"metadata": {"annotations": {IDLE_POLICY_ANNOTATION: want}}},
            dry_run=dry_run is DryRun.SERVER,
            field_manager=IDLE_FIELD_MANAGER,
        )
    verb = "set" if want else "removed"
    return f"quota/{quota} idle policy {verb} for namespace {namespace}"


def job_policy(cq: dict[str, Any] | None, flavor: dict[str, Any] | None) -> tuple[IdlePolicy | None, str]:
    """The policy a job falls under (its team's ClusterQueue's, else its pool's flavor's) and, when one of
    them is unreadable (hand-edited), why it was skipped ("" otherwise): a policy in doubt does nothing."""
    errors = []
    found: list[IdlePolicy | None] = []
    for obj, source in ((cq, "quota"), (flavor, "pool")):
        # A quota by its document's name (the ClusterQueue's runwhere.ai/quota label), a pool by its own.
        name = labels(obj).get(Labels.QUOTA) or ((obj or {}).get("metadata") or {}).get("name", "")
        try:
            found.append(read_policy(obj, f"{source} {name}"))
        except PolicyError as e:
            found.append(None)
            errors.append(str(e))
    if errors:
        return None, "; ".join(errors)
    return effective(found[0], found[1]), ""
