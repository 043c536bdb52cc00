"""The objects `get` and `history` print (gpuctl.cli.objects, docs/cli.md "The objects of `get`"): one
Kubernetes-shaped object per job from its rows, the tables read from those objects, GPUs as one number
with slices, the earlier `--json` rows kept; without a cluster (the same on a real one:
tests/integration/test_cli_kubectl.py)."""

from __future__ import annotations

import argparse
import json
import time

import pytest

from gpuctl.cli import get
from gpuctl.cli.errors import CommandError
from gpuctl.cli.objects import history_object, job_cells, job_objects, job_row_pairs, quota_object
from gpuctl.cli.printers import Listing, emit
from gpuctl.constants import VIEW_API_VERSION
from gpuctl.domain.gpus import controller_asks
from gpuctl.domain.history import Record
from gpuctl.domain.sharing import resource_units, units_to_gpus
from gpuctl.service.jobs import JobFacts, JobRow

MIG = "nvidia.com/mig-1g.10gb"


class _Job:
    """What JobFacts reads of a gpuctl.service.jobs.Job."""

    def __init__(self, resource: str, obj: dict, status: str = "Running", position: int | None = None):
        self.resource, self.obj, self.status, self.position = resource, obj, status, position
        self.workload: dict | None = None


def _template(gpus: int = 0, slices: dict | None = None) -> dict:
    limits = {
        **({"nvidia.com/gpu": str(gpus)} if gpus else {}),
        **{k: str(v) for k, v in (slices or {}).items()},
    }
    return {"spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]}}


def _controller(name: str, uid: str, spec: dict) -> dict:
    return {"metadata": {"name": name, "uid": uid, "creationTimestamp": "2026-11-29T08:00:00Z"}, "spec": spec}


def _rows(job: _Job, rows: list[JobRow], starts_by: str | None = None) -> list[JobRow]:
    facts = JobFacts(job, starts_by)  # type: ignore[arg-type]
    for r in rows:
        r.owner = facts
    return rows


def _row(job_id: str, name: str, **kw) -> JobRow:
    base = dict(namespace="team-a", kind="training", status="Running", ready="1/1", node="n1", ip="10.0.0.1")
    base.update(age=5.0, pool="training-pool", priority="medium", queue="default", gpus=1)
    base["labels"] = {"runwhere.ai/priority": "medium"}
    return JobRow(job_id=job_id, name=name, **{**base, **kw})


def test_a_job_of_one_pod_is_one_object_whose_id_is_its_name() -> None:
    job = _Job("Job", _controller("train", "uid-1", {"parallelism": 1, "template": _template(1)}))
    rows = _rows(job, [_row("train-abcde", "train")])
    ((obj, same),) = job_objects(rows)
    assert same == rows
    assert (obj["apiVersion"], obj["kind"]) == (VIEW_API_VERSION, "Job")
    assert obj["metadata"] == {
        "name": "train",
        "namespace": "team-a",
        "uid": "uid-1",
        "creationTimestamp": "2026-11-29T08:00:00Z",
        "labels": {"runwhere.ai/priority": "medium"},
    }
    assert obj["spec"] == {
        "kind": "training",
        "resource": "Job",
        "pool": "training-pool",
        "priority": "medium",
        "queue": "default",
        "gpus": 1,
        "nodes": 1,
        "replicas": 1,
    }
    st = obj["status"]
    assert (st["phase"], st["ready"], st["nodes"], st["ip"], st["gpus"]) == (
        "Running",
        "1/1",
        ["n1"],
        "10.0.0.1",
        1,
    )
    assert [p["name"] for p in st["pods"]] == ["train-abcde"]
    ((_, pod),) = job_row_pairs(obj, rows)
    cells = job_cells(obj, pod)
    # JOB ID is the job's name, the pod is its own column: the same ID queued and running.
    assert (cells["JOB ID"], cells["POD"], cells["STATUS"], cells["NODE"]) == (
        "train",
        "train-abcde",
        "Running",
        "n1",
    )


def test_a_queued_job_has_its_own_row_with_position_reason_and_estimate() -> None:
    job = _Job(
        "Job",
        _controller(
            "wait", "uid-2", {"parallelism": 2, "completionMode": "Indexed", "template": _template(8)}
        ),
        "Queued",
        3,
    )
    row = _row("wait", "wait", status="Queued", ready="0/0", node="<none>", ip="<none>", gpus=16, position=3)
    row.reason = "needs 2 nodes with 8 free GPUs"
    ((obj, rows),) = job_objects(_rows(job, [row], "2026-11-29T09:00:00Z"))
    st = obj["status"]
    assert (st["phase"], st["position"], st["reason"], st["estimate"]) == (
        "Queued",
        3,
        row.reason,
        "2026-11-29T09:00:00Z",
    )
    assert (st["pods"], st["nodes"], st["ip"]) == ([], [], "")
    assert (obj["spec"]["gpus"], obj["spec"]["nodes"], obj["spec"]["replicas"]) == (16, 2, 2)
    ((_, pod),) = job_row_pairs(obj, rows)
    cells = job_cells(obj, pod)
    assert (cells["JOB ID"], cells["POD"], cells["POSITION"], cells["NODE"], cells["IP"]) == (
        "wait",
        "<none>",
        3,
        "<none>",
        "<none>",
    )


def test_gpus_count_slices_as_the_quota_charges_them() -> None:
    """A notebook on a 1g.10gb slice asks and holds 0 whole GPUs: its object says 0.14 GPUs, not 0."""
    tmpl = _template(0, {MIG: 1})
    job = _Job("StatefulSet", _controller("nb", "uid-3", {"replicas": 1, "template": tmpl}))
    ((obj, _),) = job_objects(_rows(job, [_row("nb-0", "nb", kind="notebook", gpus=0, slices={MIG: 1})]))
    want = units_to_gpus(resource_units(MIG))
    assert 0 < want < 1
    assert (obj["spec"]["gpus"], obj["status"]["gpus"], obj["status"]["pods"][0]["gpus"]) == (
        want,
        want,
        want,
    )
    assert (obj["spec"]["resource"], obj["spec"]["replicas"]) == ("StatefulSet", 1)


def test_what_controllers_ask() -> None:
    assert controller_asks("Deployment", {"spec": {"replicas": 3, "template": _template(1)}}) == (
        3 * 840,
        1,
        3,
    )
    lws = {"spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2, "workerTemplate": _template(4)}}}
    assert controller_asks("LeaderWorkerSet", lws) == (16 * 840, 2, 2)
    gang = {
        "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed", "template": _template(8)}
    }
    assert controller_asks("Job", gang) == (16 * 840, 2, 2)


def test_a_service_of_three_replicas_is_one_object_with_three_pods() -> None:
    job = _Job("Deployment", _controller("web", "uid-4", {"replicas": 3, "template": _template(1)}))
    rows = _rows(
        job,
        [
            _row("web-a", "web", kind="inference", node="n1"),
            _row("web-b", "web", kind="inference", node="n2", ready="0/1"),
            _row("web-c", "web", kind="inference", node="n1"),
        ],
    )
    ((obj, _),) = job_objects(rows)
    st = obj["status"]
    assert (st["ready"], st["nodes"], st["gpus"], len(st["pods"])) == ("2/3", ["n1", "n2"], 3, 3)
    assert (obj["spec"]["gpus"], obj["spec"]["replicas"]) == (3, 3)
    assert [job_cells(obj, p)["POD"] for _, p in job_row_pairs(obj, rows)] == ["web-a", "web-b", "web-c"]


def test_the_table_reads_the_objects_and_json_prints_them(capsys) -> None:
    job = _Job("Job", _controller("train", "uid-1", {"parallelism": 1, "template": _template(1)}))
    rows = _rows(job, [_row("train-abcde", "train")])
    headers = get._job_columns(rows, wide=False)
    ((obj, rs, named),) = get._job_table(rows, headers)
    lst = Listing(
        items=[obj],
        headers=headers,
        rows=[[list(c.values()) for c in named]],
        grouped=True,
        name=lambda o: o["metadata"]["name"],
        legacy=[r.as_dict() for r in rs],
    )
    base = {"json": False, "no_headers": False, "sort_by": None, "show_labels": False, "field_selector": None}
    assert emit(argparse.Namespace(**base, output=None), lst) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:4] == ["JOB", "ID", "POD", "NAMESPACE"] and table[1].split()[:2] == [
        "train",
        "train-abcde",
    ]
    assert emit(argparse.Namespace(**base, output="json"), lst) == 0
    assert json.loads(capsys.readouterr().out)["items"] == [obj]
    # The earlier client's --json: its bare array of flat rows (job_id is the pod's, as it was).
    assert emit(argparse.Namespace(**{**base, "json": True}, output="json"), lst) == 0
    (legacy,) = json.loads(capsys.readouterr().out)
    assert (legacy["job_id"], legacy["name"], legacy["status"]) == ("train-abcde", "train", "Running")
    with pytest.raises(CommandError, match="--json prints the earlier gpuctl's rows"):
        emit(argparse.Namespace(**{**base, "json": True, "sort_by": ".metadata.name"}, output="json"), lst)
    # A field selector names a scalar field by its path; `status` (an object) is refused, not matched.
    assert (
        emit(argparse.Namespace(**{**base, "field_selector": "status.phase=Running"}, output="name"), lst)
        == 0
    )
    assert capsys.readouterr().out == "train\n"
    with pytest.raises(CommandError, match=r"field label not supported: status \(.*status\.phase"):
        emit(argparse.Namespace(**{**base, "field_selector": "status=Running"}, output="name"), lst)


