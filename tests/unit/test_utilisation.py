"""GPU use per job (issue 40): gpuctl.domain.utilisation over dcgm-exporter's real series and labels, and
the PromQL gpuctl sends, evaluated by Prometheus' own engine (promtool test rules)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from gpuctl.constants import DCGM_ENGINE_ACTIVE, DCGM_FB_USED, DCGM_GPU_UTIL
from gpuctl.domain.utilisation import (
    by_activity,
    device_uses,
    idle_seconds,
    idle_text,
    job_use,
    matrix,
    mean_query,
    memory_query,
    memory_text,
    peak_query,
    percent_text,
    selector,
    step_for,
    vector,
)
from tests.unit.test_metrics_manifests import _promtool

NOW = 1_000_000.0


def labels(pod: str, gpu: str = "0", ns: str = "team-a", node: str = "gpu-0", **extra: str) -> dict:
    """dcgm-exporter's labels with the kubelet pod-resources mapping on."""
    return {
        "gpu": gpu,
        "UUID": f"GPU-{node}-{gpu}",
        "device": f"nvidia{gpu}",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": node,
        "namespace": ns,
        "pod": pod,
        "container": "main",
        **extra,
    }


def pod(name: str, gpus: int = 1, rank: int | None = None, phase: str = "Running", start: float = NOW - 7200):
    from datetime import UTC, datetime

    meta = {"name": name, "namespace": "team-a", "uid": name, "annotations": {}}
    if rank is not None:
        meta["annotations"]["batch.kubernetes.io/job-completion-index"] = str(rank)
    return {
        "metadata": meta,
        "spec": {
            "nodeName": "gpu-0",
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase, "startTime": datetime.fromtimestamp(start, UTC).isoformat()},
    }


def flat(value: float, since: float = NOW - 3600, step: int = 60) -> list[tuple[float, float]]:
    return [(t, value) for t in range(int(since) + step, int(NOW) + 1, step)]


# ----------------------------------------------------------------------------- series
def test_engine_activity_is_preferred_and_gpu_util_is_the_fallback_per_device() -> None:
    uses = device_uses(
        means={
            DCGM_ENGINE_ACTIVE: [(labels("nb-0", "0"), 0.25)],
            # GPU 0 reports both (engine wins); GPU 1 has no profiling metrics: util / 100.
            DCGM_GPU_UTIL: [(labels("nb-0", "0"), 100.0), (labels("nb-0", "1"), 40.0)],
        },
        peaks={},
        memory=[(labels("nb-0", "0"), 2048.0), (labels("nb-0", "1"), 512.0)],
    )
    by_gpu = {u.device.gpu: u for u in uses}
    assert (by_gpu["0"].source, by_gpu["0"].activity, by_gpu["0"].memory_mib) == (
        DCGM_ENGINE_ACTIVE,
        0.25,
        2048,
    )
    assert (by_gpu["1"].source, by_gpu["1"].activity) == (DCGM_GPU_UTIL, 0.4)


def test_a_mig_slice_is_its_own_device() -> None:
    a = labels("svc-a", "0", GPU_I_PROFILE="1g.10gb", GPU_I_ID="7")
    b = labels("svc-b", "0", GPU_I_PROFILE="1g.10gb", GPU_I_ID="8")
    uses = device_uses({DCGM_ENGINE_ACTIVE: [(a, 0.9), (b, 0.0)]}, {})
    assert sorted((u.pod, u.device.text, u.activity) for u in uses) == [
        ("svc-a", "gpu-0/gpu0/1g.10gb#7", 0.9),
        ("svc-b", "gpu-0/gpu0/1g.10gb#8", 0.0),
    ]


def test_prometheus_answers_parse_and_nan_is_dropped() -> None:
    data = {
        "resultType": "vector",
        "result": [
            {"metric": {"pod": "a"}, "value": [NOW, "0.5"]},
            {"metric": {"pod": "b"}, "value": [NOW, "NaN"]},
        ],
    }
    assert vector(data) == [({"pod": "a"}, 0.5)]
    m = {
        "resultType": "matrix",
        "result": [{"metric": {"pod": "a"}, "values": [[1, "0"], [2, "+Inf"], [3, "1"]]}],
    }
    assert matrix(m) == [({"pod": "a"}, [(1.0, 0.0), (3.0, 1.0)])]


def test_selector_is_scoped_and_refuses_what_is_not_a_name() -> None:
    assert selector(["team-b", "team-a"]) == '{namespace=~"team-a|team-b",pod!=""}'
    assert selector([]) == '{namespace="-",pod!=""}'  # may read no namespace: matches nothing
    assert selector(None) == '{pod!=""}'
    assert selector(["team-a"], ["nb-0"]) == '{namespace=~"team-a",pod!="",pod=~"nb-0"}'
    with pytest.raises(ValueError):
        selector(['team-a"} or vector(1) #'])


# ----------------------------------------------------------------------------- idle time
def test_idle_since_the_last_step_at_or_above_the_floor() -> None:
    peaks = [(NOW - 600, 0.5), (NOW - 300, 0.009), (NOW, 0.0)]
    assert idle_seconds(peaks, 0.01, NOW) == (600.0, False)
    assert idle_seconds([(NOW, 0.02)], 0.01, NOW) == (0.0, False)


def test_never_active_is_idle_since_the_pod_started_or_at_least_since_the_first_point() -> None:
    peaks = flat(0.0)
    assert idle_seconds(peaks, 0.01, NOW, since=NOW - 1800) == (1800.0, False)
    seconds, at_least = idle_seconds(peaks, 0.01, NOW, since=NOW - 86400)
    assert at_least and seconds == pytest.approx(3600 - 60)
    assert idle_seconds([], 0.01, NOW) == (None, False)


