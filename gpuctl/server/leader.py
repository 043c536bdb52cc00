"""Leader election on a coordination.k8s.io/v1 Lease, so `gpuctl serve` can run with several replicas.

Only the leader writes (the reconciler applies the Cohort) and only the leader exports the cluster-state
metrics (gpuctl.server.metrics: pools, teams, workloads, queue wait, preemptions), so two replicas neither
fight over the Cohort nor double a `sum()` in Prometheus. Every replica keeps its caches warm, so a
follower that takes over reconciles at once.

The algorithm is client-go's (k8s.io/client-go/tools/leaderelection), on the one gpuctl transport:

- a replica holds the Lease while it renews `spec.renewTime` at least every `renew_deadline` seconds; it
  stops acting as leader as soon as a renewal is `renew_deadline` old, before anyone may take over;
- another replica takes over only after it has seen the *same* record unchanged for `lease_duration`
  seconds on its own monotonic clock (never by comparing the remote timestamp with its own clock, so clock
  skew between machines cannot cause two leaders);
- every write is a PUT carrying the resourceVersion read: of two replicas racing for an expired Lease the
  API server lets one win (409 Conflict for the other);
- on a clean shutdown the leader releases the Lease (holder emptied, duration 1 s), so the other replica
  takes over within a retry period instead of a lease duration.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuctl.cluster import ApiError

log = logging.getLogger(__name__)

LEASE_API: str = "/apis/coordination.k8s.io/v1"
DEFAULT_LEASE_NAME = "gpuctl-serve"
IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def lease_path(namespace: str, name: str | None = None) -> str:
    p = f"{LEASE_API}/namespaces/{namespace}/leases"
    return f"{p}/{name}" if name else p


# Where gpuctl's services live (manifests/serve, manifests/admission); serve's Lease Role is there.
SYSTEM_NAMESPACE = "gpuctl-system"
# Outside a cluster, with no namespace in the kubeconfig context: kubectl's default namespace.
FALLBACK_NAMESPACE = "default"


def default_namespace(context_namespace: str | None = None) -> str:
    """Where the Lease lives unless --lease-namespace says otherwise, the way kubectl picks a namespace:
    $POD_NAMESPACE (the Deployment's downward API), the in-cluster ServiceAccount's namespace, the
    kubeconfig context's namespace (`context_namespace`), else `default`, which every cluster has.

    Why not gpuctl-system out of cluster: that namespace exists only where gpuctl's manifests were
    applied, and a Lease in a missing namespace can never be acquired (serve would wait forever,
    exporting no pool series). To join the replicas of an installed gpuctl from outside, pass
    --lease-namespace gpuctl-system."""
    ns = os.environ.get("POD_NAMESPACE")
    if ns:
        return ns
    try:
        ns = IN_CLUSTER_NAMESPACE.read_text().strip()
    except OSError:
        ns = ""
    return ns or context_namespace or FALLBACK_NAMESPACE


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def micro_time(t: float) -> str:
    """A Kubernetes MicroTime."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        cluster: Any,
        *,
        namespace: str,
        name: str = DEFAULT_LEASE_NAME,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started: Callable[[], None] | None = None,
        on_stopped: Callable[[], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ):
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.monotonic = monotonic
        self.wall = wall
        self._lock = threading.Lock()
        self._renewed_at: float | None = None  # monotonic time of our last successful acquire/renew
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self.holder = ""  # who holds the Lease as last seen
        self._observed_duration = lease_duration  # the holder's leaseDurationSeconds as last seen
        self._read_at: float | None = None  # monotonic time of the last successful read of the Lease
        self.last_error = ""  # why the last round failed ("" after a good round), with the fix
        self.transitions = 0  # times this replica became leader
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ state
    def is_leader(self) -> bool:
        with self._lock:
            return self._renewed_at is not None and self.monotonic() - self._renewed_at < self.renew_deadline

    def leader_known(self) -> bool:
        """This replica leads, or it follows a live leader: another holder whose Lease it read within a
        lease duration and whose record has not stood still for a lease duration (client-go's takeover
        condition). False while the Lease cannot be read or written (a missing namespace, no RBAC),
        and after the leader died until this replica takes over."""
        if self.is_leader():
            return True
        with self._lock:
            now = self.monotonic()
            return (
                bool(self.holder)
                and self.holder != self.identity
                and self._read_at is not None
                and now - self._read_at < self.lease_duration
                and now < self._observed_at + self._observed_duration
            )

    def role(self) -> str:
        """leader | standby (follows a live leader) | none (neither: see last_error)."""
        if self.is_leader():
            return "leader"
        return "standby" if self.leader_known() else "none"

    def describe(self) -> str:
        """One line: this replica's role in the election, who leads, why there is no leader."""
        where = f"lease {self.namespace}/{self.name}"
        role = self.role()
        if role == "leader":
            return f"{self.identity} leads ({where})"
        if role == "standby":
            return f"{self.identity} is standby; {self.holder} leads ({where})"
        why = self.last_error or (
            f"the Lease of {self.holder} has not been renewed; taking over"
            if self.holder
            else "no leader elected yet"
        )
        return f"{self.identity} has no leader to follow ({where}): {why}"

    # ------------------------------------------------------------------ loop
    def start(self, stop: threading.Event) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, args=(stop,), name="leader-election", daemon=True)
        self._thread.start()
        return self._thread

    def join(self, timeout: float | None = None) -> None:
        """Wait for the loop to end (after `stop` is set it releases the Lease first)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self, stop: threading.Event) -> None:
        was_leader = False
        seen: tuple[str, str] | None = None  # (role, holder) last logged
        while not stop.is_set():
            try:
                self.try_acquire_or_renew()
                self.last_error = ""
            except Exception as e:  # the API server may be down: keep trying, lose leadership by deadline
                error = self._explain(e)
                if error != self.last_error:
                    log.warning("%s", error)
                self.last_error = error
            leader = self.is_leader()
            if leader != was_leader:
                was_leader = leader
                self._notify(leader)
            # Who leads, at start and whenever it changes: a standby replica is visible in its log.
            now = (self.role(), self.holder)
            if now != seen and not (now[0] == "none" and self.last_error):
                seen = now
                log.info("%s", self.describe())
            stop.wait(self.retry_period if not leader else min(self.retry_period, self.renew_deadline / 3))
        if was_leader:
            self._notify(False)
            self.release()

    def _explain(self, e: Exception) -> str:
        """The failure of a round as a message that names the fix."""
        where = f"lease {self.namespace}/{self.name}"
        if isinstance(e, ApiError) and e.status == 404:
            return (
                f"{where}: namespace {self.namespace} does not exist ({e.message}): create it "
                f"(kubectl create namespace {self.namespace}) or pass --lease-namespace"
            )
        if isinstance(e, ApiError) and e.status == 403:
            return (
                f"{where}: forbidden ({e.message}): this identity needs get and update on the Lease "
                f"{self.name} and create on leases in {self.namespace} (manifests/serve/rbac.yaml, Role "
                "gpuctl-serve-lease, names the Lease gpuctl-serve), or pass --lease-namespace/--lease-name"
            )
        return f"{where}: {type(e).__name__}: {e}"

    def _notify(self, leader: bool) -> None:
        log.info(
            "%s %s lease %s/%s", self.identity, "acquired" if leader else "lost", self.namespace, self.name
        )
        if leader:
            self.transitions += 1
        cb = self.on_started if leader else self.on_stopped
        if cb is not None:
            try:
                cb()
            except Exception:
                log.exception("leader callback failed")

    # ------------------------------------------------------------------ one round
    def try_acquire_or_renew(self) -> bool:
        """One round of client-go's tryAcquireOrRenew; True when this replica holds the Lease after it."""
        now_mono, now = self.monotonic(), self.wall()
        try:
            lease = self.cluster.get(lease_path(self.namespace, self.name))
        except ApiError as e:
            if e.status != 404:
                raise
            return self._create(now_mono, now)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime") or "")
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        with self._lock:
            if record != self._observed:
                # A replica's first read cannot tell how long ago that record was renewed; a standby that
                # has been following saw the renewal within a retry period of it. So a newcomer counts
                # the record it first reads as renewed a retry period later: after a crash the standby
                # takes over first, not the crashed leader's own container, which the kubelet restarts
                # in the same pod within seconds under a new identity (it used to win that race about
                # as often as the standby). Alone, a restarted replica takes over a retry period later.
                first = self._observed is None
                self._observed = record
                self._observed_at = now_mono + (self.retry_period if first else 0.0)
            self._observed_duration = duration
            self._read_at = now_mono
            self.holder = holder
        mine = holder == self.identity
        if holder and not mine and now_mono < self._observed_at + duration:
            return False  # someone else holds it and it has not expired in our eyes
        new_spec = dict(spec)
        new_spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=int(self.lease_duration),
            renewTime=micro_time(now),
        )
        if not mine:
            new_spec["acquireTime"] = micro_time(now)
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        body = {**lease, "spec": new_spec}
        try:
            self.cluster.request("PUT", lease_path(self.namespace, self.name), body=body)
        except ApiError as e:
            if e.status == 409:  # someone else wrote first (renewed, or won the race to take over)
                return False
            raise
        with self._lock:
            self._renewed_at = now_mono
            self.holder = self.identity
            self._observed = (self.identity, new_spec["renewTime"])
            self._observed_at = now_mono
        return True

    def _create(self, now_mono: float, now: float) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_duration),
                "acquireTime": micro_time(now),
                "renewTime": micro_time(now),
                "leaseTransitions": 0,
            },
        }
        try:
            self.cluster.request("POST", lease_path(self.namespace), body=body)
        except ApiError as e:
            if e.status == 409:  # another replica created it first
                return False
            raise
        with self._lock:
            self._renewed_at = now_mono
            self._read_at = now_mono
            self.holder = self.identity
        return True

    def release(self) -> None:
        """Give the Lease up (holder emptied, 1 s duration) so another replica takes over at once."""
        with self._lock:
            self._renewed_at = None
        try:
            lease = self.cluster.get(lease_path(self.namespace, self.name))
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            spec = {
                **spec,
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": micro_time(self.wall()),
            }
            self.cluster.request("PUT", lease_path(self.namespace, self.name), body={**lease, "spec": spec})
            log.info("%s released lease %s/%s", self.identity, self.namespace, self.name)
        except Exception as e:
            log.warning("releasing lease %s/%s failed: %s", self.namespace, self.name, e)
