"""/api/v1/jobs: submit, list, describe, delete, stop, resume, logs (and live logs over a WebSocket).

Every operation is the CLI's: list_job_rows (`get jobs`), find_job + explain (`describe job`),
submit (`create/apply -f`), delete_by_name (`delete job`), set_active (`stop`, `resume`),
job_pods_for_logs + read_logs (`logs`).
What the API adds is who may do it: the namespace each document or job is in decides which RBAC
permission is reviewed, so a team-a token cannot see, create or delete anything in team-b.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from collections.abc import Mapping
from typing import Annotated, Any, Final

import anyio
from fastapi import APIRouter, Depends, Query, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError
from starlette.websockets import WebSocketDisconnect, WebSocketState

from gpuctl.cluster import ApiError, Cluster
from gpuctl.constants import JOB_KINDS, LOG_RANK_MAX, LOG_TAIL_MAX, Kind
from gpuctl.domain.gang import pod_rank
from gpuctl.domain.objects import short_age
from gpuctl.domain.promise import RecordedBound
from gpuctl.server.api import perms
from gpuctl.server.api.auth import Access, AuthError, Caller
from gpuctl.server.api.deps import (
    allowed,
    authenticate,
    credential,
    current_caller,
    permissions,
    require,
    run,
    state,
    visible,
)
from gpuctl.server.api.documents import check_results, delete_named, load, message, now, only_kinds, warnings
from gpuctl.server.api.errors import JSON, ApiProblem, api_error_status, error, validation_error
from gpuctl.server.api.logstream import start_reader
from gpuctl.server.api.models import (
    DNS_LABEL,
    BatchSubmit,
    DryRun,
    DryRunQ,
    DryRunValue,
    JobName,
    NamespaceP,
    NamespaceQ,
    Page,
    PageSize,
    Submit,
    dry_run_mode,
    paged,
)
from gpuctl.service.activation import set_active
from gpuctl.service.errors import NotFound, ServiceError, describe_exception
from gpuctl.service.jobs import Job, JobRow, find_job, list_job_rows, namespaces_holding
from gpuctl.service.lifecycle import Result, submit
from gpuctl.service.logs import job_pods_for_logs, rank_target, read_logs
from gpuctl.service.plan import plan_documents
from gpuctl.service.views import describe_job
from gpuctl.spec import Document, SpecError

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])
ws_router = APIRouter(tags=["jobs"])
Me = Annotated[Caller, Depends(current_caller)]

COMMON_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "invalid YAML or a gpuctl rule not met; `error` says what to fix"},
    401: {"description": "no or invalid token"},
    403: {"description": "RBAC does not allow it"},
    404: {"description": "not found"},
    409: {"description": "exists already / in use"},
    422: {"description": "invalid parameters"},
}


# ----------------------------------------------------------------------------- shapes
def row_item(r: JobRow) -> dict:
    """A row of `gpuctl get jobs -o json` in the earlier API's keys (jobId, age as `5m`)."""
    return {
        "jobId": r.job_id,
        "name": r.name,
        "namespace": r.namespace,
        "kind": r.kind,
        "status": r.status,
        "ready": r.ready,
        "node": r.node,
        "ip": r.ip,
        "age": short_age(r.age),
        "ageSeconds": r.age,
        "pool": r.pool,
        "priority": r.priority,
        "queue": r.queue,
        "position": r.position,
        "gpus": r.gpus,
        "slices": r.slices or {},
        # The job's recorded start bound and its outcome, as `get jobs -o wide`.
        **RecordedBound.fields(r.owner.bound if r.owner else None),
    }


