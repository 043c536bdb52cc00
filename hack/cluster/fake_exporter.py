#!/usr/bin/env python3
"""The local cluster's only metrics double: series that the pods of KWOK's fake nodes would export.

On a fake node no container runs, so nothing answers at a fake pod's address. Everything that reads the
series is real: Prometheus discovers the pods through the API server with the scrape configuration a real
cluster uses (manifests/prometheus/serving-scrape.yaml) and, for a pod on a fake node only, scrapes this
process instead of the pod (one relabel rule appended by hack/cluster/autoscaling.py: the pod's namespace
and name become URL parameters); prometheus-adapter, the HPA controller and Kueue follow as on a real
cluster. A test sets the values a pod reports over HTTP.

    fake_exporter.py --listen 127.0.0.1:PORT [--kubeconfig FILE]

Scraped (what Prometheus reads):
    GET /pods/metrics?namespace=NS&pod=POD   one pod's series, in the Prometheus text format, without
                                             namespace/pod labels (Prometheus adds them from discovery,
                                             as for a real pod). A pod nobody set reports the family's
                                             defaults: an idle vLLM (0 requests running, 0 waiting).
Set (what a test writes; JSON bodies):
    PUT    /v1/pods/NS/POD    {"vllm:num_requests_running": 3, "vllm:request_success_total": {"rate": 2}}
                              merges into the pod's values: a number sets a gauge, {"rate": r} makes a
                              counter grow by r per second from its current value
    DELETE /v1/pods/NS/POD    back to the defaults
    GET    /v1/pods           every value set, {"NS/POD": {...}}
    GET    /healthz

Discovered (with --kubeconfig): Debian's `prometheus` is built without Kubernetes service discovery, so the
local Prometheus finds the pods through HTTP service discovery here instead:
    GET /sd/pods     every pod with an IP among those labelled runwhere.ai/serving-tier (the ones the
                     serving scrape job keeps; a real Prometheus lists every pod and its relabelling drops
                     the rest), one target per container port, with the meta labels of Prometheus' own pod
                     role (discovery/kubernetes/pod.go: __meta_kubernetes_namespace, _pod_name, _pod_ip,
                     _pod_phase, _pod_ready, _pod_node_name, _pod_label_<name>, _pod_annotation_<name>,
                     _pod_container_name, _pod_container_port_number, ...), so the shipped relabel rules run
                     on what they would read in a cluster. Kept current by a watch (gpuctl.cluster.informer).

Families (FAMILIES below) are the series of one kind of exporter. `vllm` is per pod (vLLM's /metrics,
scraped at the pod). dcgm-exporter's, a node-level exporter whose series name the pod in labels
(DCGM_FI_DEV_GPU_UTIL{gpu, UUID, namespace, pod, container, GPU_I_PROFILE, ...}), is hack/cluster/
fake_dcgm.py (issue 40): set through the same API, served for every fake node's GPUs at /dcgm/metrics
(GET /sd/dcgm discovers it as the GPU Operator's exporter pod, for manifests/prometheus/dcgm-scrape.yaml).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # fake_dcgm beside it, however loaded
import fake_dcgm  # issue 40: dcgm-exporter's family, hack/cluster/fake_dcgm.py


@dataclass(frozen=True)
class Series:
    name: str
    kind: str  # gauge | counter
    help: str
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Family:
    """The series one kind of exporter serves for a pod, with their defaults (0: an idle server)."""

    name: str
    series: tuple[Series, ...]


# vLLM's own metric names and the labels it puts on them (vllm/engine/metrics.py: model_name; the
# request counter per finished_reason). The model name is what an unset fake pod reports.
_MODEL = (("model_name", "fake-model"),)
VLLM = Family(
    "vllm",
    (
        Series("vllm:num_requests_running", "gauge", "Number of requests currently running on GPU.", _MODEL),
        Series("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", _MODEL),
        Series(
            "vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.", _MODEL
        ),
        Series(
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
            (*_MODEL, ("finished_reason", "stop")),
        ),
    ),
)
FAMILIES = {f.name: f for f in (VLLM,)}
KNOWN = {s.name: s for f in FAMILIES.values() for s in f.series}
# dcgm-exporter's series (issue 40, hack/cluster/fake_dcgm.py): set per pod like the others, served for every
# node's GPUs at fake_dcgm.PATH, as a real cluster's exporter serves them (the pod in labels).
KNOWN.update({n: Series(n, "gauge", "") for n in fake_dcgm.SETTABLE})


@dataclass
class Counter:
    """A counter that grows by `rate` per second from `base` at `since`."""

    base: float = 0.0
    rate: float = 0.0
    since: float = field(default_factory=time.monotonic)

    def value(self, now: float) -> float:
        return self.base + self.rate * (now - self.since)


class Store:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pods: dict[tuple[str, str], dict[str, float | Counter]] = {}

    def set(self, key: tuple[str, str], values: dict) -> None:
        now = time.monotonic()
        with self.lock:
            cur = self.pods.setdefault(key, {})
            for name, raw in values.items():
                series = KNOWN.get(name)
                if series is None:
                    raise ValueError(f"unknown series {name!r}; known: {', '.join(sorted(KNOWN))}")
                if series.kind == "counter":
                    rate = raw.get("rate") if isinstance(raw, dict) else None
                    if not isinstance(rate, int | float) or rate < 0:
                        raise ValueError(f'{name} is a counter: set {{"rate": <per second, >= 0>}}')
                    old = cur.get(name)
                    base = old.value(now) if isinstance(old, Counter) else 0.0
                    cur[name] = Counter(base=base, rate=float(rate), since=now)
                else:
                    if not isinstance(raw, int | float) or isinstance(raw, bool) or not math.isfinite(raw):
                        raise ValueError(f"{name} is a gauge: set a number")
                    cur[name] = float(raw)

    def reset(self, key: tuple[str, str]) -> None:
        with self.lock:
            self.pods.pop(key, None)

    def dump(self) -> dict:
        now = time.monotonic()
        with self.lock:
            return {
                f"{ns}/{pod}": {n: (v.value(now) if isinstance(v, Counter) else v) for n, v in vals.items()}
                for (ns, pod), vals in self.pods.items()
            }

    def gauges(self) -> dict[tuple[str, str], dict[str, float]]:
        """Every pod's gauge values (what fake_dcgm serves)."""
        with self.lock:
            return {
                k: {n: v for n, v in vals.items() if not isinstance(v, Counter)}
                for k, vals in self.pods.items()
            }

    def exposition(self, family: Family, key: tuple[str, str]) -> str:
        now = time.monotonic()
        with self.lock:
            vals = dict(self.pods.get(key, {}))
        lines = []
        for s in family.series:
            raw = vals.get(s.name, 0.0)
            value = raw.value(now) if isinstance(raw, Counter) else raw
            labels = ",".join(f'{k}="{v}"' for k, v in s.labels)
            lines += [
                f"# HELP {s.name} {s.help}",
                f"# TYPE {s.name} {s.kind}",
                f"{s.name}{{{labels}}} {value}",
            ]
        return "\n".join(lines) + "\n"


