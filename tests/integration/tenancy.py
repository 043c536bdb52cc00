"""Team members as the people who use gpuctl: least privilege, tokens from an exec plugin.

`TeamMember` is a ServiceAccount bound to exactly the roles gpuctl ships for team members
(manifests/api/rbac.yaml: `gpuctl-user` by a RoleBinding in the team namespace, `gpuctl-pool-viewer` by
a ClusterRoleBinding), or to Kubernetes' own `edit` role in the namespace (a namespace editor: what
a plain `kubectl` tenant usually gets). Its kubeconfig carries no token: the credential comes from a
client.authentication.k8s.io/v1 exec plugin, as on EKS/GKE/AKS, and the context's namespace is the
team's, as kubectl users set it. Nothing here runs as cluster-admin but the setup itself.

    member = TeamMember.create(kube, "team-a", roles=SHIPPED_ROLES)
    member.gpuctl("get", "jobs")                 # CompletedProcess, KUBECONFIG = member.kubeconfig
    member.kubectl(kubectl_bin, "get", "pods")   # plain kubectl with the same credential
    member.delete()
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gpuctl.cluster import ApiError, Cluster, path

ROOT = Path(__file__).resolve().parents[2]
RBAC = ROOT / "manifests" / "api" / "rbac.yaml"
USER_ROLE = "gpuctl-user"  # RoleBinding in the team namespace
POOL_VIEWER_ROLE = "gpuctl-pool-viewer"  # ClusterRoleBinding
EARLIER_CLIENT_ROLE = "gpuctl-earlier-client"  # ClusterRoleBinding, users of the earlier client only
CLUSTER_ROLES = (POOL_VIEWER_ROLE, EARLIER_CLIENT_ROLE)  # bound by ClusterRoleBindings
SHIPPED_ROLES = (USER_ROLE, POOL_VIEWER_ROLE)
EDIT_ROLES = ("edit",)  # Kubernetes' aggregated namespace editor, by a RoleBinding


def caller_roles() -> list[dict]:
    """The ClusterRoles gpuctl ships for callers (every ClusterRole of manifests/api/rbac.yaml but the
    API's own identity)."""
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    return [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] != "gpuctl-api"]


def apply_caller_roles(kube: Cluster) -> None:
    """Install (or update) the shipped caller ClusterRoles, as the admin would from the manifest."""
    for role in caller_roles():
        kube.apply(role)


_PLUGIN = """#!{python}
import json, sys
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {{"token": open({token!r}).read().strip()}}}}))
"""


@dataclass
class TeamMember:
    kube: Cluster  # the admin's client (setup and teardown only)
    namespace: str
    name: str
    roles: tuple[str, ...]
    dir: Path
    bindings: list[str] = field(default_factory=list)  # API paths to delete afterwards

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    @property
    def kubeconfig(self) -> str:
        return str(self.dir / "kubeconfig")

    @classmethod
    def create(
        cls,
        kube: Cluster,
        namespace: str,
        *,
        roles: tuple[str, ...] = SHIPPED_ROLES,
        name: str | None = None,
        token_seconds: int = 3600,
    ) -> TeamMember:
        """A ServiceAccount in `namespace` bound to `roles`: CLUSTER_ROLES cluster-wide, every other role
        by a RoleBinding in the namespace. The namespace must exist."""
        name = name or f"member-{uuid.uuid4().hex[:6]}"
        m = cls(kube, namespace, name, tuple(roles), Path(tempfile.mkdtemp(prefix=f"gpuctl-{name}-")))
        kube.create(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
        )
        subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
        for role in roles:
            ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}
            binding_name = f"{name}-{role}"
            if role in CLUSTER_ROLES:
                obj = {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": f"{namespace}-{binding_name}"},
                    "roleRef": ref,
                    "subjects": [subject],
                }
                m.bindings.append(
                    f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{namespace}-{binding_name}"
                )
            else:
                obj = {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": binding_name, "namespace": namespace},
                    "roleRef": ref,
                    "subjects": [subject],
                }
                m.bindings.append(
                    f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/{binding_name}"
                )
            kube.create(obj)
        token = kube.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": token_seconds},
            },
        )["status"]["token"]
        m._write_kubeconfig(token)
        return m

    def _write_kubeconfig(self, token: str) -> None:
        admin = yaml.safe_load(Path(os.environ["KUBECONFIG"]).read_text())
        ctx_name = admin["current-context"]
        ctx = next(c["context"] for c in admin["contexts"] if c["name"] == ctx_name)
        cluster = next(c for c in admin["clusters"] if c["name"] == ctx["cluster"])
        token_file = self.dir / "token"
        token_file.write_text(token)
        token_file.chmod(0o600)
        plugin = self.dir / "get-token"
        plugin.write_text(_PLUGIN.format(python=sys.executable, token=str(token_file)))
        plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [cluster],
            "users": [
                {
                    "name": self.name,
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1",
                            "command": str(plugin),
                            "interactiveMode": "Never",
                        }
                    },
                }
            ],
            "contexts": [
                {
                    "name": self.name,
                    "context": {"cluster": cluster["name"], "user": self.name, "namespace": self.namespace},
                }
            ],
            "current-context": self.name,
        }
        Path(self.kubeconfig).write_text(yaml.safe_dump(config))

    def env(self) -> dict[str, str]:
        env = {**os.environ, "KUBECONFIG": self.kubeconfig}
        env.pop("DEFAULT_NAMESPACE", None)
        return env

    def gpuctl(
        self, *args: str, input: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """Run the gpuctl CLI as this member (a new process, like a user's shell)."""
        return subprocess.run(
            [sys.executable, "-m", "gpuctl.main", *args],
            env=self.env(),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )

    def kubectl(self, kubectl_bin: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        """Run kubectl as this member."""
        return subprocess.run(
            [kubectl_bin, "--kubeconfig", self.kubeconfig, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def client(self) -> Cluster:
        """gpuctl's own client with this member's credential."""
        return Cluster.connect(kubeconfig=self.kubeconfig)

    def delete(self) -> None:
        for p in self.bindings:
            try:
                self.kube.delete(p)
            except ApiError as e:
                if e.status != 404:
                    raise
        try:
            self.kube.delete(path("ServiceAccount", self.name, self.namespace))
        except ApiError as e:
            if e.status != 404:
                raise
        shutil.rmtree(self.dir, ignore_errors=True)  # its kubeconfig and token helper


def dump(p: subprocess.CompletedProcess) -> str:
    """A CompletedProcess for an assertion message."""
    return json.dumps({"rc": p.returncode, "stdout": p.stdout[-3000:], "stderr": p.stderr[-3000:]}, indent=1)


def bind_jobset_editor(kube: Cluster, namespace: str, who: TeamMember) -> None:
    """What docs/distributed.md tells admins to bind for JobSets (JobSet's own jobset-editor-role's rights):
    a Role in the namespace and its RoleBinding to `who`."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    kube.request(
        "POST",
        f"{rbac}/namespaces/{namespace}/roles",
        body={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "jobset-editor", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": ["jobset.x-k8s.io"],
                    "resources": ["jobsets"],
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                }
            ],
        },
    )
    kube.request(
        "POST",
        f"{rbac}/namespaces/{namespace}/rolebindings",
        body={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "jobset-editor", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jobset-editor"},
            "subjects": [{"kind": "ServiceAccount", "name": who.name, "namespace": namespace}],
        },
    )
