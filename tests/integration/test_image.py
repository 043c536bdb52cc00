"""The built container image runs as the chart runs it: the webhook and `gpuctl serve` against the
local cluster.

The image (hack/image.sh, build/image/gpuctl.oci.tar; hack/test.sh builds or reuses it before the
tests, never a test) is unpacked by umoci, an independent OCI implementation. Each process then runs
the way a kubelet would start the chart's Deployment: the container's command and args, env and
volumeMounts exactly as `helm template` renders them, the image's own PATH and user (the pod's
runAsUser 65532), the root filesystem mounted read-only, in its own mount and PID namespaces with a
fresh /proc, and in-cluster credentials (KUBERNETES_SERVICE_HOST/PORT and a ServiceAccount token of
the chart's RBAC at /var/run/secrets/kubernetes.io/serviceaccount). Two things differ from a pod,
because the processes share the host's network namespace: the listen port flag gets a free port, and
the webhook is registered by URL (with the chart's rules and matchConditions, restricted to this
test's namespace) instead of through a Service.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bench.webhook import image_server
from gpuctl.constants import Labels
from tests.integration.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts/gpuctl"
ARCHIVE = Path(os.environ.get("GPUCTL_IMAGE_ARCHIVE", ROOT / "build/image/gpuctl.oci.tar"))
HOST_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
CACHE = Path(os.environ.get("GPUCTL_TESTBED_CACHE", Path.home() / ".cache" / "gpuctl-testbed"))
VERSIONS = dict(
    line.split("=", 1)
    for line in (ROOT / "hack/cluster/versions.env").read_text().splitlines()
    if "=" in line and not line.startswith("#")
)
HELM = CACHE / "bin" / f"helm-{VERSIONS['HELM_VERSION']}" / "helm"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TESTBED_LABEL = {"gpuctl.runwhere.ai/testbed": "true"}
RELEASE_NS = "gpuctl-system"


def wait_logged(check, timeout: float, what: str, log: Path):
    """wait_until, and on time-out the process' log in the failure."""
    try:
        return wait_until(check, timeout, 0.5, what=what)
    except AssertionError as e:
        raise AssertionError(
            f"{e}\n----- {log.name}:\n{log.read_text()[-3000:] if log.exists() else ''}"
        ) from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> dict:
    """The unpacked image: rootfs, its OCI runtime config (from umoci) and digest."""
    if not ARCHIVE.exists():
        pytest.fail(f"{ARCHIVE} is missing: run hack/image.sh (hack/test.sh does, before the tests)")
    if os.geteuid() != 0:
        pytest.fail("running the image needs root here (chroot, mount and PID namespaces)")
    for tool in ("umoci", "unshare", "chroot"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} is missing (apt-get install umoci util-linux coreutils; hack/test.sh does)")
    d = tmp_path_factory.mktemp("image")
    with tarfile.open(ARCHIVE) as t:
        t.extractall(d / "layout", filter="tar")
    (entry,) = json.loads((d / "layout/index.json").read_text())["manifests"]
    # One image per architecture under the tag: umoci unpacks a manifest, so point the tag at this
    # machine's, as a runtime resolves it (hack/image.py select).
    tag = subprocess.run(
        [sys.executable, str(ROOT / "hack/image.py"), "select", str(d / "layout"), HOST_ARCH],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subprocess.run(
        ["umoci", "unpack", "--image", f"{d / 'layout'}:{tag}", str(d / "bundle")],
        check=True,
        capture_output=True,
    )
    rootfs = d / "bundle/rootfs"
    # The chart's mount points (the webhook's /tls, serve's API certificate) and the kubelet's.
    for mount_point in ("tls", "etc/gpuctl/tls", SA_DIR.lstrip("/"), "proc", "dev"):
        (rootfs / mount_point).mkdir(parents=True, exist_ok=True)
    return {
        "rootfs": rootfs,
        "config": json.loads((d / "bundle/config.json").read_text()),
        "digest": entry["digest"],
    }


@pytest.fixture(scope="module")
def chart(image) -> dict[str, dict]:
    """The chart's objects for this image, by (kind, name)."""
    out = subprocess.run(
        [
            str(HELM),
            "template",
            "gpuctl",
            str(CHART),
            "-n",
            RELEASE_NS,
            "--set",
            f"image.digest={image['digest']}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}


def test_image_is_minimal_non_root_and_runs_gpuctl(image) -> None:
    rootfs, cfg = image["rootfs"], image["config"]
    proc = cfg["process"]
    assert proc["args"] == ["/usr/local/bin/gpuctl", "--help"]
    assert (proc["user"]["uid"], proc["user"]["gid"]) == (65532, 65532)
    for shell in ("bin/sh", "bin/bash", "bin/dash", "usr/bin/sh", "usr/bin/bash", "usr/bin/dash"):
        assert not (rootfs / shell).exists(), shell
    assert not (rootfs / "usr/bin/apt").exists() and not (rootfs / "usr/bin/dpkg").exists()
    assert "gpuctl:x:65532:65532" in (rootfs / "etc/passwd").read_text()
    # Every module is compiled at build time: a read-only root filesystem costs no start-up time.
    site = next((rootfs / "usr/local/lib").glob("python3.*/dist-packages"))
    assert list((site / "gpuctl/__pycache__").glob("main.cpython-3*.pyc"))


class Runner:
    """Start a container of the chart's Deployment from the unpacked image, the way a kubelet would."""

    def __init__(self, image: dict, tmp: Path, api_host: str, api_port: str):
        self.image, self.tmp, self.api = image, tmp, (api_host, api_port)
        self.procs: list[subprocess.Popen] = []

    def start(self, deployment: dict, volumes: dict[str, Path], port_flag: str, port: int, log: Path):
        pod = deployment["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        sec = pod["securityContext"]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        args = [a if not a.startswith(f"{port_flag}=") else f"{port_flag}={port}" for a in c["args"]]
        assert args != c["args"], f"{port_flag} not among the chart's args {c['args']}"
        env = {}
        for kv in self.image["config"]["process"]["env"]:
            k, v = kv.split("=", 1)
            env[k] = v
        # The downward API, as the kubelet resolves it for this pod.
        fields = {"metadata.namespace": deployment["metadata"]["namespace"], "metadata.name": "pod-0"}
        for e in c.get("env", []):
            env[e["name"]] = (
                fields[e["valueFrom"]["fieldRef"]["fieldPath"]] if "valueFrom" in e else e["value"]
            )
        env.update(
            {
                "KUBERNETES_SERVICE_HOST": self.api[0],
                "KUBERNETES_SERVICE_PORT": self.api[1],
                "HOSTNAME": "pod",
            }
        )
        r = self.image["rootfs"]
        mounts = [f"mount --bind {r} {r}", f"mount -o remount,bind,ro {r}"]
        for m in c.get("volumeMounts", []):
            src = volumes[m["name"]]
            mounts.append(f"mount --bind {src} {r}{m['mountPath']}")
            if m.get("readOnly"):
                mounts.append(f"mount -o remount,bind,ro {r}{m['mountPath']}")
        mounts.append(f"mount --bind {volumes['serviceaccount']} {r}{SA_DIR}")
        mounts += [f"mount -t proc proc {r}/proc", f"mount --rbind /dev {r}/dev"]
        # The container's command through the image's PATH, as the user of the pod's securityContext.
        run = [
            "env",
            "-i",
            *[f"{k}={v}" for k, v in env.items()],
            shutil.which("chroot") or "chroot",
            f"--userspec={sec['runAsUser']}:{sec['runAsGroup']}",
            str(r),
            *c["command"],
            *args,
        ]
        script = " && ".join(mounts) + " && exec " + " ".join(f"'{a}'" for a in run)
        p = subprocess.Popen(
            ["unshare", "--mount", "--pid", "--fork", "--propagation", "private", "sh", "-c", script],
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(p)
        return p

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(10)


@pytest.fixture(scope="module")
def system(kube, kubectl_bin, cluster) -> Iterator[dict]:
    """The release namespace with the chart's RBAC applied for real (ServiceAccounts, ClusterRoles,
    bindings); tokens of its ServiceAccounts. Objects this fixture created are deleted afterwards."""
    created: list[list[str]] = []

    def kc(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            [kubectl_bin, "--kubeconfig", cluster, *args],
            input=input,
            capture_output=True,
            text=True,
            check=check,
        )

    if kc("get", "ns", RELEASE_NS, check=False).returncode != 0:
        kc("create", "namespace", RELEASE_NS)
        created.append(["namespace", RELEASE_NS])
    yield {"kc": kc, "created": created}
    for obj in reversed(created):
        subprocess.run(
            [kubectl_bin, "--kubeconfig", cluster, "delete", "--ignore-not-found", *obj], capture_output=True
        )


def apply_rbac(system: dict, chart: dict, components: tuple[str, ...]) -> None:
    """Apply the chart's ServiceAccounts, (Cluster)Roles and bindings of these components for real."""
    kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    docs = [
        d
        for (k, _), d in chart.items()
        if k in kinds and d["metadata"]["labels"].get("app.kubernetes.io/name") in components
    ]
    assert docs
    for d in docs:
        ref = [d["kind"].lower(), d["metadata"]["name"]]
        if "namespace" in d["metadata"]:
            ref += ["-n", d["metadata"]["namespace"]]
        if system["kc"]("get", *ref, check=False).returncode != 0:
            system["created"].append(ref)
    system["kc"]("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(docs))


def service_account_dir(system: dict, kube_ca: bytes, name: str, dest: Path) -> Path:
    token = system["kc"]("-n", RELEASE_NS, "create", "token", name, "--duration=1h").stdout.strip()
    dest.mkdir(parents=True)
    (dest / "token").write_text(token)
    (dest / "ca.crt").write_bytes(kube_ca)
    (dest / "namespace").write_text(RELEASE_NS)
    for f in dest.iterdir():
        f.chmod(0o644)
    dest.chmod(0o755)
    return dest


def kubeconfig_ca_and_server(path: str) -> tuple[bytes, str, str]:
    cfg = yaml.safe_load(Path(path).read_text())
    c = cfg["clusters"][0]["cluster"]
    host_port = c["server"].removeprefix("https://")
    host, port = host_port.rsplit(":", 1)
    return base64.b64decode(c["certificate-authority-data"]), host, port


def make_tls(dest: Path) -> bytes:
    """A CA and a serving certificate for 127.0.0.1 in the files the chart mounts at /tls."""
    dest.mkdir(parents=True)

    def q(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    q(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        str(dest / "ca.key"),
        "-out",
        str(dest / "ca.crt"),
    )
    q(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        str(dest / "tls.key"),
        "-out",
        str(dest / "tls.csr"),
    )
    (dest / "ext").write_text("subjectAltName=IP:127.0.0.1\n")
    q(
        "x509",
        "-req",
        "-in",
        str(dest / "tls.csr"),
        "-CA",
        str(dest / "ca.crt"),
        "-CAkey",
        str(dest / "ca.key"),
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        str(dest / "ext"),
        "-out",
        str(dest / "tls.crt"),
    )
    for f in dest.iterdir():
        f.chmod(0o644)
    dest.chmod(0o755)
    return (dest / "ca.crt").read_bytes()


def test_webhook_from_the_image_refuses_a_raw_kubectl_submission(
    image, chart, system, kube, kubectl_bin, cluster, tmp_path
) -> None:
    apply_rbac(system, chart, ("gpuctl-admission",))
    ca, host, port = kubeconfig_ca_and_server(cluster)
    runner = Runner(image, tmp_path, host, port)
    sa = service_account_dir(system, ca, "gpuctl-admission", tmp_path / "sa")
    test_ca = make_tls(tmp_path / "tls")
    hook_port = free_port()
    sfx = uuid.uuid4().hex[:6]
    team = f"img-team-{sfx}"
    vwc_name = f"gpuctl-image-test-{sfx}"
    log = tmp_path / "webhook.log"
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": team, "labels": {Labels.NAMESPACE: "true"}},
        }
    )
    try:
        runner.start(
            chart[("Deployment", "gpuctl-admission")],
            {"tls": tmp_path / "tls", "serviceaccount": sa},
            "--port",
            hook_port,
            log,
        )
        ctx = ssl.create_default_context(cafile=str(tmp_path / "tls/ca.crt"))

        def ready() -> bool:
            try:
                return (
                    urllib.request.urlopen(
                        f"https://127.0.0.1:{hook_port}/readyz", context=ctx, timeout=2
                    ).status
                    == 200
                )
            except OSError:
                return False

        wait_logged(ready, 60, "the image's webhook ready", log)
        # The chart's webhook configuration, by URL, seeing only this test's namespace.
        vwc = json.loads(json.dumps(chart[("ValidatingWebhookConfiguration", "gpuctl-admission")]))
        vwc["metadata"] = {"name": vwc_name, "labels": TESTBED_LABEL}
        vwc["webhooks"] = [w for w in vwc["webhooks"] if w["name"].startswith("workloads.")]
        for w in vwc["webhooks"]:
            w["clientConfig"] = {
                "url": f"https://127.0.0.1:{hook_port}/validate",
                "caBundle": base64.b64encode(test_ca).decode(),
            }
            w["namespaceSelector"]["matchExpressions"].append(
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [team]}
            )
        kube.create(vwc)
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "raw",
                "namespace": team,
                "labels": {Labels.KUEUE_QUEUE: "default", Labels.POOL: "no-such-pool"},
            },
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "nodeSelector": {Labels.POOL: "no-such-pool"},
                        "containers": [
                            {
                                "name": "main",
                                "image": "busybox",
                                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                            }
                        ],
                    }
                },
            },
        }

        def refused() -> subprocess.CompletedProcess | None:
            p = subprocess.run(
                [kubectl_bin, "--kubeconfig", cluster, "apply", "-f", "-"],
                input=yaml.safe_dump(job),
                capture_output=True,
                text=True,
            )
            return p if p.returncode != 0 else None

        p = wait_logged(refused, 30, "the API server calling the image's webhook", log)
        assert 'admission webhook "workloads.admission.runwhere.ai" denied the request' in p.stderr, p.stderr
        assert "[pool-exists]" in p.stderr and "no-such-pool" in p.stderr
    finally:
        subprocess.run(
            [
                kubectl_bin,
                "--kubeconfig",
                cluster,
                "delete",
                "validatingwebhookconfiguration",
                vwc_name,
                "--ignore-not-found",
            ],
            capture_output=True,
        )
        runner.stop()
        kube.delete(f"/api/v1/namespaces/{team}")


