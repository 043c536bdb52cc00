"""`gpuctl logs` of a multi-node job (issue 31, docs/distributed.md): rank 0 by default, `--rank N`,
`--all-pods` prefixed by rank. The rank is the pod's completion index (gpuctl.domain.gang.pod_rank)."""

from __future__ import annotations

import argparse

import pytest

from gpuctl.cli.errors import CommandError
from gpuctl.cli.logs import _prefix, log_targets

INDEX = "batch.kubernetes.io/job-completion-index"


def _job(nodes: int) -> dict:
    spec = {"completionMode": "Indexed", "parallelism": nodes, "completions": nodes} if nodes > 1 else {}
    return {"metadata": {"name": "pair"}, "spec": spec}


def _pod(name: str, rank: int | None, created: str = "2026-01-01T00:00:00Z", **meta) -> dict:
    ann = {INDEX: str(rank)} if rank is not None else {}
    return {
        "metadata": {"name": name, "annotations": ann, "creationTimestamp": created, **meta},
        "spec": {"containers": [{"name": "main"}]},
    }


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"prefix": False, "all_pods": False, "container": None, **kw})


def test_a_gang_shows_the_first_pod_given_and_rank_n_picks_its_live_pod() -> None:
    pods = [_pod("pair-0-a", 0), _pod("pair-1-b", 1)]
    assert log_targets(_job(2), pods, None, False) == ([pods[0]], True)
    assert log_targets(_job(2), pods, 1, False) == ([pods[1]], True)
    # A replaced rank: its newest pod that is not being deleted.
    old = _pod("pair-1-old", 1, deletionTimestamp="2026-01-01T00:01:00Z")
    new = _pod("pair-1-new", 1, "2026-01-01T00:02:00Z")
    assert log_targets(_job(2), [pods[0], old, new, pods[1]], 1, False)[0] == [new]


def test_all_pods_of_a_gang_are_read_in_the_order_given() -> None:
    pods = [_pod("pair-0-a", 0), _pod("pair-1-b", 1)]
    assert log_targets(_job(2), pods, None, True) == (pods, True)
    assert log_targets(_job(1), pods[:1], None, True) == (pods[:1], False)


@pytest.mark.parametrize(
    ("nodes", "rank", "all_pods", "pods", "message"),
    [
        (2, 2, False, [_pod("pair-0-a", 0)], "--rank 2: job pair has ranks 0 to 1"),
        (2, -1, False, [_pod("pair-0-a", 0)], "--rank -1: job pair has ranks 0 to 1"),
        (1, 0, False, [_pod("pair-x", None)], "--rank 0: job pair runs one pod, it has no ranks"),
        (2, 1, False, [_pod("pair-0-a", 0)], "rank 1 of job pair has no pod now"),
        (2, 1, True, [_pod("pair-0-a", 0)], "only one of --rank or --all-pods may be given"),
    ],
)
def test_a_rank_that_cannot_be_shown_is_refused(nodes, rank, all_pods, pods, message) -> None:
    with pytest.raises(CommandError, match="^" + message.replace("-", r"\-")):
        log_targets(_job(nodes), pods, rank, all_pods)


def test_a_gangs_lines_are_prefixed_by_rank_and_pod() -> None:
    pod = _pod("pair-1-b", 1)
    assert _prefix(_args(all_pods=True), pod, gang=True) == "[rank 1 pod/pair-1-b] "
    assert _prefix(_args(prefix=True), pod, gang=True) == "[rank 1 pod/pair-1-b/main] "
    assert _prefix(_args(prefix=True, container="side"), pod, gang=True) == "[rank 1 pod/pair-1-b/side] "
    assert _prefix(_args(), pod, gang=True) == ""
    # One-pod jobs keep kubectl's and gpuctl's earlier prefixes.
    assert _prefix(_args(all_pods=True), pod) == "[pair-1-b] "
    assert _prefix(_args(prefix=True), pod) == "[pod/pair-1-b/main] "
