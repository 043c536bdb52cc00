"""queues/ on the four-pool, two-team layout of docs/queueing.md: golden YAML, the structural rules of
Kueue's CRDs and webhooks (kueue v0.19.2), and the YAML quoted in the doc."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from gpuctl.quantity import parse_quantity
from gpuctl.service.convert import team_quotas
from gpuctl.spec import load_text
from queues import (
    PoolCapacity,
    PoolGuarantee,
    TeamQuota,
    cluster_queue,
    cohort,
    desired_objects,
    local_queue,
    resource_flavor,
    team_namespace,
)

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden" / "queues" / "four_pools_two_teams.yaml"
DOC = ROOT / "docs" / "queueing.md"
KUEUE_CONFIG = ROOT / "manifests" / "kueue" / "configuration.yaml"

# Capacities are the sums of the nodes' allocatable (2 x 8 A100, 96 CPU, 1Ti; 2 x 4 A10, 32 CPU, 256Gi;
# 1 x 4 RTX4090, 32 CPU, 128Gi; 2 x CPU-only, 64 CPU, 256Gi).
POOLS = [
    PoolCapacity("training-pool", gpu=16, cpu="192", memory="2Ti", nodes=("gpu-node-1", "gpu-node-2")),
    PoolCapacity("inference-pool", gpu=8, cpu="64", memory="512Gi", nodes=("gpu-node-3", "gpu-node-4")),
    PoolCapacity("dev-pool", gpu=4, cpu="32", memory="128Gi", nodes=("gpu-node-5",)),
    PoolCapacity("compute-pool", gpu=0, cpu="128", memory="512Gi", nodes=("cpu-node-1", "cpu-node-2")),
]
TEAMS = [
    TeamQuota(
        "team-a", "team-quota", gpu=16, borrowing_limit=8, pools={"training-pool": PoolGuarantee(gpu=8)}
    ),
    TeamQuota("team-b", "team-quota", gpu=8),
]


def layout_objects() -> list[dict]:
    """Everything gpuctl applies for the layout: cluster objects, then team namespaces and LocalQueues."""
    return [
        *desired_objects(POOLS, TEAMS),
        *(team_namespace(t) for t in TEAMS),
        *(local_queue(t.namespace) for t in TEAMS),
    ]


def test_golden_four_pools_two_teams() -> None:
    rendered = yaml.safe_dump_all(layout_objects(), sort_keys=False)
    if os.environ.get("GPUCTL_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(rendered)
    assert rendered == GOLDEN.read_text(), "queue objects changed; GPUCTL_UPDATE_GOLDEN=1 regenerates"


# --- Kueue's structural rules -----------------------------------------------------------------------
# config/components/crd/bases/kueue.x-k8s.io_{clusterqueues,cohorts,resourceflavors}.yaml and
# pkg/webhooks/clusterqueue_webhook.go at sigs.k8s.io/kueue v0.19.2.

QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
QUOTA_OBJECTS = ("ClusterQueue", "Cohort")


def _label_problems(labels: dict, where: str) -> list[str]:
    out = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
            out.append(f"{where}: label key prefix {prefix!r}")
        if len(name) > 63 or not LABEL_NAME.match(name):
            out.append(f"{where}: label key {key!r}")
        if not isinstance(value, str) or len(value) > 63 or (value and not LABEL_NAME.match(value)):
            out.append(f"{where}: label value {value!r}")
    return out


def _quantity_problems(q: object, where: str) -> list[str]:
    if not isinstance(q, str) or not QUANTITY.match(q):
        return [f"{where}: {q!r} is not a quantity"]
    if parse_quantity(q) < 0:
        return [f"{where}: {q} is negative"]
    return []


def kueue_problems(obj: dict) -> list[str]:
    """What Kueue's CRD schema, CEL rules or validating webhook would reject in one object."""
    kind, meta, spec = obj["kind"], obj["metadata"], obj.get("spec") or {}
    where = f"{kind}/{meta['name']}"
    out = []
    if len(meta["name"]) > 253 or not DNS_SUBDOMAIN.match(meta["name"]):
        out.append(f"{where}: name")
    out += _label_problems(meta.get("labels", {}), where)
    if kind == "ResourceFlavor":
        node_labels = spec.get("nodeLabels", {})
        if "topologyName" in spec and not node_labels:
            out.append(f"{where}: topologyName without nodeLabels")
        if len(node_labels) > 8:
            out.append(f"{where}: {len(node_labels)} nodeLabels > 8")
        out += _label_problems(node_labels, f"{where} nodeLabels")
    if kind not in QUOTA_OBJECTS:
        return out
    groups = spec.get("resourceGroups", [])
    if len(groups) > 16:
        out.append(f"{where}: {len(groups)} resourceGroups > 16")
    if sum(len(g["flavors"]) for g in groups) > 256:
        out.append(f"{where}: more than 256 flavors in all")
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    for i, g in enumerate(groups):
        covered, flavors = g["coveredResources"], g["flavors"]
        if not 1 <= len(covered) <= 64:
            out.append(f"{where} group {i}: {len(covered)} coveredResources")
        if not 1 <= len(flavors) <= 64:
            out.append(f"{where} group {i}: {len(flavors)} flavors (1..64)")
        if sum(len(f["resources"]) for f in flavors) > 512:
            out.append(f"{where} group {i}: more than 512 flavor-resource pairs")
        for r in covered:
            if r in seen_resources:
                out.append(f"{where}: resource {r} in two groups")
            seen_resources.add(r)
        for f in flavors:
            fw = f"{where} flavor {f['name']}"
            if f["name"] in seen_flavors:
                out.append(f"{fw}: listed twice")
            seen_flavors.add(f["name"])
            if not DNS_SUBDOMAIN.match(f["name"]):
                out.append(f"{fw}: name")
            if [r["name"] for r in f["resources"]] != covered:
                out.append(
                    f"{fw}: resources {[r['name'] for r in f['resources']]} != coveredResources {covered}"
                )
            for r in f["resources"]:
                for field in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    if field in r:
                        out += _quantity_problems(r[field], f"{fw} {r['name']} {field}")
                limits = {"borrowingLimit", "lendingLimit"} & set(r)
                # A Cohort without parentName and a ClusterQueue without cohortName cannot have limits.
                if limits and ("cohortName" if kind == "ClusterQueue" else "parentName") not in spec:
                    out.append(f"{fw}: {sorted(limits)} without a parent")
    if kind == "ClusterQueue":
        if "namespaceSelector" not in spec:
            out.append(f"{where}: no namespaceSelector (no namespace may submit)")
        p = spec.get("preemption", {})
        if (
            p.get("reclaimWithinCohort", "Never") == "Never"
            and p.get("borrowWithinCohort", {}).get("policy", "Never") != "Never"
        ):
            out.append(f"{where}: borrowWithinCohort without reclaimWithinCohort")
    return out


