"""gpuctl.cluster.kubeyaml reads what yaml.safe_load reads, or gives up (None); never a different value."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuctl.cluster import config, kubeyaml

ROOT = Path(__file__).resolve().parents[2]


def same_or_none(text: str) -> Any:
    got = kubeyaml.loads(text)
    if got is not None:
        want = yaml.safe_load(text)
        assert got == want, text
        assert json.dumps(got, default=repr) == json.dumps(want, default=repr), text  # bool is not int
    return got


# ----------------------------------------------------------------------------- property
# Words PyYAML resolves to something other than a string, or that need quoting or escapes.
TRICKY = [
    'yes', 'No', 'ON', 'off', 'y', 'n', 'true', 'False', 'null', 'Null', '~', '', '010', '0x1F', '0b101',
    '0o17', '1e3', '1.5', '1.', '.5', '.inf', '-.Inf', '.NaN', '2001-12-14',
    '2001-12-14t21:59:43.10-05:00', '190:20:30', '1_000', '-1', '+5', '-0', '00', '<<', '=', '- a', '-a',
    '#x', 'a #b', 'a#b', 'a: b', 'a:', ':a', '?a', "it's", 'say "hi"', 'back\\slash', 'tab\there',
    'line\nbreak', '  lead', 'trail  ', 'é ü', '*alias', '&anchor', '!tag', '%dir', '@at', '`bt', '{a}',
    '[a]', 'a, b', '| x', '> x', '---', '...', 'https://example.com:6443/x?y=1#frag',
    'arn:aws:eks:us-east-1:123:cluster/prod', '\x07bell', '\u2028',
]  # fmt: skip
PLAIN_FIRST = "abcdeghijklmpqrsuvwxz"  # no letter that starts a YAML 1.1 bool or null word
PLAIN_REST = "abcdefghijklmnopqrstuvwxyz0123456789-_./"

plain_text = st.builds(
    lambda a, b: a + b,
    st.sampled_from(PLAIN_FIRST),
    st.text(PLAIN_REST, max_size=30),
)
any_text = st.one_of(plain_text, st.sampled_from(TRICKY), st.text(max_size=20))
keys = st.one_of(plain_text, st.sampled_from(TRICKY), st.text(max_size=10))


def docs(text: st.SearchStrategy[str], key: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    scalars = st.one_of(text, st.integers(-(10**12), 10**12), st.booleans(), st.none())
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(key, inner, max_size=4),
        ),
        max_leaves=25,
    )


STYLES = [
    {"default_flow_style": False},
    {"default_flow_style": False, "sort_keys": False},
    {"default_flow_style": False, "indent": 4},
    {"default_flow_style": False, "indent": 3, "sort_keys": False, "explicit_start": True},
    {"default_flow_style": False, "allow_unicode": True, "width": 40},
    {"default_flow_style": None},
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=docs(any_text, keys), style=st.sampled_from(STYLES))
def test_any_dump_reads_the_same_or_gives_up(doc: Any, style: dict[str, Any]) -> None:
    same_or_none(yaml.safe_dump(doc, **style))


@settings(max_examples=300, deadline=None)
@given(
    doc=st.dictionaries(plain_text, docs(plain_text, plain_text), min_size=1, max_size=5),
    style=st.sampled_from(STYLES[:4]),
)
def test_block_style_with_plain_strings_is_read(doc: dict[str, Any], style: dict[str, Any]) -> None:
    """The subset is not empty: kubectl-like block dumps of plain strings never fall back."""
    text = yaml.safe_dump(doc, **style)
    assert same_or_none(text) is not None, text


@settings(max_examples=300, deadline=None)
@given(doc=docs(any_text, keys))
def test_go_yaml_layout_reads_the_same_or_gives_up(doc: Any) -> None:
    """go-yaml writes a sequence at its key's indent: PyYAML's default layout is the same; drop one
    indent level of the dump to check the other layout too (PyYAML reads both)."""
    text = yaml.safe_dump(doc, default_flow_style=False, indent=4)
    same_or_none(text.replace("\n    ", "\n  "))


# Lines that are valid, invalid or tricky YAML alone or in company: random texts of them must read as
# PyYAML reads them, or give up; above all never read a text PyYAML rejects.
LINES = [
    'a:', 'b:', 'a: 1', 'b: x', '- ', '-', '- a', '- a: 1', '- - b', 'c: |', 'c: >', 'c: |-', 'c: >-',
    '  text', 'text', '# c', 'a: x # c', "a: 'q'", 'a: "q\\n"', "'k': v", '"k": v', 'a: {}', '- []',
    'x y', 'a: b: c', 'a:b', 'a :b', 'k: -1', 'k: - x', '---', '...', "a: ''", "k: 'it''s'", 'k: "a" #c',
    "k: 'a' b", '-  a: 1', '   b: 2', 'k:  v  ', '', '  ', 'k: yes', 'k: ~', 'k: 012', '? x', ': y',
    'k: #', 'k: a#b', 'k: a #b', "- 'a': b", '- "x"', 'k: "a\\"', 'k: -', 'k: --', '- -', 'k: [] x',
    'k: {} # c', 'k: %x', 'k: @', 'k: a, b', 'k: [x]', 'a: 1.5', 'k: 2001-01-01', '<<: x', '~: 1',
    'null: 1', "'yes': 1", 'k: "\\u00e9\\x4"',
]  # fmt: skip


@settings(max_examples=1500, deadline=None)
@given(
    lines=st.lists(
        st.tuples(st.sampled_from([0, 0, 1, 2, 2, 3, 4, 6]), st.sampled_from(LINES)), min_size=1, max_size=7
    ),
    end=st.sampled_from(["", "\n", "\n\n"]),
)
def test_random_lines_read_as_safe_load_or_give_up(lines: list[tuple[int, str]], end: str) -> None:
    text = "\n".join(" " * n + line for n, line in lines) + end
    got = kubeyaml.loads(text)
    if got is None:
        return
    try:
        want = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise AssertionError(f"kubeyaml read {text!r}, which PyYAML rejects: {e}") from None
    assert json.dumps(got, default=repr) == json.dumps(want, default=repr), text


# ----------------------------------------------------------------------------- kubectl's shapes
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n" + bytes(range(256)) * 4).decode()

KUBECONFIGS = {
    "kubectl": f"""\
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: {CA}
    server: https://127.0.0.1:6443
  name: kind-kind
