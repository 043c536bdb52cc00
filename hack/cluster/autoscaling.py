"""Render what the local cluster's autoscaling stack needs (hack/cluster/autoscaling.sh runs it).

    autoscaling.py prometheus API_URL PKI_DIR FAKE_ADDR INTERVAL [yes|no]   prometheus.yml
    autoscaling.py apiservice HOST_IP PORT CA_B64                     prometheus-adapter's APIService

prometheus.yml is manifests/prometheus/serving-scrape.yaml and dcgm-scrape.yaml (issue 40: dcgm-exporter's
job, its one target the fake exporter's DCGM family over HTTP service discovery, which gives it the meta
labels of an exporter pod in the GPU Operator's namespace) as shipped for real clusters, with two local
changes and nothing else: the pods are discovered by Kubernetes service discovery given the API server's
address and the admin client certificate (a Prometheus inside a cluster uses its ServiceAccount) or, for
Debian's `prometheus`, which is built without it, by HTTP service discovery from fake_exporter.py, which
serves the pod role's targets and meta labels; and relabel rules are appended that send the scrape of a
pod on a KWOK fake node (a pod IP of KWOK's --cidr, FAKE_POD_IP) to hack/cluster/fake_exporter.py with the
pod's namespace and name as URL parameters. The target's labels (namespace, pod, gpuctl_job, gpuctl_tier,
instance) are those of the real scrape.

The APIService registers external.metrics.k8s.io with the aggregation layer, served by prometheus-adapter
on this machine's address: the API server proxies to a Service's endpoint, which may not be a loopback
address (hence HOST_IP, as for Kueue's visibility API in up.sh), verified with the testbed CA.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRAPE = ROOT / "manifests/prometheus/serving-scrape.yaml"
# dcgm-exporter's job (issue 40), as shipped; locally its one target is fake_exporter.py's DCGM family.
DCGM_SCRAPE = ROOT / "manifests/prometheus/dcgm-scrape.yaml"
# The pod IPs KWOK gives pods of fake nodes (up.sh: kwok --cidr=10.244.0.0/16).
FAKE_POD_IP = r"10\.244\.\d+\.\d+"
ADAPTER_NS, ADAPTER_NAME = "custom-metrics", "prometheus-adapter"
TESTBED_LABEL = {"gpuctl.runwhere.ai/testbed": "true"}


def fake_node_rules(fake_addr: str) -> list[dict]:
    """Relabel rules that point the scrape of a fake-node pod at the fake exporter."""
    ip = "__meta_kubernetes_pod_ip"
    return [
        {
            "source_labels": [ip, "__meta_kubernetes_namespace"],
            "regex": f"{FAKE_POD_IP};(.+)",
            "target_label": "__param_namespace",
        },
        {
            "source_labels": [ip, "__meta_kubernetes_pod_name"],
            "regex": f"{FAKE_POD_IP};(.+)",
            "target_label": "__param_pod",
        },
        {
            "source_labels": [ip],
            "regex": FAKE_POD_IP,
            "target_label": "__metrics_path__",
            "replacement": "/pods/metrics",
        },
        {
            "source_labels": [ip],
            "regex": FAKE_POD_IP,
            "target_label": "__address__",
            "replacement": fake_addr,
        },
    ]


def prometheus(api_url: str, pki: str, fake_addr: str, interval: str, kubernetes_sd: str = "no") -> dict:
    """kubernetes_sd "yes": a Prometheus built with Kubernetes service discovery reads the pods from the API
    server itself; "no" (Debian's build has none): the same pod targets and meta labels come over HTTP
    service discovery from hack/cluster/fake_exporter.py's /sd/pods."""
    jobs = yaml.safe_load(SCRAPE.read_text())["scrape_configs"]
    tls = {"ca_file": f"{pki}/ca.crt", "cert_file": f"{pki}/admin.crt", "key_file": f"{pki}/admin.key"}
    for job in jobs:
        job["scrape_interval"] = interval
        if kubernetes_sd == "yes":
            for sd in job.get("kubernetes_sd_configs", []):
                sd["api_server"] = api_url
                sd["tls_config"] = dict(tls)
        elif job.pop("kubernetes_sd_configs", None):
            job["http_sd_configs"] = [{"url": f"http://{fake_addr}/sd/pods", "refresh_interval": interval}]
        job["relabel_configs"] = [*job.get("relabel_configs", []), *fake_node_rules(fake_addr)]
    for job in yaml.safe_load(DCGM_SCRAPE.read_text())["scrape_configs"]:
        job["scrape_interval"] = interval
        job.pop("kubernetes_sd_configs", None)  # no exporter pod runs here: the fake exporter is its target
        job["http_sd_configs"] = [{"url": f"http://{fake_addr}/sd/dcgm", "refresh_interval": interval}]
        jobs.append(job)
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": jobs,
    }


def apiservice(host_ip: str, port: str, ca: str) -> list[dict]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ADAPTER_NS, "labels": dict(TESTBED_LABEL)},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": ADAPTER_NAME, "namespace": ADAPTER_NS, "labels": dict(TESTBED_LABEL)},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": int(port)}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": ADAPTER_NAME,
                "namespace": ADAPTER_NS,
                "labels": {"kubernetes.io/service-name": ADAPTER_NAME, **TESTBED_LABEL},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [host_ip], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": int(port), "protocol": "TCP"}],
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": "v1beta1.external.metrics.k8s.io", "labels": dict(TESTBED_LABEL)},
            "spec": {
                "group": "external.metrics.k8s.io",
                "version": "v1beta1",
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
                "caBundle": ca,
                "service": {"name": ADAPTER_NAME, "namespace": ADAPTER_NS, "port": 443},
            },
        },
    ]


def main(argv: list[str]) -> None:
    what, args = argv[1], argv[2:]
    if what == "prometheus":
        yaml.safe_dump(prometheus(*args), sys.stdout, sort_keys=False)
    elif what == "apiservice":
        yaml.safe_dump_all(apiservice(*args), sys.stdout, sort_keys=False)
    else:
        sys.exit(f"unknown command {what!r}: prometheus | apiservice")


if __name__ == "__main__":
    main(sys.argv)
