"""`gpuctl serve`'s command line: its parser and the flag groups of its parts (metrics, reconciler, API,
history, backstop, defrag, idle, leader election, several clusters). The flags it shares with the
standalone API are gpuctl.server.flags'.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpuctl.constants import (
    DEFRAG_MOVES_PER_HOUR,
    DEFRAG_SETTLE_SECONDS,
    IDLE_INTERVAL_SECONDS,
    SET_ASIDE_BOUND_LEAD_SECONDS,
    SET_ASIDE_IDLE_SECONDS,
    SET_ASIDE_MAX_SECONDS,
    UNCOVERED_EVICT_AFTER_SECONDS,
    UNCOVERED_GRACE_SECONDS,
    UNCOVERED_TERMINATION_ALLOWANCE_SECONDS,
)
from gpuctl.server import flags
from gpuctl.server.leader import DEFAULT_LEASE_NAME

API_MODULE = "gpuctl.server.api"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpuctl serve",
        description="Run gpuctl's service: pool capacity reconciler, Prometheus /metrics, REST API.",
    )
    flags.add_cluster(p)
    flags.add_listener(p, 9090, "--metrics-port", "--port")
    _add_parts(p)
    _add_backstop(p)
    _add_defrag(p)
    _add_idle(p)
    _add_leader_election(p)
    flags.add_tls(p)
    flags.add_api_auth(p)  # with --api
    flags.add_prometheus(p)  # the API's GPU use, --idle's evidence (docs/utilisation.md)
    _add_clusters(p)
    flags.add_log_level(p)
    return p


def _add_parts(p: argparse.ArgumentParser) -> None:
    """Which parts run: metrics, reconciler, API, history; and the reconciler's pace."""
    p.add_argument(
        "--metrics", action=argparse.BooleanOptionalAction, default=True, help="serve /metrics (default on)"
    )
    p.add_argument(
        "--reconcile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the Cohort's capacity equal to the pools' nodes (default on)",
    )
    p.add_argument(
        "--api",
        action=argparse.BooleanOptionalAction,
        default=False,
        help=f"mount the REST API ({API_MODULE})",
    )
    p.add_argument(
        "--history",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep each team's audit trail (who submitted, stopped, preempted, moved, deleted which job) in "
        "its namespace's ConfigMap gpuctl-history, read by `gpuctl history` (default on; docs/audit.md)",
    )
    p.add_argument("--debounce", type=float, default=0.5, help="seconds of quiet before a reconcile (0.5)")
    p.add_argument("--resync", type=float, default=60.0, help="seconds between periodic reconciles (60)")


def _add_backstop(p: argparse.ArgumentParser) -> None:
    """GPU pods no admitted Workload covers: reported, optionally evicted."""
    p.add_argument(
        "--backstop",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="report GPU pods on pool nodes that no admitted Kueue Workload covers (default on)",
    )
    p.add_argument(
        "--uncovered-grace",
        type=float,
        default=UNCOVERED_GRACE_SECONDS,
        help=f"seconds a pod may stay uncovered before it is reported ({UNCOVERED_GRACE_SECONDS:.0f})",
    )
    p.add_argument(
        "--termination-allowance",
        type=float,
        default=UNCOVERED_TERMINATION_ALLOWANCE_SECONDS,
        help="a terminating pod holding GPUs Kueue no longer counts is given its termination grace, at most "
        f"this many seconds, before the grace starts ({UNCOVERED_TERMINATION_ALLOWANCE_SECONDS:.0f}; "
        "docs/security.md)",
    )
    p.add_argument(
        "--evict-terminating",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="end the termination (gracePeriodSeconds 0, through the Eviction API) of a terminating pod "
        "still holding GPUs Kueue no longer counts once reported: after its grace up to "
        "--termination-allowance, then --uncovered-grace (default on; needs manifests/serve/evict/rbac.yaml)",
    )
    p.add_argument(
        "--evict-uncovered",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="evict uncovered pods through the Eviction API (respects PodDisruptionBudgets; default off)",
    )
    p.add_argument(
        "--evict-after",
        type=float,
        default=UNCOVERED_EVICT_AFTER_SECONDS,
        help="seconds uncovered before an eviction, at least the grace "
        f"({UNCOVERED_EVICT_AFTER_SECONDS:.0f})",
    )


