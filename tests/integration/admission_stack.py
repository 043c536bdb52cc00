"""gpuctl's whole admission stack on the local cluster, as shipped, bound to a test's own namespaces.

`AdmissionStack.install(kube, namespaces, tmp)` starts the webhook server (enforce mode) on 127.0.0.1 and
registers manifests/admission/webhook.yaml pointed at it, and creates every ValidatingAdmissionPolicy and
MutatingAdmissionPolicy the demo installs (hack/demo.sh: the chart's own rendering for the local cluster's
Kubernetes version, admission.policies.catalog.chart_policies) under test names. Namespaced bindings keep
their shipped selector (team or other namespaces) narrowed to `namespaces`, so the stack judges exactly
what it would judge in production there and nothing of other tests; the cluster-scoped PriorityClass
policy binds as shipped. `remove()` deletes the webhook configuration first (a dangling Fail webhook would
break the cluster for everyone), then the rest, then stops the server.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from admission.policies import catalog, submitted_by
from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import AUDIT_SUBMITTED_BY_ANNOTATION
from tests.integration.conftest import wait_until
from tests.integration.test_admission_webhook import (
    TESTBED_LABEL,
    _certs,
    _free_port,
    _ready,
    _start_server,
    _webhook_config,
)
from tests.integration.test_chart import CHART, VERSIONS, helm


def _policies() -> list[dict]:
    """Every admission policy (and binding) the demo installs: the chart's rendering, as hack/demo.sh makes
    it for the local cluster's Kubernetes version."""
    out = helm(
        "template", "gpuctl", str(CHART), "-n", "gpuctl-system", "--show-only", "templates/admission.yaml",
        "--kube-version", VERSIONS["K8S_VERSION"], "--set", f"image.digest=sha256:{'0' * 64}",
    ).stdout  # fmt: skip
    return catalog.chart_policies(yaml.safe_load_all(out))


def has_module(name: str) -> bool:
    """Whether this checkout's admission package has the module (looked up beside it: an editable install of
    another checkout would otherwise answer for a module this one lacks)."""
    return (Path(catalog.__file__).parents[1] / f"{name}.py").exists()


