"""gpuctl in kubectl users' hands, on the local cluster (issue 34), against the kubectl binary itself:

- golden: `-o jsonpath=`, `-o custom-columns=`, `--sort-by` print what kubectl prints for the same
  objects (kubectl's own `-o json` of them fed to gpuctl's printers);
- exit codes and messages: NotFound, usage errors, a flag a verb cannot honour;
- `get jobs -o json` is a List, `-o name`, jsonpath on real jobs; `wait job`; `logs` flags;
- transport: a local HTTP CONNECT proxy given by HTTPS_PROXY, bypassed through NO_PROXY; --server,
  --token, --certificate-authority, --insecure-skip-tls-verify, --as/--as-group, --request-timeout;
- completion sourced in bash, and `kubectl gpuctl get jobs` through the real kubectl.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuctl.cli.printers import custom_columns, print_custom_columns, run_jsonpath, sort_pairs
from gpuctl.cluster import path
from gpuctl.constants import VIEW_API_VERSION
from tests.integration.conftest import delete_namespaces, wait_until
from tests.unit.test_cli_objects import json_documents

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def gpuctl(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """The installed console script, as a user runs it."""
    return subprocess.run(
        [str(BIN / "gpuctl"), *args],
        capture_output=True,
        text=True,
        env=env or os.environ.copy(),
        timeout=timeout,
    )


# ----------------------------------------------------------------------------- objects both read
@pytest.fixture(scope="module")
def objects(kube) -> Iterator[str]:
    """A namespace with ConfigMaps whose fields sort differently by name, by a number, by a quantity."""
    ns = f"kc-{uuid.uuid4().hex[:6]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for name, size, mem, team in (
        ("b", "10", "10Gi", "x"),
        ("a", "2", "500Mi", None),
        ("c", "7", "2Gi", "y"),
    ):
        labels = {"app": "golden", **({"team": team} if team else {})}
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": {"mem": mem}},
                "data": {"size": size, "mem": mem, "note": "<&>"},
            }
        )
    yield ns
    kube.delete(path("Namespace", ns))


def _kubectl_list(kubectl, *args: str) -> dict:
    return json.loads(kubectl(*args, "-o", "json").stdout)


TEMPLATES = [
    "{.items[*].metadata.name}",
    '{range .items[*]}{.metadata.name}{"\\t"}{.data.size}{"\\n"}{end}',
    "{.items[?(@.metadata.labels.team)].metadata.name}",
    '{.items[?(@.data.mem=="2Gi")].metadata.name}',
    "{.items[0].metadata.labels}",
    "{.items[-1:].data}",
    "{.items[*]['metadata.name', 'data.size']}",
    "{..team}",
    "{.items[0].metadata.missing}",
    "{.kind} {.apiVersion}",
]


@pytest.mark.parametrize("template", TEMPLATES)
def test_jsonpath_prints_what_kubectl_prints(kubectl, objects, template) -> None:
    theirs = kubectl(
        "get", "configmaps", "-n", objects, "-l", "app=golden", "-o", f"jsonpath={template}"
    ).stdout
    doc = _kubectl_list(kubectl, "get", "configmaps", "-n", objects, "-l", "app=golden")
    assert run_jsonpath(template, doc) == theirs


def test_jsonpath_on_nodes_prints_what_kubectl_prints(kubectl) -> None:
    t = '{range .items[*]}{.metadata.name} {.status.capacity.cpu} {.status.allocatable}{"\\n"}{end}'
    assert (
        run_jsonpath(t, _kubectl_list(kubectl, "get", "nodes"))
        == kubectl("get", "nodes", "-o", f"jsonpath={t}").stdout
    )


@pytest.mark.parametrize(
    "spec",
    [
        "NAME:.metadata.name,SIZE:.data.size,TEAM:.metadata.labels.team",
        "N:metadata.name,LABELS:.metadata.labels,NOTE:{.data.note}",
        "A-LONG-HEADER:.metadata.name",
    ],
)
@pytest.mark.parametrize("headers", [True, False], ids=["headers", "no-headers"])
def test_custom_columns_print_what_kubectl_prints(kubectl, objects, capsys, spec, headers) -> None:
    flags = [] if headers else ["--no-headers"]
    args = ("get", "configmaps", "-n", objects, "-l", "app=golden")
    theirs = kubectl(*args, "-o", f"custom-columns={spec}", *flags).stdout
    items = _kubectl_list(kubectl, *args)["items"]
    capsys.readouterr()
    print_custom_columns(custom_columns(spec), items, headers=headers)
    assert capsys.readouterr().out == theirs


@pytest.mark.parametrize("field", [".metadata.name", ".data.size", ".data.mem", "{.metadata.labels.team}"])
def test_sort_by_orders_as_kubectl_orders(kubectl, objects, field) -> None:
    args = ("get", "configmaps", "-n", objects, "-l", "app=golden")
    theirs = kubectl(*args, f"--sort-by={field}", "-o", "jsonpath={.items[*].metadata.name}").stdout
    items = _kubectl_list(kubectl, *args)["items"]
    ours = [i["metadata"]["name"] for i, _ in sort_pairs([(i, None) for i in items], field)]
    assert " ".join(ours) == theirs


# ----------------------------------------------------------------------------- gpuctl on gpuctl's jobs
@pytest.fixture(scope="module")
def team(cluster, kube, tmp_path_factory) -> Iterator[str]:
    """A team namespace with a quota, the example pools, and two jobs: `long` (30m) and `short` (5s)."""
    from tests.integration.conftest import reset_gpuctl_state

    reset_gpuctl_state(kube)
    tmp = tmp_path_factory.mktemp("team")
    ns = f"kt-{uuid.uuid4().hex[:6]}"
    (tmp / "q.yaml").write_text(
        f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace:\n  {ns}: {{cpu: 64, memory: 256Gi, gpu: 8}}\n"
    )
    for f in (str(ROOT / "examples" / "pools.yaml"), str(tmp / "q.yaml")):
        p = gpuctl("create", "-f", f)
        assert p.returncode == 0, p.stderr
    for name, runtime in (("long", "30m"), ("short", "5s")):
        (tmp / f"{name}.yaml").write_text(
            f"kind: training\njob: {{name: {name}, namespace: {ns}}}\n"
            f"environment: {{image: busybox, env: [{{GPUCTL_FAKE_RUNTIME: {runtime}}}]}}\n"
            "resources: {pool: training-pool, gpu: 1, cpu: 1, memory: 1Gi}\n"
        )
        p = gpuctl("create", "-f", str(tmp / f"{name}.yaml"))
        assert p.returncode == 0, p.stderr
    yield ns
    gpuctl("delete", "quota", f"q-{ns}", "--delete-namespace")
    delete_namespaces(kube, [ns], 120)
    reset_gpuctl_state(kube)


def test_wait_running_then_complete_then_deleted(team) -> None:
    p = gpuctl("wait", "job", "long", "-n", team, "--for=running", "--timeout=90s")
    assert (p.returncode, p.stdout) == (0, "job.batch/long condition met\n"), p.stderr
    p = gpuctl("wait", "job", "short", "-n", team, "--for=complete", "--timeout=120s")
    assert (p.returncode, p.stdout) == (0, "job.batch/short condition met\n"), p.stderr
    # Succeeded can never become failed: no waiting out the timeout.
    p = gpuctl("wait", "job", "short", "-n", team, "--for=failed", "--timeout=1h", timeout=60)
    assert p.returncode == 1 and "is Succeeded: it will not become failed" in p.stderr
    # Timed out, as kubectl says it.
    p = gpuctl("wait", "job", "long", "-n", team, "--for=complete", "--timeout=2s")
    assert p.returncode == 1
    assert p.stderr == "error: timed out waiting for the condition on jobs/long\n"
    p = gpuctl("wait", "job", "nope", "-n", team, "--for=running")
    assert (p.returncode, p.stderr) == (1, 'Error from server (NotFound): jobs "nope" not found\n')
    # deleted: a job that is there times out; one never there is met at once and silently (kubectl).
    p = gpuctl("wait", "job", "short", "-n", team, "--for=deleted", "--timeout=1s")
    assert (p.returncode, p.stderr) == (1, "error: timed out waiting for the condition on jobs/short\n")
    p = gpuctl("wait", "job", "never-was", "-n", team, "--for=deleted")
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")
    assert gpuctl("delete", "job", "short", "-n", team).returncode == 0
    p = gpuctl("wait", "job", "short", "-n", team, "--for=deleted", "--timeout=60s")
    assert p.returncode == 0, p.stderr
    assert gpuctl("get", "jobs", "short", "-n", team).returncode == 1


def test_get_jobs_is_a_list_with_names_and_jsonpath(team) -> None:
    wait_until(lambda: "Running" in gpuctl("get", "jobs", "-n", team).stdout, 90, what="long Running")
    doc = json.loads(gpuctl("get", "jobs", "-n", team, "-o", "json").stdout)
    assert doc["apiVersion"] == "v1" and doc["kind"] == "List"
    (long,) = [i for i in doc["items"] if i["metadata"]["name"] == "long"]
    assert (long["apiVersion"], long["kind"]) == (VIEW_API_VERSION, "Job")
    assert long["metadata"]["labels"]["runwhere.ai/job-type"] == "training"
    assert (long["spec"]["kind"], long["spec"]["resource"], long["status"]["phase"]) == (
        "training",
        "Job",
        "Running",
    )
    assert yaml.safe_load(gpuctl("get", "jobs", "-n", team, "-o", "yaml").stdout)["kind"] == "List"
    assert "job.batch/long" in gpuctl("get", "jobs", "-n", team, "-o", "name").stdout.splitlines()
    p = gpuctl("get", "jobs", "long", "-n", team, "-o", "jsonpath={.metadata.name}:{.status.phase}")
    assert p.stdout == "long:Running", p.stderr  # one named job: the object itself, as kubectl's get pod x
    p = gpuctl(
        "get", "jobs", "-n", team, "--field-selector", "metadata.name=long,status.phase=Running", "-o", "name"
    )
    assert p.stdout == "job.batch/long\n", p.stderr
    p = gpuctl("get", "jobs", "-n", team, "--field-selector", "metadata.name!=long", "-o", "name")
    assert p.returncode == 0 and "job.batch/long" not in p.stdout, p.stderr
    p = gpuctl("get", "jobs", "-n", team, "--field-selector", "status=Running")
    assert p.returncode == 1 and "field label not supported: status " in p.stderr, p.stderr


def test_the_objects_are_kubernetes_objects_and_the_job_id_is_stable(team, kube) -> None:
    """Each object's metadata is the Kubernetes object's it stands for; JOB ID is the job's name."""
    wait_until(lambda: "Running" in gpuctl("get", "jobs", "long", "-n", team).stdout, 90, what="long Running")
    (obj,) = [
        i
        for i in json.loads(gpuctl("get", "jobs", "-n", team, "-o", "json").stdout)["items"]
        if i["metadata"]["name"] == "long"
    ]
    real = kube.get(path("Job", "long", namespace=team))
    for k in ("uid", "creationTimestamp"):
        assert obj["metadata"][k] == real["metadata"][k], k
    assert obj["metadata"]["labels"] == real["metadata"]["labels"]
    (pod,) = obj["status"]["pods"]
    assert pod["name"].startswith("long-") and pod["phase"] == "Running"
    rows = [r.split() for r in gpuctl("get", "jobs", "long", "-n", team).stdout.splitlines()]
    assert rows[0][:4] == ["JOB", "ID", "POD", "NAMESPACE"]
    assert [r[0] for r in rows[1:]] == ["long"] and rows[1][1] == pod["name"]
    pools = json.loads(gpuctl("get", "pools", "-o", "json").stdout)["items"]
    flavor = kube.get(path("ResourceFlavor", pools[0]["metadata"]["name"]))
    assert pools[0]["metadata"]["uid"] == flavor["metadata"]["uid"]
    ns = json.loads(gpuctl("get", "ns", team, "-o", "json").stdout)
    assert ns["metadata"]["uid"] == kube.get(path("Namespace", team))["metadata"]["uid"]


