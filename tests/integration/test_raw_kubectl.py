"""Raw kubectl work in a team namespace runs like gpuctl's own (docs/queueing.md, "Raw kubectl
submissions"): every pool flavor is a TAS flavor, so the shipped MutatingAdmissionPolicies
(manifests/admission/topology.yaml) ask Kueue for an unconstrained topology assignment where the user
asked for none. Installed under test names, bound only to this module's namespaces; the team/foreign
decision is still the shipped namespaceSelector's."""

from __future__ import annotations

import contextlib
import copy
import json
import uuid
from collections.abc import Iterator

import pytest

from admission.policies import topology
from gpuctl.cluster import path
from gpuctl.constants import TAS_REQUEST_KEYS, TAS_UNCONSTRAINED, Labels
from tests.integration.conftest import wait_until
from tests.integration.test_cli_cluster import gpuctl, pools, teams  # noqa: F401 - fixtures
from tests.integration.test_coexistence import _admitted, _job, _workloads, foreign  # noqa: F401 - fixture

pytestmark = pytest.mark.integration

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
TESTBED_LABEL = {"runwhere.ai-test": "raw-kubectl"}
DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
RUN_60S = {DELAY: "60s"}


@contextlib.contextmanager
def topology_policies(kubectl, namespaces: list[str], probe_ns: str) -> Iterator[None]:
    """The shipped topology MutatingAdmissionPolicies under test names, bound only to `namespaces` (within
    the shipped team selector), active once a probe pod in `probe_ns` gets its annotation."""
    sfx = uuid.uuid4().hex[:6]
    objs = copy.deepcopy(topology.policies())
    for o in objs:
        name = f"{o['metadata']['name']}-test-{sfx}"
        if o["kind"] == "MutatingAdmissionPolicyBinding":
            o["spec"]["policyName"] = name
            o["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"].append(
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(namespaces)}
            )
        o["metadata"] = {"name": name, "labels": dict(TESTBED_LABEL)}
    # kubectl: gpuctl's own client knows only the kinds gpuctl itself reads and writes.
    kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": probe_ns},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }

    def active() -> bool:
        p = kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(probe))
        return TAS_UNCONSTRAINED in json.loads(p.stdout)["metadata"].get("annotations", {})

    try:
        wait_until(active, 30, what="topology policies active")
        yield
    finally:
        kubectl("delete", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))


@pytest.fixture
def policy(kubectl, teams, foreign) -> Iterator[None]:  # noqa: F811
    with topology_policies(kubectl, [*teams, foreign["ns"]], teams[0]):
        yield


def _raw_job(
    ns: str,
    name: str,
    queue: str,
    annotations: dict | None = None,
    pool: str = "training-pool",
    gpus: int = 2,
) -> dict:
    """test_coexistence's Job as a kubectl user writes it: not suspended (Kueue's webhook does that),
    pinned to a pool, running long enough to be seen Running."""
    job = _job(ns, name, gpus, queue)
    del job["spec"]["suspend"]
    tmpl = job["spec"]["template"]
    tmpl["metadata"] = {"labels": {"app": "raw"}, "annotations": {**RUN_60S, **(annotations or {})}}
    # terminationGracePeriodSeconds 0: the namespaces go quickly afterwards.
    tmpl["spec"] |= {"nodeSelector": {Labels.POOL: pool}, "terminationGracePeriodSeconds": 0}
    return job


def _running_pool(kube, ns: str, selector: str) -> str | None:
    """The pool of the node a Running pod matching `selector` is on."""
    for p in kube.list(path("Pod", namespace=ns), label_selector=selector):
        if p["status"].get("phase") == "Running" and p["spec"].get("nodeName"):
            return kube.get(path("Node", p["spec"]["nodeName"]))["metadata"]["labels"].get(Labels.POOL)
    return None