def test_age_is_read_from_the_creation_timestamp() -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 125))
    job = _Job(
        "Job", {"metadata": {"name": "q", "uid": "u", "creationTimestamp": stamp}, "spec": {}}, "Queued"
    )
    ((obj, _),) = job_objects(
        _rows(job, [_row("q", "q", status="Queued", ready="0/0", node="<none>", ip="<none>")])
    )
    assert job_cells(obj, None)["AGE"] == "2m"  # kubectl's short age (gpuctl.domain.objects.short_age)


def test_quota_and_history_objects() -> None:
    q = {
        "name": "q",
        "namespace": "team-a",
        "gpu": {"used": 0.14, "quota": 8, "free": 7.86, "borrowed": 0, "borrowing_limit": None},
        "cpu": {"used": 1, "quota": 64},
        "memory": {"used": "0", "quota": "256Gi"},
        "guarantees": {"training-pool": 8},
        "pending_workloads": 0,
        "admitted_workloads": 1,
        "status": "Active",
        "description": "",
        "metadata": {"uid": "cq-uid", "creationTimestamp": "2026-11-29T08:00:00Z", "labels": {}},
    }
    o = quota_object(q)
    assert (o["kind"], o["metadata"]["namespace"], o["metadata"]["uid"]) == ("Quota", "team-a", "cq-uid")
    assert (o["spec"]["gpus"], o["status"]["gpus"]["used"], o["status"]["phase"]) == (8, 0.14, "Active")
    rec = Record("2026-11-29T08:01:00Z", "team-a", "train", "submitted", "alice", "created", "wl-uid")
    h = history_object(rec)
    assert h["kind"] == "HistoryRecord"
    assert h["metadata"] == {
        "name": "train",
        "namespace": "team-a",
        "uid": "wl-uid",
        "creationTimestamp": "2026-11-29T08:01:00Z",
        "labels": {},
    }
    assert (h["spec"]["action"], h["spec"]["actor"], h["spec"]["reason"]) == ("submitted", "alice", "created")