# kubectl's recipes, on every get type (docs/cli.md, "The objects of `get`").
GET_TYPES = [("jobs",), ("pools",), ("nodes",), ("quotas",), ("ns",), ("labels",)]


@pytest.mark.parametrize("what", GET_TYPES, ids=lambda w: w[0])
def test_kubectl_recipes_on_every_get_type(team, what) -> None:
    wait_until(lambda: "Running" in gpuctl("get", "jobs", "-n", team).stdout, 90, what="long Running")
    where = ("-n", team) if what[0] in ("jobs", "quotas") else ()
    doc = json.loads(gpuctl("get", *what, *where, "-o", "json").stdout)
    names = [i["metadata"]["name"] for i in doc["items"]]
    assert names and all(i["apiVersion"] == VIEW_API_VERSION for i in doc["items"])
    p = gpuctl("get", *what, *where, "-o", "jsonpath={.items[*].metadata.name}")
    assert (p.returncode, p.stdout) == (0, " ".join(names)), p.stderr
    p = gpuctl(
        "get", *what, *where, "-o",
        'jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}:{.status.phase}{"\\n"}{end}',
    )  # fmt: skip
    want = [
        f"{i['metadata'].get('namespace', '')}/{i['metadata']['name']}:{i['status'].get('phase', '')}"
        for i in doc["items"]
    ]
    assert (p.returncode, p.stdout.splitlines()) == (0, want), p.stderr
    if what[0] != "labels":  # NodeLabels carry no creationTimestamp (docs/cli.md)
        p = gpuctl("get", *what, *where, "--sort-by=.metadata.creationTimestamp", "-o", "name")
        stamps = {i["metadata"]["name"]: i["metadata"]["creationTimestamp"] for i in doc["items"]}
        assert p.returncode == 0, p.stderr
        got = [n.split("/", 1)[1] for n in p.stdout.splitlines()]
        assert [stamps[n] for n in got] == sorted(stamps.values())
    p = gpuctl("get", *what, *where, "-o", "custom-columns=NAME:.metadata.name,POOL:.spec.pool")
    lines = p.stdout.splitlines()
    assert p.returncode == 0 and lines[0].split() == ["NAME", "POOL"], p.stderr
    assert [line.split()[0] for line in lines[1:]] == names
    if what[0] == "jobs":
        assert "training-pool" in p.stdout


