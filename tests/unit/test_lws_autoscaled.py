"""Issue 44: an autoscaled service of multi-node replicas (`service.autoscaling` with `resources.nodes` >
1, docs/serving.md): the floor and burst LeaderWorkerSets gpuctl builds, the HPA on the burst's scale
subresource, the Service in front of both tiers' leaders, the spec's refusals, and how the service's
groups read back (desired, ready, running, waiting: in groups). The real controllers:
tests/integration/test_lws_autoscaled.py."""

from __future__ import annotations

import pytest

from gpuctl.builders import build
from gpuctl.constants import LWS_GROUP_INDEX_LABEL, LWS_NAME_LABEL, LWS_WORKER_INDEX_LABEL, Labels
from gpuctl.domain.serving import scale
from gpuctl.spec import SpecError, load_text

AUTO = "autoscaling: {minReplicas: 1, maxReplicas: 3, targetConcurrency: 10}"


def _spec(name: str = "llm", service: str = AUTO, resources: str = "gpu: 8, nodes: 2"):
    (doc,) = load_text(
        f"kind: inference\njob: {{name: {name}, namespace: team-a}}\nenvironment: {{image: vllm}}\n"
        f"service: {{{service}, port: 8000, healthCheck: /health}}\n"
        f"resources: {{pool: training-pool, {resources}, cpu: 4, memory: 8Gi}}\n",
        "svc.yaml",
    )
    return doc.spec


def test_floor_and_burst_are_leader_worker_sets_and_the_hpa_scales_the_bursts_groups():
    floor, burst, hpa, svc = build(_spec(), "team-a")
    assert [o["kind"] for o in (floor, burst, hpa, svc)] == [
        "LeaderWorkerSet",
        "LeaderWorkerSet",
        "HorizontalPodAutoscaler",
        "Service",
    ]
    assert (floor["metadata"]["name"], floor["spec"]["replicas"]) == ("llm", 1)
    assert (burst["metadata"]["name"], burst["spec"]["replicas"]) == ("llm-burst", 0)
    for lws, tier in ((floor, "floor"), (burst, "burst")):
        assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
        labels = lws["metadata"]["labels"]
        # Kueue queues each group at its tier's priority: floor inside the guarantee, burst first to yield.
        assert labels[Labels.KUEUE_PRIORITY] == f"gpuctl-serving-{tier}"
        assert labels[Labels.KUEUE_QUEUE] == "default"
        assert (labels[Labels.SERVING_TIER], labels[Labels.APP]) == (tier, "llm")
        assert Labels.PRIORITY not in labels
        lwt = lws["spec"]["leaderWorkerTemplate"]
        for t in (lwt["leaderTemplate"], lwt["workerTemplate"]):
            # (Kueue's LeaderWorkerSet webhook copies the set's priority class onto both templates.)
            tl = t["metadata"]["labels"]
            assert (tl[Labels.SERVING_TIER], tl[Labels.APP]) == (tier, "llm")
            assert Labels.PRIORITY not in tl and tl.get(Labels.KUEUE_PRIORITY) in (
                None,
                f"gpuctl-serving-{tier}",
            )
            assert t["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
            assert t["metadata"]["annotations"]["kueue.x-k8s.io/podset-group-name"] == "replica"
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": "llm-burst",
    }
    assert (spec["minReplicas"], spec["maxReplicas"]) == (0, 2)  # groups, not pods
    assert spec["metrics"][0]["external"]["metric"]["selector"]["matchLabels"] == {
        "gpuctl_job": "llm",
        "floor": "10",
    }
    # Requests go to the leaders of both tiers.
    assert svc["spec"]["selector"] == {"app": "llm", LWS_WORKER_INDEX_LABEL: "0"}


def test_a_fixed_size_multi_node_service_is_still_one_leader_worker_set():
    lws, _ = build(_spec(service="replicas: 2"), "team-a")
    assert lws["kind"] == "LeaderWorkerSet" and Labels.SERVING_TIER not in lws["metadata"]["labels"]
    assert Labels.APP not in lws["metadata"]["labels"]