# ----------------------------------------------------------------------------- one NotFound text
NOT_FOUND_CASES = [
    (["get", "jobs", "nope", "-n", "NS"], "jobs"),
    (["describe", "job", "nope", "-n", "NS"], "jobs"),
    (["describe", "job", "nope", "-n", "NS", "-o", "json"], "jobs"),
    (["delete", "job", "nope", "-n", "NS"], "jobs"),
    (["logs", "nope", "-n", "NS"], "jobs"),
    (["stop", "nope", "-n", "NS", "--dry-run=client"], "jobs"),  # (the fake server names no caller)
    (["resume", "nope", "-n", "NS", "--dry-run=client"], "jobs"),
    (["keep", "nope", "--for", "1h", "-n", "NS"], "jobs"),
    (["wait", "job", "nope", "-n", "NS", "--for=running", "--timeout=1s"], "jobs"),
    (["get", "pools", "nope"], "pools"),
    (["describe", "pool", "nope"], "pools"),
    (["delete", "pool", "nope"], "pools"),
    (["get", "nodes", "nope"], "nodes"),
    (["describe", "node", "nope"], "nodes"),
    (["get", "labels", "nope"], "nodes"),
    (["label", "nope", "a=b"], "nodes"),
    (["get", "quotas", "nope"], "quotas"),
    (["describe", "quota", "nope"], "quotas"),
    (["delete", "quota", "nope"], "quotas"),
    (["get", "ns", "nope"], "namespaces"),
    (["describe", "ns", "nope"], "namespaces"),
    (["delete", "ns", "nope"], "namespaces"),
]