def test_the_earlier_clients_json_keeps_its_rows(team) -> None:
    """--json (the earlier gpuctl's flag) prints its bare array of flat rows, as its scripts read them."""
    wait_until(lambda: "Running" in gpuctl("get", "jobs", "long", "-n", team).stdout, 90, what="long Running")
    rows = json.loads(gpuctl("get", "jobs", "-n", team, "--json").stdout)
    assert isinstance(rows, list)
    (row,) = [r for r in rows if r["name"] == "long"]
    assert {"job_id", "name", "namespace", "kind", "status", "ready", "node", "ip", "age"} <= set(row)
    assert row["job_id"].startswith("long-") and row["status"] == "Running"
    pools = json.loads(gpuctl("get", "pools", "--json").stdout)
    assert isinstance(pools, list) and {"name", "gpu_total", "gpu_used", "gpu_free"} <= set(pools[0])


def test_describe_and_show_labels(team) -> None:
    wait_until(lambda: "Running" in gpuctl("get", "jobs", "long", "-n", team).stdout, 90, what="long Running")
    assert "LABELS" in gpuctl("get", "jobs", "-n", team, "--show-labels").stdout.splitlines()[0]
    # describe: one object; -o name and jsonpath on its document
    assert gpuctl("describe", "job", "long", "-n", team, "-o", "name").stdout == "job.batch/long\n"
    assert gpuctl("describe", "job", "long", "-n", team, "-o", "jsonpath={.status}").stdout == "Running"
    p = gpuctl("describe", "pool", "training-pool", "-o", "jsonpath={.name}")
    assert (p.returncode, p.stdout) == (0, "training-pool"), p.stderr


