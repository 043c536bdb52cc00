"""`job:` and `environment:`: a job's identity and its single container (image, command, variables)."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator

from gpuctl.constants import GRACE_ENV, MAX_TERMINATION_GRACE_SECONDS, Priority
from gpuctl.spec.fields import (
    DnsLabel,
    Duration,
    NodeName,
    PositiveInt,
    SpecModel,
    Text,
    aliases,
    fail,
    scalar_text,
    show,
)
from gpuctl.spec.names import is_env_name
from gpuctl.spec.suggest import closest


class JobMeta(SpecModel):
    """`job:` — the job's identity. `name` becomes the controller, pod and Service name."""

    name: DnsLabel
    priority: Priority = Priority.MEDIUM
    description: Text | None = None
    namespace: DnsLabel | None = None
    epochs: PositiveInt | None = None
    batch_size: PositiveInt | None = Field(
        None, validation_alias=aliases("batch_size", "batchSize", "batch-size")
    )
    # Wall-clock cap in seconds (Kueue's max-exec-time-seconds: Kueue stops the job once admitted that
    # long; "when will it run" counts on it). None: no limit.
    max_runtime: Duration | None = Field(
        None, validation_alias=aliases("maxRuntime", "max_runtime", "max-runtime")
    )
    # The pods' terminationGracePeriodSeconds (time to checkpoint on SIGTERM), at most what admission
    # allows a team pod (SpecConfig.max_termination_grace: $GPUCTL_MAX_TERMINATION_GRACE, else
    # constants.MAX_TERMINATION_GRACE_SECONDS, the webhook's default): Kueue stops counting a terminating
    # pod's GPUs. None: Kubernetes' 30 s.
    termination_grace: int | None = Field(
        None,
        validation_alias=aliases(
            "terminationGracePeriodSeconds",
            "termination_grace_period_seconds",
            "termination-grace-period-seconds",
        ),
    )

    @field_validator("termination_grace", mode="before")
    @classmethod
    def _termination_grace(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        cap = (info.context or {}).get("max_termination_grace", MAX_TERMINATION_GRACE_SECONDS)
        if type(value) is not int or value < 0:
            raise fail(
                "termination_grace",
                f"{show(value)} is not a number of seconds",
                f"use a whole number of seconds from 0 to {cap}",
            )
        if value > cap:
            raise fail(
                "termination_grace",
                f"{value} s is longer than the {cap} s a team pod may take to stop "
                "(Kueue stops counting a stopping pod's GPUs)",
                f"use at most {cap} (checkpoint within it), or ask an admin to raise the bound "
                f"(maxTerminationGraceSeconds; ${GRACE_ENV} for gpuctl)",
            )
        return value

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
        raise fail("priority", f"unknown priority {show(value)}", fix)


class EnvVar(SpecModel):
    """One container environment variable; values are always strings, as in Kubernetes."""

    name: str
    value: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not is_env_name(value):
            raise fail("env_name", f"{show(value)} is not a valid environment variable name", _ENV_NAME_FIX)
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
        return str(scalar_text(value))
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
        raise fail("env", f"env must be a list, got {show(items)}", _ENV_FORM_FIX)
    out: list[dict[str, str]] = []
    problems: list[tuple[str, str, str]] = []
    for i, item in enumerate(items):
        where = f"[{i}]"
        if not isinstance(item, dict) or not item:
            problems.append((where, f"expected a variable, got {show(item)}", _ENV_FORM_FIX))
            continue
        keys = set(item)
        if "name" in keys and keys <= {"name", "value"}:
            if "value" not in keys:
                problems.append(
                    (
                        where,
                        f"variable {show(item['name'])} has no value",
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
                    (where, f"{show(key)} is not a valid environment variable name", _ENV_NAME_FIX)
                )
            elif value is None:
                problems.append(
                    (where, f"value of {name} must be text or a number, got {show(raw)}", "quote the value")
                )
            else:
                out.append({"name": name, "value": value})
    if len(problems) == 1:
        where, message, fix = problems[0]
        raise fail("env", message, fix, at=where)
    if problems:
        message = "; ".join(f"item {where}: {msg}" for where, msg, _ in problems)
        raise fail("env", message, problems[0][2])
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
            out.append(str(scalar_text(item)))
        else:
            raise fail(
                "string_list",
                f"expected text, got {show(item)}",
                'write each item as a quoted string, e.g. ["python", "train.py"]',
                at=f"[{i}]",
            )
    return out


class Environment(SpecModel):
    """`environment:` — the single container's image, command and variables."""

    image: str
    image_pull_secret: NodeName | None = Field(
        None, validation_alias=aliases("imagePullSecret", "image_pull_secret", "image-pull-secret")
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
                raise fail("image", "image must not be empty", "add an image, e.g. `image: nginx:latest`")
            if any(c.isspace() for c in value):
                raise fail(
                    "image", f"{show(value)} contains spaces", "use an image reference such as nginx:1.27"
                )
        return value