@pytest.mark.parametrize(
    ("name", "service", "words"),
    [
        # Two LeaderWorkerSets, <name> and <name>-burst: Kueue's 39 characters hold the burst's name.
        ("x" * 34, AUTO, "shorten job.name to at most 33"),
        ("llm", AUTO.replace("minReplicas: 1", "minReplicas: 3"), "not above minReplicas"),
        ("llm", AUTO.replace("autoscaling:", "replicas: 2, autoscaling:"), "service.replicas"),
    ],
)
def test_spec_refusals(name, service, words):
    with pytest.raises(SpecError, match=words):
        _spec(name, service)


def test_a_name_of_33_characters_is_taken():
    _, burst, *_ = build(_spec("x" * 33), "team-a")
    assert len(burst["metadata"]["name"]) == 39


def _lws(name: str, tier: str, want: int, ready: int) -> dict:
    return {
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {"app": "llm", Labels.SERVING_TIER: tier},
        },
        "spec": {"replicas": want, "leaderWorkerTemplate": {"size": 2}},
        "status": {"readyReplicas": ready},
    }


def _pod(lws: str, group: int, rank: int, gated: bool) -> dict:
    spec: dict = {"containers": [{"name": "c"}]}
    if gated:
        spec["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    return {
        "metadata": {
            "name": f"{lws}-{group}" + (f"-{rank}" if rank else ""),
            "namespace": "team-a",
            "uid": f"{lws}-{group}-{rank}",
            "labels": {
                "app": "llm",
                Labels.SERVING_TIER: "burst" if lws.endswith("-burst") else "floor",
                LWS_NAME_LABEL: lws,
                LWS_GROUP_INDEX_LABEL: str(group),
                LWS_WORKER_INDEX_LABEL: str(rank),
            },
        },
        "spec": spec,
        "status": {"phase": "Pending" if gated else "Running"},
    }


def test_a_services_replicas_are_counted_in_groups():
    # Floor group 0 runs; burst groups 0 and 1: 0 runs, 1 waits (both its pods gated: admitted whole).
    floor, burst = _lws("llm", "floor", 1, 1), _lws("llm-burst", "burst", 2, 1)
    pods = [
        _pod("llm", 0, 0, False),
        _pod("llm", 0, 1, False),
        _pod("llm-burst", 0, 0, False),
        _pod("llm-burst", 0, 1, False),
        _pod("llm-burst", 1, 0, True),
        _pod("llm-burst", 1, 1, True),
    ]
    sc = scale(floor, burst, pods)
    assert (sc.floor, sc.desired, sc.ready, sc.running, sc.waiting) == (1, 3, 2, 2, 1)


def test_the_shipped_scrape_reads_a_group_at_its_leaders_service_port_only():
    """Prometheus' pod discovery makes a target per container port: the leader's rendezvous port would
    count its load twice, and the workers serve no requests."""
    import re
    from pathlib import Path

    import yaml

    from gpuctl.constants import GANG_PORT_NAME

    root = Path(__file__).resolve().parents[2]
    (job,) = yaml.safe_load((root / "manifests/prometheus/serving-scrape.yaml").read_text())["scrape_configs"]
    drops = {r["source_labels"][0]: r["regex"] for r in job["relabel_configs"] if r.get("action") == "drop"}
    worker = "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", LWS_WORKER_INDEX_LABEL)
    assert re.fullmatch(drops[worker], "1") and not re.fullmatch(drops[worker], "0")
    assert re.fullmatch(drops["__meta_kubernetes_pod_container_port_name"], GANG_PORT_NAME)


# ----------------------------------------------------------------------------- admission
def _admission_objects() -> list[dict]:
    """What `gpuctl create` makes of an autoscaled service of 2-pod replicas (4 GPUs a pod) on the admission
    fixtures' pool a100."""
    from tests.unit.test_admission_fixtures import TEAM

    (doc,) = load_text(
        f"kind: inference\njob: {{name: llm, namespace: {TEAM}}}\nenvironment: {{image: vllm}}\n"
        "service: {autoscaling: {minReplicas: 1, maxReplicas: 3, targetConcurrency: 10}}\n"
        "resources: {pool: a100, nodes: 2, gpu: 4, cpu: 1, memory: 1Gi}\n",
        "svc.yaml",
    )
    return build(doc.spec, TEAM)


