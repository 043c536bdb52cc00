"""The webhook's own metrics: per-request counts and durations, and the cache's state.

gpuctl_webhook_requests_total{kind,operation,decision,rule,dry_run}, gpuctl_webhook_duration_seconds{kind,
operation}, gpuctl_webhook_cache_synced, gpuctl_webhook_cache_objects{resource},
gpuctl_webhook_cache_generation (docs/admission.md, "Metrics").
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from admission.state import ClusterState

__all__ = ["DURATION_BUCKETS", "Metrics", "RequestStats"]

DURATION_BUCKETS: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0)


class RequestStats:
    """The per-request series (gpuctl_webhook_requests_total, gpuctl_webhook_duration_seconds) as plain
    ints and floats, turned into metric families only when /metrics is scraped.

    prometheus_client's Counter.inc and Histogram.observe take a lock and walk label children on every
    call: about 3 us of each request, more than the response body's encoding. Requests are counted on the
    server's one event-loop thread and scraped on it too; the GIL keeps each update whole anyway.
    """

    def __init__(self) -> None:
        self.counts: dict[tuple[str, ...], int] = {}
        # (kind, operation) -> per-bucket (non-cumulative) counts, the last one +Inf; and the sums.
        self.buckets: dict[tuple[str, str], list[int]] = {}
        self.sums: dict[tuple[str, str], float] = {}
        self.created = time.time()

    def count(self, labels: tuple[str, ...]) -> None:
        counts = self.counts
        counts[labels] = counts.get(labels, 0) + 1

    def observe(self, kind: str, op: str, seconds: float) -> None:
        key = (kind, op)
        b = self.buckets.get(key)
        if b is None:
            b = self.buckets[key] = [0] * (len(DURATION_BUCKETS) + 1)
            self.sums[key] = 0.0
        b[bisect.bisect_left(DURATION_BUCKETS, seconds)] += 1
        self.sums[key] += seconds

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "gpuctl_webhook_requests",
            "Admission requests by outcome; rule is the first rule a denied or warned request broke.",
            labels=("kind", "operation", "decision", "rule", "dry_run"),
        )
        for labels, n in list(self.counts.items()):
            requests.add_metric(labels, n, created=self.created)
        yield requests
        duration = HistogramMetricFamily(
            "gpuctl_webhook_duration_seconds",
            "Time from a complete request body to the response body, per request.",
            labels=("kind", "operation"),
        )
        les = [*(repr(float(le)) for le in DURATION_BUCKETS), "+Inf"]
        for key, counts in list(self.buckets.items()):
            cumulative = list(itertools.accumulate(counts))
            duration.add_metric(key, list(zip(les, cumulative, strict=True)), self.sums[key])
        yield duration


class Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.stats = RequestStats()
        registry.register(self.stats)  # type: ignore[arg-type]  # a Collector by its collect()
        self.synced = Gauge(
            "gpuctl_webhook_cache_synced", "1 once every watch has listed.", registry=registry
        )
        self.objects = Gauge(
            "gpuctl_webhook_cache_objects",
            "Objects in the cached snapshot.",
            ("resource",),
            registry=registry,
        )
        self.generation = Gauge("gpuctl_webhook_cache_generation", "Snapshots published.", registry=registry)

    def count(self, *labels: str) -> None:
        self.stats.count(labels)

    def observe(self, kind: str, op: str, seconds: float) -> None:
        self.stats.observe(kind, op, seconds)

    def observe_state(self, state: ClusterState) -> None:
        self.synced.set(1 if state.synced else 0)
        self.generation.set(state.generation)
        self.objects.labels("pools").set(len(state.pools))
        self.objects.labels("nodes").set(len(state.nodes))
        self.objects.labels("localqueues").set(sum(len(q) for q in state.local_queues.values()))
        self.objects.labels("clusterqueues").set(len(state.cluster_queues))
        self.objects.labels("namespaces").set(len(state.namespaces))
