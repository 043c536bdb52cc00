"""A KWOK fake Node, the one shape every integration test and bench script creates (KWOK's controller
runs it: Ready, its pods run). Pure: a dict to `kube.create`."""

from __future__ import annotations

from collections.abc import Mapping

BASE_ALLOCATABLE: Mapping[str, str] = {"cpu": "96", "memory": "1Ti", "pods": "110"}


def fake_node(
    name: str,
    labels: Mapping[str, str] | None = None,
    gpus: Mapping[str, str] | None = None,
    *,
    base: Mapping[str, str] = BASE_ALLOCATABLE,
) -> dict:
    """A fake Node `name` labelled as a linux/amd64 KWOK node plus `labels`, with `base` allocatable (96
    CPUs, 1Ti, 110 pods) plus `gpus` (e.g. {"nvidia.com/gpu": "8"}); capacity = allocatable."""
    alloc = {**base, **(gpus or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **(labels or {}),
            },
        },
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "capacity": dict(alloc),
            "allocatable": alloc,
        },
    }
