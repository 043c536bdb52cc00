"""Pydantic models of the YAML files users bring from the earlier gpuctl, one model per `kind`.

The models are permissive about spelling (every documented alias of a field is accepted, because users copy
the docs, which disagree with the earlier code) and strict about meaning (names, quantities, ports and host
paths are checked here so that nothing reaches the cluster that the API server would reject half-way).

Every check that can fail raises a `PydanticCustomError` whose type starts with `gpuctl_` and whose context
carries `message`, `fix` and `at` (a path suffix below the failing field). `gpuctl.spec.loader` turns those
into user-facing SpecIssues; code that validates models directly still gets readable pydantic errors.
"""

from __future__ import annotations

import os.path
import re
from decimal import Decimal
from itertools import pairwise
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gpuctl.constants import (
    DEFAULT_POOL,
    DEFAULT_SERVICE_PORT,
    DENIED_HOST_PATHS,
    MAX_RUNTIME_SECONDS,
    NOTEBOOK_PORT,
    SERVICE_PREFIX,
    Kind,
    Priority,
)
from gpuctl.quantity import QuantityError, parse_quantity
from gpuctl.spec.names import is_dns_label, is_dns_subdomain, is_env_name, is_label_value
from gpuctl.spec.suggest import closest

__all__ = [
    "KIND_MODELS",
    "AnySpec",
    "ComputeSpec",
    "EnvVar",
    "Environment",
    "InferenceSpec",
    "JobMeta",
    "JobSpec",
    "LimitRange",
    "NotebookService",
    "NotebookSpec",
    "PoolGuarantee",
    "PoolMeta",
    "PoolNode",
    "PoolSpec",
    "QuotaEntry",
    "QuotaMeta",
    "QuotaSpec",
    "Resources",
    "Service",
    "Storage",
    "Toleration",
    "TrainingSpec",
    "Workdir",
    "path_denied",
    "spec_namespace",
]

# Fix texts shared with tests and the loader; keep the wording stable, users search for it.
NAME_FIX = (
    "use lowercase letters, digits and '-', starting and ending with a letter or digit, "
    "at most 63 characters, e.g. {example}"
)
QUANTITY_FIX = "use a Kubernetes quantity such as 4, 500m, 16Gi"
PORT_FIX = "use a port between 1 and 65535, e.g. 8000"
HOST_PATH_FIX = "choose a data directory such as /data/<team>, or ask an admin to add it to allowedHostPaths"
NOTEBOOK_REPLICAS_FIX = "notebooks run exactly one replica; remove `replicas` or set it to 1"

# A notebook is a StatefulSet: its pods carry `controller-revision-hash: <name>-<10-char hash>`, a label
# value limited to 63 characters, so longer names create a StatefulSet that never gets a pod.
NOTEBOOK_NAME_MAX = 52
# Service kinds also get a Service `svc-<name>`, itself a 63-character DNS label.
SERVICE_NAME_MAX = 63 - len(SERVICE_PREFIX)


def _fail(code: str, message: str, fix: str, at: str = "") -> PydanticCustomError:
    """Build the error every gpuctl check raises; `at` is appended to the failing field's path."""
    return PydanticCustomError(f"gpuctl_{code}", "{message}", {"message": message, "fix": fix, "at": at})


def _show(value: object) -> str:
    """Short repr of a user value for messages (a 2 kB command line must not flood the terminal)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------------------------------------
# Scalar coercions and checks, used through Annotated types below.


def _scalar_text(value: object) -> object:
    """YAML turns `version: 1`, `gpu-type: 4090` and `value: true` into numbers and booleans; the earlier
    gpuctl took them as text, so stringify scalars the way the user typed them (`true`, not `True`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, int | float | Decimal):
        return str(value)
    return value


def _name_text(value: object) -> object:
    """Names may be all digits (`name: 2024`), which YAML reads as an int."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def _example_label(value: str, default: str) -> str:
    """Turn an invalid name into the nearest valid one, so the fix shows the user's own name fixed."""
    guess = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:63].strip("-")
    return guess if guess and is_dns_label(guess) else default


_NAME_EXAMPLES: dict[str | None, str] = {
    "pool": "training-pool",
    "namespace": "team-a",
    "name": "my-job",
}


def _dns_label(value: str, info: ValidationInfo) -> str:
    if not is_dns_label(value):
        example = _example_label(value, _NAME_EXAMPLES.get(info.field_name, "my-job"))
        why = "is longer than 63 characters" if len(value) > 63 else "is not a valid name"
        if value == "":
            why = "must not be empty"
        raise _fail("dns_label", f"{_show(value)} {why}", NAME_FIX.format(example=example))
    return value


