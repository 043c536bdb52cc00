"""The building blocks of every spec model: the error every check raises, scalar coercions and the
Annotated field types (names, quantities, ports, durations), and the two base models.

Every check that can fail raises a `PydanticCustomError` whose type starts with `gpuctl_` and whose context
carries `message`, `fix` and `at` (a path suffix below the failing field). `gpuctl.spec.loader` turns those
into user-facing SpecIssues; code that validates models directly still gets readable pydantic errors.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gpuctl.constants import MAX_RUNTIME_SECONDS, Kind
from gpuctl.quantity import QuantityError, parse_quantity
from gpuctl.spec.names import is_dns_label, is_dns_subdomain, is_label_value

# Fix texts shared with tests and the loader; keep the wording stable, users search for it.
NAME_FIX = (
    "use lowercase letters, digits and '-', starting and ending with a letter or digit, "
    "at most 63 characters, e.g. {example}"
)
QUANTITY_FIX = "use a Kubernetes quantity such as 4, 500m, 16Gi"
PORT_FIX = "use a port between 1 and 65535, e.g. 8000"
HOST_PATH_FIX = (
    "choose a directory under a data root such as /data/<team> (system locations are never mounted); an "
    "admin adds data roots with allowedHostPaths"
)
NOTEBOOK_REPLICAS_FIX = "notebooks run exactly one replica; remove `replicas` or set it to 1"


def fail(code: str, message: str, fix: str, at: str = "") -> PydanticCustomError:
    """Build the error every gpuctl check raises; `at` is appended to the failing field's path."""
    return PydanticCustomError(f"gpuctl_{code}", "{message}", {"message": message, "fix": fix, "at": at})


def show(value: object) -> str:
    """Short repr of a user value for messages (a 2 kB command line must not flood the terminal)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------------------------------------
# Scalar coercions and checks, used through Annotated types below.


def scalar_text(value: object) -> object:
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
        raise fail("dns_label", f"{show(value)} {why}", NAME_FIX.format(example=example))
    return value


def _dns_label_key(value: str) -> str:
    """Dict keys (quota namespaces, pool names under `pools:`) have no field name to tailor the example."""
    if not is_dns_label(value):
        example = _example_label(value, "team-a")
        raise fail("dns_label", f"{show(value)} is not a valid name", NAME_FIX.format(example=example))
    return value


def _dns_subdomain(value: str, info: ValidationInfo) -> str:
    if not is_dns_subdomain(value):
        if info.field_name == "image_pull_secret":
            example = "e.g. regcred (the name of a docker-registry Secret in the job's namespace)"
        else:
            example = "e.g. gpu-node-1 (the name `kubectl get nodes` shows)"
        raise fail(
            "dns_subdomain",
            f"{show(value)} is not a valid Kubernetes object name",
            f"use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, "
            f"{example}",
        )
    return value


def _label_value(value: str) -> str:
    if not is_label_value(value):
        raise fail(
            "label_value",
            f"{show(value)} cannot be a Kubernetes label value",
            "use at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, "
            "e.g. A100-80G",
        )
    return value


def _quantity(value: str, *, positive: bool, field: str) -> str:
    example = {"cpu": "cpu: 4 or cpu: 500m", "memory": "memory: 16Gi"}.get(field, f"{field}: 4")
    try:
        amount = parse_quantity(value)
    except QuantityError:
        raise fail("quantity", f"{show(value)} is not a Kubernetes quantity", QUANTITY_FIX) from None
    if positive and amount <= 0:
        raise fail(
            "quantity_positive",
            f"{show(value)} must be greater than 0",
            f"request a positive amount, e.g. {example}",
        )
    if not positive and amount < 0:
        raise fail(
            "quantity_negative", f"{show(value)} must not be negative", f"use 0 or more, e.g. {example}"
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
    return scalar_text(value)


def _not_a_boolean(value: object, info: ValidationInfo) -> object:
    """YAML's true/yes/on are booleans, which pydantic would take as 1: `nodes: true` is a mistake, not one
    node. Counts are whole numbers only."""
    if isinstance(value, bool):
        field = info.field_name or "value"
        raise fail(
            "not_a_number",
            f"{str(value).lower()} is a boolean, not a whole number",
            f"write a number, e.g. {field}: {2 if field == 'nodes' else 1}",
        )
    return value


def _non_negative_int(value: int, info: ValidationInfo) -> int:
    if value < 0:
        if info.field_name == "gpu":
            fix = "use 0 for CPU-only work or a positive number of GPUs, e.g. gpu: 1"
        else:
            fix = f"use 0 or a positive whole number, e.g. {info.field_name or 'value'}: 1"
        raise fail("negative", f"{value} must not be negative", fix)
    return value


def _positive_int(value: int, info: ValidationInfo) -> int:
    if value < 1:
        raise fail("not_positive", f"{value} must be at least 1", f"use 1 or more, e.g. {info.field_name}: 1")
    return value


def _port(value: int) -> int:
    if not 1 <= value <= 65535:
        raise fail("port", f"port {value} is out of range", PORT_FIX)
    return value


MAX_RUNTIME_FIX = (
    "use a duration such as 2h, 90m, 1h30m or 45s, or a whole number of seconds, e.g. maxRuntime: 2h"
)
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def _duration_seconds(value: object) -> int:
    """`job.maxRuntime`: "2h", "90m", "1h30m", "45s", "1d" or whole seconds (3600 or "3600") -> seconds,
    as Kueue's max-exec-time label takes them (a positive int32)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise fail("max_runtime", f"{show(value)} is not a duration", MAX_RUNTIME_FIX)
    if isinstance(value, float):
        if not value.is_integer():
            raise fail("max_runtime", f"{show(value)} is not a whole number of seconds", MAX_RUNTIME_FIX)
        value = int(value)
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if text.isdigit():
            value = int(text)
        else:
            m = _DURATION.match(text)
            if not text or m is None:
                raise fail("max_runtime", f"{show(value)} is not a duration", MAX_RUNTIME_FIX)
            d, h, mi, sec = (int(g or 0) for g in m.groups())
            value = ((d * 24 + h) * 60 + mi) * 60 + sec
    if value <= 0:
        raise fail("max_runtime", f"{show(value)} is not a positive duration", MAX_RUNTIME_FIX)
    if value > MAX_RUNTIME_SECONDS:
        raise fail(
            "max_runtime",
            f"{show(value)} is longer than Kueue accepts ({MAX_RUNTIME_SECONDS} seconds)",
            "use at most 24855d, or leave maxRuntime out for no limit",
        )
    return value


