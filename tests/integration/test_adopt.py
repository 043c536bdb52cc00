# ruff: noqa: F811 - the gpuctl fixture is imported from test_cli_cluster and taken as a parameter
"""Real GPU nodes and earlier gpuctl clusters: tainted pools run jobs, and `gpuctl adopt` switches a
cluster the earlier gpuctl ran over to gpuctl without touching what runs."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator

import pytest
import yaml

from gpuctl.cluster import ApiError, path
from gpuctl.constants import Labels
from gpuctl.domain.pools import is_pool_taint, pool_toleration
from gpuctl.service.pool_sync import set_flavor_tolerations
from tests.integration.conftest import delete_namespaces, wait_until
from tests.integration.serve_process import service_account_kubeconfig, start_serve
from tests.integration.test_cli_cluster import gpuctl  # noqa: F401 - fixture

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}


def _set_taints(kube, node: str, taints: list[dict]) -> None:
    """The node's taints become `taints` plus the pool taint gpuctl set, if any (kept as it is)."""
    pool = [t for t in kube.get(path("Node", node))["spec"].get("taints") or [] if is_pool_taint(t)]
    kube.merge_patch(path("Node", node), {"spec": {"taints": [*pool, *taints] or None}})


@pytest.fixture
def tainted(kube) -> Iterator[list[str]]:
    """Taints nodes with the GPU operator's nvidia.com/gpu=present:NoSchedule; removed afterwards."""
    done: list[str] = []

    def taint(*nodes: str) -> None:
        for n in nodes:
            _set_taints(kube, n, [GPU_TAINT])
            done.append(n)

    yield taint  # type: ignore[misc]
    for n in done:
        _set_taints(kube, n, [])


def _job(
    tmp_path, name: str, ns: str | None, gpus: int, pool: str | None = None, gpu_type: str | None = None
) -> str:
    res = {"gpu": gpus, "cpu": 1, "memory": "1Gi"}
    if pool:
        res["pool"] = pool
    if gpu_type:
        res["gpuType"] = gpu_type
    job = {"name": name}
    if ns:
        job["namespace"] = ns
    doc = {
        "kind": "training",
        "version": "v0.1",
        "job": job,
        "environment": {"image": "busybox", "env": [{"name": "GPUCTL_FAKE_RUNTIME", "value": "30m"}]},
        "resources": res,
    }
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump(doc))
    return str(f)


def _status(gpuctl, name: str, ns: str) -> dict:
    rc, out, err = gpuctl("describe", "job", name, "-n", ns, "-o", "json")
    assert rc == 0, err
    return json.loads(out)


def _wait_gone(kube, ns: str) -> None:
    """Wait for a namespace (and so its jobs' pods and Workloads) to be gone, so the next test starts
    on a quiet cluster with its GPUs free."""
    delete_namespaces(kube, [ns], 120)


def _pods(kube, ns: str, job: str) -> list[dict]:
    return kube.list(path("Pod", namespace=ns), label_selector=f"{Labels.JOB_NAME}={job}")


