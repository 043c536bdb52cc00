"""What reading jobs costs (issue 22), over the consistency test's jobs (every status: queued, preempted,
inactive, QuotaReserved, finished, running, a Deployment's gated pod) answered by its fake API server:

- one job found by name (`describe`, the API's get) reads only that job, and finds it in the same state
  as the whole listing does;
- `get jobs` decides each pod's status word once, and judges no REASON its caller does not print.
"""

from __future__ import annotations

import pytest

import gpuctl.domain.status as status_module
from gpuctl.domain.sharing import resource_units, units_to_gpus
from gpuctl.domain.status import State
from gpuctl.service.inventory import CONTROLLER_KINDS, Inventory
from gpuctl.service.jobs import collect_jobs, find_job, list_job_rows
from tests.unit.test_consistency import CASES, NS, Case, FakeApiServer, _team_objects

CONTROLLERS = CONTROLLER_KINDS
N = len(CONTROLLERS)


@pytest.fixture(params=CASES, ids=[c.id for c in CASES])
def case(request) -> Case:
    return request.param


class Server(FakeApiServer):
    def __init__(self, objects: list[dict]):
        super().__init__(objects)
        self.selectors: list[str] = []  # each list's selectors

    def list(self, api_path: str, *, label_selector=None, field_selector=None, **kw) -> list[dict]:
        self.selectors.append(f"{label_selector or ''} {field_selector or ''}")
        return super().list(api_path, label_selector=label_selector, field_selector=field_selector, **kw)

    def pending_in_local_queue(self, namespace: str, local_queue: str) -> None:
        return None  # no visibility API: a waiting job's position is computed from the Workloads


def _with_neighbours(case: Case) -> Server:
    """The case's job beside every other case's job in the same namespace."""
    return Server(_team_objects() + [o for c in CASES for o in c.objects])


def _subject(case: Case) -> tuple[str, str]:
    """The case's controller: (kind, name)."""
    obj = next(o for o in case.objects if o["kind"] in CONTROLLERS)
    return obj["kind"], obj["metadata"]["name"]


@pytest.mark.parametrize("namespace", [NS, None])
def test_one_job_by_name_is_read_alone_and_in_the_listings_state(case: Case, namespace: str | None) -> None:
    fake = _with_neighbours(case)
    kind, name = _subject(case)
    listed = next(j for j in collect_jobs(Inventory(fake, NS)) if j.name == name)
    fake.listed.clear()
    fake.selectors.clear()
    job = find_job(fake, name, namespace)
    assert (job.resource, job.name, job.status, job.reason) == (kind, name, listed.status, listed.reason)
    assert job.status == (case.job_status or case.status)
    assert [p["metadata"]["uid"] for p in job.pods] == [p["metadata"]["uid"] for p in listed.pods]
    assert job.workload == listed.workload
    # A list per controller kind, the job's pods, its Workloads: whatever else the namespace holds.
    assert fake.listed[: N + 2] == [*CONTROLLERS, "Pod", "Workload"]
    uid = job.obj["metadata"]["uid"]
    assert [f"metadata.name={name}" in s for s in fake.selectors[:N]] == [True] * N
    assert f"={name}" in fake.selectors[N] and uid in fake.selectors[N + 1], fake.selectors
    # A job in the queue also reads its position: its team queue, then (no visibility API here) its Workloads.
    if job.status in (State.QUEUED, State.PREEMPTED):
        assert fake.listed[N + 2 :] == ["ClusterQueue", "Workload"], fake.listed
    else:
        assert len(fake.listed) == N + 2, fake.listed


def test_a_job_is_found_by_the_name_of_its_pod() -> None:
    case = next(c for c in CASES if c.id == "deployment-pod-quota-reserved")
    fake = _with_neighbours(case)
    job = find_job(fake, "svc-7d9f-x1", NS)
    assert (job.name, job.status) == ("svc", "QuotaReserved")
    # No job has the pod's name: the pod names its owner, whose job is then read.
    assert fake.listed[: 2 * N + 3] == [*CONTROLLERS, "Pod", *CONTROLLERS, "Pod", "Workload"]