def _owned_wl(kube, ns: str, kind: str, name: str) -> dict | None:
    for wl in _workloads(kube, ns):
        if any(o["kind"] == kind and o["name"] == name for o in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def test_raw_job_and_pod_in_a_team_namespace_are_admitted_on_their_pool(
    pools,  # noqa: F811
    teams,  # noqa: F811
    foreign,  # noqa: F811
    policy,
    kube,
):
    ns = teams[0]
    # A plain Job: only the queue label and a GPU request (no topology annotation).
    kube.create(_raw_job(ns, "plain", "default"))
    # A plain gated Pod (Kueue's pod integration), for inference-pool.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "lone", "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "default"}},
        "spec": _raw_job(ns, "lone", "default", pool="inference-pool", gpus=1)["spec"]["template"]["spec"],
    }
    kube.create(pod)
    # A Job that asks for its own topology request keeps it as written.
    kube.create(_raw_job(ns, "required", "default", {REQUIRED: "kubernetes.io/hostname"}))
    # A Deployment without even a queue label (Kueue defaults it to the namespace's LocalQueue `default`).
    # (inference-pool: the foreign fixture takes dev-pool's one node out of every gpuctl pool.)
    web = _raw_job(ns, "web", "default", pool="inference-pool", gpus=1)["spec"]["template"]
    del web["spec"]["restartPolicy"]  # Always, as a Deployment needs
    kube.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "raw"}}, "template": web},
        }
    )
    # A foreign namespace (no runwhere.ai/namespace label) is not touched.
    kube.create(_raw_job(foreign["ns"], "theirs", foreign["lq"]))

    # (Kueue may already have added kueue.x-k8s.io/workload: compare the topology keys only.)
    def topology(obj: dict, meta: dict | None = None) -> dict:
        ann = (meta or obj["spec"]["template"]["metadata"]).get("annotations", {})
        return {k: v for k, v in ann.items() if k in TAS_REQUEST_KEYS}

    assert topology(kube.get(path("Job", "plain", namespace=ns))) == {TAS_UNCONSTRAINED: "true"}
    lone = kube.get(path("Pod", "lone", namespace=ns))
    assert topology(lone, lone["metadata"]) == {TAS_UNCONSTRAINED: "true"}
    assert topology(kube.get(path("Deployment", "web", namespace=ns))) == {TAS_UNCONSTRAINED: "true"}
    assert topology(kube.get(path("Job", "required", namespace=ns))) == {REQUIRED: "kubernetes.io/hostname"}
    theirs = kube.get(path("Job", "theirs", namespace=foreign["ns"]))
    assert topology(theirs) == {} and theirs["spec"]["template"]["metadata"]["annotations"][DELAY] == "60s"

    for kind, name in (("Job", "plain"), ("Pod", "lone"), ("Job", "required")):
        wl = wait_until(
            lambda kind=kind, name=name: (w := _owned_wl(kube, ns, kind, name)) and _admitted(w) and w,
            45,
            what=f"{kind} {name} admitted",
        )
        (psa,) = wl["status"]["admission"]["podSetAssignments"]
        assert psa.get("topologyAssignment"), (name, psa)
    assert wait_until(lambda: _running_pool(kube, ns, "job-name=plain"), 45, what="plain running") == (
        "training-pool"
    )
    assert wait_until(lambda: _running_pool(kube, ns, "job-name=required"), 45, what="required running") == (
        "training-pool"
    )
    assert wait_until(lambda: _running_pool(kube, ns, "app=raw,!job-name"), 45, what="web running") == (
        "inference-pool"
    )
    lone = wait_until(
        lambda: (p := kube.get(path("Pod", "lone", namespace=ns)))["status"].get("phase") == "Running" and p,
        45,
        what="lone pod running",
    )
    node = kube.get(path("Node", lone["spec"]["nodeName"]))
    assert node["metadata"]["labels"][Labels.POOL] == "inference-pool"
    # The foreign Job is admitted on its own (non-TAS) flavor, as with stock Kueue.
    wl = wait_until(
        lambda: (w := _owned_wl(kube, foreign["ns"], "Job", "theirs")) and _admitted(w) and w,
        45,
        what="foreign Job admitted",
    )
    assert "topologyAssignment" not in wl["status"]["admission"]["podSetAssignments"][0]
