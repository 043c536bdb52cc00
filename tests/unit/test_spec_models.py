"""The spec models on their own: aliases, coercions, defaults and every validation rule."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gpuctl.constants import DEFAULT_SERVICE_PORT, MAX_TERMINATION_GRACE_SECONDS, NOTEBOOK_PORT, Priority
from gpuctl.spec import (
    ComputeSpec,
    Environment,
    EnvVar,
    InferenceSpec,
    JobMeta,
    NotebookSpec,
    PoolGuarantee,
    PoolNode,
    PoolSpec,
    QuotaEntry,
    QuotaSpec,
    Resources,
    Service,
    Storage,
    TrainingSpec,
    Workdir,
    closest,
    is_dns_label,
    is_dns_subdomain,
    is_env_name,
    is_label_value,
    path_denied,
    spec_namespace,
)

RES = {"cpu": 1, "memory": "1Gi"}


def job_doc(kind: str = "training", **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kind": kind,
        "job": {"name": "j"},
        "environment": {"image": "busybox"},
        "resources": dict(RES),
    }
    doc.update(extra)
    return doc


def error_types(exc: pytest.ExceptionInfo[ValidationError]) -> list[str]:
    return [e["type"] for e in exc.value.errors()]


# --- aliases --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["gpu", "accelerator_count", "accelerator-count"])
def test_resources_gpu_aliases(key: str) -> None:
    assert Resources.model_validate({**RES, key: 2}).gpu == 2


@pytest.mark.parametrize("key", ["gpuType", "gpu_type", "gpu-type"])
def test_resources_gpu_type_aliases(key: str) -> None:
    assert Resources.model_validate({**RES, key: "a100-80g"}).gpu_type == "a100-80g"


@pytest.mark.parametrize("key", ["gpuShare", "gpu_share", "gpu-share"])
def test_resources_gpu_share_aliases(key: str) -> None:
    assert Resources.model_validate({**RES, key: "10Gi"}).gpu_share == "10Gi"


@pytest.mark.parametrize("key", ["imagePullSecret", "image_pull_secret", "image-pull-secret"])
def test_environment_image_pull_secret_aliases(key: str) -> None:
    assert Environment.model_validate({"image": "x", key: "regcred"}).image_pull_secret == "regcred"


@pytest.mark.parametrize("key", ["healthCheck", "health_check", "health-check"])
def test_service_health_check_aliases(key: str) -> None:
    assert Service.model_validate({key: "/health"}).health_check == "/health"


@pytest.mark.parametrize("key", ["targetPort", "target_port"])
def test_service_target_port_aliases(key: str) -> None:
    assert Service.model_validate({key: 9000}).target_port == 9000


@pytest.mark.parametrize("key", ["gpuType", "gpu_type", "gpu-type"])
def test_pool_node_gpu_type_aliases(key: str) -> None:
    assert PoolNode.model_validate({key: "A100-100G"}).gpu_type == "A100-100G"


@pytest.mark.parametrize("key", ["borrowingLimit", "borrowing_limit", "borrow"])
def test_quota_borrowing_limit_aliases(key: str) -> None:
    assert QuotaEntry.model_validate({"gpu": 4, key: 2}).borrowing_limit == 2


@pytest.mark.parametrize("key", ["namespace", "namespaces"])
def test_quota_namespace_aliases(key: str) -> None:
    spec = QuotaSpec.model_validate({"kind": "quota", "quota": {"name": "q"}, key: {"team-a": {"gpu": 1}}})
    assert spec.entries() == {"team-a": QuotaEntry(gpu=1)}


def test_fields_also_accept_python_names() -> None:
    res = Resources(cpu="1", memory="1Gi", gpu=1, gpu_type="t4", gpu_share="1")
    assert (res.gpu, res.gpu_type, res.pool) == (1, "t4", "default")


# --- job block ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"), [("high", Priority.HIGH), ("LOW", Priority.LOW), (" Medium ", Priority.MEDIUM)]
)
def test_priority_is_case_insensitive(given: str, expected: Priority) -> None:
    assert JobMeta.model_validate({"name": "a", "priority": given}).priority is expected


def test_job_defaults() -> None:
    job = JobMeta.model_validate({"name": "a"})
    assert (job.priority, job.namespace, job.description, job.epochs, job.batch_size) == (
        Priority.MEDIUM,
        None,
        None,
        None,
        None,
    )


def test_unknown_priority_suggests() -> None:
    with pytest.raises(ValidationError) as exc:
        JobMeta.model_validate({"name": "a", "priority": "hihg"})
    err = exc.value.errors()[0]
    assert err["type"] == "gpuctl_priority"
    assert err["ctx"]["fix"] == "use one of high, medium, low (did you mean 'high'?)"


@pytest.mark.parametrize("name", ["a", "my-job", "0abc", "a" * 63, 2024])
def test_valid_job_names(name: Any) -> None:
    assert JobMeta.model_validate({"name": name}).name == str(name)


@pytest.mark.parametrize("name", ["", "Bad_Name!", "-a", "a-", "a.b", "UPPER", "a" * 64, "a b"])
def test_invalid_job_names(name: str) -> None:
    with pytest.raises(ValidationError) as exc:
        JobMeta.model_validate({"name": name})
    assert error_types(exc) == ["gpuctl_dns_label"]


def test_invalid_name_fix_suggests_the_fixed_name() -> None:
    with pytest.raises(ValidationError) as exc:
        JobMeta.model_validate({"name": "My_Training.Job"})
    assert exc.value.errors()[0]["ctx"]["fix"].endswith("e.g. my-training-job")


def test_namespace_must_be_dns_label() -> None:
    with pytest.raises(ValidationError) as exc:
        JobMeta.model_validate({"name": "a", "namespace": "Team_A"})
    assert exc.value.errors()[0]["loc"] == ("namespace",)


def test_empty_namespace_means_none() -> None:
    assert JobMeta.model_validate({"name": "a", "namespace": ""}).namespace is None


@pytest.mark.parametrize("field", ["epochs", "batch_size"])
def test_epochs_and_batch_size_at_least_one(field: str) -> None:
    assert getattr(JobMeta.model_validate({"name": "a", field: 3}), field) == 3
    with pytest.raises(ValidationError) as exc:
        JobMeta.model_validate({"name": "a", field: 0})
    assert error_types(exc) == ["gpuctl_not_positive"]


# --- environment ----------------------------------------------------------------------------------------


def env_of(items: Any) -> list[tuple[str, str]]:
    return [(e.name, e.value) for e in Environment.model_validate({"image": "x", "env": items}).env]


def test_env_name_value_form() -> None:
    assert env_of([{"name": "MYSQL_ROOT_PASSWORD", "value": "secret"}, {"name": "B", "value": 2}]) == [
        ("MYSQL_ROOT_PASSWORD", "secret"),
        ("B", "2"),
    ]


def test_env_one_key_form() -> None:
    assert env_of([{"NCCL_DEBUG": "INFO"}, {"X": 1}]) == [("NCCL_DEBUG", "INFO"), ("X", "1")]


def test_env_multi_key_dict_and_stringified_values() -> None:
    assert env_of([{"A": 1, "B": True, "C": False, "D": 1.5, "E": None, "F": 2.0}]) == [
        ("A", "1"),
        ("B", "true"),
        ("C", "false"),
        ("D", "1.5"),
        ("E", ""),
        ("F", "2"),
    ]


def test_env_forms_mix_in_one_list() -> None:
    assert env_of([{"name": "A", "value": "1"}, {"B": "2"}, {"C": 3, "D": 4}]) == [
        ("A", "1"),
        ("B", "2"),
        ("C", "3"),
        ("D", "4"),
    ]


def test_env_plain_mapping_and_null() -> None:
    assert env_of({"A": "1", "B": "2"}) == [("A", "1"), ("B", "2")]
    assert env_of(None) == []


def test_env_name_only_is_an_error() -> None:
    with pytest.raises(ValidationError) as exc:
        env_of([{"name": "FOO"}])
    ctx = exc.value.errors()[0]["ctx"]
    assert ctx["at"] == "[0]"
    assert ctx["message"] == "variable 'FOO' has no value"


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([{"1BAD": "x"}], "'1BAD' is not a valid environment variable name"),
        ([{"A B": "x"}], "'A B' is not a valid environment variable name"),
        (["A=1"], "expected a variable, got 'A=1'"),
        ([{"A": [1, 2]}], "value of A must be text or a number, got [1, 2]"),
        ([{"name": "A", "valueFrom": {"secretKeyRef": {}}}], "valueFrom is not supported"),
    ],
)
def test_env_item_errors(items: Any, message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        env_of(items)
    assert exc.value.errors()[0]["ctx"]["message"] == message


def test_env_several_errors_are_listed_together() -> None:
    with pytest.raises(ValidationError) as exc:
        env_of([{"OK": 1}, {"1X": 1}, "junk"])
    message = exc.value.errors()[0]["ctx"]["message"]
    assert "item [1]: '1X' is not a valid environment variable name" in message
    assert "item [2]: expected a variable, got 'junk'" in message


def test_env_var_direct_construction_validates_name() -> None:
    assert EnvVar(name="A.b-c", value="1").name == "A.b-c"
    with pytest.raises(ValidationError):
        EnvVar(name="9", value="1")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("python train.py", ["python train.py"]),
        (8000, ["8000"]),
        (["--port", 8000, True], ["--port", "8000", "true"]),
    ],
)
def test_command_and_args_accept_strings_and_numbers(given: Any, expected: list[str]) -> None:
    env = Environment.model_validate({"image": "x", "command": given, "args": given})
    assert env.command == expected
    assert env.args == expected


def test_command_rejects_nested_values() -> None:
    with pytest.raises(ValidationError) as exc:
        Environment.model_validate({"image": "x", "args": ["a", {"b": 1}]})
    assert exc.value.errors()[0]["ctx"]["at"] == "[1]"


@pytest.mark.parametrize("image", ["", "   "])
def test_image_must_not_be_empty(image: str) -> None:
    with pytest.raises(ValidationError) as exc:
        Environment.model_validate({"image": image})
    assert error_types(exc) == ["gpuctl_image"]


# --- resources ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu", "expected"), [(4, "4"), (0.5, "0.5"), ("500m", "500m"), (2.0, "2"), ("8000m", "8000m")]
)
def test_cpu_is_normalised_to_text(cpu: Any, expected: str) -> None:
    assert Resources.model_validate({"cpu": cpu, "memory": "1Gi"}).cpu == expected


@pytest.mark.parametrize(
    ("field", "value", "etype"),
    [
        ("cpu", "abc", "gpuctl_quantity"),
        ("cpu", 0, "gpuctl_quantity_positive"),
        ("cpu", "-1", "gpuctl_quantity_positive"),
        ("memory", "lots", "gpuctl_quantity"),
        ("memory", "1GiB", "gpuctl_quantity"),
        ("memory", "0", "gpuctl_quantity_positive"),
        ("gpu", -1, "gpuctl_negative"),
        ("gpu", 0.5, "int_from_float"),
        ("pool", "Training_Pool", "gpuctl_dns_label"),
        ("gpu_type", "a b", "gpuctl_label_value"),
    ],
)
def test_resource_errors(field: str, value: Any, etype: str) -> None:
    with pytest.raises(ValidationError) as exc:
        Resources.model_validate({**RES, field: value})
    assert error_types(exc) == [etype]


@pytest.mark.parametrize("missing", ["cpu", "memory"])
def test_cpu_and_memory_are_required(missing: str) -> None:
    data = dict(RES)
    del data[missing]
    with pytest.raises(ValidationError) as exc:
        Resources.model_validate(data)
    assert exc.value.errors()[0]["type"] == "missing"
    assert exc.value.errors()[0]["loc"] == (missing,)


@pytest.mark.parametrize("pool", [None, ""])
def test_empty_pool_is_default(pool: Any) -> None:
    assert Resources.model_validate({**RES, "pool": pool}).pool == "default"


def test_empty_gpu_type_is_none() -> None:
    assert Resources.model_validate({**RES, "gpu-type": ""}).gpu_type is None


# --- service --------------------------------------------------------------------------------------------


def test_service_defaults() -> None:
    svc = Service()
    assert (svc.replicas, svc.port, svc.health_check, svc.target_port) == (
        1,
        DEFAULT_SERVICE_PORT,
        None,
        None,
    )


def test_service_keeps_scenario_keys() -> None:
    svc = Service.model_validate({"targetPort": 8080, "protocol": "TCP", "type": "NodePort", "timeout": 30})
    assert (svc.target_port, svc.protocol, svc.type, svc.timeout) == (8080, "TCP", "NodePort", "30")


@pytest.mark.parametrize(
    ("field", "value"), [("port", 0), ("port", 65536), ("targetPort", 70000), ("port", -5)]
)
def test_port_range(field: str, value: int) -> None:
    with pytest.raises(ValidationError) as exc:
        Service.model_validate({field: value})
    assert error_types(exc) == ["gpuctl_port"]


def test_replicas_zero_allowed_negative_not() -> None:
    assert Service.model_validate({"replicas": 0}).replicas == 0
    with pytest.raises(ValidationError) as exc:
        Service.model_validate({"replicas": -1})
    assert error_types(exc) == ["gpuctl_negative"]


def test_health_check_must_be_a_path() -> None:
    with pytest.raises(ValidationError) as exc:
        Service.model_validate({"healthCheck": "health"})
    assert exc.value.errors()[0]["ctx"]["fix"] == "start the path with '/', e.g. healthCheck: /health"


# --- notebooks ------------------------------------------------------------------------------------------


def test_notebook_port_defaults_to_notebook_port_without_service() -> None:
    assert NotebookSpec.model_validate(job_doc("notebook")).service.port == NOTEBOOK_PORT == 8888


def test_notebook_port_defaults_when_service_has_no_port() -> None:
    spec = NotebookSpec.model_validate(job_doc("notebook", service={"replicas": 1}))
    assert spec.service.port == 8888
    assert isinstance(spec.service, Service)


def test_notebook_explicit_port_is_kept() -> None:
    assert NotebookSpec.model_validate(job_doc("notebook", service={"port": 9999})).service.port == 9999


@pytest.mark.parametrize("replicas", [0, 2])
def test_notebook_replicas_other_than_one(replicas: int) -> None:
    with pytest.raises(ValidationError) as exc:
        NotebookSpec.model_validate(job_doc("notebook", service={"replicas": replicas}))
    err = exc.value.errors()[0]
    assert err["loc"] == ("service", "replicas")
    assert "notebooks run exactly one replica" in err["ctx"]["fix"]


def test_inference_and_compute_service_default_port() -> None:
    assert InferenceSpec.model_validate(job_doc("inference")).service.port == 8000
    assert ComputeSpec.model_validate(job_doc("compute")).service.port == 8000


@pytest.mark.parametrize(
    ("kind", "model", "limit"),
    [("notebook", NotebookSpec, 52), ("inference", InferenceSpec, 59), ("compute", ComputeSpec, 59)],
)
def test_name_length_limits_per_kind(kind: str, model: Any, limit: int) -> None:
    ok = job_doc(kind)
    ok["job"] = {"name": "a" * limit}
    assert model.model_validate(ok).job.name == "a" * limit
    bad = job_doc(kind)
    bad["job"] = {"name": "a" * (limit + 1)}
    with pytest.raises(ValidationError) as exc:
        model.model_validate(bad)
    err = exc.value.errors()[0]
    assert (err["type"], err["loc"], err["ctx"]["at"]) == ("gpuctl_name_length", ("job",), "name")


def test_training_allows_63_character_names() -> None:
    doc = job_doc()
    doc["job"] = {"name": "a" * 63}
    assert TrainingSpec.model_validate(doc).job.name == "a" * 63


# --- storage --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [("/data/team-a", "/data/team-a"), ("/data//x/./y/", "/data/x/y"), ("/data/../models/m", "/models/m")],
)
def test_workdir_paths_are_normalised(path: str, expected: str) -> None:
    assert Workdir.model_validate({"path": path}).path == expected


def test_workdir_plain_string_entry() -> None:
    assert Storage.model_validate({"workdirs": ["/data/a"]}).workdirs == [Workdir(path="/data/a")]


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/etc",
        "/etc/ssl",
        "/proc/1",
        "/sys",
        "/root/.ssh",
        "/var/lib/kubelet/pods",
        "/var/run/docker.sock",
        "/run/containerd",
        "/var/lib/etcd/member",
        "/var/lib/containerd",
        "/var/lib/docker/volumes",
        "//etc",
        "/data/../etc/passwd",
        "/etc/",
    ],
)
def test_denied_host_paths(path: str) -> None:
    with pytest.raises(ValidationError) as exc:
        Workdir.model_validate({"path": path})
    assert error_types(exc) == ["gpuctl_host_path_denied"]


@pytest.mark.parametrize("path", ["/data", "/data/team-a/output", "/output", "/models", "/models/llama"])
def test_workdirs_under_the_data_roots_by_default(path: str) -> None:
    """The earlier gpuctl's documented workdirs (/output, /models, examples' /data/<team>/...)."""
    assert Workdir.model_validate({"path": path}).path == path


@pytest.mark.parametrize(
    "path", ["/etcetera", "/var/lib/docker-data", "/runs", "/home/u", "/var/lib/kubeletx", "/dataset"]
)
def test_workdirs_outside_the_data_roots_are_refused(path: str) -> None:
    """A workdir is mounted read-write: only under a data root (issue 43, 5)."""
    with pytest.raises(ValidationError) as exc:
        Workdir.model_validate({"path": path})
    assert error_types(exc) == ["gpuctl_host_path_denied"]
    assert Workdir.model_validate({"path": path}, context={"allowed_host_paths": (path,)}).path == path


@pytest.mark.parametrize("path", ["/opt/cni/bin", "/usr", "/lib/modules", "/boot", "/var/log/pods"])
def test_system_locations_are_refused_whatever_the_admin_allows(path: str) -> None:
    ctx = {"allowed_host_paths": (path, "/")}
    with pytest.raises(ValidationError) as exc:
        Workdir.model_validate({"path": path}, context=ctx)
    assert error_types(exc) == ["gpuctl_host_path_denied"]
    assert "is a system location" in str(exc.value)


def test_path_denied_helper() -> None:
    assert path_denied("/etc/ssl") == "/etc"
    assert path_denied("/") == "/"
    assert path_denied("/data") is None
    assert path_denied("/lib/modules/6.1") == "/lib"


def test_relative_workdir_is_an_error() -> None:
    with pytest.raises(ValidationError) as exc:
        Workdir.model_validate({"path": "data"})
    assert error_types(exc) == ["gpuctl_host_path_relative"]


def test_duplicate_workdirs_are_an_error() -> None:
    with pytest.raises(ValidationError) as exc:
        Storage.model_validate({"workdirs": ["/data/a", {"path": "/data/a/"}]})
    assert exc.value.errors()[0]["ctx"]["at"] == "[1]"


# --- pools ----------------------------------------------------------------------------------------------


def test_pool_nodes_null_and_empty_values() -> None:
    spec = PoolSpec.model_validate(
        {"kind": "pool", "pool": {"name": "p"}, "nodes": {"n1": None, "n2": {}, "n3": ""}}
    )
    assert spec.nodes == {"n1": PoolNode(), "n2": PoolNode(), "n3": PoolNode()}
    assert spec.nodes["n1"].gpu_type == ""


def test_pool_kind_resource_is_pool() -> None:
    assert PoolSpec.model_validate({"kind": "Resource", "pool": {"name": "p"}}).kind == "pool"


@pytest.mark.parametrize("node", ["gpu-node-1", "ip-10-0-0-1.ec2.internal", "n"])
def test_pool_node_names_are_subdomains(node: str) -> None:
    assert node in PoolSpec.model_validate({"kind": "pool", "pool": {"name": "p"}, "nodes": {node: {}}}).nodes


def test_pool_bad_node_name() -> None:
    with pytest.raises(ValidationError) as exc:
        PoolSpec.model_validate({"kind": "pool", "pool": {"name": "p"}, "nodes": {"Node_1": {}}})
    assert exc.value.errors()[0]["loc"] == ("nodes", "Node_1", "[key]")


# --- quotas ---------------------------------------------------------------------------------------------


def quota(**blocks: Any) -> QuotaSpec:
    return QuotaSpec.model_validate({"kind": "quota", "quota": {"name": "q"}, **blocks})


def test_quota_default_block_is_namespace_default() -> None:
    spec = quota(default={"cpu": 20, "memory": "40Gi", "gpu": 2}, namespace={"team-a": {"gpu": 8}})
    entries = spec.entries()
    assert list(entries) == ["team-a", "default"]
    assert entries["default"] == QuotaEntry(cpu="20", memory="40Gi", gpu=2)


def test_quota_namespace_default_is_honoured() -> None:
    assert quota(namespace={"default": {"gpu": 1}}).entries() == {"default": QuotaEntry(gpu=1)}


def test_quota_both_default_forms_is_an_error() -> None:
    with pytest.raises(ValidationError) as exc:
        quota(default={"gpu": 1}, namespace={"default": {"gpu": 2}})
    err = exc.value.errors()[0]
    assert (err["type"], err["loc"]) == ("gpuctl_default_twice", ("default",))


def test_quota_entry_none_means_unlimited() -> None:
    entry = quota(namespace={"team-a": None}).entries()["team-a"]
    assert (entry.cpu, entry.memory, entry.gpu, entry.borrowing_limit, entry.pools) == (
        None,
        None,
        None,
        None,
        {},
    )


def test_quota_pools_and_shorthand() -> None:
    entry = QuotaEntry.model_validate(
        {"gpu": 8, "pools": {"training-pool": 4, "dev-pool": {"gpu": 2, "cpu": 8}}}
    )
    assert entry.pools == {"training-pool": PoolGuarantee(gpu=4), "dev-pool": PoolGuarantee(gpu=2, cpu="8")}


def test_quota_pools_sum_exceeds_gpu() -> None:
    with pytest.raises(ValidationError) as exc:
        QuotaEntry.model_validate({"gpu": 4, "pools": {"a": 3, "b": 2}})
    err = exc.value.errors()[0]
    assert err["ctx"]["message"] == "pool guarantees add up to 5 GPUs but the quota is gpu: 4"
    assert err["ctx"]["at"] == "pools"


def test_quota_pools_sum_without_gpu_limit_is_fine() -> None:
    assert sum(p.gpu for p in QuotaEntry.model_validate({"pools": {"a": 3, "b": 2}}).pools.values()) == 5


def test_quota_pool_memory_sum_exceeds_memory() -> None:
    with pytest.raises(ValidationError) as exc:
        QuotaEntry.model_validate(
            {"memory": "1Gi", "pools": {"a": {"memory": "768Mi"}, "b": {"memory": "512Mi"}}}
        )
    assert exc.value.errors()[0]["type"] == "gpuctl_pools_exceed"


@pytest.mark.parametrize(("field", "value"), [("gpu", -1), ("cpu", "-1"), ("memory", "x"), ("borrow", -2)])
def test_quota_entry_errors(field: str, value: Any) -> None:
    with pytest.raises(ValidationError):
        QuotaEntry.model_validate({field: value})


def test_quota_zero_values_are_allowed() -> None:
    entry = QuotaEntry.model_validate({"cpu": 0, "memory": "0", "gpu": 0, "borrowingLimit": 0})
    assert (entry.cpu, entry.memory, entry.gpu, entry.borrowing_limit) == ("0", "0", 0, 0)


def test_quota_bad_namespace_key() -> None:
    with pytest.raises(ValidationError) as exc:
        quota(namespace={"Team_A": {"gpu": 1}})
    assert exc.value.errors()[0]["type"] == "gpuctl_dns_label"


# --- helpers --------------------------------------------------------------------------------------------


def test_spec_namespace_yaml_wins() -> None:
    doc = job_doc()
    doc["job"] = {"name": "a", "namespace": "team-a"}
    assert spec_namespace(TrainingSpec.model_validate(doc), "cli-ns") == "team-a"
    assert spec_namespace(TrainingSpec.model_validate(job_doc()), "cli-ns") == "cli-ns"
    assert spec_namespace(quota(), "cli-ns") == "cli-ns"


def test_version_is_free_text() -> None:
    assert TrainingSpec.model_validate(job_doc(version=1)).version == "1"
    assert TrainingSpec.model_validate(job_doc()).version == "v0.1"


def test_closest() -> None:
    assert closest("gpus", ["gpu", "cpu", "memory"]) == "gpu"
    assert closest("Training", ["training", "inference"]) == "training"
    assert closest("zzz", ["gpu", "cpu"]) is None
    assert closest("x", []) is None


def test_name_helpers() -> None:
    assert is_dns_label("a-1") and not is_dns_label("a_1") and not is_dns_label("a" * 64)
    assert is_dns_subdomain("a.b-c.d") and not is_dns_subdomain("a..b") and not is_dns_subdomain("A")
    assert is_label_value("") and is_label_value("A100_80G.x") and not is_label_value("-a")
    assert is_env_name("_A.b-1") and not is_env_name("1A") and not is_env_name("A=B")


def test_termination_grace_is_bounded_and_reaches_the_pods() -> None:
    """Issue 43: Kueue stops counting a stopping pod's GPUs, so a job may not ask more than admission allows
    (constants.MAX_TERMINATION_GRACE_SECONDS); the field names itself in the error."""
    doc = job_doc()
    doc["job"]["terminationGracePeriodSeconds"] = 120
    assert TrainingSpec.model_validate(doc).job.termination_grace == 120
    for bad in (MAX_TERMINATION_GRACE_SECONDS + 1, 7200, -1, True, "60"):
        doc["job"]["terminationGracePeriodSeconds"] = bad
        with pytest.raises(ValidationError) as exc:
            TrainingSpec.model_validate(doc)
        assert error_types(exc) == ["gpuctl_termination_grace"], bad
