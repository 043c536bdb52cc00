"""Kueue objects as gpuctl's unit tests build them (the shape `queues.objects` writes and Kueue fills in)."""

from __future__ import annotations

from gpuctl.constants import GPU_UNITS, QUOTA_GPU


def team_cluster_queue(ns: str, quota: int, used: int = 0) -> dict:
    """A team's ClusterQueue: `quota` GPUs of budget, `used` of them reserved (status.flavorsReservation)."""
    return {
        "metadata": {
            "name": ns,
            "labels": {"app.kubernetes.io/managed-by": "gpuctl", "runwhere.ai/team": ns},
        },
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": [QUOTA_GPU],
                    "flavors": [
                        {
                            "name": "gpuctl-budget",
                            "resources": [{"name": QUOTA_GPU, "nominalQuota": str(quota * GPU_UNITS)}],
                        }
                    ],
                }
            ]
        },
        "status": {
            "flavorsReservation": [
                {
                    "name": "gpuctl-budget",
                    "resources": [{"name": QUOTA_GPU, "total": str(used * GPU_UNITS), "borrowed": "0"}],
                }
            ]
        },
    }
