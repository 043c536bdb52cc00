"""Builders: each kind's manifests against a golden file, plus the rules every workload must keep."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from gpuctl.builders import build
from gpuctl.cli.output import to_yaml
from gpuctl.domain.gang import set_aside_tolerations
from gpuctl.spec import SpecError, load_file, load_text

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden" / "builders"
KINDS = ["training", "inference", "notebook", "compute"]


# Example files with a golden rendering beyond the one per kind.
EXAMPLES = [*KINDS, "training-multinode", "autoscaled-service"]


def _objects(kind: str) -> list[dict]:
    (doc,) = load_file(str(ROOT / "examples" / f"{kind}.yaml"))
    return build(doc.spec, doc.spec.job.namespace)


@pytest.mark.parametrize("kind", EXAMPLES)
def test_golden_manifests(kind: str) -> None:
    rendered = yaml.safe_dump_all(_objects(kind), sort_keys=False)
    golden = GOLDEN / f"{kind}.yaml"
    if os.environ.get("GPUCTL_UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert rendered == golden.read_text(), f"{kind} manifests changed; GPUCTL_UPDATE_GOLDEN=1 regenerates"


@pytest.mark.parametrize("kind", KINDS)
def test_every_workload_is_queued_pinned_and_guaranteed(kind: str) -> None:
    workload = _objects(kind)[0]
    labels = workload["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "default"
    assert labels["kueue.x-k8s.io/priority-class"] == f"gpuctl-{labels['runwhere.ai/priority']}"
    for key in ("runwhere.ai/job-type", "runwhere.ai/priority", "runwhere.ai/pool", "runwhere.ai/namespace"):
        assert key in labels
    assert labels["runwhere.ai/job-type"] == kind
    pod = workload["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["runwhere.ai/pool"] == labels["runwhere.ai/pool"]
    res = pod["containers"][0]["resources"]
    assert res["requests"] == res["limits"]
    assert set(res["requests"]) >= {"cpu", "memory"}


def test_training_job_is_suspended_with_gpu_and_type_selector() -> None:
    (job,) = _objects("training")
    assert (job["apiVersion"], job["kind"], job["spec"]["suspend"]) == ("batch/v1", "Job", True)
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == {"runwhere.ai/pool": "training-pool"}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    keys = [e["key"] for t in terms for e in t["matchExpressions"]]
    assert keys == ["runwhere.ai/gpu-type", "runwhere.ai/gpuType"]  # either key selects the GPU type
    assert all(e["values"] == ["A100-100G"] for t in terms for e in t["matchExpressions"])
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in pod["containers"][0]["env"]
    assert pod["volumes"] == [
        {"name": "workdir-0", "hostPath": {"path": "/data/team-a/output", "type": "DirectoryOrCreate"}}
    ]
    assert "ttlSecondsAfterFinished" not in job["spec"]


def test_job_tolerations_from_yaml_in_both_forms() -> None:
    text = yaml.safe_dump(
        {
            "kind": "training",
            "job": {"name": "t"},
            "environment": {"image": "busybox"},
            "resources": {
                "cpu": 1,
                "memory": "1Gi",
                "tolerations": [
                    "nvidia.com/gpu=present:NoSchedule",
                    {"key": "spot", "operator": "Exists"},
                    "x",
                ],
            },
        }
    )
    (doc,) = load_text(text, "t.yaml")
    pod = build(doc.spec, "default")[0]["spec"]["template"]["spec"]
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists"},
        {"key": "x", "operator": "Exists"},
        *set_aside_tolerations("default", "t"),  # its own set-aside (issue 45), after the user's
    ]


def test_inference_deployment_and_nodeport_service() -> None:
    deploy, svc = _objects("inference")
    assert (deploy["kind"], deploy["spec"]["replicas"]) == ("Deployment", 2)
    assert deploy["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert deploy["spec"]["selector"]["matchLabels"] == {"app": "llm-serving"}
    c = deploy["spec"]["template"]["spec"]["containers"][0]
    assert c["ports"] == [{"containerPort": 8000, "protocol": "TCP"}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert svc["metadata"]["name"] == "svc-llm-serving"
    assert svc["spec"]["type"] == "NodePort"
    assert svc["spec"]["ports"][0]["port"] == svc["spec"]["ports"][0]["targetPort"] == 8000
    assert svc["spec"]["selector"] == {"app": "llm-serving"}
    assert "nodePort" not in svc["spec"]["ports"][0]


def test_notebook_statefulset_service_port_matches_container_port() -> None:
    sts, svc = _objects("notebook")
    assert (sts["kind"], sts["spec"]["replicas"], sts["spec"]["serviceName"]) == (
        "StatefulSet",
        1,
        "svc-alice-notebook",
    )
    port = sts["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert port == svc["spec"]["ports"][0]["port"] == svc["spec"]["ports"][0]["targetPort"] == 8888


def test_notebook_default_port_is_8888_everywhere() -> None:
    (doc,) = load_text(
        "kind: notebook\njob: {name: nb}\nenvironment: {image: jupyter}\nresources: {cpu: 1, memory: 1Gi}\n"
    )
    sts, svc = build(doc.spec, "team-a")
    assert sts["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] == 8888
    assert svc["spec"]["ports"][0]["port"] == 8888


def test_compute_labels_port_and_has_no_gpu() -> None:
    deploy, svc = _objects("compute")
    assert deploy["metadata"]["labels"]["runwhere.ai/port"] == "80"
    assert svc["metadata"]["labels"]["runwhere.ai/port"] == "80"
    assert (
        "nvidia.com/gpu" not in deploy["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    )
    assert {"name": "NGINX_PORT", "value": "80"} in deploy["spec"]["template"]["spec"]["containers"][0]["env"]


def test_priority_maps_to_workload_priority_class() -> None:
    for prio in ("high", "medium", "low"):
        (doc,) = load_text(
            f"kind: training\njob: {{name: j, priority: {prio}}}\nenvironment: {{image: x}}\n"
            "resources: {cpu: 1, memory: 1Gi}\n"
        )
        (job,) = build(doc.spec, "ns")
        assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == f"gpuctl-{prio}"
        assert job["spec"]["template"]["spec"]["nodeSelector"] == {"runwhere.ai/pool": "default"}


def _load(doc: dict):
    (d,) = load_text(yaml.safe_dump(doc), "svc.yaml")
    return d.spec


def _inference(**service) -> dict:
    return {
        "kind": "inference",
        "job": {"name": "svc"},
        "environment": {"image": "nginx"},
        "resources": {"cpu": 1, "memory": "1Gi"},
        "service": {"port": 5353, "healthCheck": "/health", **service},
    }


def test_service_type_and_protocol_are_honoured() -> None:
    deploy, svc = build(_load(_inference(type="clusterip", protocol="udp")), "default")
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"][0]["protocol"] == "UDP"
    assert deploy["spec"]["template"]["spec"]["containers"][0]["ports"] == [
        {"containerPort": 5353, "protocol": "UDP"}
    ]
    _, svc = build(_load(_inference()), "default")
    assert (svc["spec"]["type"], svc["spec"]["ports"][0]["protocol"]) == ("NodePort", "TCP")


@pytest.mark.parametrize(
    ("field", "value", "fix"), [("type", "NodPort", "NodePort"), ("protocol", "HTTP", "TCP")]
)
def test_unknown_service_type_or_protocol_is_an_error_naming_the_choices(
    field: str, value: str, fix: str
) -> None:
    with pytest.raises(SpecError) as e:
        _load(_inference(**{field: value}))
    assert f"service.{field}" in str(e.value) and fix in str(e.value)


def test_yaml_output_has_no_anchors() -> None:
    objs = build(_load(_inference()), "default")
    text = to_yaml(objs[0])
    assert "&id" not in text and "*id" not in text
    probe = objs[0]["spec"]["template"]["spec"]["containers"][0]
    assert (
        probe["livenessProbe"]["httpGet"] is probe["readinessProbe"]["httpGet"]
    )  # shared, yet printed twice
    assert text.count("path: /health") == 2


def test_the_termination_grace_a_job_asks_reaches_its_pods() -> None:
    text = (
        "kind: training\njob: {name: t, namespace: team-a, terminationGracePeriodSeconds: 90}\n"
        "environment: {image: busybox}\nresources: {pool: a100, gpu: 1, cpu: 1, memory: 1Gi}\n"
    )
    (doc,) = load_text(text)
    (job, *_) = build(doc.spec, "team-a")
    assert job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 90