def _dns_label_key(value: str) -> str:
    """Dict keys (quota namespaces, pool names under `pools:`) have no field name to tailor the example."""
    if not is_dns_label(value):
        example = _example_label(value, "team-a")
        raise _fail("dns_label", f"{_show(value)} is not a valid name", NAME_FIX.format(example=example))
    return value


def _dns_subdomain(value: str, info: ValidationInfo) -> str:
    if not is_dns_subdomain(value):
        if info.field_name == "image_pull_secret":
            example = "e.g. regcred (the name of a docker-registry Secret in the job's namespace)"
        else:
            example = "e.g. gpu-node-1 (the name `kubectl get nodes` shows)"
        raise _fail(
            "dns_subdomain",
            f"{_show(value)} is not a valid Kubernetes object name",
            f"use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, "
            f"{example}",
        )
    return value


def _label_value(value: str) -> str:
    if not is_label_value(value):
        raise _fail(
            "label_value",
            f"{_show(value)} cannot be a Kubernetes label value",
            "use at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, "
            "e.g. A100-80G",
        )
    return value


def _quantity(value: str, *, positive: bool, field: str) -> str:
    example = {"cpu": "cpu: 4 or cpu: 500m", "memory": "memory: 16Gi"}.get(field, f"{field}: 4")
    try:
        amount = parse_quantity(value)
    except QuantityError:
        raise _fail("quantity", f"{_show(value)} is not a Kubernetes quantity", QUANTITY_FIX) from None
    if positive and amount <= 0:
        raise _fail(
            "quantity_positive",
            f"{_show(value)} must be greater than 0",
            f"request a positive amount, e.g. {example}",
        )
    if not positive and amount < 0:
        raise _fail(
            "quantity_negative", f"{_show(value)} must not be negative", f"use 0 or more, e.g. {example}"
        )
    return value


def _positive_quantity(value: str, info: ValidationInfo) -> str:
    return _quantity(value, positive=True, field=info.field_name or "value")


def _non_negative_quantity(value: str, info: ValidationInfo) -> str:
    return _quantity(value, positive=False, field=info.field_name or "value")


def _quantity_text(value: object) -> object:
    """`cpu: 4`, `cpu: 0.5` and `cpu: "500m"` are all fine; store the text Kubernetes will be sent."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool):
        return value  # `cpu: yes` is a mistake, let the string check report it
    return _scalar_text(value)


def _non_negative_int(value: int, info: ValidationInfo) -> int:
    if value < 0:
        if info.field_name == "gpu":
            fix = "use 0 for CPU-only work or a positive number of GPUs, e.g. gpu: 1"
        else:
            fix = f"use 0 or a positive whole number, e.g. {info.field_name or 'value'}: 1"
        raise _fail("negative", f"{value} must not be negative", fix)
    return value


def _positive_int(value: int, info: ValidationInfo) -> int:
    if value < 1:
        raise _fail(
            "not_positive", f"{value} must be at least 1", f"use 1 or more, e.g. {info.field_name}: 1"
        )
    return value


def _port(value: int) -> int:
    if not 1 <= value <= 65535:
        raise _fail("port", f"port {value} is out of range", PORT_FIX)
    return value


MAX_RUNTIME_FIX = (
    "use a duration such as 2h, 90m, 1h30m or 45s, or a whole number of seconds, e.g. maxRuntime: 2h"
)
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def _duration_seconds(value: object) -> int:
    """`job.maxRuntime`: "2h", "90m", "1h30m", "45s", "1d" or whole seconds (3600 or "3600") -> seconds,
    as Kueue's max-exec-time label takes them (a positive int32)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _fail("max_runtime", f"{_show(value)} is not a duration", MAX_RUNTIME_FIX)
    if isinstance(value, float):
        if not value.is_integer():
            raise _fail("max_runtime", f"{_show(value)} is not a whole number of seconds", MAX_RUNTIME_FIX)
        value = int(value)
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if text.isdigit():
            value = int(text)
        else:
            m = _DURATION.match(text)
            if not text or m is None:
                raise _fail("max_runtime", f"{_show(value)} is not a duration", MAX_RUNTIME_FIX)
            d, h, mi, sec = (int(g or 0) for g in m.groups())
            value = ((d * 24 + h) * 60 + mi) * 60 + sec
    if value <= 0:
        raise _fail("max_runtime", f"{_show(value)} is not a positive duration", MAX_RUNTIME_FIX)
    if value > MAX_RUNTIME_SECONDS:
        raise _fail(
            "max_runtime",
            f"{_show(value)} is longer than Kueue accepts ({MAX_RUNTIME_SECONDS} seconds)",
            "use at most 24855d, or leave maxRuntime out for no limit",
        )
    return value


