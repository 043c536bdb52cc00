"""One YAML size and alias limit (gpuctl.constants YAML_MAX_BYTES, YAML_MAX_EXPANDED_NODES) for
`gpuctl create -f` and the REST API (issue 33: the CLI had none; 10 nested aliases took 28 s and 2.2 GB,
a 10 MB file failed with "EOF occurred in violation of protocol")."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.cli.main import main
from gpuctl.constants import YAML_MAX_BYTES, YAML_MAX_EXPANDED_NODES
from gpuctl.server.api import models
from gpuctl.spec import SpecError, load_text, loader
from gpuctl.spec.limits import expanded_size

EX = Path(__file__).resolve().parents[2] / "examples"


def bomb(levels: int) -> str:
    """`levels` nested lists of ten aliases each: 10**levels leaves once expanded."""
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    lines += ["kind: training", "job: {name: x}", f"environment: {{image: x, command: *a{levels - 1}}}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


def never_construct(monkeypatch) -> None:
    """The limit is checked before the loader builds Python objects (where the memory went)."""

    def refuse(_text):
        raise AssertionError("the loader constructed an over-limit text")

    monkeypatch.setattr(loader, "_iter_documents", refuse)


def test_ten_nested_aliases_are_refused_by_create_before_loading(tmp_path, capsys, monkeypatch) -> None:
    f = tmp_path / "bomb.yaml"
    f.write_text(bomb(10))
    never_construct(monkeypatch)
    assert main(["create", "-f", str(f)]) == 1
    err = capsys.readouterr().err
    assert f"{f}: the YAML expands to more than {YAML_MAX_EXPANDED_NODES:,} nodes through its aliases" in err
    assert "fix: write the repeated parts out" in err


def test_a_file_over_the_size_limit_is_refused_with_its_size(tmp_path, capsys, monkeypatch) -> None:
    f = tmp_path / "big.yaml"
    text = (EX / "training.yaml").read_text()
    f.write_text(text + "#" * (10 * 1024 * 1024) + "\n")
    never_construct(monkeypatch)
    assert main(["apply", "-f", str(f), "--dry-run=client"]) == 1
    err = capsys.readouterr().err
    size = len(text) + 10 * 1024 * 1024 + 1
    assert f"{f}: {size:,} bytes of YAML, more than the limit of {YAML_MAX_BYTES:,} (1 MiB)" in err
    assert "fix: split the documents over several files" in err


def test_exactly_the_limit_loads_and_one_byte_more_does_not() -> None:
    text = (EX / "training.yaml").read_text()
    pad = YAML_MAX_BYTES - len(text.encode()) - 1
    at_limit = text + "#" * pad + "\n"
    assert len(at_limit.encode()) == YAML_MAX_BYTES
    (doc,) = load_text(at_limit, "ok.yaml")
    assert doc.spec.job.name == "llama-finetune"
    with pytest.raises(SpecError, match="bytes of YAML"):
        load_text(at_limit + "\n", "over.yaml")


def test_the_limit_counts_utf8_bytes_not_characters() -> None:
    text = "kind: training\njob: {name: x}\nenvironment: {image: x}\n# " + "é" * (YAML_MAX_BYTES // 2) + "\n"
    assert len(text) < YAML_MAX_BYTES < len(text.encode())
    with pytest.raises(SpecError, match="bytes of YAML"):
        load_text(text, "accents.yaml")


def test_aliases_within_the_limit_still_load() -> None:
    text = "kind: training\njob: {name: x}\nresources: {cpu: 1, memory: 1Gi}\n"
    text += "environment: {image: &img repo/x:1, command: [&py python, *py, *img]}\n"
    (doc,) = load_text(text, "small.yaml")
    assert doc.spec.environment.command == ["python", "python", "repo/x:1"]
    assert expanded_size(bomb(4)) < YAML_MAX_EXPANDED_NODES < expanded_size(bomb(5))


def test_the_api_caps_yaml_content_with_the_same_constant() -> None:
    assert models.MAX_YAML == YAML_MAX_BYTES
    field = models.Submit.model_fields["yamlContent"]
    assert any(getattr(m, "max_length", None) == YAML_MAX_BYTES for m in field.metadata)
