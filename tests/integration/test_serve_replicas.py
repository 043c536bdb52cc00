"""Two `gpuctl serve` replicas on the local cluster, as the ServiceAccount of manifests/serve/rbac.yaml.

Exactly one leads (the Lease gpuctl-system/gpuctl-serve names it); only it applies the Cohort and exports
the cluster-state series, so the two scrapes summed equal one; when the leader is killed (SIGKILL) the
other takes over within the lease duration and follows a capacity change; when the leader stops cleanly
it releases the Lease and the other takes over within a retry period. Short lease timings keep it quick.

Who leads is visible (a standby's log line, gpuctl_serve_leader, /readyz); out of cluster with default
flags the replica leads in the kubeconfig context's namespace; a Lease that can never be acquired makes
/readyz 503 with the fix; with --tls-cert/--tls-key the port is HTTPS only and a rotated certificate is
served without a restart.
"""

from __future__ import annotations

import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpuctl.cluster import Cluster, path
from gpuctl.constants import BUDGET_FLAVOR, COHORT_NAME, GPU_RESOURCE, GPU_UNITS, QUOTA_GPU, Labels
from gpuctl.domain.pools import pool_capacities
from gpuctl.server.leader import DEFAULT_LEASE_NAME, SYSTEM_NAMESPACE
from queues import desired_objects
from tests.integration.conftest import reset_gpuctl_state, wait_until
from tests.integration.metrics_stack import scrape as read_metrics
from tests.integration.serve_process import (
    drop_leader_lease,
    free_port,
    remove_serve_rbac,
    service_account_kubeconfig,
    start_serve,
)

pytestmark = pytest.mark.integration

POOL = "replica-pool"
NODES = ("gpu-node-1", "gpu-node-2")
LEASE = ["--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5"]


@dataclass
class Replica:
    name: str
    port: int
    log: Path
    proc: subprocess.Popen | None = None

    def scrape(self) -> dict[str, dict[tuple, float]]:
        return read_metrics(f"http://127.0.0.1:{self.port}/metrics")

    def leading(self) -> bool | None:
        try:
            return self.scrape()["gpuctl_serve_leader"][()] == 1
        except (OSError, KeyError):
            return None


@dataclass
class Pair:
    kube: Cluster
    kubeconfig: Path
    replicas: list[Replica] = field(default_factory=list)

    def start(self, r: Replica) -> None:
        r.proc = start_serve(self.kubeconfig, r.log, "--resync", "5", *LEASE, port=r.port, append=True).proc

    def leader(self) -> Replica | None:
        states = [(r, r.leading()) for r in self.replicas if r.proc and r.proc.poll() is None]
        leaders = [r for r, s in states if s]
        assert len(leaders) <= 1, f"two leaders: {[r.name for r in leaders]}"
        return leaders[0] if leaders and all(s is not None for _, s in states) else None

    def cohort_gpus(self) -> int | None:
        """The GPUs the root Cohort lends: since issue 15 the budget flavor's quota-gpu, the pools' GPUs no
        team quota covers (this test has no teams, so all of the pool's)."""
        cohort = self.kube.get_or_none(path("Cohort", COHORT_NAME)) or {}
        for group in (cohort.get("spec") or {}).get("resourceGroups") or []:
            for fl in group.get("flavors") or []:
                if fl["name"] == BUDGET_FLAVOR:
                    units = next(int(r["nominalQuota"]) for r in fl["resources"] if r["name"] == QUOTA_GPU)
                    return units // GPU_UNITS
        return None