def test_the_webhook_passes_gpuctls_floor_burst_and_hpa():
    from admission.rules import AdmissionConfig
    from admission.rules import review as judge
    from tests.unit.test_admission_fixtures import review, state

    st = state()
    for obj in _admission_objects()[:3]:
        v = judge(review(obj)["request"], st, AdmissionConfig())
        assert v.allowed and not v.violations and not v.warnings, (obj["kind"], v.message())


def test_an_hpa_of_a_leader_worker_set_is_judged_like_one_of_a_deployment():
    """hpa-queued: an HPA of a GPU LeaderWorkerSet Kueue does not queue is refused; one of gpuctl's burst
    is warned when floor + burst groups x the group's GPUs (2 pods x 4) pass the team's cap."""
    from dataclasses import replace

    from admission.rules import AdmissionConfig
    from admission.rules import review as judge
    from admission.state import CachedDeployment, ClusterState, TeamCap
    from tests.unit.test_admission_fixtures import TEAM, cluster_objects, review

    floor, burst, hpa, _ = _admission_objects()
    raw = {**floor, "metadata": {**floor["metadata"], "name": "raw", "labels": {}}}
    st = ClusterState.from_objects([*cluster_objects(), floor, burst, raw])
    assert st.leader_worker_sets[(TEAM, "llm")] == CachedDeployment(8, 1, "floor", "llm", "default")
    assert (TEAM, "llm") not in st.deployments
    st = replace(st, team_caps={**st.team_caps, TEAM: TeamCap(16, 8)})

    def judged(target: str, high: int):
        h = {**hpa, "spec": {**hpa["spec"], "maxReplicas": high}}
        h["spec"]["scaleTargetRef"] = {**hpa["spec"]["scaleTargetRef"], "name": target}
        return judge(review(h)["request"], st, AdmissionConfig())

    refused = judged("raw", 2)
    assert not refused.allowed
    assert (
        "scales LeaderWorkerSet raw, whose replicas (groups of pods) request 8 GPU(s) each"
        in refused.message()
    )
    # floor 1 + burst 2 = 3 groups x 8 = 24 GPUs: the team's 16 + 8 it may borrow, silently.
    assert judged("llm-burst", 2).warnings == ()
    (warning,) = judged("llm-burst", 3).warnings
    assert "with its service's floor of 1" in warning and "4 replicas x 8 GPU(s) = 32 GPUs" in warning, (
        warning
    )


def test_the_metrics_count_a_multi_node_services_groups():
    from gpuctl.domain.serving import services

    floor, burst = _lws("llm", "floor", 1, 1), _lws("llm-burst", "burst", 1, 0)
    pods = [_pod("llm", 0, 0, False), _pod("llm", 0, 1, False), _pod("llm-burst", 0, 0, True)]
    pods.append(_pod("llm-burst", 0, 1, True))
    (sc,) = services([floor, burst], pods, []).values()
    assert (sc.desired, sc.running, sc.waiting) == (2, 1, 1)


def test_the_webhook_watches_leader_worker_sets_only_where_the_cluster_serves_them():
    from admission.state import OPTIONAL_RESOURCES, served
    from gpuctl.cluster import ApiError

    class Discovery:
        def __init__(self, serves: bool):
            self.serves, self.asked = serves, []

        def get(self, api_path: str, **_):
            self.asked.append(api_path)
            if not self.serves:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return {"kind": "APIResourceList"}

    yes, no = Discovery(True), Discovery(False)
    assert [r.kind for r in served(yes, OPTIONAL_RESOURCES)] == ["LeaderWorkerSet"]
    assert served(no, OPTIONAL_RESOURCES) == []
    assert yes.asked == ["/apis/leaderworkerset.x-k8s.io/v1"]


def test_serve_metrics_watch_the_services_leader_worker_sets_where_served():
    from gpuctl.server.wiring import default_cache
    from tests.unit.test_metrics import NoCluster

    served = default_cache(NoCluster(), metrics=True, api=False, optional=("LeaderWorkerSet",))
    assert served.informers["LeaderWorkerSet"].label_selector == Labels.SERVING_TIER
    assert "LeaderWorkerSet" not in default_cache(NoCluster(), metrics=True, api=False, optional=()).informers
