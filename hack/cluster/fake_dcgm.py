"""dcgm-exporter's series for the pods of KWOK's fake nodes (issue 40): the DCGM family of the local cluster's
one metrics double, hack/cluster/fake_exporter.py, kept in a module of its own that the exporter imports.

On a real GPU node NVIDIA's dcgm-exporter (a DaemonSet of the GPU Operator, in its namespace) serves one
series per GPU (and per MIG instance) and metric; with the kubelet pod-resources mapping on, each carries
the namespace, pod and container the device is given to. The names, types and labels here are
dcgm-exporter's (etc/default-counters.csv; pkg/dcgmexporter kubernetes.go: `namespace`, `pod`,
`container`; the device labels `gpu`, `UUID`, `device`, `modelName`, `Hostname`; MIG's `GPU_I_PROFILE`,
`GPU_I_ID`). Every pod bound to a node that holds GPUs (requests of nvidia.com/gpu, or of a MIG profile
nvidia.com/mig-<profile>) gets its devices, numbered per node in the pods' name order; a test sets what
they report over the exporter's set API (`PUT /v1/pods/NS/POD {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.4}`), or
`"fake:profiling": 0` to leave the pod's GPUs without profiling metrics (the engine series missing, as on
the setups NVIDIA/DCGM#226 describes: gpuctl then reads DCGM_FI_DEV_GPU_UTIL). Unset, a device is idle:
0 activity, 0 MiB.

Scraped as the shipped job manifests/prometheus/dcgm-scrape.yaml scrapes a real cluster's exporter: the
exporter's HTTP service discovery (`/sd/dcgm`) serves one target with the meta labels of a dcgm-exporter
pod in the GPU Operator's namespace, so the shipped relabel rules keep it, and Prometheus reads
`/dcgm/metrics` (every fake node's devices at once; a real cluster has one exporter per node).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

PATH = "/dcgm/metrics"
SD_PATH = "/sd/dcgm"
# What the discovered target looks like (the GPU Operator's DaemonSet pod); the scrape job keeps it by these.
OPERATOR_NAMESPACE = "gpu-operator"
EXPORTER_APP = "nvidia-dcgm-exporter"
MODEL = "NVIDIA H100 80GB HBM3"
FB_TOTAL_MIB = 81559.0
PROFILING = "fake:profiling"  # a setting, never exported: 0 leaves the pod's GPUs without the engine series
# A setting: 1 makes the pod serve dcgm-exporter's activity series in its own /metrics too (a tenant faking
# its GPUs' activity); the scrape jobs of tenant pods drop them (manifests/prometheus/dcgm-scrape.yaml).
OWN_METRICS = "fake:dcgm-in-own-metrics"
ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"


@dataclass(frozen=True)
class Gauge:
    name: str
    help: str


# dcgm-exporter's help texts (etc/default-counters.csv); all gauges.
SERIES = (
    Gauge(UTIL, "GPU utilization (in %)."),
    Gauge(FB_FREE, "Frame buffer memory free (in MiB)."),
    Gauge(FB_USED, "Frame buffer memory used (in MiB)."),
    Gauge(ENGINE, "Ratio of time the graphics engine is active."),
)
# What the set API accepts for this family (the exporter's Store checks names against its KNOWN): the series
# a test may set, and the profiling switch.
SETTABLE = (*(s.name for s in SERIES if s.name != FB_FREE), PROFILING, OWN_METRICS)


def _gpu_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """Whole GPUs and MIG instances the pod's containers ask for: {"gpu": n, "1g.10gb": m, ...}."""
    out: dict[str, int] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        for part in ("limits", "requests"):
            for name, qty in (res.get(part) or {}).items():
                key = "gpu" if name == "nvidia.com/gpu" else name.removeprefix("nvidia.com/mig-")
                if name == "nvidia.com/gpu" or name.startswith("nvidia.com/mig-"):
                    try:
                        out[key] = max(out.get(key, 0), int(str(qty)))
                    except ValueError:
                        continue
    return out