# ----------------------------------------------------------------------------- finding a job
async def resolve(request: Request, caller: Caller, name: str, namespace: str | None) -> Job:
    """find_job, limited to where the caller may read jobs.

    With a namespace: 403 unless the caller may get jobs there. Without one (the earlier API searched
    everywhere): a caller allowed cluster-wide searches every namespace; anyone else only the
    namespaces they may read, so neither the job nor the names of other teams' namespaces leak.
    """
    cluster = state(request).cluster()
    if namespace:
        await require(request, caller, perms.jobs("get", namespace))
        return await run(find_job, cluster, name, namespace)
    if await allowed(state(request).auth, caller, perms.jobs("get", None)):
        return await run(find_job, cluster, name, None)
    spaces = await visible(
        request, caller, perms.jobs("get", None), await run(namespaces_holding, cluster, name)
    )
    if not spaces:
        raise NotFound(f"job {name} not found")
    if len(spaces) > 1:
        raise ServiceError(
            f"job {name} exists in several namespaces: {', '.join(sorted(spaces))}; pass namespace"
        )
    return await run(find_job, cluster, name, spaces.pop())


# ----------------------------------------------------------------------------- list / get
@router.get("", responses=COMMON_ERRORS, summary="List jobs (one row per pod, as `gpuctl get jobs`)")
async def list_jobs(
    request: Request,
    caller: Me,
    namespace: NamespaceQ = None,
    kind: Annotated[Kind | None, Query(description="training, inference, notebook or compute")] = None,
    pool: Annotated[str | None, Query(max_length=63, pattern=DNS_LABEL)] = None,
    status: Annotated[str | None, Query(max_length=64, description="e.g. Running, Queued (any case)")] = None,
    selector: Annotated[str | None, Query(max_length=1024, description="label selector k=v,k!=v")] = None,
    page: Page = 1,
    page_size: PageSize = 20,
) -> JSON:
    if kind is not None and kind not in JOB_KINDS:
        raise ApiProblem(400, f"kind {kind} is not a job kind: use training, inference, notebook or compute")
    cluster = state(request).reader()  # the serve cache inside `gpuctl serve --api`
    if namespace:
        await require(request, caller, perms.jobs("list", namespace))
    # row_item prints no REASON: none is judged.
    rows = await run(
        list_job_rows, cluster, namespace, pool=pool, kind=kind, selector=selector, reasons=False
    )
    if not namespace:
        seen = await visible(request, caller, perms.jobs("list", None), {r.namespace for r in rows})
        rows = [r for r in rows if r.namespace in seen]
    if status:
        rows = [r for r in rows if r.status.lower() == status.lower()]
    return JSON(paged([row_item(r) for r in rows], page, page_size))


@router.get("/{jobId}", responses=COMMON_ERRORS, summary="Describe a job (as `gpuctl describe job -o json`)")
async def get_job(request: Request, caller: Me, jobId: JobName, namespace: NamespaceQ = None) -> JSON:
    job = await resolve(request, caller, jobId, namespace)
    perms = permissions(request, caller)  # why it waits: from what the caller may read, as in the CLI
    st = state(request)
    d = await run(describe_job, st.cluster(), job.name, job.namespace, perms, job=job, prom=st.prometheus)
    return JSON(d.as_dict())


# ----------------------------------------------------------------------------- create / apply
def _create_accesses(objects: list[dict], action: str) -> list[Access]:
    """The RBAC verbs the submitted objects need: create; apply also patches (server-side apply) and
    may re-create a Job whose pod template changed (delete)."""
    out = []
    for o in objects:
        out.append(perms.on_object("create", o))
        if action == "apply":
            out.append(perms.on_object("patch", o))
            if o["kind"] == "Job":
                out.append(perms.on_object("delete", o))
    return out