def test_layout_passes_kueue_validation() -> None:
    assert [p for o in layout_objects() for p in kueue_problems(o)] == []


def test_validator_catches_what_kueue_rejects() -> None:
    """The checks above are not vacuous: each broken object is reported."""
    bad_rf = resource_flavor("p")
    bad_rf["spec"]["nodeLabels"] = {f"runwhere.ai/k{i}": "v" for i in range(9)}
    bad_cq = cluster_queue(TeamQuota("team-a", "q", gpu=4, borrowing_limit=2), ["a", "b"])
    bad_cq["spec"]["resourceGroups"][0]["flavors"][1]["resources"].reverse()
    bad_cq["spec"]["resourceGroups"][1]["flavors"][0]["resources"][2]["nominalQuota"] = "4 GPUs"
    del bad_cq["spec"]["cohortName"]
    problems = kueue_problems(bad_rf) + kueue_problems(bad_cq)
    assert len(problems) == 4, problems
    assert any("9 nodeLabels" in p for p in problems)
    assert any("!= coveredResources" in p for p in problems)
    assert any("'4 GPUs' is not a quantity" in p for p in problems)
    assert any("without a parent" in p for p in problems)


def test_sixty_four_pools_is_the_most_kueue_accepts() -> None:
    """One flavor per pool in one resource group: Kueue's maxItems 64 caps the number of pools."""

    def objs(n: int) -> list[dict]:
        pools = [PoolCapacity(f"pool-{i:02d}", gpu=1, cpu="1", memory="1Gi") for i in range(n)]
        return [cohort(pools, TEAMS), cluster_queue(TEAMS[0], [p.name for p in pools])]

    assert [p for o in objs(64) for p in kueue_problems(o)] == []
    problems = [p for o in objs(65) for p in kueue_problems(o)]
    assert problems == ["ClusterQueue/team-a group 0: 65 flavors (1..64)"]


def test_every_pod_resource_is_covered_and_transformed() -> None:
    """BlockUndeclared: a workload's cpu, memory and GPU (pool group) and the virtual resources Kueue
    derives from them (budget group) must all be covered by every team ClusterQueue. Slices of GPUs
    (MIG, time-slicing) are transformed into the GPU budget but declared nowhere (IgnoreUndeclared):
    TAS places them, the budget bounds them (docs/sharing.md)."""
    config = yaml.safe_load(KUEUE_CONFIG.read_text())
    derived = {o for t in config["resources"]["transformations"] for o in t["outputs"]}
    inputs = {t["input"] for t in config["resources"]["transformations"]}
    assert all(t.get("strategy") == "Retain" for t in config["resources"]["transformations"])
    whole = {"cpu", "memory", "nvidia.com/gpu"}
    for cq in (o for o in layout_objects() if o["kind"] == "ClusterQueue"):
        covered = {r for g in cq["spec"]["resourceGroups"] for r in g["coveredResources"]}
        assert covered == whole | derived - {"runwhere.ai/quota-gpu"}
    # runwhere.ai/quota-gpu: the whole-GPU budget of ClusterQueues written before issue 32 (docs/sharing.md).
    assert derived == {
        "runwhere.ai/quota-cpu",
        "runwhere.ai/quota-memory",
        "runwhere.ai/quota-gpu-840ths",
        "runwhere.ai/quota-gpu",
    }
    assert whole < inputs
    assert {"nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared", "amd.com/gpu"} < inputs