STORE = Store()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: object) -> None:  # quiet: Prometheus scrapes every second
        pass

    def _send(self, code: int, body: str, ctype: str = "application/json") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _pod_key(self) -> tuple[str, str] | None:
        parts = urllib.parse.urlsplit(self.path).path.strip("/").split("/")
        if len(parts) == 4 and parts[:2] == ["v1", "pods"] and all(parts[2:]):
            return parts[2], parts[3]
        return None

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/healthz":
            self._send(200, "ok\n", "text/plain")
        elif url.path == "/v1/pods":
            self._send(200, json.dumps(STORE.dump(), sort_keys=True))
        elif url.path == "/sd/pods":
            if PODS is None:
                self._send(404, json.dumps({"error": "started without --kubeconfig: no pod discovery"}))
                return
            groups = [g for pod in PODS.list() for g in pod_targets(pod)]
            self._send(200, json.dumps(groups))
        elif url.path == "/pods/metrics":
            q = urllib.parse.parse_qs(url.query)
            ns, pod = (q.get("namespace") or [""])[0], (q.get("pod") or [""])[0]
            if not ns or not pod:
                self._send(400, "namespace and pod parameters are required\n", "text/plain")
                return
            text = STORE.exposition(VLLM, (ns, pod)) + fake_dcgm.own_metrics(
                ns, pod, STORE.gauges().get((ns, pod))
            )
            self._send(200, text, "text/plain; version=0.0.4")
        elif url.path == fake_dcgm.PATH:
            pods = GPU_PODS.list() if GPU_PODS is not None else []
            self._send(200, fake_dcgm.exposition(pods, STORE.gauges()), "text/plain; version=0.0.4")
        elif url.path == fake_dcgm.SD_PATH:
            self._send(200, json.dumps(fake_dcgm.sd_targets(LISTEN)))
        else:
            self._send(404, json.dumps({"error": f"no such path {url.path}"}))

    def do_PUT(self) -> None:
        key = self._pod_key()
        if key is None:
            self._send(404, json.dumps({"error": "PUT /v1/pods/NAMESPACE/POD"}))
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            values = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(values, dict):
                raise ValueError("the body is a JSON object of series -> value")
            STORE.set(key, values)
        except ValueError as e:  # json.JSONDecodeError is a ValueError
            self._send(400, json.dumps({"error": str(e)}))
            return
        self._send(200, json.dumps(STORE.dump().get(f"{key[0]}/{key[1]}", {})))

    def do_DELETE(self) -> None:
        key = self._pod_key()
        if key is None:
            self._send(404, json.dumps({"error": "DELETE /v1/pods/NAMESPACE/POD"}))
            return
        STORE.reset(key)
        self._send(200, "{}")