async def _submit(
    request: Request,
    caller: Caller,
    body: Submit | BatchSubmit,
    docs: list[Document],
    action: str,
    force: bool = False,
) -> tuple[int, dict]:
    """Review the caller's right to every object the documents make, then lifecycle.submit them."""
    st = state(request)
    only_kinds(docs, JOB_KINDS, "/api/v1/jobs")
    default_ns = body.namespace or "default"
    plan = plan_documents(docs, default_ns)
    await require(request, caller, *_create_accesses(plan.objects, action))
    mode = dry_run_mode(body.dryRun)
    if mode is DryRun.CLIENT:
        # notes: what only the cluster knows (gpuMemory's GPUs, gpu-share's slice, nodeTypes' pools)
        return 200, {
            "dryRun": "client",
            "objects": plan.objects,
            "warnings": warnings(docs),
            "notes": plan.notes,
        }
    results: list[Result] = await run(
        submit,
        st.cluster(),
        docs,
        default_ns,
        action=action,
        dry_run=mode,
        force=force,
        perms=permissions(request, caller),
        reader=st.reader(),
        submitted_by=caller.username,
    )
    check_results(results)
    first = results[0]
    return 201 if action == "create" else 200, {
        "jobId": first.name,
        "name": first.name,
        "kind": first.kind,
        "namespace": first.namespace,
        "status": first.action,
        "createdAt": now(),
        "dryRun": not mode.persists,
        "message": message((line for r in results for line in r.lines), mode),
        "results": [r.as_dict() for r in results],
        "warnings": warnings(docs),
    }


@router.post(
    "",
    status_code=201,
    responses={**COMMON_ERRORS, 200: {"description": "dryRun client: the objects"}},
    summary="Create jobs from gpuctl YAML (as `gpuctl create -f`)",
)
async def create_jobs(request: Request, caller: Me, body: Submit) -> JSON:
    docs = await run(load, body.yamlContent, state(request).spec_config, strict=body.strict)
    code, data = await _submit(request, caller, body, docs, "create")
    return JSON(data, status_code=code)


@router.put("/{jobId}", responses=COMMON_ERRORS, summary="Apply a job's YAML (as `gpuctl apply -f`)")
async def apply_job(request: Request, caller: Me, jobId: JobName, body: Submit) -> JSON:
    docs = await run(load, body.yamlContent, state(request).spec_config, strict=body.strict)
    names = [getattr(getattr(d.spec, "job", None), "name", None) for d in docs]
    if names != [jobId]:
        raise ApiProblem(400, f"PUT /api/v1/jobs/{jobId} takes one document whose job.name is {jobId}")
    code, data = await _submit(request, caller, body, docs, "apply", body.force)
    return JSON(data, status_code=code)


@router.post(
    "/batch", responses=COMMON_ERRORS, summary="Create jobs from several YAML texts, each on its own"
)
async def create_batch(request: Request, caller: Me, body: BatchSubmit) -> JSON:
    """Each text succeeds or fails alone. 201 when all were created, 207 when some failed, else the
    first failure's status."""
    success: list[dict] = []
    failed: list[dict] = []
    for i, text in enumerate(body.yamlContents):
        try:
            docs = await run(
                load, text, state(request).spec_config, strict=body.strict, source=f"yamlContents[{i}]"
            )
            _, data = await _submit(request, caller, body, docs, "create")
        except (ApiProblem, AuthError, ServiceError, SpecError, ApiError) as e:
            failed.append({"index": i, "error": _message(e), "status": _status(e)})
            continue
        created = data.get("results") or [
            {"name": o["metadata"]["name"], "namespace": o["metadata"].get("namespace")}
            for o in data.get("objects", [])
        ]
        for r in created:
            success.append(
                {"index": i, "jobId": r["name"], "name": r["name"], "namespace": r.get("namespace")}
            )
    code = 201 if not failed else 207 if success else failed[0]["status"]
    return JSON({"success": success, "failed": failed}, status_code=code)


def _message(e: Exception) -> str:
    if isinstance(e, ApiError):
        return f"Kubernetes: {e.message or e}"
    return getattr(e, "message", None) or str(e)


def _status(e: Exception) -> int:
    if isinstance(e, SpecError):
        return 400
    if isinstance(e, ApiError):
        return api_error_status(e)
    return int(getattr(e, "status", 400) or 400)


