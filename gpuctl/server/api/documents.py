"""YAML in, service-layer results out: what the create/apply routes of jobs, pools and quotas share.

The documents are read by the same loader as `gpuctl create -f` (gpuctl.spec.load_text), with the
*server's* site settings (allowed hostPaths come from the API server's environment, never from the
caller), and submitted through gpuctl.service.lifecycle.submit, so the API applies the CLI's rules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from fastapi import Request

from gpuctl.constants import Kind
from gpuctl.server.api.deps import run, state
from gpuctl.server.api.errors import JSON, ApiProblem
from gpuctl.server.api.models import DryRun, DryRunValue, dry_run_mode
from gpuctl.service.lifecycle import Result, delete_by_name, submit
from gpuctl.service.plan import plan_documents
from gpuctl.spec import Document, SpecConfig, load_text


def load(text: str, config: SpecConfig, *, strict: bool = False, source: str = "<request>") -> list[Document]:
    """Validate every document (SpecError -> 400 with every problem listed; the size and alias limits are
    the loader's, gpuctl.spec.limits, as for `gpuctl create -f`). Blocking: CPU-bound."""
    if strict:
        config = dataclasses.replace(config, strict=True)
    docs = load_text(text, source, config)
    if not docs:
        raise ApiProblem(400, f"{source}: no YAML document (only comments, `---` or blank)")
    return docs


def only_kinds(docs: list[Document], kinds: Iterable[str], route: str) -> None:
    """400 unless every document is one of `kinds` (jobs go to /jobs, pools to /pools...)."""
    allowed = {str(k) for k in kinds}
    for d in docs:
        kind = str(d.spec.kind)
        if kind not in allowed:
            other = {Kind.POOL: "/api/v1/pools", Kind.QUOTA: "/api/v1/quotas"}.get(Kind(kind), "/api/v1/jobs")
            raise ApiProblem(400, f"{d.source}: kind {kind} is not accepted by {route}: send it to {other}")


def warnings(docs: list[Document]) -> list[str]:
    return [w for d in docs for w in d.warnings]


def check_results(results: list[Result]) -> None:
    """Raise the first failure with its status (404 missing, 409 exists/in use, 400 otherwise)."""
    failed = [r for r in results if r.error]
    if failed:
        first = failed[0]
        status = first.error_status or 400
        status = 502 if status >= 500 else status
        raise ApiProblem(status, first.error or "failed", results=[r.as_dict() for r in results])


def message(lines: Iterable[str], mode: DryRun) -> str:
    """What a write did, one line: the service's lines with the dry run's suffix, joined by "; "."""
    return "; ".join(line + mode.suffix() for line in lines)


async def delete_named(request: Request, kind: str, name: str, mode: DryRun, **options: Any) -> list[Result]:
    """`gpuctl delete KIND NAME` for a route (gpuctl.service.lifecycle.delete_by_name, the CLI's rules); a
    failure is raised with its status."""
    results = await run(delete_by_name, state(request).cluster(), kind, [name], dry_run=mode, **options)
    check_results(results)
    return results


def deleted(name: str, mode: DryRun, results: list[Result]) -> JSON:
    """The answer to a delete of one cluster-scoped thing (a pool, a namespace)."""
    body = {
        "name": name,
        "status": "deleted",
        "dryRun": not mode.persists,
        "message": message(results[0].lines, mode),
    }
    return JSON(body)


async def submit_cluster_documents(
    request: Request, docs: list[Document], dry_run: DryRunValue, action: str
) -> JSON:
    """Create or apply cluster-scoped documents (pools, quotas) once the caller's RBAC is checked: the
    objects for a client dry run, else lifecycle.submit's results (201 on create)."""
    mode = dry_run_mode(dry_run)
    if mode is DryRun.CLIENT:
        plan = plan_documents(docs, "default")
        return JSON({"dryRun": "client", "objects": plan.objects, "notes": plan.notes})
    results: list[Result] = await run(
        submit, state(request).cluster(), docs, "default", action=action, dry_run=mode
    )
    check_results(results)
    return JSON(
        {
            "name": results[0].name,
            "status": results[0].action,
            "dryRun": not mode.persists,
            "message": message((line for r in results for line in r.lines), mode),
            "results": [r.as_dict() for r in results],
            "warnings": warnings(docs),
        },
        status_code=201 if action == "create" else 200,
    )


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