# ----------------------------------------------------------------------------- taints
def test_pool_on_tainted_gpu_nodes_admits_and_runs_jobs(clean_cluster, tainted, gpuctl, kube, tmp_path):
    tainted("gpu-node-3", "gpu-node-4")
    ns = f"tt-{uuid.uuid4().hex[:6]}"
    pool = tmp_path / "pool.yaml"
    pool.write_text("kind: pool\npool: {name: tainted}\nnodes: {gpu-node-3: {gpu-type: A10}}\n")
    quota = tmp_path / "quota.yaml"
    quota.write_text(f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace: {{{ns}: {{gpu: 8}}}}\n")
    try:
        assert gpuctl("create", "-f", str(pool), "-f", str(quota))[0] == 0
        flavor = kube.get(path("ResourceFlavor", "tainted"))
        assert flavor["spec"]["tolerations"] == [pool_toleration("tainted"), GPU_TOLERATION]
        assert gpuctl("create", "-f", _job(tmp_path, "on-tainted", ns, 2, pool="tainted"))[0] == 0
        wait_until(lambda: _status(gpuctl, "on-tainted", ns)["status"] == "Running", 60, what="Running")
        (pod,) = _pods(kube, ns, "on-tainted")
        assert pod["spec"]["nodeName"] == "gpu-node-3"
        assert GPU_TOLERATION in pod["spec"]["tolerations"]  # added by Kueue from the flavor

        # A tainted node labelled into the pool later: the flavor follows (gpuctl label syncs it), and
        # a node whose taint goes away takes its toleration with it.
        _set_taints(kube, "gpu-node-3", [])
        rc, _, err = gpuctl("label", "node", "gpu-node-4", "pool=tainted")
        assert rc == 0, err
        own = pool_toleration("tainted")
        assert kube.get(path("ResourceFlavor", "tainted"))["spec"]["tolerations"] == [own, GPU_TOLERATION]
        _set_taints(kube, "gpu-node-4", [{"key": "other", "effect": "NoExecute"}])
        gpuctl("label", "node", "gpu-node-4", "pool-")
        assert kube.get(path("ResourceFlavor", "tainted"))["spec"]["tolerations"] == [own]  # its own stays
        assert [t["key"] for t in kube.get(path("Node", "gpu-node-4"))["spec"]["taints"]] == ["other"]
    finally:
        gpuctl("delete", "job", "on-tainted", "-n", ns)
        gpuctl("delete", "quota", f"q-{ns}", "--delete-namespace")
        _wait_gone(kube, ns)


def test_without_the_flavor_tolerations_the_same_job_would_never_start(
    clean_cluster, tainted, gpuctl, kube, tmp_path
):
    """The control: the same pool with its flavor's tolerations stripped never runs the job (Kueue's
    TAS does not admit it), so the test above shows the tolerations at work."""
    tainted("gpu-node-3")
    ns = f"tc-{uuid.uuid4().hex[:6]}"
    pool = tmp_path / "pool.yaml"
    pool.write_text("kind: pool\npool: {name: tainted}\nnodes: {gpu-node-3: {}}\n")
    quota = tmp_path / "quota.yaml"
    quota.write_text(f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace: {{{ns}: {{gpu: 8}}}}\n")
    try:
        assert gpuctl("create", "-f", str(pool), "-f", str(quota))[0] == 0
        # A TAS flavor is immutable in Kueue: gpuctl's writer re-creates it without tolerations.
        set_flavor_tolerations(kube, kube.get(path("ResourceFlavor", "tainted")), [])
        assert gpuctl("create", "-f", _job(tmp_path, "stuck", ns, 2, pool="tainted"))[0] == 0
        # Topology Aware Scheduling sees that no node of the pool tolerates the taint: Kueue does not
        # admit the job at all (no pod is created to sit Unschedulable).
        msg = wait_until(
            lambda: next(
                (
                    c.get("message", "")
                    for w in kube.list(path("Workload", namespace=ns))
                    for c in (w.get("status") or {}).get("conditions") or []
                    if c["type"] == "QuotaReserved" and c["status"] == "False"
                ),
                None,
            ),
            60,
            what="Kueue refusing the job",
        )
        # Kueue's own words (pkg/cache/scheduler/tas_flavor_snapshot.go notFitMessage and its exclusion
        # counts): the one node of the pool was excluded for the GPU taint its flavor does not tolerate.
        assert "doesn't allow to fit any of 1 pod(s)" in msg, msg
        taint = f"{GPU_TAINT['key']}={GPU_TAINT['value']}:{GPU_TAINT['effect']}"
        assert f'taint "{taint}": 1' in msg.partition("excluded:")[2], msg
        assert _pods(kube, ns, "stuck") == []
    finally:
        gpuctl("delete", "job", "stuck", "-n", ns)
        gpuctl("delete", "quota", f"q-{ns}", "--delete-namespace")
        _wait_gone(kube, ns)


# ----------------------------------------------------------------------------- adoption
def _earlier_job(name: str) -> dict:
    """A training Job as the earlier gpuctl made it: no Kueue labels, the default pool's affinity."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {Labels.JOB_TYPE: "training", Labels.PRIORITY: "medium", Labels.POOL: "default"},
        },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {Labels.JOB_TYPE: "training", Labels.POOL: "default"}},
                "spec": {
                    "restartPolicy": "Never",
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {"matchExpressions": [{"key": Labels.POOL, "operator": "DoesNotExist"}]}
                                ]
                            }
                        }
                    },
                    "tolerations": [GPU_TOLERATION],
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "env": [{"name": "GPUCTL_FAKE_RUNTIME", "value": "30m"}],
                            "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"}},
                        }
                    ],
                },
            },
        },
    }


def _earlier_deployment(name: str) -> dict:
    labels = {Labels.JOB_TYPE: "inference", Labels.POOL: "training-pool", "app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {Labels.POOL: "training-pool"},
                    "containers": [
                        {"name": "main", "image": "nginx", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                    ],
                },
            },
        },
    }


def _running_pods(kube, selector: str) -> dict[str, str]:
    """uid -> node of the Running pods in default matching the selector."""
    return {
        p["metadata"]["uid"]: p["spec"].get("nodeName", "")
        for p in kube.list(path("Pod", namespace="default"), label_selector=selector)
        if (p.get("status") or {}).get("phase") == "Running"
    }


@pytest.fixture
def earlier_cluster(clean_cluster, tainted, kube) -> Iterator[dict]:
    """The state the earlier gpuctl leaves: label pools (one node with the old gpuType key), a team
    namespace with its ResourceQuota (GPUs, CPU, memory and pods), unlabelled GPU nodes (one tainted
    by the GPU operator), and a training Job and an inference Deployment running in default."""
    uid = uuid.uuid4().hex[:6]
    team, job, deploy = f"ea-{uid}", f"old-train-{uid}", f"old-infer-{uid}"
    kube.merge_patch(
        path("Node", "gpu-node-1"),
        {"metadata": {"labels": {Labels.POOL: "training-pool", Labels.GPU_TYPE_LEGACY: "A100-100G"}}},
    )
    kube.merge_patch(path("Node", "gpu-node-2"), {"metadata": {"labels": {Labels.POOL: "training-pool"}}})
    tainted("gpu-node-3")
    # gpu-node-5 stays out: an unlabelled GPU node that the other tests may use, in the default pool too.
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": team, "labels": {Labels.NAMESPACE: "true"}},
        }
    )
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": f"q-{team}", "namespace": team, "labels": {Labels.QUOTA: "q"}},
            "spec": {"hard": {"nvidia.com/gpu": "4", "cpu": "16", "memory": "64Gi", "pods": "20"}},
        }
    )
    kube.create(_earlier_job(job))
    kube.create(_earlier_deployment(deploy))
    running = wait_until(
        lambda: (
            (j := _running_pods(kube, f"job-name={job}"))
            and (d := _running_pods(kube, f"app={deploy}"))
            and {**j, **d}
        ),
        90,
        what="the earlier gpuctl's job and deployment Running",
    )
    state = {"team": team, "job": job, "deploy": deploy, "running": running}
    yield state
    for kind, name in (("Job", job), ("Deployment", deploy), ("Job", "nopool")):
        with contextlib.suppress(ApiError):
            kube.delete(path(kind, name, "default"), propagation="Background")
    # Namespace default back to a plain namespace, whatever the test reached.
    with contextlib.suppress(ApiError):
        kube.delete(path("LimitRange", "gpuctl-defaults", "default"))
    lq = kube.get_or_none(path("LocalQueue", "default", "default"))
    if lq is not None and (lq["metadata"].get("labels") or {}).get(Labels.MANAGED_BY) == "gpuctl":
        kube.delete(path("LocalQueue", "default", "default"))
    kube.merge_patch(
        path("Namespace", "default"), {"metadata": {"labels": {Labels.NAMESPACE: None, Labels.QUOTA: None}}}
    )
    kube.delete(path("Namespace", team))
    _wait_gone(kube, team)
    for n in ("gpu-node-1", "gpu-node-2"):
        kube.merge_patch(path("Node", n), {"metadata": {"labels": {Labels.GPU_TYPE_LEGACY: None}}})


def test_adopt_switches_an_earlier_gpuctl_cluster_over_without_touching_running_work(
    earlier_cluster,
    gpuctl,
    kube,
    tmp_path,
):
    team = earlier_cluster["team"]
    # Before: what the earlier user meets (the report).
    rc, _, err = gpuctl("create", "-f", _job(tmp_path, "before", team, 1))
    assert rc == 1 and "gpuctl adopt" in err

    # The plan is a dry run: nothing changes.
    rc, out, err = gpuctl("adopt")
    assert rc == 0, err
    assert "pool/training-pool created with 2 node(s)" in out
    assert "pool/default created" in out and "gpu-node-3" in out and "gpu-node-5" in out
    assert f"quota/q created for namespace {team}: gpu=4, cpu=16, memory=64Gi" in out
    assert f"resourcequota/q-{team} -n {team}: cpu, memory, nvidia.com/gpu removed" in out
    assert "dry run: nothing changed" in out
    assert "pods=20 not converted" in err
    assert kube.get_or_none(path("ResourceFlavor", "training-pool")) is None
    assert kube.get_or_none(path("ClusterQueue", team)) is None
    rc, out, _ = gpuctl("adopt", "-o", "yaml")
    plan = yaml.safe_load(out)
    kinds = [o["kind"] for o in plan["apply"]]
    assert kinds.count("ResourceFlavor") == 2 and "ClusterQueue" in kinds and kinds[-1] == "Cohort"
    default_flavor = next(
        o for o in plan["apply"] if o["kind"] == "ResourceFlavor" and o["metadata"]["name"] == "default"
    )
    assert default_flavor["spec"]["tolerations"] == [pool_toleration("default"), GPU_TOLERATION]
    assert "&id" not in out

    rc, out, err = gpuctl("adopt", "--yes", "--default-quota")
    assert rc == 0, err
    assert "pool/training-pool created" in out and f"resourcequota/q-{team} -n {team}" in out
    assert kube.get(path("ResourceFlavor", "default"))["spec"]["tolerations"] == [
        pool_toleration("default"),
        GPU_TOLERATION,
    ]
    assert kube.get(path("LimitRange", "gpuctl-defaults", team))["spec"]["limits"][0]["defaultRequest"] == {
        "cpu": "100m",
        "memory": "256Mi",
    }
    rq = kube.get(path("ResourceQuota", f"q-{team}", team))
    assert rq["spec"]["hard"] == {"pods": "20"}  # never both enforcing GPUs: only pods is left
    rc, out, _ = gpuctl("get", "quotas", "-o", "json")
    rows = {r["metadata"]["namespace"]: r for r in json.loads(out)["items"]}
    assert rows[team]["spec"]["gpus"] == 4 and rows[team]["metadata"]["name"] == "q"
    assert "default" in rows

    # Running work untouched: the same pods, still Running, on the same nodes.
    job, deploy = earlier_cluster["job"], earlier_cluster["deploy"]
    after = {**_running_pods(kube, f"job-name={job}"), **_running_pods(kube, f"app={deploy}")}
    assert after == earlier_cluster["running"]

    # The earlier user's commands and YAML, unchanged.
    rc, out, _ = gpuctl("get", "pools", "-o", "json")
    pools = {p["metadata"]["name"]: p for p in json.loads(out)["items"]}
    assert set(pools) >= {"training-pool", "default"}
    assert sorted(pools["default"]["spec"]["nodes"]) == ["gpu-node-3", "gpu-node-4", "gpu-node-5"]
    # A job without a pool runs in pool default (the tainted node included); gpuType matches the old key.
    assert gpuctl("create", "-f", _job(tmp_path, "nopool", None, 4))[0] == 0
    # A node labelled with the earlier internal key only (as kubectl users did) is selected by gpuType.
    kube.merge_patch(path("Node", "gpu-node-2"), {"metadata": {"labels": {Labels.GPU_TYPE_LEGACY: "H100"}}})
    assert (
        gpuctl("create", "-f", _job(tmp_path, "typed", team, 2, pool="training-pool", gpu_type="H100"))[0]
        == 0
    )
    wait_until(lambda: _status(gpuctl, "nopool", "default")["status"] == "Running", 60, what="nopool Running")
    wait_until(lambda: _status(gpuctl, "typed", team)["status"] == "Running", 60, what="typed Running")
    assert _pods(kube, team, "typed")[0]["spec"]["nodeName"] == "gpu-node-2"  # the only H100 node
    # The converted quota enforces as the ResourceQuota did (a hard cap): 2 of 4 GPUs used, 3 more wait.
    assert gpuctl("create", "-f", _job(tmp_path, "over", team, 3, pool="training-pool"))[0] == 0
    wait_until(lambda: _status(gpuctl, "over", team)["status"] == "Queued", 30, what="over Queued")
    rc, _, err = gpuctl("label", "node", "gpu-node-5", "runwhere.ai/pool=training-pool", "--overwrite")
    assert rc == 0, err

    # Idempotent: a second run has nothing to do.
    rc, out, err = gpuctl("adopt", "--yes", "--default-quota")
    assert rc == 0 and "nothing to adopt" in out, out + err

    for name, ns in (("nopool", "default"), ("typed", team), ("over", team)):
        gpuctl("delete", "job", name, "-n", ns)
    gpuctl("delete", "quota", "q")
    assert gpuctl("delete", "quota", "adopted")[0] == 0
    assert kube.get_or_none(path("LimitRange", "gpuctl-defaults", "default")) is None  # gpuctl's goes with it


# ----------------------------------------------------------------------------- LimitRange
def test_team_limit_range_gives_hand_made_pods_requests(gpuctl, kube, tmp_path):
    ns = f"lr-{uuid.uuid4().hex[:6]}"
    quota = tmp_path / "quota.yaml"
    quota.write_text(
        f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace:\n  {ns}:\n    gpu: 2\n"
        "    limitRange: {defaultRequest: {cpu: 250m, memory: 512Mi}, default: {cpu: 1, memory: 1Gi}}\n"
    )
    try:
        rc, _, err = gpuctl("create", "-f", str(quota))
        assert rc == 0, err
        (item,) = kube.get(path("LimitRange", "gpuctl-defaults", ns))["spec"]["limits"]
        assert item["defaultRequest"] == {"cpu": "250m", "memory": "512Mi"}
        # A pod made by hand, without any resources, now requests (and so is charged) something.
        pod = kube.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "by-hand", "namespace": ns},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            }
        )
        res = pod["spec"]["containers"][0]["resources"]
        assert res == {
            "requests": {"cpu": "250m", "memory": "512Mi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        }
        kube.delete(path("Pod", "by-hand", ns), grace_seconds=0)
        # limitRange: false takes gpuctl's LimitRange away.
        quota.write_text(
            f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace: {{{ns}: {{gpu: 2, limitRange: false}}}}\n"
        )
        rc, _, err = gpuctl("apply", "-f", str(quota))
        assert rc == 0, err
        assert kube.get_or_none(path("LimitRange", "gpuctl-defaults", ns)) is None
    finally:
        gpuctl("delete", "quota", f"q-{ns}", "--delete-namespace")
        _wait_gone(kube, ns)


# ----------------------------------------------------------------------------- delete pool
def test_delete_pool_keep_running_leaves_running_jobs_and_refuses_new_work(
    clean_cluster, gpuctl, kube, tmp_path
):
    ns = f"dp-{uuid.uuid4().hex[:6]}"
    pool = tmp_path / "pool.yaml"
    pool.write_text("kind: pool\npool: {name: doomed}\nnodes: {gpu-node-5: {}}\n")
    quota = tmp_path / "quota.yaml"
    quota.write_text(f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace: {{{ns}: {{gpu: 4}}}}\n")
    try:
        assert gpuctl("create", "-f", str(pool), "-f", str(quota))[0] == 0
        assert gpuctl("create", "-f", _job(tmp_path, "survivor", ns, 2, pool="doomed"))[0] == 0
        wait_until(lambda: _status(gpuctl, "survivor", ns)["status"] == "Running", 60, what="Running")
        (before,) = _pods(kube, ns, "survivor")
        # Without the flag: refused, with the way out named.
        rc, _, err = gpuctl("delete", "pool", "doomed")
        assert rc == 1 and f"{ns}/survivor" in err and "--keep-running" in err
        rc, out, err = gpuctl("delete", "pool", "doomed", "--keep-running")
        assert rc == 0, err
        assert f"job {ns}/survivor keeps running" in out
        wait_until(lambda: kube.get_or_none(path("ResourceFlavor", "doomed")) is None, 30, what="flavor gone")
        assert Labels.POOL not in kube.get(path("Node", "gpu-node-5"))["metadata"]["labels"]
        # The job keeps running: same pod, Running, its Job not suspended, for a while.
        for _ in range(10):
            (pod,) = _pods(kube, ns, "survivor")
            assert pod["metadata"]["uid"] == before["metadata"]["uid"]
            assert pod["status"]["phase"] == "Running"
            assert not kube.get(path("Job", "survivor", ns))["spec"].get("suspend")
            time.sleep(1)
        # New work for the pool is refused, clearly.
        rc, _, err = gpuctl("create", "-f", _job(tmp_path, "latecomer", ns, 1, pool="doomed"))
        assert rc == 1 and "pool doomed does not exist" in err
    finally:
        gpuctl("delete", "job", "survivor", "-n", ns)
        gpuctl("delete", "quota", f"q-{ns}", "--delete-namespace")
        _wait_gone(kube, ns)


# ----------------------------------------------------------------------------- the serve reconciler
def test_gpuctl_serve_keeps_pool_tolerations_in_step_with_node_taints(
    clean_cluster, tainted, gpuctl, kube, kubectl_bin, cluster, tmp_path
):
    """The real `gpuctl serve` (serve's least-privilege RBAC, no leader election) follows taints that
    appear and disappear on a pool's nodes; prints how long each took."""
    pool = tmp_path / "pool.yaml"
    pool.write_text("kind: pool\npool: {name: followed}\nnodes: {gpu-node-3: {}, gpu-node-4: {}}\n")
    assert gpuctl("create", "-f", str(pool))[0] == 0
    own = pool_toleration("followed")  # the pool's own taint: tolerated from the start, never changed
    assert kube.get(path("ResourceFlavor", "followed"))["spec"]["tolerations"] == [own]
    sa = service_account_kubeconfig(kube, kubectl_bin, cluster, tmp_path / "sa-kubeconfig")
    serve = start_serve(sa, tmp_path / "serve.log", "--no-leader-elect", "--resync", "30")

    def tolerations() -> list | None:
        """None while serve re-creates the flavor (a TAS flavor's tolerations are immutable)."""
        flavor = kube.get_or_none(path("ResourceFlavor", "followed"))
        return None if flavor is None else flavor["spec"].get("tolerations") or []

    try:
        # serve has listed every resource and watches (its /readyz: every informer listed once).
        serve.wait_ready(30)
        t0 = time.monotonic()
        tainted("gpu-node-3")
        wait_until(lambda: tolerations() == [own, GPU_TOLERATION], 30, what="serve adds the toleration")
        added = time.monotonic() - t0
        t0 = time.monotonic()
        _set_taints(kube, "gpu-node-3", [])
        wait_until(lambda: tolerations() == [own], 30, what="serve removes the toleration")
        removed = time.monotonic() - t0
        print(
            f"\nserve reconciler: taint added -> flavor tolerates it in {added:.2f}s; "
            f"removed in {removed:.2f}s"
        )
        serve.alive()
    finally:
        serve.stop()