# ----------------------------------------------------------------------------- delete
@router.delete(
    "/{jobId}", responses=COMMON_ERRORS, summary="Delete a job and its Service (as `gpuctl delete job`)"
)
async def delete_job_route(
    request: Request,
    caller: Me,
    jobId: JobName,
    namespace: NamespaceQ = None,
    force: Annotated[bool, Query(description="delete the pods at once (grace period 0)")] = False,
    dryRun: DryRunQ = False,
) -> JSON:
    mode = dry_run_mode(dryRun)
    job = await resolve(request, caller, jobId, namespace)
    needs = [perms.on_kind("delete", job.resource, job.namespace, job.name)]
    if job.service is not None:
        needs.append(perms.on_kind("delete", "Service", job.namespace, job.service["metadata"]["name"]))
    if force:
        needs.append(perms.on_kind("delete", "Pod", job.namespace))
    await require(request, caller, *needs)
    results = await delete_named(request, "job", job.name, mode, namespace=job.namespace, force=force)
    return JSON(
        {
            "jobId": job.name,
            "namespace": job.namespace,
            "status": "terminating" if mode.persists else "unchanged (dry run)",
            "dryRun": not mode.persists,
            "message": message(results[0].lines, mode),
        }
    )


# ----------------------------------------------------------------------------- stop / resume
async def _activate(
    request: Request, caller: Caller, name: str, namespace: str | None, active: bool, dry_run: DryRunValue
) -> JSON:
    """`gpuctl stop|resume` for a caller: found where it may read jobs (as delete), then allowed only if
    it may patch the job's Workload itself (what the CLI would send with its own credential)."""
    mode = dry_run_mode(dry_run)
    job = await resolve(request, caller, name, namespace)
    wl_name = job.workload["metadata"]["name"] if job.workload else None
    await require(request, caller, perms.on_kind("patch", "Workload", job.namespace, wl_name))
    a = await run(
        set_active,
        state(request).cluster(),
        job.name,
        job.namespace,
        active,
        dry_run=mode,
        actor=caller.username,
        on_behalf=True,
    )
    return JSON({**a.as_dict(), "dryRun": not mode.persists, "message": a.line() + mode.suffix()})


STOP_SUMMARY = "Stop a job without deleting it: its Workload's spec.active=false (as `gpuctl stop`)"
RESUME_SUMMARY = "Requeue a stopped job: its Workload's spec.active=true (as `gpuctl resume`)"


@router.post("/{namespace}/{jobId}/stop", responses=COMMON_ERRORS, summary=STOP_SUMMARY)
async def stop_job(
    request: Request, caller: Me, namespace: NamespaceP, jobId: JobName, dryRun: DryRunQ = False
) -> JSON:
    return await _activate(request, caller, jobId, namespace, False, dryRun)


@router.post("/{namespace}/{jobId}/resume", responses=COMMON_ERRORS, summary=RESUME_SUMMARY)
async def resume_job(
    request: Request, caller: Me, namespace: NamespaceP, jobId: JobName, dryRun: DryRunQ = False
) -> JSON:
    return await _activate(request, caller, jobId, namespace, True, dryRun)


# The shape of the other job routes (`DELETE /api/v1/jobs/{jobId}?namespace=`): the same operations.
@router.post("/{jobId}/stop", responses=COMMON_ERRORS, summary=STOP_SUMMARY)
async def stop_job_q(
    request: Request, caller: Me, jobId: JobName, namespace: NamespaceQ = None, dryRun: DryRunQ = False
) -> JSON:
    return await _activate(request, caller, jobId, namespace, False, dryRun)


@router.post("/{jobId}/resume", responses=COMMON_ERRORS, summary=RESUME_SUMMARY)
async def resume_job_q(
    request: Request, caller: Me, jobId: JobName, namespace: NamespaceQ = None, dryRun: DryRunQ = False
) -> JSON:
    return await _activate(request, caller, jobId, namespace, True, dryRun)


