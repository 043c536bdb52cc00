"""The loader: documents, kinds, user-facing error and warning text, config, files and speed."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gpuctl.constants import GRACE_ENV, HOST_PATH_ROOTS, MAX_TERMINATION_GRACE_SECONDS
from gpuctl.spec import (
    ComputeSpec,
    InferenceSpec,
    NotebookSpec,
    PoolSpec,
    QuotaSpec,
    SpecConfig,
    SpecError,
    SpecIssue,
    TrainingSpec,
    load_file,
    load_files,
    load_text,
)

SPECDATA = Path(__file__).parent / "specdata"

TRAINING = """\
kind: training
job: {name: train}
environment: {image: busybox}
resources: {cpu: 1, memory: 1Gi}
"""


def job_yaml(
    kind: str = "training", name: str = "j", extra: str = "", resources: str = "cpu: 1, memory: 1Gi"
) -> str:
    return (
        f"kind: {kind}\njob: {{name: {name}}}\nenvironment: {{image: busybox}}\n"
        f"resources: {{{resources}}}\n{extra}"
    )


def error_of(text: str, source: str = "f.yaml", config: SpecConfig | None = None) -> SpecError:
    with pytest.raises(SpecError) as exc:
        load_text(text, source, config)
    return exc.value


def assert_issue(err: SpecError, *fragments: str) -> None:
    """Some single line of str(err) contains every fragment (file, document, field, fix...)."""
    lines = str(err).splitlines()
    assert any(all(f in line for f in fragments) for line in lines), f"{fragments} not in:\n{err}"


# --- kinds and documents --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "model"),
    [
        (job_yaml("training"), TrainingSpec),
        (job_yaml("inference"), InferenceSpec),
        (job_yaml("notebook"), NotebookSpec),
        (job_yaml("compute"), ComputeSpec),
        ("kind: pool\npool: {name: p}\n", PoolSpec),
        ("kind: resource\npool: {name: p}\n", PoolSpec),
        ("kind: quota\nquota: {name: q}\n", QuotaSpec),
        (job_yaml("Training"), TrainingSpec),
        ("kind: POOL\npool: {name: p}\n", PoolSpec),
    ],
)
def test_every_kind(text: str, model: type) -> None:
    docs = load_text(text, "k.yaml")
    assert len(docs) == 1
    assert type(docs[0].spec) is model
    assert (docs[0].source, docs[0].index, docs[0].warnings) == ("k.yaml", 1, ())


def test_resource_kind_becomes_pool() -> None:
    spec = load_text("kind: resource\npool: {name: p}\nnodes: {n1: {gpu-type: A10}}\n")[0].spec
    assert isinstance(spec, PoolSpec)
    assert spec.kind == "pool"
    assert spec.nodes["n1"].gpu_type == "A10"


def test_multi_document_with_leading_separator_and_empty_documents() -> None:
    text = "---\n" + job_yaml(name="a") + "---\n---\n# only a comment\n---\n" + job_yaml(name="b") + "---\n"
    docs = load_text(text, "multi.yaml")
    assert [(d.index, d.spec.job.name) for d in docs] == [(1, "a"), (4, "b")]  # type: ignore[union-attr]


def test_empty_file_gives_no_documents() -> None:
    assert load_text("", "e.yaml") == []
    assert load_text("---\n---\n", "e.yaml") == []


def test_all_kinds_in_one_file() -> None:
    text = "\n---\n".join(p.read_text() for p in sorted((SPECDATA / "upstream_2_3").glob("*.yaml")))
    docs = load_text(text)
    assert sorted(d.spec.kind for d in docs) == [
        "compute",
        "inference",
        "notebook",
        "pool",
        "quota",
        "training",
    ]


# --- upstream and seed examples -------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted((SPECDATA / "upstream_2_3").glob("*.yaml")), ids=lambda p: p.name)
def test_upstream_section_2_3_examples_are_accepted(path: Path) -> None:
    docs = load_file(str(path), SpecConfig(strict=True))
    assert len(docs) == 1
    assert docs[0].spec.kind == path.stem
    assert docs[0].warnings == ()


def test_upstream_training_example_values() -> None:
    spec = load_file(str(SPECDATA / "upstream_2_3" / "training.yaml"))[0].spec
    assert isinstance(spec, TrainingSpec)
    assert spec.job.namespace == "team-a"
    assert [(e.name, e.value) for e in spec.environment.env] == [("NCCL_DEBUG", "INFO")]
    assert (spec.resources.pool, spec.resources.gpu, spec.resources.gpu_type) == (
        "training-pool",
        1,
        "a10-24g",
    )
    assert (spec.resources.cpu, spec.resources.memory) == ("4", "16Gi")
    assert [w.path for w in spec.storage.workdirs] == ["/output"]


def test_upstream_notebook_and_quota_values() -> None:
    nb = load_file(str(SPECDATA / "upstream_2_3" / "notebook.yaml"))[0].spec
    assert isinstance(nb, NotebookSpec)
    assert (nb.service.port, nb.service.replicas) == (8888, 1)
    quota = load_file(str(SPECDATA / "upstream_2_3" / "quota.yaml"))[0].spec
    assert isinstance(quota, QuotaSpec)
    entries = quota.entries()
    assert (entries["default"].cpu, entries["default"].memory, entries["default"].gpu) == ("20", "40Gi", 2)
    assert entries["team-alice"].gpu == 8


@pytest.mark.parametrize("path", sorted((SPECDATA / "seed_pools").glob("*.yaml")), ids=lambda p: p.name)
def test_seed_pool_documents_are_accepted(path: Path) -> None:
    docs = load_file(str(path), SpecConfig(strict=True))
    assert len(docs) == 1 and isinstance(docs[0].spec, PoolSpec)


def test_seed_four_pool_layout_together() -> None:
    names = ["training-pool", "inference-pool", "dev-pool", "compute-pool"]
    docs = load_files([str(SPECDATA / "seed_pools" / f"{n}.yaml") for n in names])
    pools = {d.spec.pool.name: d.spec.nodes for d in docs}  # type: ignore[union-attr]
    assert list(pools) == names
    assert {n: p.gpu_type for n, p in pools["training-pool"].items()} == {
        "gpu-node-1": "A100-100G",
        "gpu-node-2": "A100-100G",
    }
    assert {n: p.gpu_type for n, p in pools["compute-pool"].items()} == {"cpu-node-1": "", "cpu-node-2": ""}


# --- errors: file, document, field path, fix ------------------------------------------------------------


def test_missing_kind() -> None:
    err = error_of("job: {name: a}\n", "nokind.yaml")
    assert_issue(err, "nokind.yaml: document 1: kind: missing", "add `kind: training`", "resource")


def test_unknown_kind_suggests_closest() -> None:
    err = error_of("---\n" + job_yaml() + "---\nkind: trainning\n", "k.yaml")
    assert str(err) == (
        "k.yaml: document 2: kind: unknown kind 'trainning' (fix: did you mean `kind: training`? "
        "use one of: training, inference, notebook, compute, pool, quota, resource)"
    )


def test_kubernetes_manifest_is_recognised() -> None:
    assert_issue(error_of("apiVersion: v1\nkind: Pod\n"), "document 1: kind", "kubectl")


def test_non_mapping_document() -> None:
    assert_issue(error_of("- a\n- b\n"), "f.yaml: document 1: a document must be a mapping", "kind: <kind>")


def test_yaml_syntax_error_names_line_and_column() -> None:
    err = error_of(job_yaml() + "---\nkind: pool\npool: name: p\n", "syn.yaml")
    assert str(err) == (
        "syn.yaml: document 2: YAML syntax error at line 7, column 11: "
        "mapping values are not allowed in this context "
        "(fix: check the indentation and quoting near line 7; documents are separated by a line `---`)"
    )


def test_tab_indentation_hint() -> None:
    assert_issue(error_of("kind: pool\npool:\n\tname: p\n"), "line 3", "indent with spaces, not tabs")


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (
            job_yaml(name="Bad_Name!"),
            ("document 1: job.name: 'Bad_Name!' is not a valid name", "e.g. bad-name"),
        ),
        (job_yaml(name="a" * 64), ("job.name", "longer than 63", "at most 63 characters")),
        (job_yaml("inference", name="a" * 60), ("job.name", "60 characters", "at most 59")),
        (job_yaml("notebook", name="a" * 53), ("job.name", "53 characters", "at most 52")),
        (
            job_yaml().replace("{name: j}", "{name: j, namespace: Team_A}"),
            ("job.namespace", "e.g. team-a"),
        ),
        (
            job_yaml().replace("{name: j}", "{name: j, priority: urgent}"),
            ("job.priority", "high, medium, low"),
        ),
        (
            job_yaml(resources="cpu: abc, memory: 1Gi"),
            ("resources.cpu", "Kubernetes quantity such as 4, 500m, 16Gi"),
        ),
        (
            job_yaml(resources="cpu: 1, memory: lots"),
            ("resources.memory", "'lots' is not a Kubernetes quantity"),
        ),
        (
            job_yaml(resources="cpu: '-1', memory: 1Gi"),
            ("resources.cpu", "must be greater than 0", "positive"),
        ),
        (job_yaml(resources="cpu: 0, memory: 1Gi"), ("resources.cpu", "'0' must be greater than 0")),
        (
            job_yaml(resources="cpu: 1, memory: 1Gi, gpu: -1"),
            ("resources.gpu", "must not be negative", "CPU-only"),
        ),
        (
            job_yaml(resources="cpu: 1, memory: 1Gi, accelerator-count: -2"),
            ("resources.accelerator-count", "-2 must not be negative"),
        ),
        (
            job_yaml(resources="cpu: 1, memory: 1Gi, gpu: two"),
            ("resources.gpu", "expected a whole number", "gpu: 1"),
        ),
        (job_yaml(resources="cpu: 1, memory: 1Gi, gpu-type: 'a b'"), ("resources.gpu-type", "label value")),
        (job_yaml(resources="cpu: 1, memory: 1Gi, pool: Big_Pool"), ("resources.pool", "e.g. big-pool")),
        (
            job_yaml(resources="memory: 1Gi"),
            ("resources.cpu: required field is missing", "add `cpu: 4` under `resources`"),
        ),
        (job_yaml(resources="cpu: 1"), ("resources.memory", "add `memory: 16Gi` under `resources`")),
        (
            job_yaml("compute", extra="service: {port: 70000}\n"),
            ("service.port", "port 70000", "between 1 and 65535"),
        ),
        (job_yaml("compute", extra="service: {port: 0}\n"), ("service.port", "between 1 and 65535")),
        (job_yaml("compute", extra="service: {port: http}\n"), ("service.port", "between 1 and 65535")),
        (
            job_yaml("inference", extra="service: {targetPort: 99999}\n"),
            ("service.targetPort", "between 1 and 65535"),
        ),
        (
            job_yaml("inference", extra="service: {health_check: health}\n"),
            ("service.health_check", "start the path"),
        ),
        (
            job_yaml("notebook", extra="service: {replicas: 3}\n"),
            ("service.replicas", "notebooks run exactly one replica"),
        ),
        (
            job_yaml("compute", extra="service: {replicas: -1}\n"),
            ("service.replicas", "must not be negative"),
        ),
        (
            job_yaml("inference", extra="service: 8000\n"),
            ("service: expected a mapping", "write `service` as a mapping"),
        ),
        (
            job_yaml(extra="storage: {workdirs: [{path: /etc/ssl}]}\n"),
            ("storage.workdirs[0].path", "/data/<team>"),
        ),
        (
            job_yaml(extra="storage: {workdirs: [{mountPath: /x}]}\n"),
            ("storage.workdirs[0].path", "add `path:"),
        ),
        (job_yaml(extra="storage: {workdirs: [data]}\n"), ("storage.workdirs[0].path", "absolute")),
        (
            job_yaml(extra="storage: {workdirs: /data}\n"),
            ("storage.workdirs: expected a list", "write `workdirs` as a list"),
        ),
        (
            "kind: training\njob: {name: j}\nresources: {cpu: 1, memory: 1Gi}\n",
            ("environment", "add `environment:"),
        ),
        (
            "kind: training\nenvironment: {image: x}\nresources: {cpu: 1, memory: 1Gi}\n",
            ("job", "add `job: {name:"),
        ),
        (
            job_yaml().replace("{image: busybox}", "{image: ''}"),
            ("environment.image", "image must not be empty"),
        ),
        (job_yaml().replace("{image: busybox}", "{}"), ("environment.image", "add `image:")),
        ("kind: pool\npool: {description: x}\n", ("pool.name", "add `name: training-pool` under `pool`")),
        ("kind: pool\n", ("pool: required field is missing", "add `pool: {name: my-pool}`")),
        (
            "kind: pool\npool: {name: p}\nnodes: {Node_1: {}}\n",
            ("nodes.Node_1", "key 'Node_1'", "gpu-node-1"),
        ),
        ("kind: quota\nquota: {name: q}\nnamespace: {Team_A: {}}\n", ("namespace.Team_A", "e.g. team-a")),
        (
            "kind: quota\nquota: {name: q}\nnamespace: {a: {gpu: -1}}\n",
            ("namespace.a.gpu", "must not be negative"),
        ),
        ("kind: quota\nquota: {name: q}\ndefault: {cpu: -2}\n", ("default.cpu", "must not be negative")),
        ("kind: quota\nquota: {name: Q}\n", ("quota.name", "is not a valid name")),
        ("kind: pool\npool: {name: p}\nnodes: [a]\n", ("nodes: expected a mapping", "nodes: {gpu-node-1:")),
        (
            "kind: pool\npool: {name: p}\nnodes: {a: 5}\n",
            ("nodes.a", "each `nodes` entry", "{gpu-type: A100-80G}"),
        ),
        (
            job_yaml(extra="storage: {workdirs: [7]}\n"),
            ("storage.workdirs[0]", "each `workdirs` entry", "{path:"),
        ),
        (
            "kind: quota\nquota: {name: q}\nnamespace: {a: {pools: {p: x}}}\n",
            ("namespace.a.pools.p: expected a mapping", "each `pools` entry as a mapping, e.g. {gpu: 2}"),
        ),
        (
            job_yaml().replace("{image: busybox}", "{image: busybox, imagePullSecret: Reg_Cred}"),
            ("environment.imagePullSecret", "'Reg_Cred' is not a valid Kubernetes object name", "regcred"),
        ),
        (job_yaml(extra="version: [1]\n"), ("version: expected text, got [1]", "quote the value")),
        (job_yaml(resources="cpu: yes, memory: 1Gi"), ("resources.cpu: expected a quantity, got True",)),
        (job_yaml().replace("{name: j}", "{name: true}"), ("job.name: expected a name", "lowercase letters")),
        (job_yaml().replace("{name: j}", "{name: j, epochs: 0}"), ("job.epochs: 0 must be at least 1",)),
        # Issue 43: YAML's true is a boolean that pydantic would read as 1 (`nodes: true` ran one node).
        (
            job_yaml(resources="cpu: 1, memory: 1Gi, gpu: 1, nodes: true"),
            ("resources.nodes: true is a boolean, not a whole number", "nodes: 2"),
        ),
        (job_yaml(resources="cpu: 1, memory: 1Gi, gpu: yes"), ("resources.gpu: true is a boolean", "gpu: 1")),
        (
            job_yaml(kind="inference", extra="service: {replicas: on}\n"),
            ("service.replicas: true is a boolean",),
        ),
        # Issue 43: neither set-aside key may be tolerated through gpuctl (a gang gets its own from gpuctl).
        *(
            (
                job_yaml(resources=f"cpu: 1, memory: 1Gi, tolerations: ['{key}=x:NoSchedule']"),
                (f"{key} marks nodes set aside for a waiting multi-node job", "gpuctl gives it"),
            )
            for key in ("runwhere.ai/set-aside", "runwhere.ai/set-aside-job")
        ),
        (
            job_yaml().replace("{image: busybox}", "{image: busybox, env: 7}"),
            ("environment.env", "NCCL_DEBUG"),
        ),
    ],
)
def test_validation_errors(text: str, fragments: tuple[str, ...]) -> None:
    err = error_of(text, "bad.yaml")
    assert_issue(err, "bad.yaml: document 1: ", *fragments)
    assert "Input should be" not in str(err)


def test_env_error_points_at_the_item() -> None:
    text = job_yaml().replace(
        "{image: busybox}", "{image: busybox, env: [{A: 1}, {name: B, value: 2}, {9X: 3}]}"
    )
    assert_issue(
        error_of(text), "document 1: environment.env[2]: '9X' is not a valid environment variable name"
    )


def test_notebook_replicas_error() -> None:
    err = error_of(job_yaml("notebook", extra="service: {replicas: 2}\n"), "nb.yaml")
    assert str(err) == (
        "nb.yaml: document 1: service.replicas: a notebook cannot have 2 replicas "
        "(fix: notebooks run exactly one replica; remove `replicas` or set it to 1)"
    )


def test_denied_host_path_message() -> None:
    err = error_of(job_yaml(extra="storage: {workdirs: [{path: /var/run/docker.sock}]}\n"), "dind.yaml")
    assert str(err) == (
        "dind.yaml: document 1: storage.workdirs[0].path: host path /var/run/docker.sock "
        "(inside /var/run) is a system location: no team pod mounts it (fix: choose a directory under a "
        "data root such as /data/<team> (system locations are never mounted); an admin adds data roots "
        "with allowedHostPaths)"
    )


def test_allowed_host_paths_add_data_roots_but_never_system_locations() -> None:
    text = job_yaml(extra="storage: {workdirs: [{path: /scratch/x}]}\n")
    docs = load_text(text, config=SpecConfig(allowed_host_paths=("/scratch",)))
    assert docs[0].spec.storage.workdirs[0].path == "/scratch/x"  # type: ignore[union-attr]
    err = error_of(text, config=SpecConfig(allowed_host_paths=("/other",)))
    assert f"writable outside the data roots ({', '.join(HOST_PATH_ROOTS)}, /other)" in str(err)
    system = job_yaml(extra="storage: {workdirs: [{path: /var/run/nvidia/x}]}\n")
    error_of(system, config=SpecConfig(allowed_host_paths=("/var/run/nvidia",)))


def test_quota_default_twice_error() -> None:
    err = error_of(
        "kind: quota\nquota: {name: q}\ndefault: {gpu: 1}\nnamespace: {default: {gpu: 2}}\n", "q.yaml"
    )
    assert_issue(err, "q.yaml: document 1: default: namespace default has two quotas", "keep only one")


def test_quota_pools_exceed_error() -> None:
    text = "kind: quota\nquota: {name: q}\nnamespace:\n  team-a: {gpu: 4, pools: {train: 3, dev: 2}}\n"
    err = error_of(text, "q.yaml")
    assert str(err) == (
        "q.yaml: document 1: namespace.team-a.pools: "
        "pool guarantees add up to 5 GPUs but the quota is gpu: 4 "
        "(fix: lower the per-pool gpu values or raise `gpu` to at least 5)"
    )


def test_all_errors_of_all_documents_are_reported_together() -> None:
    text = (
        job_yaml(name="Bad_1")
        + "---\n"
        + job_yaml(name="ok")
        + "---\n"
        + job_yaml(resources="cpu: x, memory: y")
        + "---\nkind: nope\n"
    )
    err = error_of(text, "all.yaml")
    fields = [(i.index, i.field) for i in err.issues]
    assert fields == [(1, "job.name"), (3, "resources.cpu"), (3, "resources.memory"), (4, "kind")]
    assert len(str(err).splitlines()) == 4


def test_load_files_collects_every_file_and_returns_nothing_on_error(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(job_yaml(name="good"))
    bad = tmp_path / "bad.yaml"
    bad.write_text(job_yaml(name="Bad"))
    missing = tmp_path / "missing.yaml"
    with pytest.raises(SpecError) as exc:
        load_files([str(good), str(bad), str(missing)])
    assert [i.source for i in exc.value.issues] == [str(bad), str(missing)]
    assert_issue(exc.value, f"{bad}: document 1: job.name")
    assert_issue(exc.value, f"{missing}: no such file", "check the path")


def test_unreadable_inputs(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as exc:
        load_file(str(tmp_path))
    assert_issue(exc.value, str(tmp_path), "is a directory", "check the path")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00kind")
    with pytest.raises(SpecError) as exc:
        load_file(str(binary))
    assert_issue(exc.value, "bin.yaml", "not UTF-8", "check the path")


def test_same_file_twice_is_read_once(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(job_yaml(name="a"))
    assert len(load_files([str(path), str(path)])) == 1


def test_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(job_yaml(name="piped")))
    docs = load_file("-")
    assert (docs[0].source, docs[0].spec.job.name) == ("<stdin>", "piped")  # type: ignore[union-attr]


def test_duplicate_job_names_across_files(tmp_path: Path) -> None:
    a = tmp_path / "a.yaml"
    b = tmp_path / "b.yaml"
    a.write_text(job_yaml(name="same"))
    b.write_text(job_yaml("inference", name="same"))
    with pytest.raises(SpecError) as exc:
        load_files([str(a), str(b)])
    assert_issue(exc.value, f"{b}: document 1: job.name: job 'same' is defined twice", f"{a} document 1")


def test_same_job_name_in_different_namespaces_is_fine() -> None:
    text = (
        job_yaml(name="x") + "---\n" + job_yaml(name="x").replace("{name: x}", "{name: x, namespace: team-b}")
    )
    assert len(load_text(text)) == 2


def test_node_in_two_pools() -> None:
    text = "kind: pool\npool: {name: a}\nnodes: {n1: {}}\n---\nkind: pool\npool: {name: b}\nnodes: {n1: {}}\n"
    assert_issue(error_of(text, "p.yaml"), "p.yaml: document 2: nodes.n1: node 'n1' is also in pool 'a'")


# --- warnings -------------------------------------------------------------------------------------------


def test_unknown_key_warning_with_suggestion() -> None:
    docs = load_text(job_yaml(resources="cpu: 1, memory: 1Gi, gpus: 2"), "w.yaml")
    assert docs[0].warnings == (
        "w.yaml: document 1: unknown key 'resources.gpus' ignored; did you mean 'gpu'?",
    )
    assert docs[0].spec.resources.gpu == 0  # type: ignore[union-attr]


def test_unknown_key_without_close_match() -> None:
    docs = load_text(job_yaml(extra="zzzqqq: 1\n"), "w.yaml")
    assert docs[0].warnings == ("w.yaml: document 1: unknown key 'zzzqqq' ignored",)


def test_unknown_keys_at_every_depth() -> None:
    text = (
        "kind: inference\njob: {name: j, prioirty: high}\n"
        "environment: {image: x, env: [{ANY_NAME: 1}], imagePullSecrets: s}\n"
        "resources: {cpu: 1, memory: 1Gi, gpu_typ: x}\n"
        "service: {port: 80, helthCheck: /h}\n"
        "storage: {workdirs: [{path: /data, mountPath: /mnt}]}\n"
        "model: {source: hub, anything: goes}\n"
    )
    warnings = load_text(text, "w.yaml")[0].warnings
    assert warnings == (
        "w.yaml: document 1: unknown key 'job.prioirty' ignored; did you mean 'priority'?",
        "w.yaml: document 1: unknown key 'environment.imagePullSecrets' ignored; "
        "did you mean 'imagePullSecret'?",
        "w.yaml: document 1: unknown key 'resources.gpu_typ' ignored; did you mean 'gpu_type'?",
        "w.yaml: document 1: unknown key 'service.helthCheck' ignored; did you mean 'healthCheck'?",
        "w.yaml: document 1: unknown key 'storage.workdirs[0].mountPath' ignored; "
        "workdirs are mounted at the same path inside the container",
    )


def test_free_form_keys_are_not_checked_but_their_values_are() -> None:
    text = (
        "kind: quota\nquota: {name: q}\n"
        "namespace: {team-a: {gpu: 2, gpuz: 1, pools: {p1: {gpu: 1, cpus: 2}}}}\n"
        "default: {memroy: 1Gi}\n"
        "---\nkind: pool\npool: {name: p}\nnodes: {n1: {gpu-typ: A10}, n2: }\n"
    )
    docs = load_text(text, "w.yaml")
    assert docs[0].warnings == (
        "w.yaml: document 1: unknown key 'namespace.team-a.gpuz' ignored; did you mean 'gpu'?",
        "w.yaml: document 1: unknown key 'namespace.team-a.pools.p1.cpus' ignored; did you mean 'cpu'?",
        "w.yaml: document 1: unknown key 'default.memroy' ignored; did you mean 'memory'?",
    )
    assert docs[1].warnings == (
        "w.yaml: document 2: unknown key 'nodes.n1.gpu-typ' ignored; did you mean 'gpu-type'?",
    )


def test_strict_turns_unknown_keys_into_errors() -> None:
    err = error_of(job_yaml(resources="cpu: 1, memory: 1Gi, gpus: 2"), "s.yaml", SpecConfig(strict=True))
    assert (
        str(err)
        == "s.yaml: document 1: resources.gpus: unknown key (fix: did you mean 'gpu'? otherwise remove it)"
    )


def test_warnings_are_kept_on_error() -> None:
    err = error_of(job_yaml(resources="cpu: 1, memory: 1Gi, gpus: 2, gpu: -1"), "e.yaml")
    assert err.warnings == ("e.yaml: document 1: unknown key 'resources.gpus' ignored; did you mean 'gpu'?",)


def test_duplicate_key_warning() -> None:
    docs = load_text(job_yaml(resources="cpu: 1, memory: 1Gi, gpu: 1, gpu: 2"), "d.yaml")
    assert docs[0].warnings == (
        "d.yaml: document 1: key 'gpu' appears twice (line 4); the last value is used",
    )
    assert docs[0].spec.resources.gpu == 2  # type: ignore[union-attr]


def test_bare_small_memory_warning() -> None:
    docs = load_text(job_yaml(resources="cpu: 1, memory: 512"), "m.yaml")
    assert docs[0].warnings == (
        "m.yaml: document 1: resources.memory 512 means 512 bytes, too little to start a container; "
        "did you mean 512Mi or 512Gi?",
    )


# --- SpecIssue / SpecError / SpecConfig -----------------------------------------------------------------


def test_spec_issue_str() -> None:
    assert (
        str(SpecIssue("a.yaml", 2, "resources.cpu", "bad", "fix it"))
        == "a.yaml: document 2: resources.cpu: bad (fix: fix it)"
    )
    assert (
        str(SpecIssue("a.yaml", None, "", "no such file", "check the path"))
        == "a.yaml: no such file (fix: check the path)"
    )


def test_spec_error_str_is_all_issues() -> None:
    issues = [SpecIssue("a", 1, "x", "m1", "f1"), SpecIssue("b", None, "", "m2", "f2")]
    err = SpecError(issues)
    assert str(err) == "a: document 1: x: m1 (fix: f1)\nb: m2 (fix: f2)"
    assert err.issues == issues


def test_config_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("allowedHostPaths: [/var/run/nvidia, /etc/ssl/]\n")
    monkeypatch.setenv("GPUCTL_CONFIG", str(config))
    monkeypatch.setenv("GPUCTL_ALLOWED_HOST_PATHS", "/root/data:/proc/driver")
    cfg = SpecConfig.from_env(strict=True)
    assert cfg.allowed_host_paths == ("/root/data", "/proc/driver", "/var/run/nvidia", "/etc/ssl")
    assert cfg.strict is True


def test_config_from_home_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GPUCTL_CONFIG", raising=False)
    monkeypatch.delenv("GPUCTL_ALLOWED_HOST_PATHS", raising=False)
    monkeypatch.delenv(GRACE_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert SpecConfig.from_env() == SpecConfig()
    (tmp_path / ".config" / "gpuctl").mkdir(parents=True)
    (tmp_path / ".config" / "gpuctl" / "config.yaml").write_text("allowedHostPaths:\n  - /run/user\n")
    assert SpecConfig.from_env().allowed_host_paths == ("/run/user",)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("allowedHostPaths: [relative/path]\n", "is not absolute"),
        ("[1, 2]\n", "not a mapping"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_bad_config_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: str, fragment: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(content)
    monkeypatch.setenv("GPUCTL_CONFIG", str(config))
    monkeypatch.delenv("GPUCTL_ALLOWED_HOST_PATHS", raising=False)
    with pytest.raises(SpecError, match=fragment):
        SpecConfig.from_env()


def test_missing_explicit_config_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUCTL_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(SpecError, match="cannot read config"):
        SpecConfig.from_env()


def test_relative_env_host_path_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUCTL_CONFIG", str(tmp_path / "none.yaml"))
    (tmp_path / "none.yaml").write_text("")
    monkeypatch.setenv("GPUCTL_ALLOWED_HOST_PATHS", "data")
    with pytest.raises(SpecError, match="GPUCTL_ALLOWED_HOST_PATHS"):
        SpecConfig.from_env()


def test_the_termination_grace_bound_is_the_admins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Issue 43: `gpuctl create` and the REST API refuse a grace above admission's cap, the admin's one
    ($GPUCTL_MAX_TERMINATION_GRACE, as the webhook's --max-termination-grace; the chart sets both from
    maxTerminationGraceSeconds): a cap the admin raised is not refused by gpuctl's own check."""
    (tmp_path / "none.yaml").write_text("")
    monkeypatch.setenv("GPUCTL_CONFIG", str(tmp_path / "none.yaml"))
    monkeypatch.delenv("GPUCTL_ALLOWED_HOST_PATHS", raising=False)
    text = job_yaml().replace("job: {name: j}", "job: {name: j, terminationGracePeriodSeconds: 400}")
    monkeypatch.delenv(GRACE_ENV, raising=False)
    assert SpecConfig.from_env().max_termination_grace == MAX_TERMINATION_GRACE_SECONDS == 300
    assert_issue(error_of(text, config=SpecConfig.from_env()), "400 s is longer than the 300 s", GRACE_ENV)
    monkeypatch.setenv(GRACE_ENV, "600")
    config = SpecConfig.from_env()
    assert config.max_termination_grace == 600
    assert load_text(text, "f.yaml", config)[0].spec.job.termination_grace == 400
    assert_issue(error_of(text.replace("400", "601"), config=config), "601 s is longer than the 600 s")
    monkeypatch.setenv(GRACE_ENV, "5m")
    with pytest.raises(SpecError, match=f"{GRACE_ENV}.*'5m' is not a whole number of seconds"):
        SpecConfig.from_env()