@pytest.fixture(scope="module")
def pair(cluster: str, kube: Cluster, kubectl_bin: str, tmp_path_factory) -> Iterator[Pair]:
    tmp = tmp_path_factory.mktemp("replicas")
    reset_gpuctl_state(kube)
    kube.merge_patch(path("Node", NODES[0]), {"metadata": {"labels": {Labels.POOL: POOL}}})
    for obj in desired_objects(pool_capacities(kube.list(path("Node")), [POOL]), []):
        kube.apply(obj)
    sa = service_account_kubeconfig(kube, kubectl_bin, cluster, tmp / "sa-kubeconfig")
    drop_leader_lease(kube)
    p = Pair(kube, sa, [Replica(n, free_port(), tmp / f"{n}.log") for n in ("a", "b")])
    for r in p.replicas:
        p.start(r)
    try:
        yield p
    finally:
        for r in p.replicas:
            if r.proc and r.proc.poll() is None:
                r.proc.terminate()
                try:
                    r.proc.wait(10)
                except subprocess.TimeoutExpired:
                    r.proc.kill()
        for r in p.replicas:
            print(f"----- {r.name}\n{r.log.read_text()[-2500:]}")
        reset_gpuctl_state(kube)
        remove_serve_rbac(kubectl_bin, cluster)


def _capacity(m: dict) -> float:
    return sum(v for k, v in m.get("gpuctl_pool_capacity_gpus", {}).items() if ("pool", POOL) in k)


def test_one_leader_and_the_two_scrapes_summed_count_each_pool_once(pair: Pair) -> None:
    leader = wait_until(pair.leader, 60, 0.3, what="one replica leading")
    follower = next(r for r in pair.replicas if r is not leader)
    lease = pair.kube.get(path("Lease", DEFAULT_LEASE_NAME, SYSTEM_NAMESPACE))
    assert lease["spec"]["holderIdentity"]
    gpus = int(pair.kube.get(path("Node", NODES[0]))["status"]["allocatable"][GPU_RESOURCE])
    wait_until(lambda: _capacity(leader.scrape()) == gpus, 30, 0.5, what="leader exports the pool")
    lm, fm = leader.scrape(), follower.scrape()
    assert _capacity(lm) + _capacity(fm) == gpus
    assert not [n for n in fm if n.startswith("gpuctl_pool_")], "the follower exports pool series"
    assert fm["gpuctl_reconcile_runs_total"][(("result", "applied"),)] == 0
    wait_until(
        lambda: follower.scrape()["gpuctl_reconcile_runs_total"][(("result", "standby"),)] >= 1,
        15,
        0.5,
        what="the follower's reconciler standing by",
    )
    assert fm["gpuctl_cache_synced"][(("resource", "Node"),)] == 1  # warm, ready to take over


def test_killed_leader_is_replaced_within_the_lease_and_the_new_one_reconciles(pair: Pair) -> None:
    leader = wait_until(pair.leader, 60, 0.3, what="one replica leading")
    other = next(r for r in pair.replicas if r is not leader)
    assert leader.proc is not None
    t0 = time.monotonic()
    leader.proc.send_signal(signal.SIGKILL)
    leader.proc.wait(10)
    wait_until(lambda: other.leading(), 30, 0.2, what="the follower takes over")
    takeover = time.monotonic() - t0
    print(f"\ntakeover after SIGKILL of the leader: {takeover:.2f} s (lease 4 s)")
    assert takeover < 4 + 3  # lease duration + a few retry periods
    before = pair.cohort_gpus()
    extra = int(pair.kube.get(path("Node", NODES[1]))["status"]["allocatable"][GPU_RESOURCE])
    t1 = time.monotonic()
    pair.kube.merge_patch(path("Node", NODES[1]), {"metadata": {"labels": {Labels.POOL: POOL}}})
    wait_until(lambda: pair.cohort_gpus() == (before or 0) + extra, 30, 0.2, what="new leader reconciled")
    print(f"capacity change -> Cohort by the new leader: {time.monotonic() - t1:.2f} s")
    pair.start(leader)  # back as a follower
    wait_until(lambda: leader.leading() is False, 30, 0.3, what="restarted replica follows")