# ----------------------------------------------------------------------------- logs
async def _log_target(
    request_or_ws: Any,
    caller: Caller,
    name: str,
    namespace: str | None,
    pod: str | None,
    rank: int | None = None,
) -> tuple[Cluster, dict]:
    """(the cluster the pod is in, the pod): a MultiKueue manager's job runs in its worker (job.member).
    Default: the first running pod (a multi-node job's rank 0); `pod` or a gang's `rank` picks one."""
    if pod is not None and rank is not None:
        raise ApiProblem(400, "only one of pod or rank may be given")
    cluster = request_or_ws.app.state.api.cluster()
    job = await resolve(request_or_ws, caller, name, namespace)
    await require(request_or_ws, caller, perms.pod_logs(job.namespace))
    found, pods = await run(job_pods_for_logs, cluster, job.name, job.namespace)
    where = found.member or cluster
    if rank is not None:
        return where, rank_target(found.obj, pods, rank, "rank")
    if pod is None:
        return where, pods[0]
    chosen = next((p for p in pods if p["metadata"]["name"] == pod), None)
    if chosen is None:
        names = ", ".join(p["metadata"]["name"] for p in pods)
        raise NotFound(f"pod {pod} is not a pod of job {name}; its pods: {names}")
    return where, chosen


POD = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
PodQ = Annotated[
    str | None,
    Query(
        max_length=253,
        pattern=POD,
        description="one pod of the job (default: the first running)",
    ),
]
TailQ = Annotated[int, Query(ge=-1, le=LOG_TAIL_MAX, description="lines from the end; -1 for all")]
RankQ = Annotated[
    int | None,
    Query(ge=0, le=LOG_RANK_MAX, description="a multi-node job's rank (its completion index; default 0)"),
]
# The logs' query parameters, as GET .../logs declares them: the WebSocket route judges its own query
# string by these same types (FastAPI answers a WebSocket's invalid parameter with a bare 403 close).
_WS_LOG_QUERY: Final = {
    "namespace": (TypeAdapter(NamespaceQ), None),
    "tail": (TypeAdapter(TailQ), 100),
    "pod": (TypeAdapter(PodQ), None),
    "rank": (TypeAdapter(RankQ), None),
    "timestamps": (TypeAdapter(bool), True),
}
_JOB_ID: Final = TypeAdapter(JobName)


def ws_log_query(job_id: str, params: Mapping[str, str]) -> dict[str, Any]:
    """The WebSocket logs route's parameters, validated as the HTTP route's are: RequestValidationError
    with every error located at ("path"|"query", name), so both answer the same 422 naming the field."""
    errors: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    for name, value, (adapter, loc) in [
        ("jobId", job_id, (_JOB_ID, "path")),
        *((n, params.get(n), (a, "query")) for n, (a, _) in _WS_LOG_QUERY.items()),
    ]:
        if value is None:
            out[name] = _WS_LOG_QUERY[name][1]
            continue
        try:
            out[name] = adapter.validate_python(value)
        except ValidationError as e:
            errors += [{**err, "loc": (loc, name, *err.get("loc", ()))} for err in e.errors()]
    if errors:
        raise RequestValidationError(errors)
    return out


@router.get("/{jobId}/logs", responses=COMMON_ERRORS, summary="A job's recent log lines (as `gpuctl logs`)")
async def get_logs(
    request: Request,
    caller: Me,
    jobId: JobName,
    namespace: NamespaceQ = None,
    tail: TailQ = 100,
    pod: PodQ = None,
    rank: RankQ = None,
    timestamps: bool = True,
    follow: bool = False,
) -> JSON:
    if follow:
        raise ApiProblem(400, f"follow: use the WebSocket /api/v1/jobs/{jobId}/logs/ws")
    where, target = await _log_target(request, caller, jobId, namespace, pod, rank)
    text = await run(read_logs, where, target, tail=tail, timestamps=timestamps)
    lines = text.splitlines()
    last = lines[-1].split(" ", 1)[0] if (timestamps and lines) else None
    return JSON(
        {
            "logs": lines,
            "podName": target["metadata"]["name"],
            "namespace": target["metadata"]["namespace"],
            "lastTimestamp": last,
            **({"rank": r} if (r := pod_rank(target)) is not None else {}),
        }
    )