# --------------------------------------------------------------------------- pod discovery (--kubeconfig)
SD_SELECTOR = "runwhere.ai/serving-tier"
PODS = None  # the pod informer, when --kubeconfig is given
GPU_PODS = None  # every pod (fake_dcgm serves the GPUs of those bound to a node), when --kubeconfig is given
LISTEN = ""  # --listen: the address fake_dcgm's target names


def _sanitize(name: str) -> str:
    """Prometheus' sanitizing of Kubernetes label and annotation keys (strutil.SanitizeLabelName)."""
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in name)


def pod_targets(pod: dict) -> list[dict]:
    """The target groups Prometheus' pod role makes of one pod: none without an IP; one target per declared
    container port (a container without ports: one target at the pod IP)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    ip = status.get("podIP")
    if not ip:
        return []
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), {})
    common = {
        "__meta_kubernetes_namespace": meta.get("namespace", ""),
        "__meta_kubernetes_pod_name": meta.get("name", ""),
        "__meta_kubernetes_pod_ip": ip,
        "__meta_kubernetes_pod_uid": meta.get("uid", ""),
        "__meta_kubernetes_pod_node_name": spec.get("nodeName", ""),
        "__meta_kubernetes_pod_host_ip": status.get("hostIP", ""),
        "__meta_kubernetes_pod_phase": status.get("phase", ""),
        "__meta_kubernetes_pod_ready": "true" if ready else "false",
        "__meta_kubernetes_pod_controller_kind": owner.get("kind", ""),
        "__meta_kubernetes_pod_controller_name": owner.get("name", ""),
    }
    for k, v in (meta.get("labels") or {}).items():
        common[f"__meta_kubernetes_pod_label_{_sanitize(k)}"] = v
        common[f"__meta_kubernetes_pod_labelpresent_{_sanitize(k)}"] = "true"
    for k, v in (meta.get("annotations") or {}).items():
        common[f"__meta_kubernetes_pod_annotation_{_sanitize(k)}"] = v
        common[f"__meta_kubernetes_pod_annotationpresent_{_sanitize(k)}"] = "true"
    out = []
    for c in spec.get("containers") or []:
        base = {
            **common,
            "__meta_kubernetes_pod_container_name": c.get("name", ""),
            "__meta_kubernetes_pod_container_image": c.get("image", ""),
            "__meta_kubernetes_pod_container_init": "false",
        }
        ports = c.get("ports") or []
        if not ports:
            out.append({"targets": [ip], "labels": base})
        for p in ports:
            labels = {
                **base,
                "__meta_kubernetes_pod_container_port_name": p.get("name", ""),
                "__meta_kubernetes_pod_container_port_number": str(p.get("containerPort", "")),
                "__meta_kubernetes_pod_container_port_protocol": p.get("protocol", "TCP"),
            }
            out.append({"targets": [f"{ip}:{p.get('containerPort')}"], "labels": labels})
    return out


def _watch_pods(kubeconfig: str) -> None:
    global PODS, GPU_PODS
    # Only with --kubeconfig: the venv's gpuctl (hack/ is not a package the layers contract checks).
    from gpuctl.cluster import Cluster, path
    from gpuctl.cluster.informer import Informer

    cluster = Cluster.connect(kubeconfig=kubeconfig)
    PODS = Informer(cluster, "Pod", path("Pod"), label_selector=SD_SELECTOR, transform=lambda pod: pod)
    PODS.start()
    GPU_PODS = Informer(cluster, "Pod", path("Pod"), transform=lambda pod: pod)
    GPU_PODS.start()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", required=True, help="HOST:PORT")
    ap.add_argument("--kubeconfig", help="serve /sd/pods from this cluster's pods")
    args = ap.parse_args()
    global LISTEN
    LISTEN = args.listen
    if args.kubeconfig:
        _watch_pods(args.kubeconfig)
    host, _, port = args.listen.rpartition(":")
    server = ThreadingHTTPServer((host, int(port)), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
