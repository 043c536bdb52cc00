"""`gpuctl serve`: one process, one port, each part behind a flag.

    gpuctl serve [--kubeconfig K] [--context C] [--address 0.0.0.0] [--metrics-port 9090]
                 [--metrics/--no-metrics] [--reconcile/--no-reconcile] [--api/--no-api]
                 [--backstop/--no-backstop] [--uncovered-grace 60] [--termination-allowance 300]
                 [--no-evict-terminating] [--evict-uncovered] [--evict-after 120]
                 [--leader-elect/--no-leader-elect] [--lease-namespace NS] [--lease-name gpuctl-serve]
                 [--tls-cert F --tls-key F] [--cluster NAME] [--worker-kubeconfig NAME=PATH ...]

Replicas: with --leader-elect (the default) the replicas elect a leader on a coordination.k8s.io Lease
(gpuctl.server.leader); only the leader reconciles, runs the backstop (gpuctl.server.backstop: GPU pods
on pool nodes no admitted Workload covers) and exports the cluster-state metrics; every replica serves
the API and its own health/cache series. A replica is ready (/readyz) once its caches are synced and it
leads or follows a live leader: a standby serves the API; a replica that can neither acquire nor read
the Lease (missing namespace, no RBAC) says so with 503 and a log line naming the fix.

Why one process: the reconciler, the metrics and the REST API all read the same objects, and a
watch cache of 20,000 pods is the service's biggest cost; keeping one per process keeps the API
server's load and the memory down. Every part reads `ServerContext.cache`.

The informers each part needs are wired in gpuctl.server.wiring (with --api, also the controllers of
gpuctl jobs: the API then answers its list views from the cache).

Endpoints: /metrics (with --metrics), /healthz (alive), /readyz (every informer has listed once, and a
leader is known). With --tls-cert/--tls-key the port speaks HTTPS only (the REST API carries bearer
tokens), and the certificate is re-read when its files change (gpuctl.cluster.tls.CertReloader, shared
with the admission webhook).

Extending (the REST API): `create_app(ctx, mounts=[...])` calls each mount(app, ctx) after the built-in
routes; `--api` imports gpuctl.server.api and calls its `mount(app: FastAPI, ctx: ServerContext)`.
The cache starts after mounting, so a mount may still `ctx.cache.add(...)` informers of its own and
`add_handler` on existing ones; it must treat cached objects as read-only (they are shared).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib
import logging
import sys
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gpuctl.cluster import ApiError, Cluster
from gpuctl.cluster.paths import RESOURCES
from gpuctl.cluster.tls import CertReloader, with_reloader
from gpuctl.constants import COHORT_NAME
from gpuctl.server import flags
from gpuctl.server.backstop import Backstop
from gpuctl.server.cache import Cache
from gpuctl.server.defrag import Defragmenter, cache_source, parse_pools
from gpuctl.server.history import HistoryRecorder
from gpuctl.server.idle import IdleReclaimer
from gpuctl.server.leader import LeaderElector, default_namespace
from gpuctl.server.metrics import GpuctlCollector, WorkloadTracker, build_registry
from gpuctl.server.multicluster import GangServiceMirror
from gpuctl.server.multicluster import cache_source as mirror_source
from gpuctl.server.reconciler import Reconciler
from gpuctl.server.serve_flags import API_MODULE, build_parser
from gpuctl.server.setaside import SetAside
from gpuctl.server.setaside import cache_source as set_aside_source
from gpuctl.server.wiring import OPTIONAL_CONTROLLERS, default_cache
from gpuctl.service.access import SelfReview
from gpuctl.service.prometheus import configured

log = logging.getLogger("gpuctl.server")


@dataclass
class ServerContext:
    """What the parts of the service share; handed to every mounted app."""

    cluster: Any
    cache: Cache
    options: argparse.Namespace
    registry: CollectorRegistry | None = None
    collector: GpuctlCollector | None = None
    tracker: WorkloadTracker | None = None
    reconciler: Reconciler | None = None
    backstop: Backstop | None = None
    defrag: Defragmenter | None = None
    # nodes held for the oldest waiting gang (--defrag; docs/distributed.md, No starvation)
    set_aside: SetAside | None = None
    # a gang's Service copied to its MultiKueue worker (docs/distributed.md, Across clusters)
    mirror: GangServiceMirror | None = None
    history: HistoryRecorder | None = None
    idle: IdleReclaimer | None = None  # docs/utilisation.md: idle GPUs back to the queue (with --idle)
    elector: LeaderElector | None = None
    reloader: CertReloader | None = None
    stop: threading.Event = field(default_factory=threading.Event)


Mount = Callable[[FastAPI, ServerContext], None]


def create_app(ctx: ServerContext, mounts: Sequence[Mount] = ()) -> FastAPI:
    app = FastAPI(title="gpuctl", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.gpuctl = ctx

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict:
        return {"ok": True}

    @app.get("/readyz", include_in_schema=False)
    def readyz() -> Response:
        return Response(*readiness(ctx))

    if ctx.registry is not None:
        registry = ctx.registry

        # A plain def: FastAPI runs it in its thread pool, so a scrape never blocks the event loop.
        @app.get("/metrics", include_in_schema=False)
        def metrics() -> Response:
            return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    for mount in mounts:
        mount(app, ctx)
    return app


def readiness(ctx: ServerContext) -> tuple[str, int]:
    """(/readyz body, status). Ready = every informer has listed once and, with leader election, this
    replica leads or follows a live leader (a standby serves the API and its own metrics). Not ready
    while the Lease can be neither acquired nor read: then no replica reconciles or exports the pools,
    and the message says why (docs/metrics.md, "Replicas")."""
    pending = [k for k, i in ctx.cache.informers.items() if not i.synced.is_set()]
    if pending:
        return f"waiting for the first list of {', '.join(pending)}\n", 503
    el = ctx.elector
    if el is None:
        return "ok\n", 200
    role = el.role()
    if role == "none":
        return f"no leader: {el.describe()}\n", 503
    return f"ok: {el.describe()}\n", 200


def served_controllers(cluster: Any) -> tuple[str, ...]:
    """The OPTIONAL_CONTROLLERS whose API the cluster serves now (its discovery document answers) and
    that serve's identity may list and watch in every namespace (an informer it may not list never
    syncs, and serve would never be ready: a role from before gpuctl watched them); one installed or
    granted later is read from the API server until serve restarts."""
    out = []
    review = SelfReview(cluster)
    for kind in OPTIONAL_CONTROLLERS:
        res = RESOURCES[kind]
        try:
            if cluster.get_or_none(f"/apis/{res.api_version}") is None:
                continue
        except ApiError as e:
            log.warning("cannot tell whether the cluster serves %s: %s", kind, e)
            continue
        group = res.api_version.partition("/")[0]
        if all(review.allows(verb, res.plural, group) for verb in ("list", "watch")):
            out.append(kind)
        else:
            log.warning(
                "not watching %s: this identity may not list and watch %s.%s in every namespace "
                "(the chart's serve role grants it: manifests/serve/rbac.yaml)",
                kind, res.plural, group,
            )  # fmt: skip
    return tuple(out)


def build_context(args: argparse.Namespace, cluster: Any) -> ServerContext:
    """Cache, reconciler and registry for these flags; nothing started yet."""
    backstop = getattr(args, "backstop", False)
    defrag_pools = parse_pools(getattr(args, "defrag", ""))
    defrag = defrag_pools != []
    history = getattr(args, "history", False)
    idle = getattr(args, "idle", False)
    cache = default_cache(
        cluster,
        metrics=args.metrics,
        api=args.api,
        backstop=backstop or defrag,
        history=history,
        idle=idle,
        optional=served_controllers(cluster) if args.api or idle or args.metrics else (),
    )
    ctx = ServerContext(cluster=cluster, cache=cache, options=args)
    leader = None
    if getattr(args, "leader_elect", False) and (
        args.reconcile or args.metrics or backstop or defrag or history or idle
    ):
        ctx.elector = LeaderElector(
            cluster,
            namespace=args.lease_namespace or default_namespace(getattr(cluster, "context_namespace", None)),
            name=args.lease_name,
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
        )
        leader = ctx.elector.is_leader
    if args.reconcile:
        ctx.reconciler = Reconciler(cluster, cache, debounce=args.debounce, resync=args.resync, leader=leader)
        if ctx.elector is not None:
            ctx.elector.on_started = lambda: ctx.reconciler.trigger("elected leader")
    # A no-op but on a MultiKueue manager (gpuctl.server.multicluster).
    if args.reconcile and "Workload" in cache:
        ctx.mirror = GangServiceMirror(cluster, mirror_source(cache), leader=leader)
    if backstop:
        ctx.backstop = Backstop(
            cluster,
            cache,
            grace=args.uncovered_grace,
            evict=args.evict_uncovered,
            evict_after=max(args.evict_after, args.uncovered_grace),
            termination_allowance=args.termination_allowance,
            evict_terminating=args.evict_terminating,
            identity=ctx.elector.identity if ctx.elector is not None else "",
            leader=leader,
        )
    if defrag:
        ctx.defrag = Defragmenter(
            cluster,
            cache_source(cache),
            pools=defrag_pools,
            cap=args.defrag_moves_per_hour,
            settle=args.defrag_settle,
            leader=leader,
            identity=ctx.elector.identity if ctx.elector is not None else "",
        )
        ctx.set_aside = SetAside(
            cluster,
            set_aside_source(cache),
            pools=defrag_pools,
            settle=args.defrag_settle,
            idle=args.set_aside_idle,
            max_hold=args.set_aside_max,
            leader=leader,
            identity=ctx.elector.identity if ctx.elector is not None else "",
            lead=args.bound_lead,
            bounds=args.hold_bounds,
            cohort=lambda: cache["Cohort"].get(COHORT_NAME),
        )
    if idle:
        ctx.idle = IdleReclaimer(
            cluster,
            cache,
            configured(args.prometheus_url),
            interval=args.idle_interval,
            dry_run=args.idle_dry_run,
            leader=leader,
            identity=ctx.elector.identity if ctx.elector is not None else "",
        )
    if history:
        ctx.history = HistoryRecorder(cluster, cache, leader=leader)
        ctx.history.attach()
        if ctx.backstop is not None:
            ctx.backstop.record = ctx.history.note
    if args.metrics:
        ctx.registry, ctx.collector, ctx.tracker = build_registry(
            cache, ctx.reconciler, leader=leader, backstop=ctx.backstop, cluster=args.cluster
        )
        if ctx.defrag is not None:
            ctx.registry.register(ctx.defrag)
        if ctx.set_aside is not None:
            ctx.registry.register(ctx.set_aside)
        if ctx.history is not None:
            ctx.registry.register(ctx.history)
        if ctx.idle is not None:
            ctx.registry.register(ctx.idle)
    return ctx


def freeze_heap(cache: Cache, stop: threading.Event, interval: float = 300.0) -> None:
    """Move the cache's long-lived objects out of the cyclic garbage collector's sight.

    Why: at 20,000 pods the cache is about a million dicts and lists; every full (generation 2)
    collection walks them all, tens of milliseconds during which a scrape stalls. Frozen objects are
    still freed by reference counting when an object leaves the cache (trimmed objects hold no
    cycles), so this costs no memory. Done once the caches are synced, then every `interval` seconds
    for what arrived since.
    """
    while not stop.is_set() and not cache.wait_synced(timeout=1.0):
        pass
    while not stop.is_set():
        gc.collect()
        gc.freeze()
        if stop.wait(interval):
            return


def _mounts(args: argparse.Namespace) -> list[Mount]:
    if not args.api:
        return []
    try:
        api = importlib.import_module(API_MODULE)
    except ModuleNotFoundError as e:
        if e.name != API_MODULE:
            raise
        raise SystemExit(f"error: --api: {API_MODULE} is not part of this build") from None
    return [api.mount]


def stop_parts(ctx: ServerContext) -> None:
    """Stop the background parts; the elector releases the Lease so another replica takes over at once."""
    ctx.stop.set()
    if ctx.elector is not None:
        ctx.elector.join(timeout=5)


def _stop_on_shutdown(app: FastAPI, ctx: ServerContext) -> None:
    """Run stop_parts when uvicorn shuts down, inside its graceful shutdown: on SIGTERM uvicorn re-raises
    the signal once the server has stopped, so code after uvicorn.run() never runs then. With TLS, the
    certificate reloader runs on the server's event loop meanwhile (as in the admission webhook)."""
    inner = app.router.lifespan_context
    if ctx.reloader is not None:
        inner = with_reloader(inner, ctx.reloader)

    @contextlib.asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with inner(a) as state:
            yield state
        await asyncio.to_thread(stop_parts, ctx)

    app.router.lifespan_context = lifespan


