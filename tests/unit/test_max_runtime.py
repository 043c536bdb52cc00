"""`job.maxRuntime`: its syntax and errors (file, field, fix), and where the builders put Kueue's
max-exec-time label (the object Kueue builds the Workload from, and every pod template)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuctl.builders import build
from gpuctl.constants import MAX_EXEC_TIME_LABEL
from gpuctl.domain.workload import format_duration, max_runtime_seconds
from gpuctl.spec import SpecError, load_text

ROOT = Path(__file__).resolve().parents[2]


def _spec(kind: str, max_runtime: object):
    raw = yaml.safe_load((ROOT / "examples" / f"{kind}.yaml").read_text())
    raw["job"]["maxRuntime"] = max_runtime
    (doc,) = load_text(yaml.safe_dump(raw), f"{kind}.yaml")
    return doc.spec


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("2h", 7200), ("90m", 5400), ("1h30m", 5400), ("45s", 45), ("1d", 86400), (3600, 3600), ("600", 600)],
)
def test_durations_and_whole_seconds(value: object, seconds: int) -> None:
    assert _spec("training", value).job.max_runtime == seconds


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("2 hours", "is not a duration"),
        ("0", "is not a positive duration"),
        (-5, "is not a positive duration"),
        (1.5, "is not a whole number of seconds"),
        (True, "is not a duration"),
        ("30000d", "is longer than Kueue accepts"),
    ],
)
def test_errors_name_the_file_the_field_and_the_fix(value: object, says: str) -> None:
    with pytest.raises(SpecError) as e:
        _spec("training", value)
    text = str(e.value)
    assert "training.yaml" in text and "job.maxRuntime" in text and says in text, text
    assert "fix:" in text


@pytest.mark.parametrize("kind", ["training", "inference", "notebook", "compute"])
def test_the_label_goes_where_kueue_reads_it(kind: str) -> None:
    workload = build(_spec(kind, "90m"), "team-a")[0]
    # A Job's own labels (batch/Job integration); a pod's for Deployments and StatefulSets (pod
    # integration): gpuctl writes both on every kind.
    assert workload["metadata"]["labels"][MAX_EXEC_TIME_LABEL] == "5400"
    assert workload["spec"]["template"]["metadata"]["labels"][MAX_EXEC_TIME_LABEL] == "5400"
    assert max_runtime_seconds(workload) == max_runtime_seconds(workload["spec"]["template"]) == 5400
    # Without maxRuntime: no label at all (no cap).
    plain = build(_spec(kind, None), "team-a")[0]
    assert MAX_EXEC_TIME_LABEL not in plain["metadata"]["labels"]


def test_format_duration_reads_like_the_yaml() -> None:
    assert [format_duration(s) for s in (60, 5400, 7200, 86400 + 61)] == ["1m", "1h30m", "2h", "1d1m1s"]