@pytest.mark.parametrize(
    ("argv", "resource"), NOT_FOUND_CASES, ids=lambda v: " ".join(v[:2]) if isinstance(v, list) else v
)
def test_every_verb_says_not_found_in_one_text(argv, resource, monkeypatch, capsys) -> None:
    """kubectl's `Error from server (NotFound): jobs "x" not found`, exit 1, whatever the verb."""
    from gpuctl.cli.main import main
    from gpuctl.cluster import Cluster
    from tests.unit.test_consistency import NS, FakeApiServer, _team_objects

    fake = FakeApiServer(_team_objects())
    monkeypatch.setattr(Cluster, "connect", classmethod(lambda cls, **_: fake))
    assert main([a.replace("NS", NS) for a in argv]) == 1
    assert capsys.readouterr().err == f'Error from server (NotFound): {resource} "nope" not found\n'


def test_history_name_prints_the_real_kind(monkeypatch, capsys) -> None:
    """`history -o name` pipes to kubectl: a notebook's records name its StatefulSet, a service's its
    Deployment; a record from before records kept the kind is named by the job's live object."""
    from gpuctl.cli.main import main
    from gpuctl.cluster import Cluster
    from gpuctl.constants import HISTORY_CONFIGMAP, HISTORY_DATA_KEY
    from tests.unit.test_consistency import NS, FakeApiServer, _team_objects

    lines = [
        Record("2026-11-29T08:00:00Z", NS, "nb", "submitted", "alice", "", "u1", "StatefulSet").line(),
        Record("2026-11-29T08:00:01Z", NS, "web", "submitted", "alice", "", "u2", "Deployment").line(),
        Record("2026-11-29T08:00:02Z", NS, "old", "submitted", "alice", "", "u3").line(),  # no kind kept
        Record("2026-11-29T08:00:03Z", NS, "gone", "submitted", "alice", "", "u4").line(),
    ]
    store = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": HISTORY_CONFIGMAP, "namespace": NS},
        "data": {HISTORY_DATA_KEY: "\n".join(lines)},
    }
    live = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "old", "namespace": NS}}
    fake = FakeApiServer([*_team_objects(), store, live])
    monkeypatch.setattr(Cluster, "connect", classmethod(lambda cls, **_: fake))
    assert main(["history", "-n", NS, "-o", "name"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "statefulset.apps/nb",
        "deployment.apps/web",
        "statefulset.apps/old",
        "job.batch/gone",
    ]


# ----------------------------------------------------------------------------- create|apply -o json|yaml
def test_create_with_output_prints_the_objects_written_not_summaries(capsys) -> None:
    """kubectl's create -o yaml: each object as the API server answered (no managedFields); the earlier
    --json keeps its summaries; a failure is said on stderr, exit 1."""
    import yaml

    from gpuctl.cli.report import print_results
    from gpuctl.domain.dryrun import DryRun
    from gpuctl.service.lifecycle import Result

    answer = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "a",
            "namespace": "t",
            "uid": "server-made",
            "managedFields": [{"manager": "x"}],
        },
        "spec": {"completionMode": "NonIndexed"},
    }
    ok = Result(kind="training", name="a", action="created", lines=["job.batch/a created"], written=[answer])
    bad = Result(kind="training", name="b", error="b.yaml: training b: refused")
    a = argparse.Namespace(output="yaml", json=False, dry_run=DryRun.SERVER)
    assert print_results(a, [ok, bad], objects=True) == 1
    out = capsys.readouterr()
    (doc,) = list(yaml.safe_load_all(out.out))
    assert doc["metadata"] == {"name": "a", "namespace": "t", "uid": "server-made"}
    assert out.err == "error: b.yaml: training b: refused\n"
    a = argparse.Namespace(output="json", json=True, dry_run=DryRun.SERVER)
    assert print_results(a, [ok], objects=True) == 0
    assert json.loads(capsys.readouterr().out)[0]["status"] == "created"