def usage_error(args: argparse.Namespace) -> int:
    """Flags that contradict each other: exit 2 naming them (0 when they agree)."""
    if bool(args.tls_cert) != bool(args.tls_key):  # a usage error, before any other check
        return flags.tls_reloader(args)[1]
    if args.evict_uncovered and not args.backstop:
        print("error: --evict-uncovered needs the backstop (drop --no-backstop)", file=sys.stderr)
        return 2
    if args.idle and not args.prometheus_url:
        print(
            "error: --idle needs --prometheus-url (or $GPUCTL_PROMETHEUS_URL): its evidence", file=sys.stderr
        )
        return 2
    if args.idle_dry_run and not args.idle:
        print("error: --idle-dry-run goes with --idle", file=sys.stderr)
        return 2
    if args.evict_after < args.uncovered_grace:
        print(
            f"error: --evict-after ({args.evict_after:g}) must be at least --uncovered-grace "
            f"({args.uncovered_grace:g}): a pod is reported before it is evicted",
            file=sys.stderr,
        )
        return 2
    return 0


def start_parts(ctx: ServerContext) -> None:
    """Start the cache and every background part built for these flags."""
    ctx.cache.start()
    parts = (
        ctx.elector,
        ctx.reconciler,
        ctx.backstop,
        ctx.defrag,
        ctx.set_aside,
        ctx.mirror,
        ctx.history,
        ctx.idle,
    )
    for part in parts:
        if part is not None:
            part.start(ctx.stop)
    threading.Thread(target=freeze_heap, args=(ctx.cache, ctx.stop), name="gc-freeze", daemon=True).start()


