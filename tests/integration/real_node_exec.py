"""`gpuctl exec`, `attach` and `port-forward` into a real pod (a real kubelet and containerd, the real node of
tests/integration/test_real_node.py), as a team member with only the roles gpuctl ships (docs/cli.md,
"Into a running job").

The admin makes a CPU pool of the real node and a quota for a team; the member submits a `compute` job
(the built gpuctl image, which has Python and no shell, serving `python3 -m http.server`) that tolerates
the node's platform taint, then: exec prints what the command printed and exits with its exit code, stdin
reaches the command and its end of file ends the command's read (v5's close signal), attach streams what
the server process prints, port-forward carries two HTTP requests (one WebSocket each) to the pod's port.
Refusals are proved on KWOK (tests/integration/test_exec.py).

Its tests run in tests/integration/test_real_node.py's module (imported there), on that module's real-node
cluster: one cluster for both, where a module of their own would start a second one in CI.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import re
import subprocess
import sys
import tarfile
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuctl.cli.main import main
from gpuctl.cluster import path
from tests.integration import test_real_node as rn
from tests.integration.conftest import MANAGED, MANAGED_KINDS, wait_until
from tests.integration.tenancy import SHIPPED_ROLES, TeamMember, apply_caller_roles, caller_roles, dump

PYTHON = "/usr/bin/python3.11"  # the image's interpreter (hack/image.sh: Debian's python3.11, no shell)
PORT = 8000
PLATFORM_TAINT = "gpuctl.runwhere.ai/platform=true:NoSchedule"  # real-node.sh's taint of the node


def _image() -> str:
    """The built image's name in the node's containerd (real-node.sh imports it under this name)."""
    archive = Path(os.environ.get("GPUCTL_IMAGE_ARCHIVE", rn.ARCHIVE))
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None, f"{archive} has no index.json"
        index = json.load(member)
    return index["manifests"][0]["annotations"]["io.containerd.image.name"]


@dataclass
class Team:
    node: rn.RealNode
    namespace: str
    member: TeamMember
    job: str


def _admin(n: rn.RealNode, *args: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([*args, "--kubeconfig", n.kubeconfig])
    assert rc == 0, f"gpuctl {' '.join(args)}: {out.getvalue()}{err.getvalue()}"


def _managed(n: rn.RealNode) -> set[tuple[str, str]]:
    """gpuctl's cluster-scoped Kueue objects (a first pool also makes the Topology, a first quota the
    budget flavor): what this module adds it removes, and nothing of the chart's tests."""
    return {
        (k, o["metadata"]["name"])
        for k in MANAGED_KINDS
        for o in n.kube.list(path(k), label_selector=MANAGED)
    }