- cluster:
    insecure-skip-tls-verify: true
    server: https://10.0.0.1:443
    tls-server-name: api.internal
    proxy-url: http://proxy:3128
  name: arn:aws:eks:us-east-1:123456789012:cluster/prod
contexts:
- context:
    cluster: kind-kind
    namespace: team-a
    user: kind-kind
  name: kind-kind
- context:
    cluster: arn:aws:eks:us-east-1:123456789012:cluster/prod
    user: arn:aws:eks:us-east-1:123456789012:cluster/prod
  name: prod/admin@eks
current-context: ""
kind: Config
preferences: {{}}
users:
- name: kind-kind
  user:
    client-certificate-data: {CA}
    client-key-data: {CA}
- name: arn:aws:eks:us-east-1:123456789012:cluster/prod
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      args:
      - --region
      - us-east-1
      - eks
      - get-token
      - --cluster-name
      - prod
      command: aws
      env:
      - name: AWS_PROFILE
        value: prod
      - name: "NO_COLOR"
        value: "1"
      installHint: "install the aws cli # see https://aws.amazon.com/cli/"
      interactiveMode: IfAvailable
      provideClusterInfo: false
""",
    "go-yaml v3, indent 4, comments": """\
---
# written by a tool
apiVersion: v1
kind: Config
clusters:
    - name: 'it''s a "cluster"'   # quoted name
      cluster:
          server: "https://[::1]:6443/"
          certificate-authority: ../pki/ca.crt
contexts:
    - name: dev
      context: {cluster: 'it''s a "cluster"', user: dev}
users:
    - name: dev
      user:
          token: abc.def-ghi_jkl
          tokenFile: null
current-context: dev
extensions: []
""",
    "oidc, blocks, escapes": """\