def test_serve_from_the_image_exports_pool_metrics(
    image, chart, system, kube, clean_cluster, cluster, tmp_path
) -> None:
    apply_rbac(system, chart, ("gpuctl-serve", "gpuctl-api"))
    ca, host, port = kubeconfig_ca_and_server(cluster)
    sa = service_account_dir(system, ca, "gpuctl-serve", tmp_path / "sa")
    pool = f"img-pool-{uuid.uuid4().hex[:6]}"
    gpuctl = ROOT / ".venv/bin/gpuctl"
    spec = tmp_path / "pool.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "kind": "pool",
                "version": "v0.1",
                "pool": {"name": pool},
                "nodes": {"gpu-node-5": {"gpu-type": "RTX4090"}},
            }
        )
    )
    subprocess.run(
        [str(gpuctl if gpuctl.exists() else "gpuctl"), "--kubeconfig", cluster, "create", "-f", str(spec)],
        check=True,
        capture_output=True,
    )
    (tmp_path / "tmp").mkdir(mode=0o1777)
    (tmp_path / "tmp").chmod(0o1777)
    make_tls(tmp_path / "api-tls")  # Secret gpuctl-api-tls: serve --api speaks HTTPS only (apiTls.enabled)
    tls = ssl.create_default_context(cafile=str(tmp_path / "api-tls/ca.crt"))
    runner = Runner(image, tmp_path, host, port)
    metrics_port = free_port()
    log = tmp_path / "serve.log"
    try:
        runner.start(
            chart[("Deployment", "gpuctl-serve")],
            {"tmp": tmp_path / "tmp", "tls": tmp_path / "api-tls", "serviceaccount": sa},
            "--metrics-port",
            metrics_port,
            log,
        )

        def series() -> str | None:
            try:
                body = (
                    urllib.request.urlopen(
                        f"https://127.0.0.1:{metrics_port}/metrics", timeout=2, context=tls
                    )
                    .read()
                    .decode()
                )
            except OSError:
                return None
            line = f'gpuctl_pool_allocatable_gpus{{pool="{pool}"}} 4.0'
            return body if line in body else None

        body = wait_logged(series, 60, "pool series on /metrics", log)
        assert f'gpuctl_pool_nodes{{pool="{pool}",state="ready"}} 1.0' in body
        # The API the chart mounts into serve (serve.api) answers on the same port.
        with urllib.request.urlopen(f"https://127.0.0.1:{metrics_port}/health", timeout=5, context=tls) as r:
            assert r.status == 200
    finally:
        runner.stop()


def test_the_webhook_bench_measures_the_image_as_it_ships(image, tmp_path: Path) -> None:
    """bench/webhook.py --image runs the image's own webhook on the image's own interpreter: the figures
    issue 12 was closed on (docs/admission.md, fifth session)."""
    site, python = image_server(image["rootfs"], tmp_path).removeprefix("builtin@").split("^")
    probe = "import admission.rules, sys; print(admission.rules.__file__); print(sys.prefix)"
    out = subprocess.run([python, "-c", probe], cwd=site, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [f"{site}/admission/rules.py", f"{image['rootfs']}/usr"]
    bench = [sys.executable, "bench/webhook.py", "--image", str(ARCHIVE), "--http", "floor-tls"]
    short = ["--rates", "200", "--duration", "1", "--warmup", "0.5", "--repeat", "1"]
    run = subprocess.run([*bench, *short], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    # round, server, rate, p50, p90, p99, p99.9, max, err: the image's server answered every request.
    row = re.search(r"^\s+1 builtin@image-site py3\.\S*\s+200(?:\s+[\d.]+){5}\s+(\d+)\s", run.stdout, re.M)
    assert row, run.stdout
    assert row[1] == "0", run.stdout