# ----------------------------------------------------------------------------- -w on every get type
def json_documents(text: str) -> list[dict]:
    """The JSON documents of a watch stream (`get -w -o json`: objects one after another, no List)."""
    found, i, dec = [], 0, json.JSONDecoder()
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        doc, i = dec.raw_decode(text, i)
        found.append(doc)
    return found


def _pool_listing(gpus_used: int) -> Listing:
    from gpuctl.cli.objects import view

    objs = [
        view("Pool", n, None, {"uid": n}, {"nodes": []}, {"phase": "active", "gpus": {"used": u}})
        for n, u in (("a", gpus_used), ("b", 0))
    ]
    return Listing(
        items=objs,
        headers=["POOL NAME", "GPU USED", "AGE"],
        rows=[[o["metadata"]["name"], o["status"]["gpus"]["used"], "1m"] for o in objs],
        name=lambda o: f"pool/{o['metadata']['name']}",
    )


def test_watch_prints_each_object_alone_then_what_changed(monkeypatch, capsys) -> None:
    """kubectl's watch stream: -o json prints each object on its own (no List), then an object again
    when a field changed; an unchanged one is not printed again. Woken by its informers."""
    from gpuctl.cli import watch as w
    from gpuctl.cluster import informer

    fakes = []

    class FakeInformer:
        def __init__(self, *_a, **_kw):
            self.listeners = []
            fakes.append(self)

        def add_listener(self, fn):
            self.listeners.append(fn)

        def start(self):
            for fn in self.listeners:
                fn(self)

        def stop(self):
            pass

    monkeypatch.setattr(informer, "Informer", FakeInformer)
    base = {"output": "json", "field_selector": None, "no_headers": False}
    a = argparse.Namespace(**base)
    printer = w.Printer(a, lambda o: o["metadata"]["name"])
    shown = w.entries(a, _pool_listing(1), objects=True)
    w.first(printer, shown, headers=True)
    reads = iter([_pool_listing(3)])

    def read():
        try:
            listing = next(reads)
        except StopIteration:
            raise KeyboardInterrupt from None
        fakes[0].start()  # the next change wakes it again: then the reads end (Ctrl-C)
        return w.entries(a, listing, objects=True)

    w.watch(None, [("Node", "/api/v1/nodes", None)], read, shown, printer)
    docs = json_documents(capsys.readouterr().out)
    assert [(d["kind"], d["metadata"]["name"], d["status"]["gpus"]["used"]) for d in docs] == [
        ("Pool", "a", 1),
        ("Pool", "b", 0),
        ("Pool", "a", 3),  # changed: printed again; b did not change
    ]


def test_watch_of_a_table_prints_a_changed_row_and_yaml_separates_documents(capsys) -> None:
    from gpuctl.cli import watch as w

    table = argparse.Namespace(output=None, field_selector=None, no_headers=False)
    before = w.entries(table, _pool_listing(1), objects=False)
    after = w.entries(table, _pool_listing(2), objects=False)
    assert [k for k, _, _ in before] == [(None, "a", 0), (None, "b", 0)]
    assert w.changed_cells(before[0][2], after[0][2]) and not w.changed_cells(before[1][2], after[1][2])
    y = w.Printer(argparse.Namespace(output="yaml"), lambda o: o["metadata"]["name"])
    for _, obj, cells in after:
        y(obj, cells)
    assert capsys.readouterr().out.count("\n---\n") == 1
    n = w.Printer(argparse.Namespace(output="name"), lambda o: f"pool/{o['metadata']['name']}")
    n(after[0][1], after[0][2])
    assert capsys.readouterr().out == "pool/a\n"
