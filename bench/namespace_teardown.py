"""How long a test's namespace takes to go, the plain way against the suite's helper, paired runs.

    KUBECONFIG=... python bench/namespace_teardown.py [--runs 3] [--replicas 2]

Each run makes two namespaces alike: a Deployment of N pods and a Job of one pod (a tracking finalizer),
all Running on the KWOK nodes (the local cluster of hack/cluster/up.sh). One is deleted and waited for as
the tests did (delete, poll until 404), the other through tests.integration.conftest.delete_namespaces
(delete, then its pods with grace 0, then poll). Printed: each pair's seconds and the median ratio.

Why they differ: kube-controller-manager's namespace controller, finding pods still there, looks again
only after half the largest terminationGracePeriodSeconds of the running ones plus one (16 s for the
default 30 s), though KWOK removes a deleted pod at once.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuctl.cluster import Cluster, path  # noqa: E402
from tests.integration.conftest import delete_namespaces, wait_until  # noqa: E402

POD = {
    "nodeSelector": {"type": "kwok"},
    "tolerations": [{"operator": "Exists"}],
    "containers": [
        {"name": "c", "image": "busybox", "env": [{"name": "GPUCTL_FAKE_RUNTIME", "value": "30m"}]}
    ],
}


def populate(kube: Cluster, ns: str, replicas: int) -> None:
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    labels = {"app": "bench"}
    kube.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": ns},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": POD},
            },
        }
    )
    kube.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j", "namespace": ns},
            "spec": {"template": {"spec": {**POD, "restartPolicy": "Never"}}},
        }
    )


def running(kube: Cluster, ns: str, want: int) -> bool:
    pods = kube.list(path("Pod", namespace=ns))
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running") >= want


def plain(kube: Cluster, ns: str) -> None:
    kube.delete(path("Namespace", ns))
    wait_until(lambda: kube.get_or_none(path("Namespace", ns)) is None, 180, what=f"{ns} gone")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=2)
    args = ap.parse_args()
    kube = Cluster.connect()
    ratios = []
    for i in range(args.runs):
        sfx = uuid.uuid4().hex[:5]
        pair = {"plain": f"bnt-p-{sfx}", "helper": f"bnt-h-{sfx}"}
        for ns in pair.values():
            populate(kube, ns, args.replicas)
        for ns in pair.values():
            wait_until(lambda ns=ns: running(kube, ns, args.replicas + 1), 120, what=f"{ns} pods Running")
        took = {}
        # Alternate which goes first: the second starts on a cluster the first has just worked.
        for how in ("plain", "helper") if i % 2 == 0 else ("helper", "plain"):
            t = time.monotonic()
            if how == "plain":
                plain(kube, pair[how])
            else:
                delete_namespaces(kube, [pair[how]])
            took[how] = time.monotonic() - t
        ratios.append(took["helper"] / took["plain"])
        print(f"run {i + 1}: plain {took['plain']:.1f} s, helper {took['helper']:.1f} s")
    print(f"median helper/plain: {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