@pytest.fixture(scope="module")
def exec_team(node: rn.RealNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    tmp = tmp_path_factory.mktemp("exec")
    s = uuid.uuid4().hex[:6]
    ns, pool, quota, job = f"rx-{s}", f"rn-{s}", f"q-{s}", "web"
    (tmp / "pool.yaml").write_text(f"kind: pool\npool: {{name: {pool}}}\nnodes:\n  {rn.NODE}: {{}}\n")
    (tmp / "quota.yaml").write_text(
        f"kind: quota\nquota: {{name: {quota}}}\nnamespace:\n  {ns}: {{cpu: 2, memory: 2Gi, gpu: 0}}\n"
    )
    (tmp / "job.yaml").write_text(
        f"kind: compute\njob: {{name: {job}}}\n"
        f"environment: {{image: '{_image()}', command: [{PYTHON}, -m, http.server, '{PORT}']}}\n"
        f"service: {{replicas: 1, port: {PORT}}}\n"
        f"resources: {{pool: {pool}, gpu: 0, cpu: 100m, memory: 64Mi,"
        f" tolerations: ['{PLATFORM_TAINT}']}}\n"
    )
    before = _managed(node)
    roles = [r["metadata"]["name"] for r in caller_roles()]
    had_roles = {r for r in roles if node.kube.get_or_none(path("ClusterRole", r))}
    _admin(node, "create", "-f", str(tmp / "pool.yaml"))
    _admin(node, "create", "-f", str(tmp / "quota.yaml"))
    apply_caller_roles(node.kube)
    saved = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = node.kubeconfig  # TeamMember's kubeconfig copies the admin's cluster
    member = None
    try:
        member = TeamMember.create(node.kube, ns, roles=SHIPPED_ROLES)
        created = member.gpuctl("create", "-f", str(tmp / "job.yaml"))
        assert created.returncode == 0, dump(created)
        yield Team(node, ns, member, job)
    finally:
        if member is not None:
            member.gpuctl("delete", "job", job)
            member.delete()
        if saved is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = saved
        _admin(node, "delete", "quota", quota, "--delete-namespace")
        wait_until(lambda: node.kube.get_or_none(path("Namespace", ns)) is None, 120, what=f"{ns} gone")
        _admin(node, "delete", "pool", pool)
        for kind, name in _managed(node) - before:
            node.kube.delete(path(kind, name))
        for role in set(roles) - had_roles:  # the chart installs them: helm cannot adopt ours
            node.kube.delete(path("ClusterRole", role))


def test_exec_prints_the_commands_output_and_exits_with_its_code(exec_team: Team) -> None:
    # The first command waits for the pod to run on the real node (the image is already imported).
    hello = ("--", PYTHON, "-c", "print('hello from', 'the pod')")
    p = exec_team.member.gpuctl("exec", exec_team.job, "--pod-running-timeout", "3m", *hello, timeout=240)
    assert (p.returncode, p.stdout) == (0, "hello from the pod\n"), dump(p) + "\n" + exec_team.node.logs()
    p = exec_team.member.gpuctl(
        "exec", exec_team.job, "--", PYTHON, "-c", "import sys; print('bye'); sys.exit(3)"
    )
    assert p.returncode == 3, dump(p)
    assert p.stdout == "bye\n", dump(p)
    assert "command terminated with exit code 3" in p.stderr, dump(p)
    p = exec_team.member.gpuctl("exec", exec_team.job, "--", "/no/such/binary")
    assert p.returncode != 0 and "no/such/binary" in p.stderr, dump(p)


def test_stdin_reaches_the_command_and_its_end_ends_the_read(exec_team: Team) -> None:
    text = "round trip\n" * 2000  # ~22 kB: several WebSocket messages
    code = "import sys; data = sys.stdin.read(); sys.stdout.write(data.upper()); sys.exit(len(data) % 256)"
    p = exec_team.member.gpuctl("exec", "-i", exec_team.job, "--", PYTHON, "-c", code, input=text)
    assert p.stdout == text.upper(), dump(p)
    assert p.returncode == len(text) % 256, dump(p)


def test_port_forward_carries_connections_to_the_pods_port(exec_team: Team) -> None:
    described = exec_team.member.gpuctl("describe", "job", exec_team.job)
    assert f"gpuctl port-forward -n {exec_team.namespace} {exec_team.job} {PORT}\n" in described.stdout, dump(
        described
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuctl.main", "port-forward", exec_team.job, f":{PORT}"],
        env=exec_team.member.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=rn.ROOT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.fullmatch(rf"Forwarding from 127\.0\.0\.1:(\d+) -> {PORT}\n", line)
        assert m, (line, proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
        local = int(m.group(1))
        for _ in range(2):  # two connections: a WebSocket each
            with urllib.request.urlopen(f"http://127.0.0.1:{local}/", timeout=30) as r:
                body = r.read().decode()
            assert r.status == 200
            assert "Directory listing for /" in body, body[:500]
        assert proc.stdout.readline() == f"Handling connection for {local}\n"
    finally:
        proc.terminate()
        proc.wait(10)


def test_attach_streams_what_the_main_process_prints(exec_team: Team) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuctl.main", "attach", exec_team.job, "--pod-running-timeout", "3m"],
        env=exec_team.member.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=rn.ROOT,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stderr is not None
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True).start()  # type: ignore[union-attr]
    try:
        path_asked = f"/attached-{uuid.uuid4().hex[:6]}"
        url = f"http://127.0.0.1:{PORT}{path_asked}"
        ask = f"import urllib.request as u, urllib.error as e\ntry: u.urlopen('{url}')\nexcept e.HTTPError: 0"

        def logged() -> bool:
            # http.server logs each request on stderr; attach is live from when it connects, so ask again
            # until a request made after it attached shows up.
            exec_team.member.gpuctl("exec", exec_team.job, "--", PYTHON, "-c", ask)
            try:
                while True:
                    if path_asked in lines.get(timeout=3):
                        return True
            except queue.Empty:
                return False

        wait_until(logged, 90, 0, what=f"attach to print the server's log of GET {path_asked}")
    finally:
        proc.terminate()
        proc.wait(10)