def test_not_found_and_usage_errors_exit_like_kubectl(team, kubectl) -> None:
    ours = gpuctl("get", "jobs", "nope", "-n", team)
    theirs = kubectl("get", "jobs", "nope", "-n", team, check=False)
    assert ours.returncode == theirs.returncode == 1
    assert ours.stderr == 'Error from server (NotFound): jobs "nope" not found\n'
    assert theirs.stderr.startswith("Error from server (NotFound): ")
    for args in (("get", "pools", "nope"), ("get", "nodes", "nope"), ("get", "ns", "nope")):
        p = gpuctl(*args)
        assert p.returncode == 1 and p.stderr.startswith("Error from server (NotFound): "), args
    ours = gpuctl("get", "jobs", "--bogus")
    theirs = kubectl("get", "jobs", "--bogus", check=False)
    assert ours.returncode == theirs.returncode == 1
    assert ours.stderr.endswith("See 'gpuctl get --help' for usage.\n")
    p = gpuctl("get", "pools", "-l", "a=b")
    assert p.returncode == 1 and "get pools does not take -l/--selector" in p.stderr


def test_logs_flags(team) -> None:
    wait_until(lambda: "Running" in gpuctl("get", "jobs", "long", "-n", team).stdout, 90, what="long Running")
    p = gpuctl("logs", "long", "-n", team, "--prefix", "--since", "1h")
    assert p.returncode == 0, p.stderr
    assert all(line.startswith("[pod/long-") for line in p.stdout.splitlines())
    p = gpuctl("logs", "long", "-n", team, "-c", "nope")
    assert p.returncode == 1 and "nope" in p.stderr
    p = gpuctl("logs", "long", "-n", team, "--since", "1m", "--since-time", "2026-01-01T00:00:00Z")
    assert p.returncode == 1 and "at most one of --since or --since-time" in p.stderr