def devices(pods: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The devices of every bound, unfinished pod holding GPUs: dcgm-exporter's labels for each (whole GPUs
    numbered per node; MIG instances seven to a GPU of their own, gpu "m0", "m1", ...)."""
    out = []
    index: dict[str, int] = {}  # whole GPUs handed out per node
    mig: dict[str, int] = {}  # MIG instances handed out per node (7 to a GPU, on GPUs of their own)
    live = [
        p
        for p in pods
        if (p.get("spec") or {}).get("nodeName")
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        and _gpu_requests(p)
    ]
    for p in sorted(
        live, key=lambda p: (p["spec"]["nodeName"], p["metadata"]["namespace"], p["metadata"]["name"])
    ):
        node = p["spec"]["nodeName"]
        meta = p["metadata"]
        container = ((p.get("spec") or {}).get("containers") or [{}])[0].get("name", "")
        owner = {"namespace": meta["namespace"], "pod": meta["name"], "container": container}
        for key, n in sorted(_gpu_requests(p).items(), key=lambda kv: kv[0] != "gpu"):
            for _ in range(n):
                counter = index if key == "gpu" else mig
                i = counter.get(node, 0)
                counter[node] = i + 1
                gpu = str(i) if key == "gpu" else f"m{i // 7}"
                labels = {
                    "gpu": gpu,
                    "UUID": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}/{gpu}')}",
                    "device": f"nvidia{gpu.lstrip('m')}",
                    "modelName": MODEL,
                    "Hostname": node,
                    **owner,
                }
                if key != "gpu":
                    labels.update({"GPU_I_PROFILE": key, "GPU_I_ID": str(i % 7)})
                out.append(labels)
    return out


def _labels(d: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in d.items())


def exposition(
    pods: Iterable[Mapping[str, Any]], values: Mapping[tuple[str, str], Mapping[str, float]]
) -> str:
    """The text dcgm-exporter would serve for these pods' devices, with the values set per (namespace, pod)
    (the exporter's Store; unset: idle)."""
    devs = devices(pods)
    lines = []
    for s in SERIES:
        lines += [f"# HELP {s.name} {s.help}", f"# TYPE {s.name} gauge"]
        for d in devs:
            v = values.get((d["namespace"], d["pod"])) or {}
            if s.name == ENGINE and not v.get(PROFILING, 1):
                continue
            if s.name == FB_FREE:
                value = FB_TOTAL_MIB - float(v.get(FB_USED, 0.0))
            else:
                value = float(v.get(s.name, 0.0))
            lines.append(f"{s.name}{{{_labels(d)}}} {value}")
    return "\n".join(lines) + "\n"


def sd_targets(address: str) -> list[dict]:
    """HTTP service discovery for the scrape job: one target, the "dcgm-exporter pod", with the meta labels
    Prometheus' pod role would give the GPU Operator's (discovery/kubernetes/pod.go)."""
    return [
        {
            "targets": [address],
            "labels": {
                "__meta_kubernetes_namespace": OPERATOR_NAMESPACE,
                "__meta_kubernetes_pod_name": f"{EXPORTER_APP}-fake",
                "__meta_kubernetes_pod_label_app": EXPORTER_APP,
                "__meta_kubernetes_pod_labelpresent_app": "true",
                "__meta_kubernetes_pod_container_port_name": "metrics",
                "__meta_kubernetes_pod_phase": "Running",
                "__meta_kubernetes_pod_ready": "true",
                "__metrics_path__": PATH,
            },
        }
    ]


def own_metrics(namespace: str, pod: str, values: Mapping[str, float] | None) -> str:
    """What a pod that fakes dcgm-exporter's series serves in its own /metrics (OWN_METRICS set): its GPU
    busy at the engine value set for it. "" for every other pod."""
    v = values or {}
    if not v.get(OWN_METRICS):
        return ""
    labels = {"gpu": "0", "UUID": "GPU-forged", "Hostname": "forged", "namespace": namespace, "pod": pod}
    return f"# TYPE {ENGINE} gauge\n{ENGINE}{{{_labels(labels)}}} {float(v.get(ENGINE, 1.0))}\n"