def _add_defrag(p: argparse.ArgumentParser) -> None:
    """Moving jobs to free a node for a waiting one (docs/queueing.md, Defragmentation)."""
    p.add_argument(
        "--defrag",
        metavar="POOL[,POOL]|all",
        default="",
        help="free a node for a job that waits within its team's quota while its pool's free GPUs are spread "
        "over several nodes, by moving (Kueue deactivate + requeue) the fewest, lowest-priority, newest "
        "training jobs, in these pools (default: off; docs/queueing.md, Defragmentation)",
    )
    p.add_argument(
        "--defrag-moves-per-hour",
        type=int,
        default=DEFRAG_MOVES_PER_HOUR,
        help=f"jobs moved per rolling hour at most, all pools together ({DEFRAG_MOVES_PER_HOUR})",
    )
    p.add_argument(
        "--defrag-settle",
        type=float,
        default=DEFRAG_SETTLE_SECONDS,
        help=f"seconds a job waits before a move is made for it ({DEFRAG_SETTLE_SECONDS:g})",
    )
    p.add_argument(
        "--set-aside-idle",
        type=float,
        default=SET_ASIDE_IDLE_SECONDS,
        help="a set-aside ends once its nodes were free this many seconds without Kueue admitting its gang "
        f"({SET_ASIDE_IDLE_SECONDS:g}; docs/distributed.md, No starvation)",
    )
    p.add_argument(
        "--set-aside-max",
        type=float,
        default=SET_ASIDE_MAX_SECONDS,
        help=f"a set-aside ends after this many seconds at most ({SET_ASIDE_MAX_SECONDS:g})",
    )
    p.add_argument(
        "--hold-bounds",
        action="store_true",
        help="with --defrag: record each waiting one-pod job's first start bound and set a node aside for it "
        "before that bound (docs/queueing.md, A bound gpuctl keeps; off by default: not yet better measured)",
    )
    p.add_argument(
        "--bound-lead",
        type=float,
        default=SET_ASIDE_BOUND_LEAD_SECONDS,
        help="a one-pod job shown a start bound gets a node set aside this many seconds before that bound "
        f"({SET_ASIDE_BOUND_LEAD_SECONDS:g}; docs/queueing.md, A bound gpuctl keeps)",
    )


def _add_idle(p: argparse.ArgumentParser) -> None:
    """Idle GPUs back to the queue (docs/utilisation.md): the policies of pools and quotas."""
    p.add_argument(
        "--idle",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="act on jobs whose GPUs are idle by their pool's or quota's idle policy (stop a notebook, scale "
        "a service to its floor, report training); needs --prometheus-url (default off)",
    )
    p.add_argument(
        "--idle-dry-run",
        action="store_true",
        help="with --idle: only report (Event, history, metric) what the policies would do",
    )
    p.add_argument(
        "--idle-interval",
        type=float,
        default=IDLE_INTERVAL_SECONDS,
        help=f"seconds between idle passes ({IDLE_INTERVAL_SECONDS:g})",
    )


def _add_leader_election(p: argparse.ArgumentParser) -> None:
    """The replicas' Lease."""
    p.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="elect a leader among replicas on a Lease; only it reconciles and exports cluster metrics (on)",
    )
    p.add_argument(
        "--lease-namespace",
        default=None,
        help="namespace of the Lease (default: $POD_NAMESPACE, the in-cluster namespace, the kubeconfig "
        "context's namespace, else default)",
    )
    p.add_argument("--lease-name", default=DEFAULT_LEASE_NAME, help=f"Lease name ({DEFAULT_LEASE_NAME})")
    p.add_argument("--lease-duration", type=float, default=15.0, help="seconds a Lease lasts unrenewed (15)")
    p.add_argument(
        "--renew-deadline", type=float, default=10.0, help="seconds to renew before stepping down (10)"
    )
    p.add_argument("--retry-period", type=float, default=2.0, help="seconds between Lease attempts (2)")


def _add_clusters(p: argparse.ArgumentParser) -> None:
    """Several clusters: the series' label and a MultiKueue manager's workers."""
    p.add_argument(
        "--cluster",
        default="",
        metavar="NAME",
        help="label every exported series cluster=NAME, to tell a MultiKueue manager's and its workers' "
        'metrics apart in one Prometheus (default: no label; docs/metrics.md, "Several clusters")',
    )
    p.add_argument(
        "--worker-kubeconfig",
        action="append",
        type=worker_kubeconfig,
        default=[],
        metavar="NAME=PATH",
        help="a MultiKueue manager's worker cluster NAME, reached with the kubeconfig file PATH (its current "
        "context): the API's describe and logs of a job dispatched there read its pods there, and the "
        "reconciler copies a multi-node job's headless Service there; repeatable (docs/multicluster.md)",
    )


def worker_kubeconfig(value: str) -> tuple[str, str]:
    """--worker-kubeconfig NAME=PATH -> (NAME, PATH); the file must exist."""
    name, sep, file = value.partition("=")
    if not sep or not name or not file:
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected NAME=PATH (a worker cluster's name = its kubeconfig)"
        )
    if not Path(file).is_file():
        raise argparse.ArgumentTypeError(f"{value!r}: no file {file}")
    return name, file
