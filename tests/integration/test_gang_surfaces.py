"""The surfaces of a multi-node job on the real cluster (issue 31, docs/distributed.md "Logs and metrics of
a gang"): `gpuctl logs` shows rank 0 by default, `--rank N` the pod of rank N, `--all-pods` every rank in
order, prefixed by rank; the REST API's logs take `rank` by the same rule. The pool of three fake 8-GPU
nodes in two racks is test_gang.py's fixture."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from gpuctl.server.api import create_app
from gpuctl.server.api.auth import ApiKeys, Authenticator, hash_key, new_api_key
from tests.integration.conftest import wait_until
from tests.integration.tenancy import SHIPPED_ROLES, TeamMember, apply_caller_roles
from tests.integration.test_cli_cluster import gpuctl  # noqa: F401 - fixture
from tests.integration.test_gang import INDEX, _job_file, _pods, racks  # noqa: F401 - fixture


def test_logs_of_a_gang_by_rank(gpuctl, kube, racks, tmp_path):  # noqa: F811
    rc, _, err = gpuctl("create", "-f", _job_file(tmp_path, racks, "talk", 2))
    assert rc == 0, err

    def running() -> dict[int, str] | None:
        pods = _pods(kube, racks.ns, "talk")
        if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods):
            return {int(p["metadata"]["annotations"][INDEX]): p["metadata"]["name"] for p in pods}
        return None

    by_rank = wait_until(running, 90, what="both ranks running")
    assert sorted(by_rank) == [0, 1]
    try:
        # Default: rank 0, whatever order the pods were listed in.
        rc, out, err = gpuctl("logs", "talk", "-n", racks.ns, "-o", "json")
        assert rc == 0, err
        d = json.loads(out)
        assert (d["pod_name"], d["rank"]) == (by_rank[0], 0)
        assert "fake workload started by KWOK" in d["logs"][0]
        rc, out, err = gpuctl("logs", "talk", "-n", racks.ns, "--rank", "1", "-o", "json")
        assert rc == 0, err
        assert (json.loads(out)["pod_name"], json.loads(out)["rank"]) == (by_rank[1], 1)
        # Naming a pod shows that pod.
        rc, out, err = gpuctl("logs", by_rank[1], "-n", racks.ns, "-o", "json")
        assert rc == 0, err
        assert json.loads(out)["pod_name"] == by_rank[1]
        # Every rank, in rank order, each line prefixed by rank and pod (and container with --prefix).
        rc, out, err = gpuctl("logs", "talk", "-n", racks.ns, "--all-pods", "--tail", "2")
        assert rc == 0, err
        lines = out.splitlines()
        assert [line.split("] ", 1)[0] + "]" for line in lines] == [
            f"[rank {r} pod/{by_rank[r]}]" for r in (0, 0, 1, 1)
        ], out
        rc, out, err = gpuctl("logs", "talk", "-n", racks.ns, "--all-pods", "--prefix", "--tail", "1")
        assert rc == 0, err
        assert out.splitlines()[0].startswith(f"[rank 0 pod/{by_rank[0]}/main] step 20: "), out
        # A rank the job does not have: refused, exit 1, naming the ranks it has.
        rc, out, err = gpuctl("logs", "talk", "-n", racks.ns, "--rank", "2")
        assert rc == 1 and "--rank 2: job talk has ranks 0 to 1" in err, err
        # The REST API (in process, on the real cluster; an admin's API key): `rank`, by the same rule.
        key = new_api_key()
        (tmp_path / "keys.yaml").write_text(
            f"keys:\n- name: admin\n  sha256: '{hash_key(key)}'\n  groups: [system:masters]\n"
        )
        auth = Authenticator(lambda: kube, api_keys=ApiKeys(tmp_path / "keys.yaml"))
        with TestClient(create_app(lambda: kube, auth), headers={"X-API-Key": key}) as api:
            logs = "/api/v1/jobs/talk/logs"
            for params, rank in (({}, 0), ({"rank": 1}, 1), ({"rank": 0}, 0)):
                r = api.get(logs, params={"namespace": racks.ns, **params})
                assert r.status_code == 200, r.text
                assert (r.json()["podName"], r.json()["rank"]) == (by_rank[rank], rank)
            r = api.get(logs, params={"namespace": racks.ns, "rank": 2})
            assert r.status_code == 400 and "rank 2: job talk has ranks 0 to 1" in r.text, r.text
            r = api.get(logs, params={"namespace": racks.ns, "rank": 1, "pod": by_rank[1]})
            assert r.status_code == 400 and "only one of pod or rank" in r.text, r.text
            # The WebSocket follows the rank it is given.
            ws_url = f"{logs}/ws?namespace={racks.ns}&rank=1&tail=1"
            with api.websocket_connect(ws_url, headers={"X-API-Key": key}) as ws:
                first = ws.receive_json()
            assert (first["type"], first["pod"]) == ("log", by_rank[1]), first
            # A team member with only the roles gpuctl ships reads a rank of his team's job too.
            apply_caller_roles(kube)
            member = TeamMember.create(kube, racks.ns, roles=SHIPPED_ROLES)
            try:
                token = (member.dir / "token").read_text().strip()  # what its kubeconfig's plugin sends
                r = api.get(
                    logs,
                    params={"namespace": racks.ns, "rank": 1},
                    headers={"X-API-Key": "", "Authorization": f"Bearer {token}"},
                )
                assert r.status_code == 200, r.text
                assert (r.json()["podName"], r.json()["rank"]) == (by_rank[1], 1)
            finally:
                member.delete()
    finally:
        assert gpuctl("delete", "job", "talk", "-n", racks.ns)[0] == 0