Text = Annotated[str, BeforeValidator(scalar_text)]
Duration = Annotated[int, BeforeValidator(_duration_seconds)]
DnsLabel = Annotated[str, BeforeValidator(_name_text), AfterValidator(_dns_label)]
DnsLabelKey = Annotated[str, BeforeValidator(_name_text), AfterValidator(_dns_label_key)]
NodeName = Annotated[str, BeforeValidator(_name_text), AfterValidator(_dns_subdomain)]
LabelValue = Annotated[str, BeforeValidator(scalar_text), AfterValidator(_label_value)]
PositiveQuantity = Annotated[str, BeforeValidator(_quantity_text), AfterValidator(_positive_quantity)]
NonNegQuantity = Annotated[str, BeforeValidator(_quantity_text), AfterValidator(_non_negative_quantity)]
NonNegInt = Annotated[int, BeforeValidator(_not_a_boolean), AfterValidator(_non_negative_int)]
PositiveInt = Annotated[int, BeforeValidator(_not_a_boolean), AfterValidator(_positive_int)]
Port = Annotated[int, BeforeValidator(_not_a_boolean), AfterValidator(_port)]


def aliases(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class SpecModel(BaseModel):
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


def none_to_empty_dict_values(value: Any) -> Any:
    """`nodes: {gpu-node-1: }` and `namespace: {team-a: }` mean "no settings"."""
    if isinstance(value, dict):
        return {k: ({} if v is None or v == "" else v) for k, v in value.items()}
    return value


class KindModel(SpecModel):
    """Common to all kinds: `kind` (matched case-insensitively) and the free-form `version`."""

    version: Text = "v0.1"

    @field_validator("kind", mode="before", check_fields=False)
    @classmethod
    def _kind(cls, value: Any) -> Any:
        if isinstance(value, str):
            low = value.strip().lower()
            return Kind.POOL.value if low == "resource" else low
        return value