def test_configuration_leaves_other_kueue_users_alone() -> None:
    """Coexistence: nothing in gpuctl's Configuration narrows what stock Kueue manages or makes other
    users' ClusterQueues reject work (docs/queueing.md, "Sharing Kueue with other users")."""
    config = yaml.safe_load(KUEUE_CONFIG.read_text())
    # Kueue's default selector (all namespaces but kube-system and kueue-system) stays in force.
    assert "managedJobsNamespaceSelector" not in config
    assert config.get("manageJobsWithoutQueueName", False) is False
    # The virtual budget resources are global; foreign ClusterQueues do not declare them.
    assert config["resources"]["quotaCheckStrategy"] == "IgnoreUndeclared"
    assert "excludeResourcePrefixes" not in config["resources"]
    assert "fairSharing" not in config and "admissionFairSharing" not in config
    # Every framework stock Kueue v0.19.2 enables stays enabled (other users' JobSets, RayJobs...).
    stock = [
        "batch/job",
        "kubeflow.org/mpijob",
        "ray.io/rayjob",
        "ray.io/raycluster",
        "ray.io/rayservice",
        "jobset.x-k8s.io/jobset",
        "workload.codeflare.dev/appwrapper",
        "trainer.kubeflow.org/trainjob",
        "pod",
        "deployment",
        "statefulset",
        "leaderworkerset.x-k8s.io/leaderworkerset",
    ]
    assert set(stock) <= set(config["integrations"]["frameworks"])


# --- docs/queueing.md quotes these objects; keep the doc true -------------------------------------------


def _doc_yaml_documents() -> list[object]:
    blocks = re.findall(r"^```yaml\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)
    assert blocks, "docs/queueing.md has no yaml blocks"
    return [d for b in blocks for d in yaml.safe_load_all(b) if d is not None]


def test_doc_quotes_the_generated_objects_verbatim() -> None:
    generated = {
        (o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")): o for o in layout_objects()
    }
    quoted = [
        d for d in _doc_yaml_documents() if isinstance(d, dict) and "apiVersion" in d and "metadata" in d
    ]
    assert len(quoted) >= 6
    for d in quoted:
        key = (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace"))
        assert d == generated[key], f"docs/queueing.md quotes {key} differently from queues/"


def test_doc_quotes_the_kueue_configuration_verbatim() -> None:
    config = yaml.safe_load(KUEUE_CONFIG.read_text())
    excerpts = [d for d in _doc_yaml_documents() if isinstance(d, dict) and "resources" in d]
    assert excerpts, "the doc quotes no Configuration excerpt"
    for d in excerpts:
        for key, value in d.items():
            assert config[key] == value, f"docs/queueing.md quotes Configuration.{key} differently"


def test_doc_quota_yaml_is_the_layout() -> None:
    quotas = [d for d in _doc_yaml_documents() if isinstance(d, dict) and d.get("kind") == "quota"]
    assert len(quotas) == 1
    (doc,) = load_text(yaml.safe_dump(quotas[0]), "docs/queueing.md")
    assert team_quotas(doc.spec) == TEAMS


@pytest.mark.parametrize("pool", POOLS, ids=lambda p: p.name)
def test_layout_pool_flavors_are_topology_aware_and_never_borrowed(pool: PoolCapacity) -> None:
    """Every pool flavor is a TAS flavor on the node topology (Kueue admits a pod only where one node
    holds it), and every team's nominal quota there is out of reach, so no job borrows pool quota."""
    objs = {(o["kind"], o["metadata"]["name"]): o for o in layout_objects()}
    assert objs[("ResourceFlavor", pool.name)]["spec"]["topologyName"] == "gpuctl-nodes"
    assert objs[("Topology", "gpuctl-nodes")]["spec"] == {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]}
    for t in TEAMS:
        spec = objs[("ClusterQueue", t.namespace)]["spec"]
        (fl,) = [f for f in spec["resourceGroups"][0]["flavors"] if f["name"] == pool.name]
        for r in fl["resources"]:
            assert (
                parse_quantity(r["nominalQuota"])
                > {"cpu": 10**4, "memory": 2**45, "nvidia.com/gpu": 10**4}[r["name"]]
            )
            assert "borrowingLimit" not in r and "lendingLimit" not in r