def log_serving(args: argparse.Namespace, ctx: ServerContext) -> None:
    """One line: which parts serve where, and the Lease this replica competes for."""
    parts = [
        n
        for n, on in (
            ("metrics", args.metrics),
            ("reconcile", args.reconcile),
            ("api", args.api),
            (
                "backstop"
                + (" ending terminations past the bound" if args.evict_terminating else "")
                + (" with eviction" if args.evict_uncovered else ""),
                args.backstop,
            ),
            (f"defrag ({args.defrag})", bool(args.defrag)),
            ("history", args.history),
            ("idle" + (" (dry run)" if args.idle_dry_run else ""), args.idle),
        )
        if on
    ]
    log.info(
        "serving %s on %s://%s:%d%s",
        ", ".join(parts) or "health only",
        "https" if ctx.reloader else "http",
        args.address,
        args.port,
        f"; leader election on lease {ctx.elector.namespace}/{ctx.elector.name} as {ctx.elector.identity}"
        if ctx.elector
        else "; no leader election (this replica leads)",
    )


def main(argv: list[str]) -> int:
    # `gpuctl serve -- --flag` reaches us with the separator (argparse REMAINDER keeps it).
    if argv[:1] == ["--"]:
        argv = argv[1:]
    args = build_parser().parse_args(argv)
    if code := usage_error(args):
        return code
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    reloader, code = flags.tls_reloader(args)  # a bad pair stops the server, naming the files
    if code:
        return code
    try:
        cluster = Cluster.connect(kubeconfig=args.kubeconfig, context=args.context)
    except (ConnectionError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    cluster.member_kubeconfigs.update(args.worker_kubeconfig)
    ctx = build_context(args, cluster)
    ctx.reloader = reloader
    app = create_app(ctx, _mounts(args))
    start_parts(ctx)
    _stop_on_shutdown(app, ctx)
    log_serving(args, ctx)
    tls: dict[str, Any] = {}
    if ctx.reloader is not None:
        tls = {
            "ssl_certfile": ctx.reloader.cert,
            "ssl_keyfile": ctx.reloader.key,
            "ssl_context_factory": ctx.reloader.factory,
        }
    try:
        uvicorn.run(app, host=args.address, port=args.port, log_level=args.log_level, access_log=False, **tls)
    finally:
        stop_parts(ctx)
        ctx.cache.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