def test_a_listing_decides_each_pods_word_once(monkeypatch) -> None:
    fake = _with_neighbours(CASES[0])
    pods = sum(1 for o in fake.objects if o["kind"] == "Pod")
    calls: list[str] = []
    printed = status_module.printed_pod_status

    def counted(pod):
        calls.append(pod["metadata"]["name"])
        return printed(pod)

    # kubectl's STATUS of a pod, which every status word starts from (gpuctl.domain.status.pod_status).
    monkeypatch.setattr(status_module, "printed_pod_status", counted)
    rows = list_job_rows(fake, None)
    assert sorted(calls) == sorted(o["metadata"]["name"] for o in fake.objects if o["kind"] == "Pod")
    assert len(calls) == pods >= 2
    statuses = {r.job_id: r.status for r in rows}
    assert statuses["run-abcde"] == "Running" and statuses["svc-7d9f-x1"] == "QuotaReserved"


def test_rows_without_reasons_judge_none() -> None:
    fake = _with_neighbours(CASES[0])
    judged = list_job_rows(fake, None)
    assert "Node" in fake.listed  # the snapshot a waiting job's reason is judged against
    assert {r.job_id: r.reason for r in judged}["queued"]
    fake.listed.clear()
    rows = list_job_rows(fake, None, reasons=False)
    assert [r.reason for r in rows] == [""] * len(rows)
    assert [(r.job_id, r.status, r.position) for r in rows] == [
        (r.job_id, r.status, r.position) for r in judged
    ]
    assert "Node" not in fake.listed  # no snapshot of the cluster was built


def test_a_gang_of_slices_shows_its_slices_in_get_jobs_the_api_and_describe(monkeypatch) -> None:
    """Issue 43: a 2-node job of one MIG slice per node (`nodes: 2`, `gpu-share`) showed 0 GPUs and
    nothing else: get jobs -o json and the API's rows now carry its slices, describe names them."""
    from gpuctl.constants import JOB_COMPLETION_INDEX_ANNOTATION
    from gpuctl.service.views import describe_job
    from tests.unit.test_consistency import api_rows, cli_jobs, cond, job_obj, node_obj, pod_obj, workload_obj

    mig = "nvidia.com/mig-1g.10gb"
    spec = {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {mig: "1"}}}]}
    job = job_obj("slices", spec, suspend=False, parallelism=2)
    job["spec"].update(completions=2, completionMode="Indexed")
    pods = []
    for rank in (0, 1):
        p = pod_obj(f"slices-{rank}-x", job, spec, gated=False, node="gpu-node-1", phase="Running")
        p["metadata"]["annotations"] = {JOB_COMPLETION_INDEX_ANNOTATION: str(rank)}
        pods.append(p)
    wl = workload_obj("job-slices", job, spec, [cond("QuotaReserved"), cond("Admitted")], reserved=0, count=2)
    fake = Server([*_team_objects(), node_obj(), job, wl, *pods])
    # -o json: GPUs as one number, slices included, asked (spec) and held (status) alike.
    (obj,) = [j for j in cli_jobs(monkeypatch, fake) if j["metadata"]["name"] == "slices"]
    both = units_to_gpus(2 * resource_units(mig))
    assert 0 < both < 1
    assert (obj["spec"]["gpus"], obj["status"]["gpus"], obj["spec"]["nodes"]) == (both, both, 2)
    (api,) = [r for r in api_rows(fake) if r["name"] == "slices"]
    assert (api["gpus"], api["slices"]) == (0, {mig: 2})
    view = describe_job(fake, "slices", NS)
    assert view.gang["text"] == f"2 nodes x 1 {mig} = 2 {mig}"
    assert (view.gang["gpus_per_node"], view.gang["slices_per_node"]) == (0, {mig: 1})