# ----------------------------------------------------------------------------- completion and plugin
def test_bash_completion_offers_the_namespaces_jobs(team) -> None:
    script = (
        "source <(gpuctl completion bash)\n"
        f'COMP_WORDS=(gpuctl get jobs -n {team} ""); COMP_CWORD=5; _gpuctl_complete\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert {"long"} <= set(p.stdout.split()), p.stdout
    p = subprocess.run(
        ["bash", "-c", script.replace(f'jobs -n {team} ""); COMP_CWORD=5', 'jobs -n ""); COMP_CWORD=4')],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert team in p.stdout.split()


def test_kubectl_runs_gpuctl_as_a_plugin(team, kubectl_bin, cluster) -> None:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "KUBECONFIG": cluster}
    theirs = subprocess.run(
        [kubectl_bin, "gpuctl", "get", "jobs", "-n", team, "-o", "name"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert theirs.returncode == 0, theirs.stderr
    assert theirs.stdout == gpuctl("get", "jobs", "-n", team, "-o", "name", env=env).stdout
    assert "job.batch/long" in theirs.stdout


# ----------------------------------------------------------------------------- transport
class ConnectProxy:
    """A tiny HTTP CONNECT proxy on loopback: every tunnel goes to 127.0.0.1 at the asked port (so a
    name that resolves nowhere reaches the local API server through it); it records what it was asked."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.asked: list[str] = []
        self.closed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(4096)
            if not chunk:
                client.close()
                return
            head += chunk
        line = head.split(b"\r\n", 1)[0].decode()
        method, target, _ = line.split(" ", 2)
        self.asked.append(line)
        if method != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            client.close()
            return
        upstream = socket.create_connection(("127.0.0.1", int(target.rsplit(":", 1)[1])))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        pair = {client: upstream, upstream: client}
        try:
            while True:
                ready, _, _ = select.select(list(pair), [], [], 30)
                if not ready:
                    return
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    pair[s].sendall(data)
        except OSError:
            return
        finally:
            client.close()
            upstream.close()

    def close(self) -> None:
        self.closed.set()
        self.sock.close()


@pytest.fixture
def proxied_kubeconfig(cluster, tmp_path) -> Iterator[tuple[str, int, str]]:
    """A copy of the cluster's kubeconfig whose server is https://kube.gpuctl.invalid:PORT (a name
    nothing resolves; its certificate is checked for the original host), and the proxy."""
    doc = yaml.safe_load(Path(cluster).read_text())
    server = doc["clusters"][0]["cluster"]["server"]
    host = server.split("://", 1)[1].rsplit(":", 1)[0]
    port = int(server.rsplit(":", 1)[1])
    doc["clusters"][0]["cluster"]["server"] = f"https://kube.gpuctl.invalid:{port}"
    doc["clusters"][0]["cluster"]["tls-server-name"] = host
    f = tmp_path / "kubeconfig"
    f.write_text(yaml.safe_dump(doc))
    proxy = ConnectProxy()
    yield str(f), proxy.port, proxy
    proxy.close()


def test_https_proxy_from_the_environment_and_no_proxy(proxied_kubeconfig) -> None:
    kubeconfig, port, proxy = proxied_kubeconfig
    base = {k: v for k, v in os.environ.items() if k.lower() not in ("https_proxy", "http_proxy", "no_proxy")}
    env = {**base, "KUBECONFIG": kubeconfig, "HTTPS_PROXY": f"http://127.0.0.1:{port}"}
    p = gpuctl("get", "nodes", "-o", "name", env=env)
    assert p.returncode == 0, p.stderr
    assert "node/gpu-node-1" in p.stdout.splitlines()
    assert proxy.asked and all(a.startswith("CONNECT kube.gpuctl.invalid:") for a in proxy.asked), proxy.asked
    # NO_PROXY: straight to kube.gpuctl.invalid, which does not resolve: the proxy is never asked.
    proxy.asked.clear()
    p = gpuctl("get", "nodes", "-o", "name", env={**env, "NO_PROXY": ".invalid"})
    assert p.returncode == 1 and proxy.asked == []
    assert "kube.gpuctl.invalid" in p.stderr or "Name or service not known" in p.stderr, p.stderr
    # kubectl itself goes through the same proxy with the same environment.


def test_kubectl_uses_the_same_proxy(proxied_kubeconfig, kubectl_bin) -> None:
    kubeconfig, port, proxy = proxied_kubeconfig
    env = {**os.environ, "KUBECONFIG": kubeconfig, "HTTPS_PROXY": f"http://127.0.0.1:{port}"}
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    p = subprocess.run(
        [kubectl_bin, "get", "ns", "default", "-o", "name"], capture_output=True, text=True, env=env
    )
    assert p.stdout == "namespace/default\n", p.stderr
    assert proxy.asked and proxy.asked[0].startswith("CONNECT kube.gpuctl.invalid:")


@pytest.fixture
def token(kube) -> Iterator[str]:
    """A ServiceAccount token that may read namespaces (view), for --token."""
    ns = f"tok-{uuid.uuid4().hex[:6]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kube.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader", "namespace": ns}}
    )
    crb = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{ns}-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
    }
    kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", body=crb)
    tr = kube.request(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/reader/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
    )
    yield tr["status"]["token"]
    kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{ns}-reader")
    kube.delete(path("Namespace", ns))


def test_server_token_and_ca_flags_without_a_kubeconfig(cluster, token, tmp_path) -> None:
    doc = yaml.safe_load(Path(cluster).read_text())
    c = doc["clusters"][0]["cluster"]
    ca = tmp_path / "ca.crt"
    if "certificate-authority-data" in c:
        import base64

        ca.write_bytes(base64.b64decode(c["certificate-authority-data"]))
    else:
        ca.write_bytes((Path(cluster).parent / c["certificate-authority"]).read_bytes())
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)}
    base = ["--server", c["server"], "--token", token]
    p = gpuctl("get", "nodes", "gpu-node-1", "-o", "name", *base, "--certificate-authority", str(ca), env=env)
    assert (p.returncode, p.stdout) == (0, "node/gpu-node-1\n"), p.stderr
    p = gpuctl("get", "nodes", "gpu-node-1", "-o", "name", *base, "--insecure-skip-tls-verify", env=env)
    assert (p.returncode, p.stdout) == (0, "node/gpu-node-1\n"), p.stderr
    p = gpuctl("get", "nodes", "gpu-node-1", "-o", "name", *base, env=env)  # the system's CAs do not know it
    assert p.returncode == 1 and "certificate" in p.stderr.lower(), p.stderr


def test_impersonation(cluster) -> None:
    p = gpuctl("--as", "nobody", "get", "nodes", "gpu-node-1", "-o", "name")
    assert p.returncode == 1 and "nobody" in p.stderr, p.stderr
    p = gpuctl("get", "nodes", "gpu-node-1", "-o", "name", "--as", "nobody", "--as-group", "system:masters")
    assert (p.returncode, p.stdout) == (0, "node/gpu-node-1\n"), p.stderr
    p = gpuctl("get", "nodes", "--as-group", "system:masters")
    assert p.returncode == 1 and "need --as" in p.stderr


def test_request_timeout_bounds_a_silent_server(tmp_path) -> None:
    """A server that accepts and never answers: the command ends with an error instead of hanging."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    url = f"https://127.0.0.1:{silent.getsockname()[1]}"
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)}
    try:
        p = gpuctl(
            "get",
            "ns",
            "--server",
            url,
            "--insecure-skip-tls-verify",
            "--request-timeout",
            "1s",
            env=env,
            timeout=30,
        )
    finally:
        silent.close()
    assert p.returncode == 1 and "timed out" in p.stderr.lower(), p.stderr
    p = gpuctl("get", "nodes", "--request-timeout", "soon", env=env)
    assert p.returncode == 1 and "invalid --request-timeout" in p.stderr


