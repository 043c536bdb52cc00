"""A command reads the cluster once (issue 30): the requests one `gpuctl` command sends to the real API
server, counted where every request goes through (gpuctl.cluster.Cluster.request), for the commands of
a pool's, a quota's and a job's life. Before its first write a command lists each collection (kind,
namespace, label and field selectors) and gets each object at most once; a write command may read back
once what its writes made (the queues, the Cohort and the flavors follow the new state), again each
collection once (a GET may repeat there: waiting for a deleted object to be gone, as kubectl delete).

`GPUCTL_READS_TABLE=1` prints the table docs/architecture.md quotes ("A command reads the cluster
once"): command -> Inventory constructions, list requests, GETs, Kueue visibility requests and access
reviews, before the first write and after it."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from gpuctl.cli.main import main
from gpuctl.cluster import Cluster, path
from gpuctl.domain.workload import IN_QUEUE, workload_state
from gpuctl.service.inventory import Inventory
from tests.integration.conftest import delete_namespaces, wait_until

ROOT = Path(__file__).resolve().parents[2]
WRITES = ("POST", "PUT", "PATCH", "DELETE")
REVIEWS = ("selfsubjectaccessreviews", "selfsubjectrulesreviews", "subjectaccessreviews")


@dataclass
class Reads:
    """The requests of one command, split at its first write."""

    before: list[tuple] = field(default_factory=list)  # (verb, resource, namespace, name, selectors)
    after: list[tuple] = field(default_factory=list)
    writes: int = 0
    inventories: list[int] = field(default_factory=lambda: [0, 0])  # made before / after the first write

    def add(self, method: str, url: str, query: dict | None) -> None:
        parts = urlsplit(url)
        segs = parts.path.strip("/").split("/")
        segs = segs[2:] if segs[0] == "api" else segs[3:]
        ns = None
        if segs[0] == "namespaces" and len(segs) >= 3:
            ns, segs = segs[1], segs[2:]
        resource, name = segs[0], (segs[1] if len(segs) > 1 else None)
        q = {k: v[0] for k, v in parse_qs(parts.query).items()}
        q.update({k: str(v) for k, v in (query or {}).items() if v is not None})
        if resource in REVIEWS:
            verb = "review"
        elif method in WRITES:
            self.writes += 1
            return
        elif name is None or (len(segs) > 2 and segs[2] == "pendingworkloads"):
            verb = "list" if name is None else "pending"
        else:
            verb = "get"
        if verb == "pending":
            q.pop("offset", None)
        key = (verb, resource, ns, name, q.get("labelSelector"), q.get("fieldSelector"), q.get("continue"))
        (self.after if self.writes else self.before).append(key)

    @staticmethod
    def repeated(calls: list[tuple], verbs: tuple[str, ...] = ("list", "get")) -> list[tuple]:
        """Collections listed (or objects got) more than once in one phase."""
        return [k for k, n in Counter(c for c in calls if c[0] in verbs).items() if n > 1]

    @staticmethod
    def summary(calls: list[tuple], inventories: int) -> str:
        n = Counter(c[0] for c in calls)
        return (
            f"{inventories} Inventory, {n['list']} lists, {n['get']} GETs, {n['pending']} visibility, "
            f"{n['review']} reviews"
        )


@pytest.fixture
def counted(cluster, capsys, monkeypatch):
    """Run the CLI in-process and count its requests: counted("get", "pools") -> Reads."""
    original, made = Cluster.request, Inventory.__init__
    current: list[Reads] = []

    def inventory(self, *args, **kw):
        if current:
            current[-1].inventories[1 if current[-1].writes else 0] += 1
        made(self, *args, **kw)

    def request(self, method, api_path, **kw):
        if current:
            current[-1].add(method, api_path, kw.get("query"))
        return original(self, method, api_path, **kw)

    monkeypatch.setattr(Cluster, "request", request)
    monkeypatch.setattr(Inventory, "__init__", inventory)

    def run(*args: str) -> Reads:
        capsys.readouterr()
        current[:] = [Reads()]
        rc = main([*args, "--kubeconfig", cluster])
        out = capsys.readouterr()
        assert rc == 0, f"gpuctl {' '.join(args)}: {out.err}"
        return current.pop()

    return run


def test_each_command_lists_each_collection_once(clean_cluster, counted, kube, tmp_path) -> None:
    team = f"tr-{uuid.uuid4().hex[:6]}"
    quota = tmp_path / "quota.yaml"
    quota.write_text(
        f"kind: quota\nquota: {{name: q-{team}}}\nnamespace:\n"
        f"  {team}: {{cpu: 64, memory: 256Gi, gpu: 8, borrowingLimit: 0}}\n"
    )
    job = tmp_path / "job.yaml"
    job.write_text(
        f"kind: training\njob: {{name: reads, namespace: {team}}}\n"
        "environment: {image: busybox, env: [{GPUCTL_FAKE_RUNTIME: 30m}]}\n"
        "resources: {pool: training-pool, gpu: 2, cpu: 2, memory: 8Gi}\n"
    )
    big = tmp_path / "big.yaml"  # waits: 8 GPUs beside the first job's 2, in a quota of 8 that borrows none
    big.write_text(job.read_text().replace("name: reads", "name: waits").replace("gpu: 2", "gpu: 8"))
    commands = [
        ("create -f pool.yaml", ["create", "-f", str(ROOT / "examples" / "pool.yaml")]),
        ("apply -f pool.yaml", ["apply", "-f", str(ROOT / "examples" / "pool.yaml")]),
        ("create -f quota.yaml", ["create", "-f", str(quota)]),
        ("create -f job.yaml", ["create", "-f", str(job)]),
        ("create -f job.yaml (waits)", ["create", "-f", str(big)]),
        ("get pools", ["get", "pools"]),
        ("describe pool", ["describe", "pool", "training-pool"]),
        ("get jobs -A", ["get", "jobs", "-A"]),
        ("get jobs -A -o wide", ["get", "jobs", "-A", "-o", "wide"]),
        ("describe job (running)", ["describe", "job", "reads", "-n", team]),
        ("describe job (waiting)", ["describe", "job", "waits", "-n", team]),
        ("get quotas", ["get", "quotas"]),
        ("get nodes", ["get", "nodes"]),
        ("describe node", ["describe", "node", "gpu-node-1"]),
        ("delete job", ["delete", "job", "reads", "-n", team]),
        ("delete job (waiting)", ["delete", "job", "waits", "-n", team]),
        ("delete quota", ["delete", "quota", f"q-{team}", "--delete-namespace"]),
        ("delete pool", ["delete", "pool", "training-pool"]),
    ]
    seen: dict[str, Reads] = {}
    for what, argv in commands:
        if what == "describe job (running)":
            wait_until(
                lambda: [
                    p for p in kube.list(path("Pod", namespace=team)) if p["status"].get("phase") == "Running"
                ],
                60,
                what="the job's pod running",
            )
        if what == "describe job (waiting)":
            wait_until(
                lambda: [
                    w
                    for w in kube.list(path("Workload", namespace=team))
                    if "waits" in w["metadata"]["name"] and workload_state(w) in IN_QUEUE
                ],
                60,
                what="the second job's Workload waiting in the queue",
            )
        if what == "delete pool":
            delete_namespaces(kube, [team], 120, delete=False)  # `delete quota --delete-namespace` deleted it
        seen[what] = counted(*argv)
    if os.environ.get("GPUCTL_READS_TABLE"):
        print("\n| command | before its first write | after it |")
        print("| --- | --- | --- |")
        for what, r in seen.items():
            after = Reads.summary(r.after, r.inventories[1]) if r.writes else "(reads only)"
            print(f"| `{what}` | {Reads.summary(r.before, r.inventories[0])} | {after} |")
            if os.environ.get("GPUCTL_READS_TABLE") == "2":
                print("   before:", *r.before, "   after:", *r.after, sep="\n      ")
    # After the writes a GET may repeat: waiting for a deleted object to be gone (kubectl delete's wait).
    twice = {what: Reads.repeated(r.before) + Reads.repeated(r.after, ("list",)) for what, r in seen.items()}
    assert {what: t for what, t in twice.items() if t} == {}, {w: t for w, t in twice.items() if t}
    # The reads a pool create needs, and no more: the nodes and the flavors, once, before its writes.
    lists = Counter(c[1] for c in seen["create -f pool.yaml"].before if c[0] == "list")
    assert lists == {"nodes": 1, "resourceflavors": 1}, lists