@dataclass
class AdmissionStack:
    kube: Cluster
    kubectl_bin: str
    kubeconfig: str
    sfx: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    objects: list[dict] = field(default_factory=list)
    webhook: str = ""
    server: subprocess.Popen | None = None
    log: Path | None = None

    @classmethod
    def install(
        cls, kube: Cluster, kubectl_bin: str, kubeconfig: str, namespaces: list[str], tmp: Path
    ) -> AdmissionStack:
        s = cls(kube, kubectl_bin, kubeconfig)
        try:
            s._install(namespaces, tmp)
        except BaseException:
            s.remove()
            raise
        return s

    def _install(self, namespaces: list[str], tmp: Path) -> None:
        ca, crt, key = _certs(tmp)
        port = _free_port()
        self.log = tmp / "webhook.log"
        self.server = _start_server(port, crt, key, self.kubeconfig, "enforce", self.log)
        ca_b64 = base64.b64encode(ca.read_bytes()).decode()
        wait_until(lambda: _ready(port, ca), 60, 0.3, what="webhook ready")
        renamed: dict[str, str] = {}
        objs = copy.deepcopy(_policies())
        for o in objs:
            old = o["metadata"]["name"]
            renamed[old] = f"{old}-t{self.sfx}"
            o["metadata"] = {"name": renamed[old], "labels": dict(TESTBED_LABEL)}
        for o in objs:
            spec = o["spec"]
            if "policyName" in spec:  # a binding
                spec["policyName"] = renamed[spec["policyName"]]
                sel = (spec.get("matchResources") or {}).get("namespaceSelector")
                if sel is not None:
                    sel["matchExpressions"].append(
                        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(namespaces)}
                    )
        # Policies before their bindings (kubectl: gpuctl's client knows only the kinds gpuctl writes).
        objs.sort(key=lambda o: o["kind"].endswith("Binding"))
        self.objects = objs  # before creating: a partial create is removed too
        self._kubectl(
            "create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})
        )
        name = f"gpuctl-admission-t{self.sfx}"
        vwc = _webhook_config(
            name,
            f"https://127.0.0.1:{port}/validate",
            ca_b64,
            namespaces,
            {"admission-test": "none"},
            f"t{self.sfx}-",
        )
        self.kube.apply(vwc)
        self.webhook = name

    def _kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        p = subprocess.run(
            [self.kubectl_bin, "--kubeconfig", self.kubeconfig, *args],
            input=input,
            capture_output=True,
            text=True,
        )
        if p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {p.stderr}")
        return p

    def wait_active(self, probe: dict, needle: str) -> None:
        """Until the API server applies the stack: `probe` (dry run, as admin) is refused with `needle`."""

        def refused() -> bool:
            p = subprocess.run(
                [self.kubectl_bin, "--kubeconfig", self.kubeconfig, "create", "--dry-run=server", "-f", "-"],
                input=json.dumps(probe),
                capture_output=True,
                text=True,
            )
            return p.returncode != 0 and needle in p.stderr

        wait_until(refused, 60, 0.5, what=f"admission stack active ({needle})")

    def wait_mutating(self, probe: dict, check: Callable[[dict], bool], what: str) -> None:
        """Until the API server applies the mutating policies: `check` holds for the dry-run result of
        creating `probe` as admin (MutatingAdmissionPolicies are picked up asynchronously)."""

        def applied() -> bool:
            p = subprocess.run(
                [
                    self.kubectl_bin,
                    "--kubeconfig",
                    self.kubeconfig,
                    "create",
                    "--dry-run=server",
                    "-o",
                    "json",
                    "-f",
                    "-",
                ],
                input=json.dumps(probe),
                capture_output=True,
                text=True,
            )
            return p.returncode == 0 and check(json.loads(p.stdout))

        wait_until(applied, 60, 0.5, what=what)

    def remove(self) -> None:
        if self.webhook:
            with contextlib.suppress(ApiError):
                self.kube.delete(path("ValidatingWebhookConfiguration", self.webhook))
        if self.objects:
            doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": self.objects})
            subprocess.run(
                [
                    self.kubectl_bin,
                    "--kubeconfig",
                    self.kubeconfig,
                    "delete",
                    "--ignore-not-found",
                    "-f",
                    "-",
                ],
                input=doc,
                capture_output=True,
                text=True,
            )
        if self.server is not None:
            self.server.terminate()
            try:
                self.server.wait(10)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait(5)


@contextlib.contextmanager
def submitted_by_policy(
    kube: Cluster, kubectl_bin: str, kubeconfig: str, namespaces: list[str]
) -> Iterator[None]:
    """The shipped submitted-by MutatingAdmissionPolicies (the API server, not the client, says who submitted
    a job and who stopped or resumed it: issue 33) under test names, bound to `namespaces` only; active
    once the first stamps a dry run."""
    sfx = uuid.uuid4().hex[:6]
    objs = copy.deepcopy([*submitted_by.policies(), *submitted_by.active_policies()])
    names = []
    for mpa, binding in zip(objs[::2], objs[1::2], strict=True):
        name = f"{mpa['metadata']['name']}-t{sfx}"
        names += [f"mutatingadmissionpolicybinding/{name}", f"mutatingadmissionpolicy/{name}"]
        for o in (mpa, binding):
            o["metadata"] = {"name": name, "labels": dict(TESTBED_LABEL)}
        binding["spec"]["policyName"] = name
        binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"].append(
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(namespaces)}
        )
    probe = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "generateName": "probe-",
            "namespace": namespaces[0],
            "annotations": {AUDIT_SUBMITTED_BY_ANNOTATION: "forged"},
        },
        "spec": {
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}
        },
    }

    def stamped() -> bool:
        made = kube.create(copy.deepcopy(probe), dry_run=True)
        return made["metadata"]["annotations"].get(AUDIT_SUBMITTED_BY_ANNOTATION) != "forged"

    def kubectl(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(  # gpuctl's client knows only the kinds gpuctl writes
            [kubectl_bin, "--kubeconfig", kubeconfig, *args], input=input, capture_output=True, text=True
        )

    try:
        p = kubectl(
            "create",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}),
        )
        assert p.returncode == 0, p.stderr
        wait_until(stamped, 30, 0.3, what="submitted-by policy active")
        yield
    finally:
        kubectl("delete", "--ignore-not-found", *names)