# ----------------------------------------------------------------------------- per job
def test_a_gang_is_read_per_rank_and_its_idle_time_is_its_most_recent_activity() -> None:
    pods = [pod("g-1", 8, rank=1), pod("g-0", 8, rank=0)]
    devices = {}
    for i, p in enumerate(("g-0", "g-1")):
        peaks = {
            DCGM_ENGINE_ACTIVE: [
                (labels(p, str(g), node=f"n{i}"), flat(0.9 if (p == "g-1" and g == 3) else 0.0))
                for g in range(8)
            ]
        }
        means = {
            DCGM_ENGINE_ACTIVE: [
                (labels(p, str(g), node=f"n{i}"), 0.8 if p == "g-1" else 0.0) for g in range(8)
            ]
        }
        devices[p] = device_uses(means, peaks)
    use = job_use(
        namespace="team-a", name="g", kind="training", pool="p", status="Running", pods=pods, devices=devices,
        floor=0.01, now=NOW,
    )  # fmt: skip
    assert [(r.rank, r.pod, len(r.devices)) for r in use.pods] == [(0, "g-0", 8), (1, "g-1", 8)]
    assert use.gpus == 16
    assert use.activity == pytest.approx(0.4)
    # rank 0 never active in the hour read, and it started 2 h ago: idle at least since the first point
    assert use.pods[0].idle_seconds == pytest.approx(3540) and use.pods[0].idle_at_least is True
    assert use.idle_seconds == 0.0  # rank 1's GPU 3 is busy now


def test_a_finished_pod_holds_nothing_and_an_unmeasured_job_says_so() -> None:
    use = job_use(
        namespace="team-a", name="t", kind="training", pool="p", status="Running",
        pods=[pod("t-0", 4, phase="Succeeded"), pod("t-1", 2)], devices={}, floor=0.01, now=NOW,
    )  # fmt: skip
    assert use.gpus == 2 and not use.measured and use.activity is None and use.idle_seconds is None
    assert [r.pod for r in use.pods] == ["t-1"]


def test_top_order_is_busiest_first_unmeasured_last() -> None:
    def u(name: str, act: float | None):
        found = {} if act is None else {name: device_uses({DCGM_ENGINE_ACTIVE: [(labels(name), act)]}, {})}
        return job_use(
            namespace="team-a", name=name, kind="notebook", pool="p", status="Running", pods=[pod(name)],
            devices=found,
            floor=0.01, now=NOW,
        )  # fmt: skip

    assert [
        x.name for x in by_activity([u("idle", 0.0), u("none", None), u("busy", 0.9), u("mid", 0.3)])
    ] == [
        "busy",
        "mid",
        "idle",
        "none",
    ]


def test_cells() -> None:
    assert percent_text(0.004) == "0.4%" and percent_text(0.37) == "37%" and percent_text(None) == "-"
    assert percent_text(0.0) == "0%"
    assert memory_text(812) == "812Mi" and memory_text(40448) == "39.5Gi" and memory_text(None) == "-"
    assert idle_text(3 * 3600, False, 86400) == "3h"
    assert idle_text(90000, True, 86400) == ">24h"  # kubectl's short age: days from 48 h
    assert idle_text(None, False, 86400) == "-"
    assert step_for(86400) == 300 and step_for(20) == 1


# ----------------------------------------------------------------------------- the PromQL, by Prometheus
def test_the_queries_gpuctl_sends_give_these_answers_in_prometheus(tmp_path: Path) -> None:
    """Prometheus' own engine over dcgm-exporter-shaped series: the mean over the window, the per-step peak
    (a one-sample burst between steps is caught), memory, and a namespace the caller may not read left
    out. Fails if a query is malformed, matches other teams' series, or misses the burst."""
    sel = selector(["team-a"])
    a = '{Hostname="n0",UUID="GPU-0",gpu="0",namespace="team-a",pod="nb-0",container="main"}'
    b = '{Hostname="n0",UUID="GPU-1",gpu="1",namespace="team-b",pod="nb-9",container="main"}'
    spec = {
        "rule_files": [],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    # 0.5 for 5 minutes, 0 until 15m15s, one sample of 0.8 at 15m30s, then 0 again.
                    {"series": f"{DCGM_ENGINE_ACTIVE}{a}", "values": "0.5x20 0x40 0.8 0x20"},
                    {"series": f"{DCGM_ENGINE_ACTIVE}{b}", "values": "0.5x60"},
                    {"series": f"{DCGM_FB_USED}{a}", "values": "1024x60"},
                ],
                "promql_expr_test": [
                    {
                        "expr": mean_query(DCGM_ENGINE_ACTIVE, sel, 300),
                        "eval_time": "5m",
                        "exp_samples": [{"labels": a, "value": 0.5}],
                    },
                    {  # the step holding the burst sees it, the step before does not
                        "expr": peak_query(DCGM_ENGINE_ACTIVE, sel, 60),
                        "eval_time": "16m",
                        "exp_samples": [{"labels": a, "value": 0.8}],
                    },
                    {
                        "expr": peak_query(DCGM_ENGINE_ACTIVE, sel, 60),
                        "eval_time": "15m",
                        "exp_samples": [{"labels": a, "value": 0}],
                    },
                    {
                        "expr": memory_query(sel),
                        "eval_time": "5m",
                        "exp_samples": [{"labels": f"{DCGM_FB_USED}{a}", "value": 1024}],
                    },
                ],
            }
        ],
    }
    f = tmp_path / "queries_test.yaml"
    f.write_text(yaml.safe_dump(spec))
    p = subprocess.run([_promtool(), "test", "rules", str(f)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