apiVersion: v1
kind: Config
current-context: "ctx:with:colons"
users:
- name: oidc
  user:
    auth-provider:
      name: oidc
      config:
        client-id: kubernetes
        id-token: eyJhbGciOi.eyJzdWIiOi.sig-_
        idp-certificate-authority-data: |
          LS0tLS1CRUdJTi
          BDRVJUSUZJQ0FURS0tLS0t
        note: >-
          folded text
          on two lines
        escaped: "tab\\there \\u00e9 \\x41 \\"q\\" # not a comment"
""",
}


@pytest.mark.parametrize("name", KUBECONFIGS)
def test_kubectl_shapes_read_as_safe_load(name: str) -> None:
    text = KUBECONFIGS[name]
    if "{cluster:" in text:  # a non-empty flow mapping is outside the subset
        assert kubeyaml.loads(text) is None
        text = text.replace(
            "{cluster: 'it''s a \"cluster\"', user: dev}",
            "\n          cluster: 'it''s a \"cluster\"'\n          user: dev",
        )
    got = kubeyaml.loads(text)
    assert got is not None
    assert got == yaml.safe_load(text)


def _kubectl() -> Path:
    cache = Path(os.environ.get("GPUCTL_TESTBED_CACHE", Path.home() / ".cache" / "gpuctl-testbed"))
    found = sorted(cache.glob("bin/k8s-*/kubectl"))
    if not found:
        pytest.fail(f"no kubectl under {cache}/bin: run hack/cluster/build.sh (hack/test.sh does)")
    return found[-1]


def test_kubeconfigs_written_by_kubectl_need_no_fallback(tmp_path: Path) -> None:
    """The kubeconfigs of the local cluster and the demo, written by the real kubectl with the same
    commands as hack/cluster/up.sh (embedded CA and client certificate) and hack/demo.sh (a team
    member's token and namespace), are read by kubeyaml exactly as by PyYAML."""
    kubectl = _kubectl()
    for name in ("ca.crt", "admin.crt", "admin.key"):
        body = base64.b64encode(f"{name} ".encode() * 40).decode()
        (tmp_path / name).write_text(f"-----BEGIN X-----\n{body}\n-----END X-----\n")
    admin = tmp_path / "kubeconfig"
    alice = tmp_path / "alice.kubeconfig"

    def kc(path: Path, *args: str) -> str:
        run = subprocess.run([str(kubectl), "--kubeconfig", str(path), *args], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        return run.stdout

    kc(
        admin,
        "config",
        "set-cluster",
        "testbed",
        "--server=https://127.0.0.1:36543",
        f"--certificate-authority={tmp_path / 'ca.crt'}",
        "--embed-certs=true",
    )
    kc(
        admin,
        "config",
        "set-credentials",
        "admin",
        f"--client-certificate={tmp_path / 'admin.crt'}",
        f"--client-key={tmp_path / 'admin.key'}",
        "--embed-certs=true",
    )
    kc(admin, "config", "set-context", "testbed", "--cluster=testbed", "--user=admin")
    kc(admin, "config", "use-context", "testbed")
    alice.write_text(kc(admin, "config", "view", "--raw", "--minify"))
    kc(alice, "config", "set-credentials", "alice", "--token=eyJhbGciOiJSUzI1NiJ9.e30.c2ln")
    kc(alice, "config", "set-context", "alice", "--cluster=testbed", "--user=alice", "--namespace=team-a")
    kc(alice, "config", "use-context", "alice")
    for f in (admin, alice):
        text = f.read_text()
        got = kubeyaml.loads(text)
        assert got is not None, f
        assert got == yaml.safe_load(text), f
    contexts = {c["name"]: c["context"] for c in kubeyaml.loads(alice.read_text())["contexts"]}
    assert contexts["alice"]["namespace"] == "team-a"


# ----------------------------------------------------------------------------- outside the subset
UNSUPPORTED = {
    "anchor and alias": "a: &x 1\nb: *x\n",
    "merge key": "a: {}\nb:\n  <<: {}\n",
    "tag": "a: !!str 1\n",
    "flow sequence": "a: [1, 2]\n",
    "flow mapping": "a: {b: c}\n",
    "two documents": "a: 1\n---\nb: 2\n",
    "document end": "a: 1\n...\n",
    "directive": "%YAML 1.1\n---\na: 1\n",
    "tab indent": "a:\n\tb: 1\n",
    "duplicate key": "a: 1\na: 2\n",
    "complex key": "? a\n: b\n",
    "non-string key": "1: a\n",
    "bool key": "yes: a\n",
    "multi-line plain": "a: one\n  two\n",
    "multi-line quoted": 'a: "one\n  two"\n',
    "keep block scalar": "a: |+\n  x\n\nb: 1\n",
    "block scalar with blank line": "a: |\n  x\n\n  y\n",
    "block scalar with a less-indented space-only line": "c: |\n  a:\n \n  # c\n",
    "indented folded": "a: >\n  x\n    y\n",
    "CRLF": "a: 1\r\nb: 2\r\n",
    "top-level scalar": "hello\n",
    "bad indentation": "a:\n    b: 1\n  c: 2\n",
}


@pytest.mark.parametrize("name", UNSUPPORTED)
def test_outside_the_subset_gives_up(name: str) -> None:
    assert kubeyaml.loads(UNSUPPORTED[name]) is None


# ----------------------------------------------------------------------------- YAML 1.1 resolution
RESOLVED = [
    'yes', 'Yes', 'YES', 'yEs', 'no', 'on', 'Off', 'y', 'n', 'true', 'TRUE', 'tRue', 'null', 'NULL',
    'nuLL', '~', '0x1F', '0X1F', '0b11', '0o17', '010', '08', '0', '-0', '+12', '-12', '1_000', '1e3',
    '1E+3', '1.0e+3', '1.5', '1.', '.5', '.', '.inf', '-.inf', '.NaN', '+.nan', '2001-12-14',
    '2001-12-14 21:59:43.10 -5', '2001-1-1', '190:20:30', '1:2', '12:30:00', '1.2.3.4', '10.0.0.1/8',
    'v1.30', '1a', '0_1', '<<', '=', '-', '--', '-x', 'a:b', 'a#b', 'é', '999999999999999999999999',
]  # fmt: skip


@pytest.mark.parametrize("word", RESOLVED)
def test_plain_scalars_resolve_as_safe_loader_or_give_up(word: str) -> None:
    for text in (f"k: {word}\n", f"- {word}\n", f"k:\n- {word}\n"):
        try:
            yaml.safe_load(text)
        except yaml.YAMLError:
            assert kubeyaml.loads(text) is None, text
            continue
        same_or_none(text)
    assert kubeyaml.loads("k: yes\n") == {"k": True}  # YAML 1.1, as PyYAML reads it
    assert kubeyaml.loads("k: '010'\n") == {"k": "010"}


# ----------------------------------------------------------------------------- config.py
def test_json_and_fallback_kubeconfigs_read_like_safe_load(tmp_path: Path) -> None:
    doc = yaml.safe_load(KUBECONFIGS["kubectl"])
    (tmp_path / "json").write_text(json.dumps(doc))
    (tmp_path / "anchors").write_text("base: &u {token: abc}\n" + KUBECONFIGS["kubectl"])
    assert config.parse_kubeconfig((tmp_path / "json").read_text(), "json") == doc
    assert config.parse_kubeconfig((tmp_path / "anchors").read_text(), "anchors") == {
        **doc,
        "base": {"token": "abc"},
    }
    with pytest.raises(config.ConfigError, match="not valid YAML"):
        config.parse_kubeconfig("a: [1\n", "broken")
    assert config.parse_kubeconfig("# nothing\n", "empty") is None


def test_reading_a_kubectl_kubeconfig_does_not_import_yaml(tmp_path: Path) -> None:
    kc = tmp_path / "kubeconfig"
    kc.write_text(KUBECONFIGS["kubectl"].replace('current-context: ""', "current-context: kind-kind"))
    code = textwrap.dedent(f"""\
        import sys
        from gpuctl.cluster import config
        kc = config.read_kubeconfig([{str(kc)!r}])
        ctx, cluster, user = kc.resolve(None)
        assert cluster.value["server"] == "https://127.0.0.1:6443", cluster
        assert user.value["client-certificate-data"].startswith("LS0t"), user
        assert "yaml" not in sys.modules, "yaml imported"
        print("ok")
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