def _quota(team: str, gpus: int) -> str:
    """The team fixture's quota (q-NS, 64 CPUs, 256Gi) with this many GPUs."""
    body = f"{team}: {{cpu: 64, memory: 256Gi, gpu: {gpus}}}"
    return f"kind: quota\nquota: {{name: q-{team}}}\nnamespace:\n  {body}\n"


def test_watch_streams_changed_objects_on_every_get_type(team, tmp_path) -> None:
    """`get quotas -w -o json`: each object on its own (no List), then the quota again when it changes;
    `get pools -w -o name`: the pools' names; Ctrl-C ends both (docs/cli.md, -w)."""
    import signal

    def stream(*args: str) -> tuple[subprocess.Popen, Path]:
        out = tmp_path / f"{args[1]}-{uuid.uuid4().hex[:4]}.out"
        with out.open("w") as f:
            p = subprocess.Popen([str(BIN / "gpuctl"), *args], stdout=f, stderr=subprocess.PIPE, text=True)
        return p, out

    quotas, qout = stream("get", "quotas", "-n", team, "-w", "-o", "json")
    pools, pout = stream("get", "pools", "-w", "-o", "name")
    try:
        (q,) = wait_until(lambda: json_documents(qout.read_text()) or None, 60, what="the quota listed")
        assert (q["kind"], q["metadata"]["namespace"], q["spec"]["gpus"]) == ("Quota", team, 8)
        wait_until(lambda: "pool/training-pool" in pout.read_text(), 60, what="the pools listed")
        f = tmp_path / "q9.yaml"
        f.write_text(_quota(team, 9))
        assert gpuctl("apply", "-f", str(f)).returncode == 0
        changed = wait_until(
            lambda: (o := json_documents(qout.read_text()))[1:] and o,
            60,
            what="the changed quota printed again",
        )
        assert changed[-1]["spec"]["gpus"] == 9 and changed[-1]["metadata"]["name"] == f"q-{team}"
    finally:
        for p in (quotas, pools):
            p.send_signal(signal.SIGINT)
        for p in (quotas, pools):
            assert p.wait(30) == 0, p.stderr.read() if p.stderr else ""
        f = tmp_path / "q8.yaml"
        f.write_text(_quota(team, 8))
        gpuctl("apply", "-f", str(f))
