"""Read gpuctl YAML files into validated spec models, reporting every problem at once.

Callers create cluster objects only from a fully valid set of documents ("nothing half created"), so the
loader either returns every document of every file or raises one SpecError listing every problem of every
file, each with the file, document number, YAML field path and a concrete fix. Unknown keys — silently
dropped by the earlier gpuctl — are warnings (errors with `strict`), with a "did you mean" suggestion.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

from gpuctl.constants import GRACE_ENV, KIND_ALIASES, MAX_TERMINATION_GRACE_SECONDS, Kind
from gpuctl.quantity import QuantityError, parse_quantity
from gpuctl.spec.error_fixes import show, translate
from gpuctl.spec.limits import limit_problem
from gpuctl.spec.models import (
    KIND_MODELS,
    AnySpec,
    PoolSpec,
    QuotaSpec,
    normalise_host_path,
)
from gpuctl.spec.suggest import closest
from gpuctl.spec.unknown_keys import unknown_keys

__all__ = [
    "CONFIG_ENV",
    "HOST_PATHS_ENV",
    "Document",
    "SpecConfig",
    "SpecError",
    "SpecIssue",
    "load_file",
    "load_files",
    "load_text",
]

HOST_PATHS_ENV = "GPUCTL_ALLOWED_HOST_PATHS"
CONFIG_ENV = "GPUCTL_CONFIG"
DEFAULT_CONFIG_PATH = "~/.config/gpuctl/config.yaml"

# Every spelling of `kind` the loader accepts, in the order the fix lists them.
ACCEPTED_KINDS: tuple[str, ...] = (*(k.value for k in Kind), *KIND_ALIASES)


# ---------------------------------------------------------------------------------------------------------
# Public types.


@dataclass(frozen=True)
class SpecIssue:
    """One problem in one document; `index` is None for file-level problems (unreadable, not YAML)."""

    source: str
    index: int | None
    field: str
    message: str
    fix: str

    def __str__(self) -> str:
        parts = [self.source]
        if self.index is not None:
            parts.append(f"document {self.index}")
        if self.field:
            parts.append(self.field)
        text = ": ".join(parts) + f": {self.message}"
        return f"{text} (fix: {self.fix})" if self.fix else text


class SpecError(Exception):
    """Every problem found while loading; `str(e)` is one issue per line, ready to print."""

    def __init__(self, issues: Sequence[SpecIssue], warnings: Sequence[str] = ()) -> None:
        self.issues: list[SpecIssue] = list(issues)
        self.warnings: tuple[str, ...] = tuple(warnings)
        super().__init__("\n".join(str(i) for i in self.issues))

    def __str__(self) -> str:
        return "\n".join(str(i) for i in self.issues)


@dataclass(frozen=True)
class SpecConfig:
    """Site settings that change validation: extra hostPaths an admin allows, strict unknown keys, and the
    termination-grace cap (admission's, from the environment)."""

    allowed_host_paths: tuple[str, ...] = ()
    strict: bool = False  # unknown keys become errors
    # The longest terminationGracePeriodSeconds a job may ask: admission's cap ($GPUCTL_MAX_TERMINATION_GRACE)
    max_termination_grace: int = MAX_TERMINATION_GRACE_SECONDS

    @classmethod
    def from_env(cls, strict: bool = False) -> SpecConfig:
        """Allowed host paths from `$GPUCTL_ALLOWED_HOST_PATHS` (colon-separated) plus `allowedHostPaths`
        in `$GPUCTL_CONFIG` or ~/.config/gpuctl/config.yaml. A missing config file is fine; an unreadable
        or malformed one raises SpecError (silently ignoring it would deny paths the admin allowed)."""
        paths: list[str] = []
        issues: list[SpecIssue] = []
        env_value = os.environ.get(HOST_PATHS_ENV, "")
        for entry in filter(None, (p.strip() for p in env_value.split(":"))):
            if not entry.startswith("/"):
                issues.append(
                    SpecIssue(
                        f"${HOST_PATHS_ENV}", None, "", f"{entry!r} is not absolute", "use absolute paths"
                    )
                )
            else:
                paths.append(normalise_host_path(entry))
        config_path = os.environ.get(CONFIG_ENV) or os.path.expanduser(DEFAULT_CONFIG_PATH)
        explicit = bool(os.environ.get(CONFIG_ENV))
        if os.path.exists(config_path) or explicit:
            found, config_issues = _read_config_paths(config_path)
            paths.extend(found)
            issues.extend(config_issues)
        grace = _grace_from_env(issues)
        if issues:
            raise SpecError(issues)
        return cls(allowed_host_paths=tuple(dict.fromkeys(paths)), strict=strict, max_termination_grace=grace)


@dataclass(frozen=True)
class Document:
    """One validated YAML document: where it came from, the model, and its warnings (full lines)."""

    source: str
    index: int
    spec: AnySpec
    warnings: tuple[str, ...] = ()


def _grace_from_env(issues: list[SpecIssue]) -> int:
    """`$GPUCTL_MAX_TERMINATION_GRACE` (the admin's termination-grace cap, as the webhook's
    --max-termination-grace), else the default; a value that is no whole number of seconds is an issue."""
    raw = os.environ.get(GRACE_ENV, "").strip()
    if not raw:
        return MAX_TERMINATION_GRACE_SECONDS
    if not raw.isdigit():
        issues.append(
            SpecIssue(f"${GRACE_ENV}", None, "", f"{raw!r} is not a whole number of seconds", "e.g. 300")
        )
        return MAX_TERMINATION_GRACE_SECONDS
    return int(raw)


def _read_config_paths(path: str) -> tuple[list[str], list[SpecIssue]]:
    fix = "make it a YAML mapping such as `allowedHostPaths: [/data, /scratch]`"
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.load(fh, Loader=_SafeLoader)  # a SafeLoader subclass
    except OSError as exc:
        return [], [SpecIssue(path, None, "", f"cannot read config: {exc.strerror or exc}", "check the path")]
    except yaml.YAMLError as exc:
        return [], [SpecIssue(path, None, "", f"config is not valid YAML: {_yaml_problem(exc)}", fix)]
    if data is None:
        return [], []
    if not isinstance(data, dict):
        return [], [SpecIssue(path, None, "", "config is not a mapping", fix)]
    raw = data.get("allowedHostPaths", data.get("allowed_host_paths")) or []
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        return [], [SpecIssue(path, None, "allowedHostPaths", "must be a list of paths", fix)]
    bad = [p for p in raw if not p.startswith("/")]
    if bad:
        return [], [
            SpecIssue(path, None, "allowedHostPaths", f"{bad[0]!r} is not absolute", "use absolute paths")
        ]
    return [normalise_host_path(p) for p in raw], []


# ---------------------------------------------------------------------------------------------------------
# YAML reading.

_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _SafeLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    """SafeLoader (libyaml when available, for speed) that records duplicate mapping keys, which PyYAML
    otherwise resolves silently by keeping the last one — a classic copy-paste trap (`gpu:` twice)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[str, int]] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                ident = (key_node.tag, key_node.value)
                if ident in seen:
                    self.duplicates.append((key_node.value, key_node.start_mark.line + 1))
                seen.add(ident)
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return problem


def _iter_documents(text: str) -> Iterator[tuple[int, Any, list[tuple[str, int]]]]:
    """Yield (1-based index, data, duplicate keys) per document; YAML errors propagate after the
    documents before them were yielded."""
    loader = _SafeLoader(text)
    try:
        index = 0
        while loader.check_data():
            index += 1
            loader.duplicates = []
            data = loader.get_data()
            yield index, data, loader.duplicates
    finally:
        loader.dispose()


# ---------------------------------------------------------------------------------------------------------
# Loading.


def _kind_issue(raw: dict[str, Any]) -> tuple[str, str, str] | None:
    """(field, message, fix) if the document's kind is missing or unknown, else None."""
    accepted = ", ".join(ACCEPTED_KINDS)
    if "kind" not in raw or raw["kind"] is None or raw["kind"] == "":
        guess = next((k for k in ("job", "pool", "quota") if k in raw), None)
        example = {"pool": "pool", "quota": "quota"}.get(guess or "", "training")
        return "kind", "missing", f"add `kind: {example}` (one of: {accepted})"
    kind = raw["kind"]
    if not isinstance(kind, str):
        return "kind", f"kind must be text, got {show(kind)}", f"use one of: {accepted}"
    if kind.strip().lower() in ACCEPTED_KINDS:
        return None
    if "apiVersion" in raw:
        return (
            "kind",
            f"unknown kind {kind!r}: this looks like a Kubernetes manifest",
            f"apply Kubernetes manifests with kubectl; gpuctl reads kinds {accepted}",
        )
    hint = closest(kind.strip(), ACCEPTED_KINDS)
    fix = (f"did you mean `kind: {hint}`? " if hint else "") + f"use one of: {accepted}"
    return "kind", f"unknown kind {kind!r}", fix


def _resolve_kind(kind: str) -> Kind:
    low = kind.strip().lower()
    return KIND_ALIASES.get(low) or Kind(low)


def _semantic_warnings(spec: AnySpec) -> list[str]:
    """Valid but almost certainly unintended values, worth a line on the terminal."""
    out: list[str] = []
    resources = getattr(spec, "resources", None)
    if resources is not None:
        memory = resources.memory
        try:
            amount = parse_quantity(memory)
        except QuantityError:  # pragma: no cover - validated already
            return out
        if memory.replace(".", "", 1).isdigit() and amount < 2**20:
            out.append(
                f"resources.memory {memory} means {memory} bytes, too little to start a container; "
                f"did you mean {memory}Mi or {memory}Gi?"
            )
    return out


def _load_one(
    source: str, index: int, raw: Any, duplicates: list[tuple[str, int]], config: SpecConfig
) -> tuple[Document | None, list[SpecIssue], list[str]]:
    """Validate one parsed document: (document or None, issues, warnings). Warnings are returned even
    when there are issues, since an ignored misspelt key often explains an error next to it."""
    issues: list[SpecIssue] = []
    warnings: list[str] = []
    prefix = f"{source}: document {index}"

    for key, line in duplicates:
        message = f"key {key!r} appears twice (line {line}); the last value is used"
        if config.strict:
            issues.append(SpecIssue(source, index, "", message, "remove one of them"))
        else:
            warnings.append(f"{prefix}: {message}")

    if not isinstance(raw, dict):
        issues.append(
            SpecIssue(
                source,
                index,
                "",
                f"a document must be a mapping of keys, got {type(raw).__name__} {show(raw)}",
                "start the document with `kind: <kind>` followed by its blocks",
            )
        )
        return None, issues, warnings
    problem = _kind_issue(raw)
    if problem is not None:
        issues.append(SpecIssue(source, index, *problem))
        return None, issues, warnings
    model = KIND_MODELS[_resolve_kind(raw["kind"])]

    for path, _key, hint in unknown_keys(raw, model, ""):
        if config.strict:
            if hint and hint.startswith("did you mean"):
                fix = f"{hint} otherwise remove it"
            else:
                fix = f"remove it ({hint})" if hint else "remove it"
            issues.append(SpecIssue(source, index, path, "unknown key", fix))
        else:
            warnings.append(f"{prefix}: unknown key '{path}' ignored" + (f"; {hint}" if hint else ""))

    try:
        context = {
            "allowed_host_paths": config.allowed_host_paths,
            "max_termination_grace": config.max_termination_grace,
        }
        spec = model.model_validate(raw, context=context)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            issues.append(SpecIssue(source, index, *translate(err, raw)))
        return None, issues, warnings
    warnings.extend(f"{prefix}: {w}" for w in _semantic_warnings(spec))  # type: ignore[arg-type]
    if issues:
        return None, issues, warnings
    return Document(source, index, spec, tuple(warnings)), issues, warnings  # type: ignore[arg-type]


def _load(text: str, source: str, config: SpecConfig) -> tuple[list[Document], list[SpecIssue], list[str]]:
    """Parse and validate every document of one text: (documents, issues, all warnings)."""
    docs: list[Document] = []
    issues: list[SpecIssue] = []
    warnings: list[str] = []
    index = 0
    if (over := limit_problem(text)) is not None:
        return docs, [SpecIssue(source, None, "", *over)], warnings
    try:
        for index, raw, duplicates in _iter_documents(text):
            if raw is None:
                continue  # empty document (`---` at the start or end, or two in a row)
            doc, found, warned = _load_one(source, index, raw, duplicates, config)
            issues.extend(found)
            warnings.extend(warned)
            if doc is not None:
                docs.append(doc)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" near line {mark.line + 1}" if mark is not None else ""
        fix = f"check the indentation and quoting{line}; documents are separated by a line `---`"
        lines = text.splitlines()
        if mark is not None and mark.line < len(lines) and "\t" in lines[mark.line]:
            fix = f"indent with spaces, not tabs{line}"
        issues.append(SpecIssue(source, index + 1, "", f"YAML syntax error at {_yaml_problem(exc)}", fix))
    return docs, issues, warnings


def _identity(spec: AnySpec) -> tuple[str, str, str | None, str]:
    """(group, name, namespace, field) — two documents with the same identity would fight over objects."""
    if isinstance(spec, PoolSpec):
        return "pool", spec.pool.name, None, "pool.name"
    if isinstance(spec, QuotaSpec):
        return "quota", spec.quota.name, None, "quota.name"
    return "job", spec.job.name, spec.job.namespace, "job.name"


def _cross_document_issues(docs: Sequence[Document]) -> list[SpecIssue]:
    """Problems only visible across documents: two jobs (or pools, quotas) with one name, which would
    make the second create fail after the first succeeded, and one node claimed by two pools."""
    issues: list[SpecIssue] = []
    seen: dict[tuple[str, str, str | None], Document] = {}
    node_owner: dict[str, Document] = {}
    for doc in docs:
        group, name, namespace, field_path = _identity(doc.spec)
        first = seen.setdefault((group, name, namespace), doc)
        if first is not doc:
            where = (
                f"{first.source} document {first.index}"
                if first.source != doc.source
                else f"document {first.index}"
            )
            issues.append(
                SpecIssue(
                    doc.source,
                    doc.index,
                    field_path,
                    f"{group} {name!r} is defined twice (also in {where})",
                    f"give each {group} its own name" + (" or namespace" if group == "job" else ""),
                )
            )
        if isinstance(doc.spec, PoolSpec):
            for node in doc.spec.nodes:
                owner = node_owner.setdefault(node, doc)
                if owner is not doc and owner.spec.pool.name != doc.spec.pool.name:  # type: ignore[union-attr]
                    issues.append(
                        SpecIssue(
                            doc.source,
                            doc.index,
                            f"nodes.{node}",
                            f"node {node!r} is also in pool {owner.spec.pool.name!r}"  # type: ignore[union-attr]
                            f" ({owner.source} document {owner.index})",
                            "a node belongs to one pool; remove it from one of them",
                        )
                    )
    return issues


def _raise_if(issues: list[SpecIssue], warnings: Sequence[str]) -> None:
    if issues:
        raise SpecError(issues, warnings)


def load_text(text: str, source: str = "<stdin>", config: SpecConfig | None = None) -> list[Document]:
    """Validate every document in `text`; raise SpecError listing all problems if there is any."""
    docs, issues, warnings = _load(text, source, config or SpecConfig())
    issues.extend(_cross_document_issues(docs))
    _raise_if(issues, warnings)
    return docs


def _read(path: str) -> tuple[str | None, str, SpecIssue | None]:
    """(text, source name, issue) for a path, `-` being stdin."""
    if path == "-":
        try:
            return sys.stdin.read(), "<stdin>", None
        except (OSError, UnicodeDecodeError) as exc:
            return (
                None,
                "<stdin>",
                SpecIssue("<stdin>", None, "", f"cannot read stdin: {exc}", "pipe a YAML file"),
            )
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read(), path, None
    except IsADirectoryError:
        issue = SpecIssue(path, None, "", "is a directory", "check the path; pass one -f per YAML file")
    except FileNotFoundError:
        issue = SpecIssue(path, None, "", "no such file", "check the path")
    except UnicodeDecodeError:
        issue = SpecIssue(path, None, "", "is not UTF-8 text", "check the path; save the file as UTF-8 YAML")
    except OSError as exc:
        issue = SpecIssue(
            path, None, "", f"cannot read file: {exc.strerror or exc}", "check the path and its permissions"
        )
    return None, path, issue


def load_file(path: str, config: SpecConfig | None = None) -> list[Document]:
    """Validate every document of one file (`-` reads stdin)."""
    return load_files([path], config)


def load_files(paths: Sequence[str], config: SpecConfig | None = None) -> list[Document]:
    """Validate every document of every file; one SpecError carries the problems of all files.

    A file given twice is read once (the earlier gpuctl silently kept only the last `-f`; reading a file
    twice would instead report each of its jobs as a duplicate of itself)."""
    cfg = config or SpecConfig()
    docs: list[Document] = []
    issues: list[SpecIssue] = []
    warnings: list[str] = []
    seen_paths: set[str] = set()
    for path in paths:
        key = path if path == "-" else os.path.realpath(path)
        if key in seen_paths:
            continue
        seen_paths.add(key)
        text, source, problem = _read(path)
        if problem is not None:
            issues.append(problem)
            continue
        assert text is not None
        found_docs, found, warned = _load(text, source, cfg)
        docs.extend(found_docs)
        issues.extend(found)
        warnings.extend(warned)
    issues.extend(_cross_document_issues(docs))
    _raise_if(issues, warnings)
    return docs