Text = Annotated[str, BeforeValidator(_scalar_text)]
Duration = Annotated[int, BeforeValidator(_duration_seconds)]
DnsLabel = Annotated[str, BeforeValidator(_name_text), AfterValidator(_dns_label)]
DnsLabelKey = Annotated[str, BeforeValidator(_name_text), AfterValidator(_dns_label_key)]
NodeName = Annotated[str, BeforeValidator(_name_text), AfterValidator(_dns_subdomain)]
LabelValue = Annotated[str, BeforeValidator(_scalar_text), AfterValidator(_label_value)]
PositiveQuantity = Annotated[str, BeforeValidator(_quantity_text), AfterValidator(_positive_quantity)]
NonNegQuantity = Annotated[str, BeforeValidator(_quantity_text), AfterValidator(_non_negative_quantity)]
NonNegInt = Annotated[int, AfterValidator(_non_negative_int)]
PositiveInt = Annotated[int, AfterValidator(_positive_int)]
Port = Annotated[int, AfterValidator(_port)]


def _aliases(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class _Model(BaseModel):
    """Base of every spec model: extra keys are ignored here and reported by the loader; a key whose value
    is YAML null means "not given" (so `storage:` alone is the default and a null required field is
    reported as missing rather than as "None is not a string")."""

    # defer_build: a model's validator is built when it first validates, not at import. A `create -f`
    # of a training job builds TrainingSpec's (its blocks inline) instead of every model's.
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=False, defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(v is None for v in data.values()):
            return {k: v for k, v in data.items() if v is not None}
        return data


def _none_to_empty_dict_values(value: Any) -> Any:
    """`nodes: {gpu-node-1: }` and `namespace: {team-a: }` mean "no settings"."""
    if isinstance(value, dict):
        return {k: ({} if v is None or v == "" else v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------------------------------------------
# Shared job blocks.


class JobMeta(_Model):
    """`job:` — the job's identity. `name` becomes the controller, pod and Service name."""

    name: DnsLabel
    priority: Priority = Priority.MEDIUM
    description: Text | None = None
    namespace: DnsLabel | None = None
    epochs: PositiveInt | None = None
    batch_size: PositiveInt | None = Field(
        None, validation_alias=_aliases("batch_size", "batchSize", "batch-size")
    )
    # Wall-clock cap in seconds (Kueue's max-exec-time-seconds: Kueue stops the job once admitted that
    # long; "when will it run" counts on it). None: no limit.
    max_runtime: Duration | None = Field(
        None, validation_alias=_aliases("maxRuntime", "max_runtime", "max-runtime")
    )

    @field_validator("namespace", mode="before")
    @classmethod
    def _empty_namespace(cls, value: Any) -> Any:
        """`namespace: ""` (a template left blank) means "use -n", like leaving it out."""
        return None if value == "" else value

    @field_validator("priority", mode="before")
    @classmethod
    def _priority(cls, value: Any) -> Any:
        if isinstance(value, str):
            low = value.strip().lower()
            if low in Priority._value2member_map_:
                return low
        choices = ", ".join(p.value for p in Priority)
        hint = closest(str(value), [p.value for p in Priority]) if isinstance(value, str) else None
        fix = f"use one of {choices}" + (f" (did you mean '{hint}'?)" if hint else "")
        raise _fail("priority", f"unknown priority {_show(value)}", fix)


class EnvVar(_Model):
    """One container environment variable; values are always strings, as in Kubernetes."""

    name: str
    value: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not is_env_name(value):
            raise _fail("env_name", f"{_show(value)} is not a valid environment variable name", _ENV_NAME_FIX)
        return value


_ENV_NAME_FIX = "use letters, digits, '_', '-' and '.', not starting with a digit, e.g. NCCL_DEBUG"
_ENV_FORM_FIX = "write each variable as `- name: NCCL_DEBUG` + `value: INFO`, or as `- NCCL_DEBUG: INFO`"


def _env_value(value: Any) -> str | None:
    """Stringify an env value; None for values that cannot be one (lists, maps)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float | Decimal):
        return str(_scalar_text(value))
    return None


def _normalise_env(items: Any) -> Any:
    """Accept both env forms and return `[{name, value}, ...]`.

    The earlier gpuctl iterated `item.items()`, so the documented `- name: K / value: V` form produced
    variables literally called `name` and `value`; only `- K: V` worked. Both are accepted here, plus
    several variables in one mapping (`- {A: 1, B: 2}`) and a plain mapping instead of a list. An item is
    the name/value form when its keys are `name` and `value` (or just `name`, which is then an error: a
    variable called "name" is far less likely than a forgotten `value:`).
    """
    if items is None:
        return []
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        raise _fail("env", f"env must be a list, got {_show(items)}", _ENV_FORM_FIX)
    out: list[dict[str, str]] = []
    problems: list[tuple[str, str, str]] = []
    for i, item in enumerate(items):
        where = f"[{i}]"
        if not isinstance(item, dict) or not item:
            problems.append((where, f"expected a variable, got {_show(item)}", _ENV_FORM_FIX))
            continue
        keys = set(item)
        if "name" in keys and keys <= {"name", "value"}:
            if "value" not in keys:
                problems.append(
                    (
                        where,
                        f"variable {_show(item['name'])} has no value",
                        "add `value: <value>` under `name:`",
                    )
                )
                continue
            pairs = [(item["name"], item["value"])]
        elif "valueFrom" in keys or "value_from" in keys:
            problems.append(
                (
                    where,
                    "valueFrom is not supported",
                    "put the value inline (`value: ...`); reference Secrets from the image or entrypoint",
                )
            )
            continue
        else:
            pairs = list(item.items())
        for key, raw in pairs:
            name = _env_value(key)
            value = _env_value(raw)
            if not name or not is_env_name(name):
                problems.append(
                    (where, f"{_show(key)} is not a valid environment variable name", _ENV_NAME_FIX)
                )
            elif value is None:
                problems.append(
                    (where, f"value of {name} must be text or a number, got {_show(raw)}", "quote the value")
                )
            else:
                out.append({"name": name, "value": value})
    if len(problems) == 1:
        where, message, fix = problems[0]
        raise _fail("env", message, fix, at=where)
    if problems:
        message = "; ".join(f"item {where}: {msg}" for where, msg, _ in problems)
        raise _fail("env", message, problems[0][2])
    return out


def _string_list(value: Any) -> Any:
    """`command: python` and `args: 8000` are single-item lists; numbers in the list become text."""
    if value is None:
        return []
    if not isinstance(value, list):
        value = [value]
    out: list[str] = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, bool | int | float | Decimal):
            out.append(str(_scalar_text(item)))
        else:
            raise _fail(
                "string_list",
                f"expected text, got {_show(item)}",
                'write each item as a quoted string, e.g. ["python", "train.py"]',
                at=f"[{i}]",
            )
    return out


class Environment(_Model):
    """`environment:` — the single container's image, command and variables."""

    image: str
    image_pull_secret: NodeName | None = Field(
        None, validation_alias=_aliases("imagePullSecret", "image_pull_secret", "image-pull-secret")
    )
    command: Annotated[list[str], BeforeValidator(_string_list)] = []
    args: Annotated[list[str], BeforeValidator(_string_list)] = []
    env: Annotated[list[EnvVar], BeforeValidator(_normalise_env)] = []

    @field_validator("image", mode="before")
    @classmethod
    def _image(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip()
            if not value:
                raise _fail("image", "image must not be empty", "add an image, e.g. `image: nginx:latest`")
            if any(c.isspace() for c in value):
                raise _fail(
                    "image", f"{_show(value)} contains spaces", "use an image reference such as nginx:1.27"
                )
        return value


_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TOLERATION_FIX = (
    "write a toleration as `key=value:Effect` (kubectl taint syntax), "
    "e.g. nvidia.com/gpu=present:NoSchedule, "
    "or as a mapping {key, operator: Equal|Exists, value, effect: NoSchedule|PreferNoSchedule|NoExecute}"
)


class Toleration(_Model):
    """One pod toleration, as in Kubernetes (the pool's own taints are tolerated without one)."""

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: Text = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] = ""
    toleration_seconds: int | None = Field(
        None, validation_alias=_aliases("tolerationSeconds", "toleration_seconds")
    )

    @model_validator(mode="before")
    @classmethod
    def _taint_syntax(cls, data: Any) -> Any:
        """`key=value:Effect`, `key:Effect`, `key` (any effect, Exists when no value)."""
        if not isinstance(data, str):
            return data
        text, _, effect = data.partition(":")
        key, eq, value = text.partition("=")
        if not key.strip() or (effect and effect not in _TAINT_EFFECTS):
            raise _fail("toleration", f"{_show(data)} is not a toleration", _TOLERATION_FIX)
        return {"key": key.strip(), "operator": "Equal" if eq else "Exists", "value": value, "effect": effect}

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise _fail(
                "toleration", "operator Exists takes no value", "remove `value` or use operator Equal"
            )
        if not self.key and self.operator != "Exists":
            raise _fail("toleration", "a toleration without a key must use operator Exists", _TOLERATION_FIX)
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise _fail("toleration", "tolerationSeconds needs effect NoExecute", "set effect: NoExecute")
        return self

    def as_kubernetes(self) -> dict:
        out: dict = {"key": self.key} if self.key else {}
        out["operator"] = self.operator
        if self.operator == "Equal":
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


class Resources(_Model):
    """`resources:` — requests (= limits) of the container and where it may run. `tolerations` adds
    pod tolerations beyond the pool's (Kueue adds those of the pool's node taints itself).

    Where: `pool: P` pins the job to pool P; `pool: [P, Q]` lets it run in whichever of them Kueue
    finds room in first (`pools_allowed`); no `pool` with a `gpu-type` lets it run in any pool whose
    nodes have that GPU type; no `pool` and no `gpu-type` is pool `default`, as before (docs/queueing.md,
    "Jobs that may run in any pool")."""

    pool: DnsLabel = DEFAULT_POOL
    # sched-b (issue 23): `pool: [P, Q]`, two or more pools (one is the same as `pool: P`).
    any_of_pools: list[DnsLabel] = []
    gpu: NonNegInt = Field(0, validation_alias=_aliases("gpu", "accelerator_count", "accelerator-count"))
    gpu_type: LabelValue | None = Field(None, validation_alias=_aliases("gpuType", "gpu_type", "gpu-type"))
    cpu: PositiveQuantity
    memory: PositiveQuantity
    gpu_share: Text | None = Field(None, validation_alias=_aliases("gpuShare", "gpu_share", "gpu-share"))
    tolerations: list[Toleration] = []

    @field_validator("tolerations", mode="before")
    @classmethod
    def _tolerations(cls, value: Any) -> Any:
        return [value] if isinstance(value, str | dict) else value

    @model_validator(mode="before")
    @classmethod
    def _pool_list(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("pool"), list):
            data = dict(data)
            pools = list(dict.fromkeys(data.pop("pool")))
            if len(pools) == 1:
                data["pool"] = pools[0]
            elif pools:
                data["any_of_pools"] = pools
        return data

    @field_validator("pool", mode="before")
    @classmethod
    def _pool(cls, value: Any) -> Any:
        return DEFAULT_POOL if value == "" else value

    @property
    def any_pool(self) -> bool:
        """The job names no single pool: a list of pools, or none with a GPU type."""
        return bool(self.any_of_pools) or ("pool" not in self.model_fields_set and self.gpu_type is not None)

    @property
    def pools_allowed(self) -> list[str] | None:
        """The pools the job may run in: [pool] when pinned, the list, or None for any pool (of its GPU
        type)."""
        if self.any_of_pools:
            return list(self.any_of_pools)
        return None if self.any_pool else [self.pool]

    @field_validator("gpu_type", mode="before")
    @classmethod
    def _gpu_type(cls, value: Any) -> Any:
        return None if value == "" else value


_PROTOCOLS = ("TCP", "UDP", "SCTP")
_SERVICE_TYPES = {t.lower(): t for t in ("NodePort", "ClusterIP", "LoadBalancer")}


class Service(_Model):
    """`service:` — replicas and the port exposed through the NodePort Service `svc-<name>`."""

    replicas: NonNegInt = 1
    port: Port = DEFAULT_SERVICE_PORT
    health_check: Text | None = Field(
        None, validation_alias=_aliases("healthCheck", "health_check", "health-check")
    )
    timeout: Text | None = None
    target_port: Port | None = Field(
        None, validation_alias=_aliases("targetPort", "target_port", "target-port")
    )
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    type: Literal["NodePort", "ClusterIP", "LoadBalancer"] = "NodePort"

    @field_validator("protocol", mode="before")
    @classmethod
    def _protocol(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().upper() in _PROTOCOLS:
            return value.strip().upper()
        raise _fail("protocol", f"unknown protocol {_show(value)}", f"use one of {', '.join(_PROTOCOLS)}")

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in _SERVICE_TYPES:
            return _SERVICE_TYPES[value.strip().lower()]
        hint = closest(str(value), list(_SERVICE_TYPES.values())) if isinstance(value, str) else None
        fix = f"use one of {', '.join(_SERVICE_TYPES.values())}" + (
            f" (did you mean '{hint}'?)" if hint else ""
        )
        raise _fail("service_type", f"unknown Service type {_show(value)}", fix)

    @field_validator("health_check")
    @classmethod
    def _health_check(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise _fail(
                "health_check",
                f"{_show(value)} is not an HTTP path",
                f"start the path with '/', e.g. healthCheck: /{value.lstrip('/') or 'health'}",
            )
        return value


class NotebookService(Service):
    """A notebook's service: the Service port is also the container port (the earlier gpuctl defaulted the
    Service to 8000 while Jupyter listened on 8888), and there is exactly one replica."""

    port: Port = NOTEBOOK_PORT

    @field_validator("replicas")
    @classmethod
    def _one_replica(cls, value: int) -> int:
        if value != 1:
            raise _fail(
                "notebook_replicas", f"a notebook cannot have {value} replicas", NOTEBOOK_REPLICAS_FIX
            )
        return value


def normalise_host_path(path: str) -> str:
    """`os.path.normpath`, plus folding POSIX's preserved leading `//` (which would dodge the deny list)."""
    norm = os.path.normpath(path)
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    return norm


def _under(path: str, root: str) -> bool:
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


def path_denied(path: str, allowed: tuple[str, ...] | list[str] = ()) -> str | None:
    """Return the deny-list entry that forbids hostPath `path` (normalised), or None if it may be mounted.

    A path is denied if it equals or lies under an entry of DENIED_HOST_PATHS; `/` denies only itself (or
    nothing could be mounted). An allowed entry overrides the deny list for itself and everything below.
    """
    if any(_under(path, normalise_host_path(a)) for a in allowed):
        return None
    for denied in DENIED_HOST_PATHS:
        if path == denied or (denied != "/" and path.startswith(denied + "/")):
            return denied
    return None


class Workdir(_Model):
    """One `storage.workdirs` entry: a host directory mounted read-write at the same path."""

    path: str

    @model_validator(mode="before")
    @classmethod
    def _plain_path(cls, data: Any) -> Any:
        return {"path": data} if isinstance(data, str) else data

    @field_validator("path")
    @classmethod
    def _path(cls, value: str, info: ValidationInfo) -> str:
        if not value.startswith("/"):
            raise _fail(
                "host_path_relative",
                f"{_show(value)} is not an absolute path",
                "use an absolute host path such as /data/<team>",
            )
        norm = normalise_host_path(value)
        allowed = tuple((info.context or {}).get("allowed_host_paths", ()))
        denied = path_denied(norm, allowed)
        if denied is not None:
            inside = "" if denied == norm else f" (inside {denied})"
            raise _fail(
                "host_path_denied", f"mounting host path {norm}{inside} is not allowed", HOST_PATH_FIX
            )
        return norm


class Storage(_Model):
    """`storage:` — host directories to mount (no PVCs, as in the earlier gpuctl)."""

    workdirs: list[Workdir] = []

    @field_validator("workdirs")
    @classmethod
    def _unique(cls, value: list[Workdir]) -> list[Workdir]:
        seen: dict[str, int] = {}
        for i, workdir in enumerate(value):
            if workdir.path in seen:
                raise _fail(
                    "duplicate_workdir",
                    f"{workdir.path} is listed twice (also at [{seen[workdir.path]}])",
                    "remove the duplicate entry",
                    at=f"[{i}]",
                )
            seen[workdir.path] = i
        return value


# ---------------------------------------------------------------------------------------------------------
# Kinds.


class _KindModel(_Model):
    """Common to all kinds: `kind` (matched case-insensitively) and the free-form `version`."""

    version: Text = "v0.1"

    @field_validator("kind", mode="before", check_fields=False)
    @classmethod
    def _kind(cls, value: Any) -> Any:
        if isinstance(value, str):
            low = value.strip().lower()
            return Kind.POOL.value if low == "resource" else low
        return value


class _JobKind(_KindModel):
    job: JobMeta
    environment: Environment
    resources: Resources

    # Longest job.name the objects of this kind allow (see NOTEBOOK_NAME_MAX / SERVICE_NAME_MAX).
    _name_max: ClassVar[int] = 63
    _name_why: ClassVar[str] = ""

    @field_validator("job")
    @classmethod
    def _name_length(cls, job: JobMeta) -> JobMeta:
        if len(job.name) > cls._name_max:
            raise _fail(
                "name_length",
                f"{_show(job.name)} is {len(job.name)} characters; {cls._name_why}",
                f"shorten job.name to at most {cls._name_max} characters",
                at="name",
            )
        return job


_SERVICE_WHY = f"the Service {SERVICE_PREFIX}<name> allows at most {SERVICE_NAME_MAX}"


class TrainingSpec(_JobKind):
    """`kind: training` → a batch/v1 Job."""

    kind: Literal["training"] = "training"
    storage: Storage = Storage()


class InferenceSpec(_JobKind):
    """`kind: inference` → a Deployment and a NodePort Service. `model` is accepted and unused."""

    kind: Literal["inference"] = "inference"
    service: Service = Service()
    storage: Storage = Storage()
    model: dict[str, Any] | None = None

    _name_max: ClassVar[int] = SERVICE_NAME_MAX
    _name_why: ClassVar[str] = _SERVICE_WHY


class NotebookSpec(_JobKind):
    """`kind: notebook` → a one-replica StatefulSet and a NodePort Service on the notebook port."""

    kind: Literal["notebook"] = "notebook"
    service: NotebookService = NotebookService()
    storage: Storage = Storage()

    _name_max: ClassVar[int] = NOTEBOOK_NAME_MAX
    _name_why: ClassVar[str] = f"a notebook's StatefulSet pods break above {NOTEBOOK_NAME_MAX}"


class ComputeSpec(_JobKind):
    """`kind: compute` → a Deployment and a NodePort Service (CPU or GPU services)."""

    kind: Literal["compute"] = "compute"
    service: Service = Service()
    storage: Storage = Storage()

    _name_max: ClassVar[int] = SERVICE_NAME_MAX
    _name_why: ClassVar[str] = _SERVICE_WHY


class PoolCluster(_Model):
    """One `pool.clusters` entry (issue 24): a worker cluster the pool's nodes are in. `kubeconfig` is the
    file (relative to the YAML file's directory) whose credential the manager's Kueue uses there; gpuctl
    stores it in the manager's Secret kueue-system/gpuctl-cluster-<cluster>. Left out: that Secret exists."""

    kubeconfig: str | None = None


def _cluster_shorthand(value: Any) -> Any:
    """`cluster: worker-a` and `clusters: [worker-a, worker-b]` are shorthand for `{worker-a: {}, ...}`."""
    if isinstance(value, str):
        return {value: {}}
    if isinstance(value, list):
        return {str(v): {} for v in value}
    if isinstance(value, dict):
        return {k: ({} if v is None else v) for k, v in value.items()}
    return value


class PoolMeta(_Model):
    """`pool:` — a pool's identity; `name` is the value of the nodes' `runwhere.ai/pool` label.
    `clusters` (or `cluster`): the worker clusters its nodes are in, when the cluster gpuctl talks to is a
    MultiKueue manager (docs/multicluster.md); none: the nodes are in this cluster."""

    name: DnsLabel
    description: Text | None = None
    clusters: Annotated[dict[DnsLabelKey, PoolCluster], BeforeValidator(_cluster_shorthand)] = Field(
        {}, validation_alias=_aliases("clusters", "cluster")
    )


class PoolNode(_Model):
    """One `nodes:` entry; an empty GPU type is allowed (CPU nodes)."""

    gpu_type: LabelValue = Field("", validation_alias=_aliases("gpuType", "gpu_type", "gpu-type"))


class PoolSpec(_KindModel):
    """`kind: pool` (earlier spelling `resource`): a named set of nodes."""

    kind: Literal["pool"] = "pool"
    pool: PoolMeta
    nodes: Annotated[dict[NodeName, PoolNode], BeforeValidator(_none_to_empty_dict_values)] = {}


class QuotaMeta(_Model):
    """`quota:` — a quota's identity."""

    name: DnsLabel
    description: Text | None = None


def _pool_shorthand(value: Any) -> Any:
    """`pools: {training-pool: 4}` is shorthand for `{training-pool: {gpu: 4}}`."""
    if isinstance(value, dict):
        return {
            k: ({"gpu": v} if isinstance(v, int) and not isinstance(v, bool) else ({} if v is None else v))
            for k, v in value.items()
        }
    return value


class PoolGuarantee(_Model):
    """What a team is guaranteed inside one pool (the rest of its quota may land in any pool)."""

    gpu: NonNegInt = 0
    cpu: NonNegQuantity | None = None
    memory: NonNegQuantity | None = None


class LimitRangeResources(_Model):
    """CPU and memory amounts of one LimitRange field (`defaultRequest`, `default`, `max`)."""

    cpu: PositiveQuantity | None = None
    memory: PositiveQuantity | None = None

    def as_kubernetes(self) -> dict[str, str]:
        return {k: v for k, v in (("cpu", self.cpu), ("memory", self.memory)) if v is not None}


DEFAULT_REQUEST = LimitRangeResources(cpu="100m", memory="256Mi")


def _limit_range_switch(value: Any) -> Any:
    """`limitRange: false` turns the team's LimitRange off; `true` or nothing keeps the defaults."""
    if isinstance(value, bool):
        return {"enabled": value}
    return value


class LimitRange(_Model):
    """`limitRange:` — the LimitRange `gpuctl-defaults` of a team namespace (type Container). gpuctl's own
    jobs always set requests = limits; this covers pods made by hand (`kubectl run`), which would
    otherwise request nothing and so cost nothing against the team's quota. Defaults: defaultRequest
    cpu 100m, memory 256Mi; no default limit and no max unless given; `limitRange: false` for none."""

    enabled: bool = True
    default_request: LimitRangeResources = Field(
        DEFAULT_REQUEST, validation_alias=_aliases("defaultRequest", "default_request", "default-request")
    )
    default_limit: LimitRangeResources | None = Field(
        None, validation_alias=_aliases("default", "defaultLimit", "default_limit", "default-limit")
    )
    max: LimitRangeResources | None = None

    @model_validator(mode="after")
    def _ordered(self) -> LimitRange:
        """Kubernetes refuses defaultRequest > default > max; say so here, naming the field."""
        steps = [("defaultRequest", self.default_request), ("default", self.default_limit), ("max", self.max)]
        for res in ("cpu", "memory"):
            given = [(n, getattr(v, res)) for n, v in steps if v is not None and getattr(v, res) is not None]
            for (lo_name, lo), (hi_name, hi) in pairwise(given):
                if parse_quantity(lo) > parse_quantity(hi):
                    raise _fail(
                        "limit_range_order",
                        f"{lo_name}.{res} {lo} is more than {hi_name}.{res} {hi}",
                        f"keep defaultRequest <= default <= max for {res}",
                    )
        return self


class QuotaEntry(_Model):
    """One namespace's quota. None means unlimited; `borrowing_limit` caps GPUs borrowed beyond `gpu`
    from idle teams (None = no cap, 0 = the quota is a hard cap)."""

    cpu: NonNegQuantity | None = None
    memory: NonNegQuantity | None = None
    gpu: NonNegInt | None = None
    borrowing_limit: NonNegInt | None = Field(
        None, validation_alias=_aliases("borrowingLimit", "borrowing_limit", "borrowing-limit", "borrow")
    )
    pools: Annotated[dict[DnsLabelKey, PoolGuarantee], BeforeValidator(_pool_shorthand)] = {}
    limit_range: Annotated[LimitRange, BeforeValidator(_limit_range_switch)] = Field(
        LimitRange(), validation_alias=_aliases("limitRange", "limit_range", "limit-range")
    )

    @model_validator(mode="after")
    def _pools_fit(self) -> QuotaEntry:
        total_gpu = sum(p.gpu for p in self.pools.values())
        if self.gpu is not None and total_gpu > self.gpu:
            raise _fail(
                "pools_exceed",
                f"pool guarantees add up to {total_gpu} GPUs but the quota is gpu: {self.gpu}",
                f"lower the per-pool gpu values or raise `gpu` to at least {total_gpu}",
                at="pools",
            )
        for field in ("cpu", "memory"):
            limit = getattr(self, field)
            parts = [getattr(p, field) for p in self.pools.values() if getattr(p, field) is not None]
            if limit is not None and parts:
                total = sum((parse_quantity(q) for q in parts), Decimal(0))
                if total > parse_quantity(limit):
                    raise _fail(
                        "pools_exceed",
                        f"pool guarantees add up to {total.normalize():f} {field} "
                        f"but the quota is {field}: {limit}",
                        f"lower the per-pool {field} values or raise `{field}`",
                        at="pools",
                    )
        return self


class QuotaSpec(_KindModel):
    """`kind: quota`: per-namespace quotas. The top-level `default:` block is the quota of namespace
    `default` (as in the earlier gpuctl); `namespace: {default: ...}` is honoured too, but not both."""

    kind: Literal["quota"] = "quota"
    quota: QuotaMeta
    namespace: Annotated[dict[DnsLabelKey, QuotaEntry], BeforeValidator(_none_to_empty_dict_values)] = Field(
        {}, validation_alias=_aliases("namespace", "namespaces")
    )
    default: QuotaEntry | None = None

    @field_validator("default")
    @classmethod
    def _one_default(cls, value: QuotaEntry | None, info: ValidationInfo) -> QuotaEntry | None:
        """Checked on `default` (not after the whole model) so it is reported alongside other errors."""
        if value is not None and "default" in (info.data.get("namespace") or {}):
            raise _fail(
                "default_twice",
                "namespace default has two quotas: the top-level `default:` block "
                "and `namespace: {default: ...}`",
                "keep only one of them",
            )
        return value

    def entries(self) -> dict[str, QuotaEntry]:
        """Every namespace's quota, with the top-level `default:` block under key "default"."""
        out = dict(self.namespace)
        if self.default is not None:
            out["default"] = self.default
        return out


JobSpec = TrainingSpec | InferenceSpec | NotebookSpec | ComputeSpec
AnySpec = JobSpec | PoolSpec | QuotaSpec

KIND_MODELS: dict[Kind, type[_KindModel]] = {
    Kind.TRAINING: TrainingSpec,
    Kind.INFERENCE: InferenceSpec,
    Kind.NOTEBOOK: NotebookSpec,
    Kind.COMPUTE: ComputeSpec,
    Kind.POOL: PoolSpec,
    Kind.QUOTA: QuotaSpec,
}


def spec_namespace(spec: AnySpec, default_ns: str) -> str:
    """The namespace a job goes to: `job.namespace` from the YAML beats the CLI's `-n` (as the earlier
    gpuctl's create did; we apply it everywhere). Pools and quotas are cluster-scoped: `default_ns`."""
    job = getattr(spec, "job", None)
    if job is not None and job.namespace:
        return job.namespace
    return default_ns