# ----------------------------------------------------------------------------- live logs
BEARER_PROTOCOL = "base64url.bearer.authorization.k8s.io."
LOG_PROTOCOL = "gpuctl.logs.v1"


def ws_token(ws: WebSocket) -> tuple[str | None, str | None]:
    """(token, subprotocol to answer). Browsers cannot set headers on a WebSocket, so the token may
    also come as Kubernetes' subprotocol `base64url.bearer.authorization.k8s.io.<base64url token>`."""
    token = credential(ws.scope["headers"])
    offered = ws.scope.get("subprotocols") or []
    for proto in offered:
        if proto.startswith(BEARER_PROTOCOL) and token is None:
            raw = proto[len(BEARER_PROTOCOL) :]
            with contextlib.suppress(binascii.Error, ValueError):
                token = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode() or None
    return token, (LOG_PROTOCOL if LOG_PROTOCOL in offered else None)


async def _deny(ws: WebSocket, status: int, message: str, response: JSON | None = None) -> None:
    """Refuse the handshake with an HTTP status when the server can (ASGI denial response: `response`,
    else an error naming `message`), else accept and close with 4000+status after one error message."""
    if response is not None:
        message = json.loads(response.body)["error"]
    if "websocket.http.response" in (ws.scope.get("extensions") or {}):
        headers = {"WWW-Authenticate": 'Bearer realm="gpuctl"'} if status == 401 else None
        await ws.send_denial_response(response or error(status, message, headers=headers))
        return
    await ws.accept()
    await ws.send_json({"type": "error", "status": status, "message": message})
    await ws.close(code=4000 + status, reason=message[:120])


@ws_router.websocket("/api/v1/jobs/{jobId}/logs/ws")
async def follow_logs(ws: WebSocket, jobId: str) -> None:
    """Stream a job's log: `{"type": "log", "data": line, "pod": name}` per line, in order and once
    each, then `{"type": "end"}` when the pod's log ends (or `{"type": "error", ...}`). The query
    parameters are GET .../logs's (namespace, tail, pod, rank, timestamps), judged by the same types."""
    st = ws.app.state.api
    try:
        q = ws_log_query(jobId, ws.query_params)
    except RequestValidationError as e:
        await _deny(ws, 422, "", validation_error(list(e.errors())))
        return
    namespace, tail, pod, rank, timestamps = q["namespace"], q["tail"], q["pod"], q["rank"], q["timestamps"]
    token, subprotocol = ws_token(ws)
    try:
        caller = await authenticate(st.auth, token)
        where, target = await _log_target(ws, caller, jobId, namespace, pod, rank)
        resp = await run(read_logs, where, target, tail=tail, timestamps=timestamps, follow=True, stream=True)
    except (AuthError, ApiProblem) as e:  # ApiProblem: _log_target's (only one of pod or rank)
        await _deny(ws, e.status, e.message)
        return
    except ServiceError as e:
        await _deny(ws, e.status, str(e))
        return
    except Exception as e:
        await _deny(ws, 502, f"cannot read the log: {describe_exception(e)}")
        return

    await ws.accept(subprotocol=subprotocol)
    pod_name = target["metadata"]["name"]
    events, stop = start_reader(resp, describe_exception)
    try:
        async with anyio.create_task_group() as tg:

            async def until_client_leaves() -> None:
                with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                    while (await ws.receive())["type"] != "websocket.disconnect":
                        pass
                tg.cancel_scope.cancel()

            tg.start_soon(until_client_leaves)
            async with events:
                async for kind, data in events:
                    if kind == "log":
                        await ws.send_json({"type": "log", "data": data, "pod": pod_name})
                    elif kind == "end":
                        await ws.send_json({"type": "end", "pod": pod_name})
                    else:
                        await ws.send_json({"type": "error", "status": 502, "message": data})
            tg.cancel_scope.cancel()
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        stop()
        if ws.client_state == WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                await ws.close(code=1000)
