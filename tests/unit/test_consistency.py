"""One rule, one answer: the same Pods, Workloads and Nodes fed to every consumer give the same status
and GPU count.

Consumers, each through its real entry point:
- the CLI: `gpuctl get jobs -A -o json` (gpuctl.cli.main.main) on a fake API server;
- the REST API: `GET /api/v1/jobs` through FastAPI, on the same fake API server, and again inside
  `gpuctl serve --api`, answering from the serve cache (trimmed objects, gpuctl.server.cache.CacheReader);
- the metrics: `gpuctl serve`'s informers (gpuctl.server.wiring) filled with the objects as watch events
  (trimmed as in production), then a scrape of gpuctl_workloads and the pool GPU gauges;
- the webhook's GPU count (gpuctl.domain.gpus.pod_spec_gpus) of the pod or controller template it reviews.

The fake API server answers lists and gets from a dict, filtering with the same selector semantics
the API server has (gpuctl.cluster.reader); nothing here talks to a network.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import yaml
from fastapi.testclient import TestClient

from gpuctl.cli.main import main as cli_main
from gpuctl.cluster import Cluster
from gpuctl.cluster.paths import RESOURCES
from gpuctl.cluster.reader import fields_match, labels_match, parse_field_selector, parse_label_selector
from gpuctl.constants import (
    BUDGET_FLAVOR,
    GPU_RESOURCE,
    KUEUE_API_VERSION,
    LOCAL_QUEUE_NAME,
    QUOTA_GPU,
    Labels,
)
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.gpus import pod_spec_gpus as webhook_pod_gpus
from gpuctl.domain.objects import TABLE
from gpuctl.domain.status import NONE_CELL, pod_ip, pod_node, pod_ready, printed_pod_status
from gpuctl.domain.workload import job_pool, reserved_gpus
from gpuctl.server.api import create_app
from gpuctl.server.api.auth import SAR_PATH, TOKEN_REVIEW_PATH, Authenticator
from gpuctl.server.cache import Cache, CacheReader
from gpuctl.server.metrics import build_registry
from gpuctl.server.wiring import default_cache
from gpuctl.service.access import SSAR_PATH
from gpuctl.service.errors import Conflict
from gpuctl.service.jobs import list_job_rows
from gpuctl.service.pools import delete_pool
from gpuctl.spec import SpecConfig
from queues import TeamQuota, cluster_queue, resource_flavor

NS = "team-a"
POOL = "training-pool"
# Issue 30: a job of several pools (`pool: [inference-pool, dev-pool]`) admitted to dev-pool.
DEV, INF = "dev-pool", "inference-pool"
T0 = "2026-01-01T00:00:00Z"
USER = {"username": "admin", "uid": "1", "groups": ["system:masters"]}

# --------------------------------------------------------------------------------------------- objects


def _gpu(n: int | None, *, limits_only: bool = False) -> dict:
    if n is None:
        return {}
    key = "limits" if limits_only else "requests"
    return {"resources": {key: {GPU_RESOURCE: str(n), "cpu": "1"}}}


def pod_spec(main: int, *, limits_only: bool = False, sidecar: int = 0, init: int = 0) -> dict:
    spec: dict = {
        "containers": [{"name": "main", "image": "busybox", **_gpu(main, limits_only=limits_only)}],
        "nodeSelector": {Labels.POOL: POOL},
    }
    inits = []
    if init:
        inits.append({"name": "init", "image": "busybox", **_gpu(init)})
    if sidecar:
        inits.append({"name": "side", "image": "busybox", "restartPolicy": "Always", **_gpu(sidecar)})
    if inits:
        spec["initContainers"] = inits
    return spec


def any_pool_spec(gpus: int, admitted_to: str | None) -> dict:
    """A pod spec of `pool: [inference-pool, dev-pool]` (gpuctl's builders: node affinity, no selector);
    admitted_to: the nodeSelector Kueue writes from the admitted flavor's nodeLabels (a Job's template
    when Kueue unsuspends it, the pods made from it)."""
    spec: dict = {
        "containers": [{"name": "main", "image": "busybox", **_gpu(gpus)}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": Labels.POOL, "operator": "In", "values": [INF, DEV]}]}
                    ]
                }
            }
        },
    }
    if admitted_to:
        spec["nodeSelector"] = {Labels.POOL: admitted_to}
    return spec


def _labels(name: str, kind: str, pool: str | None = POOL) -> dict:
    out = {
        Labels.JOB_TYPE: kind,
        Labels.PRIORITY: "medium",
        Labels.KUEUE_QUEUE: LOCAL_QUEUE_NAME,
        Labels.MANAGED_BY: "gpuctl",
    }
    if pool:  # a job of several pools carries no pool label (gpuctl.builders.common.gpuctl_labels)
        out[Labels.POOL] = pool
    return out


def job_obj(
    name: str,
    spec: dict,
    *,
    suspend: bool,
    status: dict | None = None,
    pool: str | None = POOL,
    parallelism: int = 1,
) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "labels": _labels(name, "training", pool),
            "creationTimestamp": T0,
        },
        "spec": {
            "suspend": suspend,
            "parallelism": parallelism,
            "template": {"metadata": {"labels": _labels(name, "training", pool)}, "spec": spec},
        },
        "status": status or {},
    }


def deployment_obj(name: str, spec: dict) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "labels": _labels(name, "inference"),
            "creationTimestamp": T0,
        },
        "spec": {
            "replicas": 1,
            "template": {
                "metadata": {"labels": {**_labels(name, "inference"), Labels.APP: name}},
                "spec": spec,
            },
        },
        "status": {},
    }


def pod_obj(name: str, owner: dict, spec: dict, *, gated: bool, node: str | None, phase: str) -> dict:
    owner_labels = owner["metadata"]["labels"]
    labels = _labels(owner["metadata"]["name"], owner_labels[Labels.JOB_TYPE], owner_labels.get(Labels.POOL))
    labels[Labels.JOB_NAME if owner["kind"] == "Job" else Labels.APP] = owner["metadata"]["name"]
    s = dict(spec)
    if gated:
        s["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    if node:
        s["nodeName"] = node
    status: dict = {"phase": phase}
    if gated:  # what the API server writes on a gated pod (kubectl prints SchedulingGated)
        status["conditions"] = [cond("PodScheduled", "False", "SchedulingGated")]
    if phase == "Running":
        status["containerStatuses"] = [{"name": "main", "ready": True, "state": {"running": {}}}]
        status["podIP"] = "10.0.0.9"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "labels": labels,
            "creationTimestamp": T0,
            "ownerReferences": [
                {
                    "kind": owner["kind"],
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": s,
        "status": status,
    }


def cond(ctype: str, status: str = "True", reason: str = "", message: str = "") -> dict:
    return {
        "type": ctype,
        "status": status,
        "reason": reason or ctype,
        "message": message,
        "lastTransitionTime": T0,
    }


def workload_obj(
    name: str,
    owner: dict,
    spec: dict,
    conditions: list[dict],
    *,
    active: bool = True,
    reserved: int | None = None,
    pool: str | None = POOL,
    flavor: str = POOL,
    count: int = 1,
) -> dict:
    wl: dict = {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "labels": {
                **({Labels.POOL: pool} if pool else {}),
                Labels.PRIORITY: "medium",
                Labels.KUEUE_JOB_UID: owner["metadata"]["uid"],
            },
            "creationTimestamp": T0,
            "ownerReferences": [
                {
                    "kind": owner["kind"],
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "queueName": LOCAL_QUEUE_NAME,
            "priority": 500000,
            "priorityClassRef": {"name": "gpuctl-medium"},
            "active": active,
            "podSets": [{"name": "main", "count": count, "template": {"spec": spec}}],
        },
        "status": {"conditions": conditions},
    }
    if reserved is not None:
        wl["status"]["admission"] = {
            "clusterQueue": NS,
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": count,
                    "flavors": {GPU_RESOURCE: flavor, "cpu": flavor, QUOTA_GPU: BUDGET_FLAVOR},
                    "resourceUsage": {GPU_RESOURCE: str(reserved), "cpu": "1"},
                }
            ],
        }
    return wl


def node_obj(name: str = "gpu-node-1", pool: str = POOL) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {Labels.POOL: pool}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "96", "memory": "1Ti", GPU_RESOURCE: "8"},
            "allocatable": {"cpu": "96", "memory": "1Ti", GPU_RESOURCE: "8"},
            "conditions": [cond("Ready", reason="KubeletReady")],
        },
    }


def namespace_obj() -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NS, "uid": "uid-ns", "labels": {Labels.NAMESPACE: "true"}},
    }


# --------------------------------------------------------------------------------------------- cases


@dataclass
class Case:
    """One job; `subject` is the pod (or, without one, the controller) whose row is compared."""

    id: str
    objects: list[dict]
    status: str  # the job row's STATUS
    gpus: int  # GPUs of that row, of the webhook's count, and of the metrics
    metric_state: str | None  # gpuctl_workloads state label (None: not counted, finished)
    holds_quota: bool  # metrics count the GPUs as reserved (else as requested)
    webhook_spec: dict = field(default_factory=dict)  # one pod's
    # `describe pool`'s list of the job in its pool: running | queued | stopped, None: in none
    listed: str | None = None
    pool: str = POOL  # the job's pool in every view ("" none; the metrics' `*`)
    pods: int = 1  # rows of the job (one per pod); `gpus` is their sum
    job_status: str = ""  # the job's own status (`describe job`), when not its rows' (a pod not bound yet)


def _cases() -> list[Case]:
    out = []
    # The issue's example: QuotaReserved (not yet Admitted), GPUs only in limits, a GPU sidecar.
    spec = pod_spec(4, limits_only=True, sidecar=1)
    j = job_obj("qr", spec, suspend=True)
    wl = workload_obj("job-qr", j, spec, [cond("QuotaReserved")], reserved=5)
    out.append(
        Case("quota-reserved-limits-sidecar", [j, wl], "QuotaReserved", 5, "admitted", True, spec, "running")
    )

    # Waiting for quota, a classic init container bigger than the app container.
    spec = pod_spec(1, init=2)
    j = job_obj("queued", spec, suspend=True)
    wl = workload_obj("job-queued", j, spec, [cond("QuotaReserved", "False", "Pending", "insufficient")])
    out.append(Case("queued-init-container", [j, wl], "Queued", 2, "queued", False, spec, "queued"))

    # Deactivated by Kueue (spec.active=false): not queued any more.
    spec = pod_spec(2)
    j = job_obj("inactive", spec, suspend=True)
    wl = workload_obj(
        "job-inactive",
        j,
        spec,
        [cond("QuotaReserved", "False", "Inactive"), cond("Evicted", "True", "InactiveWorkload")],
        active=False,
    )
    out.append(Case("inactive", [j, wl], "Inactive", 2, "inactive", False, spec, "stopped"))

    # Evicted by preemption, back in the queue.
    spec = pod_spec(3)
    j = job_obj("evicted", spec, suspend=True)
    wl = workload_obj(
        "job-evicted",
        j,
        spec,
        [
            cond("QuotaReserved", "False", "Pending"),
            cond("Evicted", "True", "Preempted"),
            cond("Preempted", "True", "InCohortReclamation"),
        ],
    )
    out.append(Case("evicted-preempted", [j, wl], "Preempted", 3, "preempted", False, spec, "queued"))

    # Finished: the Job completed; its pod is gone.
    spec = pod_spec(2)
    j = job_obj("done", spec, suspend=False, status={"conditions": [cond("Complete")], "succeeded": 1})
    wl = workload_obj(
        "job-done",
        j,
        spec,
        [cond("QuotaReserved"), cond("Admitted"), cond("Finished", reason="Succeeded")],
        reserved=2,
    )
    out.append(Case("finished", [j, wl], "Succeeded", 2, None, False, spec))

    # Admitted and running on a node, GPUs only in limits.
    spec = pod_spec(2, limits_only=True)
    j = job_obj("run", spec, suspend=False, status={"active": 1, "ready": 1})
    wl = workload_obj(
        "job-run", j, spec, [cond("QuotaReserved"), cond("Admitted"), cond("PodsReady")], reserved=2
    )
    p = pod_obj("run-abcde", j, spec, gated=False, node="gpu-node-1", phase="Running")
    out.append(Case("admitted-running", [j, wl, p], "Running", 2, "running", True, p["spec"], "running"))

    # A Deployment's pod: gated, its own Workload QuotaReserved, a sidecar.
    spec = pod_spec(1, sidecar=1)
    d = deployment_obj("svc", spec)
    p = pod_obj("svc-7d9f-x1", d, spec, gated=True, node=None, phase="Pending")
    wl = workload_obj("pod-svc-7d9f-x1", p, spec, [cond("QuotaReserved")], reserved=2)
    out.append(
        Case(
            "deployment-pod-quota-reserved",
            [d, p, wl],
            "QuotaReserved",
            2,
            "admitted",
            True,
            p["spec"],
            "running",
        )
    )
    return out + _more_cases()


def _more_cases() -> list[Case]:
    """Issue 30: a job of several pools admitted to dev-pool (its pod not bound yet, then running there),
    the same job stopped before any admission (no pool at all), and a job of two pods."""
    out = []
    spec = any_pool_spec(2, None)
    admitted = any_pool_spec(2, DEV)
    j = job_obj("anyp-bind", admitted, suspend=False, status={"active": 1}, pool=None)
    wl = workload_obj(
        "job-anyp-bind", j, spec, [cond("QuotaReserved"), cond("Admitted")], reserved=2, pool=None, flavor=DEV
    )
    p = pod_obj("anyp-bind-x1", j, admitted, gated=False, node=None, phase="Pending")
    out.append(
        Case(
            "any-pool-not-bound",
            [j, wl, p],
            "Pending",
            2,
            "admitted",
            True,
            admitted,
            "running",
            DEV,
            job_status="Admitted",
        )
    )

    j = job_obj("anyp-run", admitted, suspend=False, status={"active": 1, "ready": 1}, pool=None)
    wl = workload_obj(
        "job-anyp-run",
        j,
        spec,
        [cond("QuotaReserved"), cond("Admitted"), cond("PodsReady")],
        reserved=2,
        pool=None,
        flavor=DEV,
    )
    p = pod_obj("anyp-run-x1", j, admitted, gated=False, node="dev-node-1", phase="Running")
    out.append(Case("any-pool-running", [j, wl, p], "Running", 2, "running", True, admitted, "running", DEV))

    j = job_obj("anyp-stop", spec, suspend=True, pool=None)
    wl = workload_obj(
        "job-anyp-stop",
        j,
        spec,
        [cond("QuotaReserved", "False", "Inactive"), cond("Evicted", "True", "InactiveWorkload")],
        active=False,
        pool=None,
    )
    out.append(Case("any-pool-inactive", [j, wl], "Inactive", 2, "inactive", False, spec, None, ""))

    spec = pod_spec(1)
    j = job_obj("two", spec, suspend=False, status={"active": 2, "ready": 2}, parallelism=2)
    wl = workload_obj(
        "job-two", j, spec, [cond("QuotaReserved"), cond("Admitted"), cond("PodsReady")], reserved=2, count=2
    )
    pods = [pod_obj(f"two-{i}", j, spec, gated=False, node="gpu-node-1", phase="Running") for i in "ab"]
    out.append(
        Case("multi-pod-running", [j, wl, *pods], "Running", 2, "running", True, spec, "running", pods=2)
    )
    return out


CASES = _cases()

# --------------------------------------------------------------------------------------------- fake API


def _team_objects() -> list[dict]:
    team = TeamQuota(namespace=NS, quota_name="q", gpu=8)
    pools = [POOL, DEV, INF]
    return [
        namespace_obj(),
        node_obj(),
        node_obj("dev-node-1", DEV),
        node_obj("inf-node-1", INF),
        *(resource_flavor(p) for p in pools),
        cluster_queue(team, pools),
    ]


_PLURAL = {r.plural: kind for kind, r in RESOURCES.items()}


class FakeApiServer:
    """Answers the Cluster client's reads (list/get by REST path) from a list of objects, and the
    API's TokenReview/SubjectAccessReview and the CLI's SelfSubjectAccessReview (one admin,
    everything allowed)."""

    def __init__(self, objects: list[dict]):
        self.objects = objects
        self.listed: list[str] = []  # kinds asked for, in order

    def _parse(self, api_path: str) -> tuple[str, str | None, str | None]:
        parts = api_path.strip("/").split("/")
        parts = parts[2:] if parts[0] == "api" else parts[3:]
        ns = None
        if parts[0] == "namespaces" and len(parts) >= 3:
            ns, parts = parts[1], parts[2:]
        return _PLURAL[parts[0]], ns, parts[1] if len(parts) > 1 else None

    def list(self, api_path: str, *, label_selector=None, field_selector=None, **_) -> list[dict]:
        kind, ns, _name = self._parse(api_path)
        self.listed.append(kind)
        lreq, freq = parse_label_selector(label_selector), parse_field_selector(field_selector)
        return [
            json.loads(json.dumps(o))
            for o in self.objects
            if o["kind"] == kind
            and (ns is None or o["metadata"].get("namespace") == ns)
            and labels_match(lreq, o["metadata"].get("labels"))
            and fields_match(freq, o)
        ]

    def list_table(self, api_path: str, *, label_selector=None, field_selector=None, **_) -> list[dict]:
        """The objects as the API server's Table rows (gpuctl.cluster.Cluster.list_table): metadata and
        kubectl's printed cells, computed by the same printer port the CLI uses for a full pod."""
        rows = []
        for o in self.list(api_path, label_selector=label_selector, field_selector=field_selector):
            ready, total = pod_ready(o)
            cells = {
                "Name": o["metadata"]["name"],
                "Ready": f"{ready}/{total}",
                "Status": printed_pod_status(o),
                "IP": pod_ip(o) or NONE_CELL,
                "Node": pod_node(o) or NONE_CELL,
                "Completed": (o.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
            }
            rows.append({"metadata": o["metadata"], TABLE: cells})
        return rows

    def get_or_none(self, api_path: str, **_) -> dict | None:
        kind, ns, name = self._parse(api_path)
        return next(
            (
                o
                for o in self.objects
                if o["kind"] == kind
                and o["metadata"]["name"] == name
                and (ns is None or o["metadata"].get("namespace") == ns)
            ),
            None,
        )

    def get(self, api_path: str, **query) -> dict:
        _kind, _ns, name = self._parse(api_path)
        if name:
            return self.get_or_none(api_path) or {}
        return {
            "items": self.list(
                api_path, label_selector=query.get("labelSelector"), field_selector=query.get("fieldSelector")
            ),
            "metadata": {},
        }

    def pending_workloads(self, cluster_queue: str) -> None:
        return None  # a cluster without Kueue's visibility API: positions are computed from Workloads

    def pending_in_local_queue(self, namespace: str, local_queue: str) -> None:
        return None  # the same for a team's view of its own queue (`get jobs -n NS`)

    def request(self, method: str, path: str, *, body: dict | None = None, **_) -> dict:
        if path == TOKEN_REVIEW_PATH:
            return {"status": {"authenticated": True, "user": USER}}
        if path in (SAR_PATH, SSAR_PATH):  # the API's reviews of its caller, the CLI's of itself
            return {"status": {"allowed": True}}
        raise AssertionError(f"unexpected {method} {path}")


@pytest.fixture(params=CASES, ids=[c.id for c in CASES])
def case(request) -> Case:
    return request.param


@pytest.fixture
def fake(case: Case) -> FakeApiServer:
    return FakeApiServer(_team_objects() + case.objects)


@contextlib.contextmanager
def _cli_cluster(monkeypatch, fake: FakeApiServer) -> Iterator[None]:
    monkeypatch.setattr(Cluster, "connect", classmethod(lambda cls, **_: fake))
    yield


# --------------------------------------------------------------------------------------------- consumers


def cli_jobs(monkeypatch, fake: FakeApiServer, argv: tuple[str, ...] = ("-o", "json")) -> list[dict]:
    """`gpuctl get jobs -A -o json`'s items: one object per job."""
    out = io.StringIO()
    with _cli_cluster(monkeypatch, fake), contextlib.redirect_stdout(out):
        assert cli_main(["get", "jobs", "-A", *argv]) == 0
    return json.loads(out.getvalue())["items"]


def cli_rows(monkeypatch, fake: FakeApiServer, argv: tuple[str, ...] = ("-o", "json")) -> list[dict]:
    """`gpuctl get jobs -A -o json`, one row per pod (a job without pods: its own), as the table lists
    them: each job object's pods (status.pods) with the job's pool (spec.pool)."""
    return [
        {"status": p["phase"], "gpus": p["gpus"], "pool": job["spec"]["pool"]}
        for job in cli_jobs(monkeypatch, fake, argv)
        for p in job["status"]["pods"] or [job["status"]]
    ]


def serve_cache(fake: FakeApiServer) -> Cache:
    """`gpuctl serve --metrics --api`'s informers, fed every object as its watch would deliver it:
    only those its selectors match, trimmed by its transform; then marked listed."""
    cache = default_cache(fake, metrics=True, api=True)
    for obj in fake.objects:
        inf = cache.informers.get(obj["kind"])
        if inf is None:
            continue
        if labels_match(parse_label_selector(inf.label_selector), obj["metadata"].get("labels")) and (
            fields_match(parse_field_selector(inf.field_selector), obj)
        ):
            inf.apply_event("ADDED", obj)
    for inf in cache.informers.values():
        inf.synced.set()
    return cache


def api_get(fake: FakeApiServer, url: str, cache: Cache | None = None, **params):
    """GET `url` of the REST API; with `cache`, as mounted in `gpuctl serve --api` (lists from the cache)."""
    kwargs = {"reader_factory": (lambda: CacheReader(cache, fake))} if cache is not None else {}
    app = create_app(lambda: fake, Authenticator(lambda: fake), spec_config=SpecConfig(), **kwargs)
    with TestClient(app) as client:
        r = client.get(url, params=params, headers={"Authorization": "Bearer t"})
    assert r.status_code == 200, r.text
    return r.json()


def api_rows(fake: FakeApiServer, cache: Cache | None = None) -> list[dict]:
    """GET /api/v1/jobs; with `cache`, inside `gpuctl serve --api`."""
    return api_get(fake, "/api/v1/jobs", cache, page_size=100)["items"]


def metrics(fake: FakeApiServer) -> dict[str, dict[tuple, float]]:
    """A scrape of the collector over the serve cache."""
    cache = default_cache(fake, metrics=True)
    registry, _, _ = build_registry(cache, None, process=False)  # hooks handlers before the events
    for obj in fake.objects:
        inf = cache.informers.get(obj["kind"])
        if inf is not None and labels_match(
            parse_label_selector(inf.label_selector), obj["metadata"].get("labels")
        ):
            inf.apply_event("ADDED", obj)
    out: dict[str, dict[tuple, float]] = {}
    for fam in registry.collect():
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def _sum(m: dict, name: str, **want: str) -> float:
    return sum(
        v for labels, v in m.get(name, {}).items() if all(dict(labels).get(k) == w for k, w in want.items())
    )


# --------------------------------------------------------------------------------------------- the test


def _view(rows: list[dict]) -> list[tuple]:
    """What every consumer must agree on, per row: status, GPUs, pool."""
    return sorted((r["status"], r["gpus"], r["pool"]) for r in rows)


def test_every_consumer_gives_the_same_status_gpus_and_pool(
    case: Case, fake: FakeApiServer, monkeypatch
) -> None:
    cli = cli_rows(monkeypatch, fake)
    api = api_rows(fake)
    cache = serve_cache(fake)
    fake.listed.clear()
    served = api_rows(fake, cache)
    # Inside serve, the job list reads pods, controllers and Workloads from memory.
    assert not {"Pod", "Job", "Deployment", "StatefulSet", "Workload"} & set(fake.listed), fake.listed
    m = metrics(fake)
    webhook = webhook_pod_gpus(case.webhook_spec)

    want = [(case.status, case.gpus // case.pods, case.pool)] * case.pods
    assert _view(cli) == _view(api) == _view(served) == want
    # The plain table's reads (no GPUs; the Workloads of suspended jobs and of jobs of several pools only).
    table = [(r.status, r.pool) for r in list_job_rows(fake, None, gpus=False)]
    assert table == [(case.status, case.pool)] * case.pods
    assert webhook * case.pods == case.gpus
    # `get jobs --pool P` lists the job exactly in its pool.
    for pool in (POOL, DEV, INF):
        listed = cli_rows(monkeypatch, fake, ("--pool", pool, "-o", "json"))
        assert len(listed) == (case.pods if pool == case.pool else 0), (pool, listed)

    states = {
        (dict(k)["state"], dict(k)["pool"]): v
        for k, v in m["gpuctl_workloads"].items()
        if dict(k)["namespace"] == NS and v
    }
    if case.metric_state is None:
        assert states == {}
    else:
        assert states == {(case.metric_state, case.pool or "*"): 1}
    pool = case.pool or "*"
    reserved = _sum(m, "gpuctl_pool_reserved_gpus", pool=pool)
    requested = _sum(m, "gpuctl_pool_requested_gpus", pool=pool)
    if case.holds_quota:
        assert (reserved, requested) == (case.gpus, 0)
    elif case.metric_state in ("queued", "preempted"):  # waiting for quota: requested
        assert (reserved, requested) == (0, case.gpus)
    else:  # finished, or inactive (Kueue does not consider it): neither
        assert (reserved, requested) == (0, 0)


def _describe_lists(d: dict) -> dict[str, list[str]]:
    return {k: [j["name"] for j in d[k]] for k in ("running", "queued", "stopped") if d[k]}


def test_describe_job_and_pool_and_delete_pool_see_the_job_in_its_pool(
    case: Case, fake: FakeApiServer, monkeypatch
) -> None:
    """`describe pool` (CLI and API) lists the job in its pool only, in the list of the domain's set its
    Workload is in; `delete pool` refuses to delete the pool while the job uses it, a finished job not
    (it holds and waits for nothing). The bug of issue 30: a job of several pools running in dev-pool was
    counted in dev-pool's GPUs but missing from its jobs, and `delete pool dev-pool` did not see it."""
    (name,) = [o["metadata"]["name"] for o in case.objects if o["kind"] in ("Job", "Deployment")]
    described = json.loads(_cli_out(monkeypatch, fake, ["describe", "job", name, "-n", NS, "-o", "json"]))
    assert described["pool"] == (case.pool or None)
    for pool in (POOL, DEV, INF):
        mine = pool == case.pool
        cli = json.loads(_cli_out(monkeypatch, fake, ["describe", "pool", pool, "-o", "json"]))
        api = api_get(fake, f"/api/v1/pools/{pool}")
        want = {case.listed: [name]} if mine and case.listed else {}
        assert _describe_lists(cli) == _describe_lists(api) == want, pool
        if mine and case.listed == "queued":
            assert cli["gpu_queued"] == sum(j["gpus"] for j in cli["queued"]) == case.gpus
        try:
            delete_pool(fake, pool, dry_run=DryRun.CLIENT)
            in_use = False
        except Conflict as e:
            assert f"{NS}/{name}" in str(e)
            in_use = True
        assert in_use == (mine and (case.job_status or case.status) not in ("Succeeded", "Failed")), pool


def kueue_reservation(objects: list[dict]) -> dict[str, int]:
    """Pool -> GPUs, summed over the Workloads that hold quota the way Kueue sums them into each
    ClusterQueue's status.flavorsReservation (each Workload's own status.admission:
    gpuctl.domain.workload.reserved_gpus)."""
    out: dict[str, int] = {}
    for o in objects:
        if o["kind"] == "Workload":
            for pool, gpus in reserved_gpus(o).items():
                out[pool] = out.get(pool, 0) + gpus
    return out


def test_pool_reserved_used_and_free_agree_in_steady_state(
    case: Case, fake: FakeApiServer, monkeypatch
) -> None:
    """One rule for a pool's reserved GPUs: Kueue's reservations. `get pools` and the API read Kueue's
    sum (the ClusterQueues' status.flavorsReservation, gpuctl.domain.teams.pool_reservations: no
    Workload, no pod); the metrics sum the Workloads they hold in memory (reserved_gpus, the terms of
    that sum). used = reserved, free = capacity - used (gpuctl.domain.pools.gpus_taken / gpus_free;
    the metrics take the larger of reserved and what bound pods hold). With Kueue's status in steady
    state all three give the same reserved, used and free GPUs (tests/integration/test_metrics.py
    checks the two sources agree on a real Kueue)."""
    pool = case.pool or POOL
    used = kueue_reservation(fake.objects).get(pool, 0)
    assert used == (case.gpus if case.holds_quota else 0)
    (cq,) = [o for o in fake.objects if o["kind"] == "ClusterQueue"]
    cq["status"] = {
        "flavorsReservation": [
            {"name": pool, "resources": [{"name": GPU_RESOURCE, "total": str(used), "borrowed": "0"}]}
        ]
    }
    out = io.StringIO()
    with _cli_cluster(monkeypatch, fake), contextlib.redirect_stdout(out):
        assert cli_main(["get", "pools", "-o", "json"]) == 0
    (cli,) = [p for p in json.loads(out.getvalue())["items"] if p["metadata"]["name"] == pool]
    g = cli["status"]["gpus"]
    app = create_app(lambda: fake, Authenticator(lambda: fake), spec_config=SpecConfig())
    with TestClient(app) as client:
        r = client.get("/api/v1/pools", headers={"Authorization": "Bearer t"})
    assert r.status_code == 200, r.text
    (api,) = [p for p in r.json() if p["name"] == pool]
    m = metrics(fake)
    reserved, free = (
        _sum(m, "gpuctl_pool_reserved_gpus", pool=pool),
        _sum(m, "gpuctl_pool_free_gpus", pool=pool),
    )
    assert (g["reserved"], api["gpuReserved"], reserved) == (used,) * 3
    # The pool's facts (gpuctl.domain.pools.PoolFacts): one aggregation for the views and the gauges.
    assert g["total"] == api["gpuTotal"] == _sum(m, "gpuctl_pool_allocatable_gpus", pool=pool) == 8
    assert g["allNodes"] == _sum(m, "gpuctl_pool_capacity_gpus", pool=pool) == 8
    assert (
        cli["status"]["nodes"]["ready"]
        == _sum(m, "gpuctl_pool_nodes", pool=pool, state="ready")
        == len(cli["spec"]["nodes"])
        == 1
    )
    metric_nodes = sorted(dict(k)["node"] for k in m["gpuctl_node_pool_info"] if dict(k)["pool"] == pool)
    assert cli["spec"]["nodes"] == api["nodes"] == metric_nodes
    assert cli["status"]["gpuTypes"] == api["gpuType"]
    assert (g["used"], g["free"]) == (api["gpuUsed"], api["gpuFree"]) == (used, 8 - used)
    assert free == 8 - used


def test_a_job_has_one_pool_whichever_object_is_read(case: Case) -> None:
    """gpuctl.domain.workload.job_pool: the controller, its pods and its Workload name one pool, each
    alone (a Job of several pools: the nodeSelector Kueue wrote from the admitted flavor, the Workload's
    admission) and together."""
    pools = {job_pool(o) for o in case.objects}
    assert pools == {case.pool or None}
    assert job_pool(*case.objects) == (case.pool or None)


def _ageless(data):
    """`data` without its ages (seconds since creation: they differ between two runs)."""
    if isinstance(data, dict):
        return {k: _ageless(v) for k, v in data.items() if k != "age"}
    if isinstance(data, list):
        return [_ageless(v) for v in data]
    return data


def _cli_out(monkeypatch, fake: FakeApiServer, argv: list[str]) -> str:
    out = io.StringIO()
    with _cli_cluster(monkeypatch, fake), contextlib.redirect_stdout(out):
        assert cli_main(argv) == 0
    return out.getvalue()


@pytest.mark.parametrize(
    "argv",
    [["get", "jobs", "-A"], ["get", "jobs", "-n", NS], ["describe", "job", "{name}", "-n", NS]],
    ids=["get-jobs-A", "get-jobs-n", "describe-job"],
)
def test_yaml_output_is_the_json_output(case: Case, fake: FakeApiServer, monkeypatch, argv) -> None:
    """-o yaml prints what -o json prints: a job's row holds enum values (its status is a
    gpuctl.domain.status.State), which YAML writes as their value, like JSON does."""
    (name,) = [o["metadata"]["name"] for o in case.objects if o["kind"] in ("Job", "Deployment")]
    argv = [a.format(name=name) for a in argv]
    # A waiting job's estimate (startsBy, its summary) is read off the clock: one instant for both
    # calls, or the two outputs differ whenever a second turns between them.
    frozen = time.time()
    monkeypatch.setattr("gpuctl.service.waiting.time", types.SimpleNamespace(time=lambda: frozen))
    as_json = json.loads(_cli_out(monkeypatch, fake, [*argv, "-o", "json"]))
    text = _cli_out(monkeypatch, fake, [*argv, "-o", "yaml"])
    assert _ageless(yaml.safe_load(text)) == _ageless(as_json)
    assert "!!python" not in text


def test_describe_prints_kueue_messages_whole(monkeypatch) -> None:
    """kubectl prints a condition's message whole; describe cut Kueue's at 120 characters, mid-word
    (issue 42)."""
    message = (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
        "training-pool, 4 more needed; insufficient quota for runwhere.ai/quota-gpu-840ths in flavor "
        "gpuctl-budget"
    )
    spec = pod_spec(4)
    j = job_obj("long", spec, suspend=True)
    wl = workload_obj("job-long", j, spec, [cond("QuotaReserved", "False", "Pending", message)])
    fake = FakeApiServer([*_team_objects(), j, wl])
    assert message in _cli_out(monkeypatch, fake, ["describe", "job", "long", "-n", NS])


def test_terminal_control_sequences_in_what_describe_prints_are_escaped(monkeypatch) -> None:
    """A tenant's text (a condition's message) cannot rewrite an admin's terminal: ESC and CR are printed
    as kubectl prints them (`^[`, `\\r`; issue 42). -o json keeps the text as it is."""
    evil = "\x1b[2J\x1b]0;owned\x07\rfake line"
    spec = pod_spec(1)
    j = job_obj("evil", spec, suspend=True)
    wl = workload_obj("job-evil", j, spec, [cond("QuotaReserved", "False", "Pending", evil)])
    fake = FakeApiServer([*_team_objects(), j, wl])
    out = _cli_out(monkeypatch, fake, ["describe", "job", "evil", "-n", NS])
    assert "\x1b" not in out and "\r" not in out, repr(out)
    assert "^[[2J^[]0;owned\x07\\rfake line" in out, repr(out)
    as_json = _cli_out(monkeypatch, fake, ["describe", "job", "evil", "-n", NS, "-o", "json"])
    assert any(c["message"] == evil for c in json.loads(as_json)["conditions"]), as_json


def test_table_and_custom_columns_cells_are_escaped(capsys) -> None:
    from gpuctl.cli.output import table
    from gpuctl.cli.printers import tabwrite

    table(["NAME", "REASON"], [["a", "x\x1b[31my\rz"]])
    tabwrite([["NAME", "REASON"], ["a", "x\x1b[31my"]])
    out = capsys.readouterr().out
    assert "x^[[31my\\rz" in out and "x^[[31my\n" in out and "\x1b" not in out, repr(out)
