"""/api/v1/usage: GPU use per job (docs/utilisation.md; as `gpuctl top -o json`).

serve reads Prometheus (its --prometheus-url) for the caller, asking only about the namespaces where the
caller may list jobs (a SubjectAccessReview each, as `GET /api/v1/jobs`): a team member sees its own
team's jobs and nothing of another's, whatever Prometheus holds. This is the way for tenants to read GPU
use where Prometheus itself is not theirs to query (docs/utilisation.md, "Who reads what").
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from gpuctl.constants import JOB_KINDS, USE_WINDOW_SECONDS, Kind
from gpuctl.quantity import parse_duration
from gpuctl.server.api import perms
from gpuctl.server.api.auth import Caller
from gpuctl.server.api.deps import current_caller, require, run, state, visible
from gpuctl.server.api.errors import JSON, ApiProblem
from gpuctl.server.api.models import DNS_LABEL, NamespaceQ
from gpuctl.server.api.routes.jobs import COMMON_ERRORS
from gpuctl.service.gpu_use import Span, job_namespaces, top

router = APIRouter(prefix="/api/v1/usage", tags=["usage"])
Me = Annotated[Caller, Depends(current_caller)]


@router.get(
    "",
    responses={**COMMON_ERRORS, 503: {"description": "no Prometheus configured (serve --prometheus-url)"}},
    summary="GPU use per job, busiest first (as `gpuctl top -o json`)",
)
async def get_usage(
    request: Request,
    caller: Me,
    namespace: NamespaceQ = None,
    pool: Annotated[str | None, Query(max_length=63, pattern=DNS_LABEL)] = None,
    kind: Annotated[Kind | None, Query(description="training, inference, notebook or compute")] = None,
    window: Annotated[
        str, Query(max_length=16, description="activity is the mean over this (5m, 30s)")
    ] = "5m",
) -> JSON:
    st = state(request)
    if st.prometheus is None:
        raise ApiProblem(503, "GPU use is not read here: run gpuctl serve with --prometheus-url")
    if kind is not None and kind not in JOB_KINDS:
        raise ApiProblem(400, f"kind {kind} is not a job kind: use training, inference, notebook or compute")
    seconds = parse_duration(window)
    if not seconds:
        raise ApiProblem(400, f"window {window!r}: use a duration such as 30s, 5m or 1h")
    reader = st.reader()
    if namespace:
        await require(request, caller, perms.jobs("list", namespace))
        spaces = {namespace}
    else:
        spaces = await visible(request, caller, perms.jobs("list", None), await run(job_namespaces, reader))
    span = Span(window=seconds or USE_WINDOW_SECONDS)
    view = await run(
        top, reader, namespace, st.prometheus, span, pool=pool, kind=kind, namespaces=sorted(spaces)
    )
    return JSON(view.as_dict())