def test_clean_shutdown_hands_the_lease_over_at_once(pair: Pair) -> None:
    leader = wait_until(pair.leader, 60, 0.3, what="one replica leading")
    other = next(r for r in pair.replicas if r is not leader)
    wait_until(lambda: other.leading() is False, 30, 0.3, what="follower up")
    assert leader.proc is not None
    t0 = time.monotonic()
    leader.proc.terminate()
    leader.proc.wait(15)
    wait_until(lambda: other.leading(), 10, 0.1, what="the follower takes over")
    handover = time.monotonic() - t0
    print(f"\nhandover after SIGTERM of the leader: {handover:.2f} s")
    lease = pair.kube.get(path("Lease", DEFAULT_LEASE_NAME, SYSTEM_NAMESPACE))
    assert lease["spec"]["leaseTransitions"] >= 2
    assert handover < 3  # released: no wait for the 4 s lease to expire


# ------------------------------------------------------------------ who leads is visible; out of cluster
def _readyz(port: int, scheme: str = "http", ctx: ssl.SSLContext | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/readyz", timeout=5, context=ctx) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_a_standby_replica_says_so_in_its_log_its_metric_and_readyz(pair: Pair) -> None:
    """Both replicas are ready (a standby serves the API); the standby says who leads."""
    for r in pair.replicas:
        if r.proc is None or r.proc.poll() is not None:
            pair.start(r)  # the one the previous test stopped
    leader = wait_until(pair.leader, 60, 0.3, what="one replica leading")
    follower = next(r for r in pair.replicas if r is not leader)
    wait_until(lambda: follower.leading() is False, 30, 0.3, what="the follower up")
    holder = pair.kube.get(path("Lease", DEFAULT_LEASE_NAME, SYSTEM_NAMESPACE))["spec"]["holderIdentity"]
    status, text = _readyz(follower.port)
    assert status == 200 and f"is standby; {holder} leads (lease {SYSTEM_NAMESPACE}/gpuctl-serve)" in text
    status, text = _readyz(leader.port)
    assert status == 200 and f"{holder} leads" in text
    wait_until(
        lambda: f"{holder} leads (lease" in follower.log.read_text(), 10, 0.3, what="standby's log line"
    )
    assert follower.scrape()["gpuctl_serve_leader"][()] == 0


def test_default_flags_out_of_cluster_lead_in_the_contexts_namespace(
    cluster: str, kube: Cluster, tmp_path: Path
) -> None:
    """The bug of issue 26: with an admin kubeconfig (no namespace in its context) gpuctl serve waited
    forever for a Lease in gpuctl-system, exported no pool series and said ready. Now the Lease goes to
    the context's namespace, `default` here, like kubectl, and the replica leads."""
    r = Replica("adhoc", free_port(), tmp_path / "adhoc.log")
    lease = f"gpuctl-serve-adhoc-{r.port}"
    r.proc = start_serve(cluster, r.log, "--lease-name", lease, *LEASE, port=r.port, append=True).proc
    try:
        wait_until(lambda: r.leading(), 60, 0.3, what="the out-of-cluster replica leading")
        assert pair_lease_holder(kube, "default", lease)
        gpus = int(kube.get(path("Node", NODES[0]))["status"]["allocatable"][GPU_RESOURCE])
        wait_until(lambda: _capacity(r.scrape()) >= gpus, 30, 0.5, what="pool series exported")
        assert _readyz(r.port)[0] == 200
        assert "leads (lease default/" in r.log.read_text()
    finally:
        r.proc.terminate()
        r.proc.wait(15)
        kube.delete(path("Lease", lease, "default"))


def pair_lease_holder(kube: Cluster, ns: str, name: str) -> str:
    return (kube.get_or_none(path("Lease", name, ns)) or {}).get("spec", {}).get("holderIdentity") or ""


def test_a_lease_that_cannot_be_acquired_is_not_ready_and_says_why(cluster: str, tmp_path: Path) -> None:
    r = Replica("nowhere", free_port(), tmp_path / "nowhere.log")
    flags = ("--lease-namespace", "no-such-namespace", *LEASE)
    r.proc = start_serve(cluster, r.log, *flags, port=r.port, append=True).proc
    try:
        wait_until(lambda: r.leading() is False and _readyz(r.port)[0] == 503, 60, 0.3, what="not ready")
        _, text = _readyz(r.port)
        assert text.startswith("no leader: ") and "namespace no-such-namespace does not exist" in text
        assert "kubectl create namespace no-such-namespace" in r.log.read_text()
        assert not [n for n in r.scrape() if n.startswith("gpuctl_pool_")]
    finally:
        r.proc.terminate()
        r.proc.wait(15)


def _make_cert(d: Path, cn: str) -> tuple[Path, Path, Path]:
    """A CA and a serving certificate for 127.0.0.1 (openssl), written in place (a rotation)."""
    d.mkdir(exist_ok=True)

    def run(*a: object) -> None:
        subprocess.run(["openssl", *map(str, a)], check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run(
        "req",
        "-x509",
        *ec,
        "-days",
        "2",
        "-subj",
        f"/CN={cn}-ca",
        "-keyout",
        d / "ca.key",
        "-out",
        d / "ca.crt",
    )
    run("req", *ec, "-subj", f"/CN={cn}", "-keyout", d / "new.key", "-out", d / "tls.csr")
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", d / "tls.csr", "-CA", d / "ca.crt", "-CAkey", d / "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", d / "ext", "-out", d / "new.crt")  # fmt: skip
    # Key first, then certificate, each renamed into place (as the kubelet swaps a Secret's files).
    (d / "new.key").replace(d / "tls.key")
    (d / "new.crt").replace(d / "tls.crt")
    return d / "ca.crt", d / "tls.crt", d / "tls.key"


def test_tls_serves_https_only_and_a_rotated_certificate_without_a_restart(
    cluster: str, tmp_path: Path
) -> None:
    """--tls-cert/--tls-key: the REST API's bearer tokens and the metrics travel over HTTPS only, and a
    certificate rotated on disk (cert-manager renewing the mounted Secret) is served to new connections
    within the reload interval (30 s), no restart."""
    ca, crt, key = _make_cert(tmp_path / "tls", "first")
    r = Replica("tls", free_port(), tmp_path / "tls.log")
    flags = ("--lease-name", f"gpuctl-serve-tls-{r.port}", "--api", "--tls-cert", str(crt), "--tls-key")
    r.proc = start_serve(cluster, r.log, *flags, str(key), *LEASE, port=r.port, append=True).proc
    try:
        verify = ssl.create_default_context(cafile=str(ca))
        wait_until(lambda: _try(lambda: _readyz(r.port, "https", verify)[0] == 200), 60, 0.5, what="https up")
        with urllib.request.urlopen(f"https://127.0.0.1:{r.port}/metrics", timeout=5, context=verify) as resp:
            assert b"gpuctl_serve_leader" in resp.read()
        # The API (mounted by --api) answers 401 to a request without a token: over HTTPS.
        try:
            urllib.request.urlopen(f"https://127.0.0.1:{r.port}/api/v1/jobs", timeout=5, context=verify)
        except urllib.error.HTTPError as e:
            assert e.code == 401
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"http://127.0.0.1:{r.port}/readyz", timeout=5)
        assert "on https://127.0.0.1" in r.log.read_text()
        first = ssl.get_server_certificate(("127.0.0.1", r.port))
        ca2, _, _ = _make_cert(tmp_path / "tls", "second")
        wait_until(
            lambda: ssl.get_server_certificate(("127.0.0.1", r.port)) != first, 45, 1, what="new certificate"
        )
        assert _readyz(r.port, "https", ssl.create_default_context(cafile=str(ca2)))[0] == 200
        assert "TLS certificate reloaded" in r.log.read_text()
        assert r.proc.poll() is None
    finally:
        r.proc.terminate()
        r.proc.wait(15)


def _try(fn) -> object:
    try:
        return fn()
    except OSError:
        return None
