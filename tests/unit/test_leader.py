"""LeaderElector's algorithm against an in-memory Lease store that behaves like the API server on the
points that matter (404, 409 on create of an existing object, 409 on a PUT with a stale resourceVersion),
with fake clocks. The real API server: tests/integration/test_serve_replicas.py."""

from __future__ import annotations

import copy
import threading
import time

import pytest

from gpuctl.cluster import ApiError
from gpuctl.server import leader
from gpuctl.server.leader import LeaderElector, lease_path


class Store:
    def __init__(self):
        self.obj: dict | None = None
        self.rv = 0
        self.fail = False

    def get(self, p: str) -> dict:
        if self.fail:
            raise ConnectionError("api server down")
        if self.obj is None:
            raise ApiError(404, "NotFound", "not found")
        return copy.deepcopy(self.obj)

    def request(self, method: str, p: str, body: dict) -> dict:
        if self.fail:
            raise ConnectionError("api server down")
        if method == "POST":
            if self.obj is not None:
                raise ApiError(409, "AlreadyExists", "exists")
        elif body["metadata"].get("resourceVersion") != str(self.rv):
            raise ApiError(409, "Conflict", "stale")
        self.rv += 1
        self.obj = copy.deepcopy(body)
        self.obj["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(self.obj)


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(store: Store, clock: Clock, ident: str) -> LeaderElector:
    return LeaderElector(store, namespace="ns", identity=ident, monotonic=clock, wall=clock)


def following(s: Store, c: Clock, leader: LeaderElector, *standbys: LeaderElector) -> None:
    """`leader` leads and every standby has seen it renew once (a running standby's state)."""
    assert leader.try_acquire_or_renew()
    for b in standbys:
        assert not b.try_acquire_or_renew()
    c.t += 2
    assert leader.try_acquire_or_renew()
    for b in standbys:
        assert not b.try_acquire_or_renew()


def test_first_replica_creates_the_lease_and_leads_the_other_follows():
    s, c = Store(), Clock()
    a, b = elector(s, c, "a"), elector(s, c, "b")
    assert a.try_acquire_or_renew() and a.is_leader()
    assert not b.try_acquire_or_renew() and not b.is_leader()
    assert s.obj["spec"]["holderIdentity"] == "a" and b.holder == "a"
    assert (
        lease_path("ns", "gpuctl-serve") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/gpuctl-serve"
    )


def test_takeover_only_after_the_record_stood_still_for_a_lease_duration_on_the_followers_clock():
    s, c = Store(), Clock()
    a, b = elector(s, c, "a"), elector(s, c, "b")
    following(s, c, a, b)
    c.t += 14.9
    assert not b.try_acquire_or_renew()
    # a stopped renewing 10 s ago: it no longer acts as leader, before b may take over.
    assert not a.is_leader()
    c.t += 0.2
    assert b.try_acquire_or_renew() and b.is_leader()
    assert s.obj["spec"]["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew() and not a.is_leader()


def test_a_crashed_leaders_restarted_container_yields_to_the_standby_that_followed():
    """The real node's failover (tests/integration/test_real_node.py): the leader's container is killed
    and the kubelet restarts it in the same pod within seconds, a new process with a new identity. It
    cannot know how long ago the record it first reads was renewed, so it counts it a retry period
    later than its read; the standby, which saw the last renewal within a retry period, leads first.
    Before, the restarted container won whenever it read the record sooner after the renewal than the
    standby's poll had (here 1.0 s against 1.5 s): it took over at t0+17, the standby would at t0+17.5."""
    s, c = Store(), Clock()
    a, b = elector(s, c, "pod-a_1"), elector(s, c, "pod-b_1")
    following(s, c, a, b)
    c.t += 0.5
    assert a.try_acquire_or_renew()
    t0 = c.t  # a's last renewal; then a is killed
    polls = sorted(
        [(t0 + 1.5 + 2 * n, b) for n in range(12)]  # the standby polls every retry period
        + [(t0 + 1.0 + 2 * n, None) for n in range(12)]  # the restarted container, from 1 s on
    )
    restarted = elector(s, c, "pod-a_2")
    leader = None
    for t, who in polls:
        c.t = t
        e = who or restarted
        if e.try_acquire_or_renew():
            leader = (e.identity, t - t0)
            break
    assert leader == ("pod-b_1", 17.5)
    c.t += 2
    assert not restarted.try_acquire_or_renew() and restarted.role() == "standby"


def test_a_replica_alone_takes_over_a_dead_holders_lease_a_retry_period_after_a_lease_duration():
    s, c = Store(), Clock()
    a = elector(s, c, "a")
    a.try_acquire_or_renew()  # then a dies
    alone = elector(s, c, "b")
    assert not alone.try_acquire_or_renew()
    c.t += 15 + 2 - 0.1
    assert not alone.try_acquire_or_renew()
    c.t += 0.2
    assert alone.try_acquire_or_renew() and alone.is_leader()


def test_renewals_keep_the_follower_out_whatever_the_remote_timestamps_say():
    s, c = Store(), Clock()
    a, b = elector(s, c, "a"), elector(s, c, "b")
    a.try_acquire_or_renew()
    for _ in range(20):
        b.try_acquire_or_renew()
        c.t += 5
        assert a.try_acquire_or_renew()
    assert not b.is_leader() and a.is_leader()


def test_two_followers_racing_for_an_expired_lease_one_wins():
    s, c = Store(), Clock()
    a, b, d = elector(s, c, "a"), elector(s, c, "b"), elector(s, c, "d")
    following(s, c, a, b, d)
    c.t += 16
    stale = s.get("x")
    assert b.try_acquire_or_renew()
    # d read the same expired record before b wrote: its PUT carries the old resourceVersion.
    s_get = s.get
    s.get = lambda p: copy.deepcopy(stale)
    try:
        assert not d.try_acquire_or_renew()
    finally:
        s.get = s_get
    assert s.obj["spec"]["holderIdentity"] == "b" and not d.is_leader()


def test_a_leader_that_cannot_reach_the_api_server_steps_down_by_the_renew_deadline():
    s, c = Store(), Clock()
    a = elector(s, c, "a")
    a.try_acquire_or_renew()
    s.fail = True
    c.t += 5
    with pytest.raises(ConnectionError):
        a.try_acquire_or_renew()
    assert a.is_leader()
    c.t += 5
    assert not a.is_leader()


def test_release_hands_over_at_once_and_the_loop_calls_back():
    s, c = Store(), Clock()
    started, stopped = threading.Event(), threading.Event()
    a = LeaderElector(
        s,
        namespace="ns",
        identity="a",
        retry_period=0.01,
        renew_deadline=0.05,
        lease_duration=0.1,
        on_started=started.set,
        on_stopped=stopped.set,
    )
    stop = threading.Event()
    a.start(stop)
    assert started.wait(5)
    stop.set()
    a.join(5)
    assert stopped.is_set()
    assert s.obj["spec"]["holderIdentity"] == "" and s.obj["spec"]["leaseDurationSeconds"] == 1
    b = elector(s, c, "b")
    assert b.try_acquire_or_renew()


def test_durations_must_nest():
    with pytest.raises(ValueError):
        LeaderElector(Store(), namespace="ns", lease_duration=5, renew_deadline=10)


# ------------------------------------------------------------- roles, readiness, the default namespace
def test_roles_leader_standby_and_none_follow_the_lease_record():
    s, c = Store(), Clock()
    a, b = elector(s, c, "a"), elector(s, c, "b")
    assert a.role() == "none" and not a.leader_known()  # no round yet
    following(s, c, a, b)
    assert a.role() == "leader" and b.role() == "standby"
    assert b.describe() == "b is standby; a leads (lease ns/gpuctl-serve)"
    # The leader dies: the follower keeps following for a lease duration of an unchanged record...
    c.t += 14
    b.try_acquire_or_renew()
    assert b.role() == "standby"
    # ...then has no leader until its own takeover succeeds.
    c.t += 1.5
    assert b.role() == "none" and "has not been renewed" in b.describe()
    assert b.try_acquire_or_renew() and b.role() == "leader"


def test_a_follower_that_cannot_read_the_lease_stops_following():
    s, c = Store(), Clock()
    a, b = elector(s, c, "a"), elector(s, c, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    s.fail = True
    c.t += 5
    with pytest.raises(ConnectionError):
        b.try_acquire_or_renew()
    assert b.role() == "standby"  # read 5 s ago: still a live leader
    c.t += 11
    assert b.role() == "none"  # nothing read for longer than a lease duration


class NoNamespace(Store):
    """An API server where the Lease's namespace does not exist, or the caller may not touch Leases."""

    def __init__(self, status: int, message: str):
        super().__init__()
        self.status, self.message = status, message

    def get(self, p: str) -> dict:
        raise ApiError(self.status, "X", self.message)

    def request(self, method: str, p: str, body: dict) -> dict:
        raise ApiError(self.status, "X", self.message)


@pytest.mark.parametrize(
    ("status", "message", "fix"),
    [
        (404, 'namespaces "gpuctl-system" not found', "kubectl create namespace ns"),
        (403, 'leases.coordination.k8s.io is forbidden: User "x"', "Role gpuctl-serve-lease"),
    ],
)
def test_a_lease_that_can_never_be_acquired_is_no_leader_and_the_message_names_the_fix(status, message, fix):
    """gpuctl serve out of cluster used to wait forever for a Lease in a namespace that did not exist,
    saying ready: now it reports 'no leader' with the fix (main.readiness answers 503 with it)."""
    a = LeaderElector(NoNamespace(status, message), namespace="ns", identity="a", retry_period=0.01,
                      renew_deadline=0.05, lease_duration=0.1)  # fmt: skip
    stop = threading.Event()
    a.start(stop)
    deadline = time.monotonic() + 5
    while not a.last_error and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    a.join(5)
    assert a.role() == "none"
    assert fix in a.last_error and "--lease-namespace" in a.last_error
    assert a.describe().startswith("a has no leader to follow (lease ns/gpuctl-serve): ")


def test_default_lease_namespace_is_kubectls(monkeypatch, tmp_path):
    """$POD_NAMESPACE, the in-cluster namespace, the kubeconfig context's, else `default` (which exists)."""
    monkeypatch.setattr(leader, "IN_CLUSTER_NAMESPACE", tmp_path / "none")
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert leader.default_namespace() == "default"
    assert leader.default_namespace("team-a") == "team-a"
    (tmp_path / "ns").write_text("gpuctl-system\n")
    monkeypatch.setattr(leader, "IN_CLUSTER_NAMESPACE", tmp_path / "ns")
    assert leader.default_namespace("team-a") == "gpuctl-system"
    monkeypatch.setenv("POD_NAMESPACE", "platform")
    assert leader.default_namespace("team-a") == "platform"
