"""kubectl's listing flags on gpuctl's read verbs (gpuctl.cli.printers), usage errors and refused flags,
without a cluster. The same outputs against the kubectl binary on real objects:
tests/integration/test_cli_kubectl.py."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from gpuctl.cli import watch
from gpuctl.cli.errors import CommandError
from gpuctl.cli.main import main
from gpuctl.cli.printers import Listing, emit

ITEMS = [
    {"name": "b", "status": "Running", "gpus": 8, "memory": "10Gi", "labels": {"team": "x"}},
    {"name": "a", "status": "Queued", "gpus": 2, "memory": "2Gi", "labels": {}},
    {"name": "c", "status": "Running", "gpus": 4, "memory": "500Mi", "labels": {"team": "y", "a": "1"}},
]


def listing(items=ITEMS, **kw) -> Listing:
    return Listing(
        items=list(items),
        headers=["NAME", "STATUS"],
        rows=[[i["name"], i["status"]] for i in items],
        name=lambda i: f"thing/{i['name']}",
        labels=lambda i: i["labels"],
        **kw,
    )


def args(**kw) -> argparse.Namespace:
    base = {"output": None, "json": False, "no_headers": False, "sort_by": None, "show_labels": False}
    return argparse.Namespace(**{**base, "field_selector": None, **kw})


def out_of(capsys, a, lst=None) -> str:
    assert emit(a, lst or listing()) == 0
    return capsys.readouterr().out


def test_json_of_a_list_is_a_v1_list(capsys) -> None:
    doc = json.loads(out_of(capsys, args(output="json")))
    assert doc == {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": ITEMS}


def test_json_of_one_named_object_is_the_object(capsys) -> None:
    assert json.loads(out_of(capsys, args(output="json"), listing(ITEMS[:1], single=True))) == ITEMS[0]


def test_the_earlier_json_flag_keeps_its_bare_array(capsys) -> None:
    assert json.loads(out_of(capsys, args(output="json", json=True))) == ITEMS


def test_yaml_is_the_same_list(capsys) -> None:
    import yaml

    assert yaml.safe_load(out_of(capsys, args(output="yaml")))["items"] == ITEMS


def test_name_prints_type_slash_name_once_each(capsys) -> None:
    items = [*ITEMS, ITEMS[0]]
    assert out_of(capsys, args(output="name"), listing(items)) == "thing/b\nthing/a\nthing/c\n"


def test_jsonpath_over_the_list_without_newline(capsys) -> None:
    assert out_of(capsys, args(output="jsonpath={.items[*].name}")) == "b a c"
    text = out_of(capsys, args(output='jsonpath={range .items[*]}{.name}={.gpus}{"\\n"}{end}'))
    assert text == "b=8\na=2\nc=4\n"


def test_jsonpath_file(capsys, tmp_path) -> None:
    f = tmp_path / "t"
    f.write_text("{.items[0].name}")
    assert out_of(capsys, args(output=f"jsonpath-file={f}")) == "b"


def test_custom_columns_pad_like_kubectl_and_print_none_for_missing(capsys) -> None:
    text = out_of(capsys, args(output="custom-columns=N:.name,T:.labels.team"))
    assert text == "N     T\nb     x\na     <none>\nc     y\n"
    assert out_of(capsys, args(output="custom-columns=N:name", no_headers=True)) == "b\na\nc\n"


def test_custom_columns_file(capsys, tmp_path) -> None:
    f = tmp_path / "cols"
    f.write_text("NAME   GPUS\n.name  .gpus\n")
    assert (
        out_of(capsys, args(output=f"custom-columns-file={f}"))
        == "NAME   GPUS\nb      8\na      2\nc      4\n"
    )


@pytest.mark.parametrize(
    ("path", "order"),
    [(".gpus", "acb"), ("{.name}", "abc"), ("memory", "cab"), (".labels.team", "abc")],
    ids=["number", "string", "quantities", "missing first"],
)
def test_sort_by_orders_items_and_rows(capsys, path, order) -> None:
    assert out_of(capsys, args(output="jsonpath={.items[*].name}", sort_by=path)).replace(" ", "") == order
    rows = out_of(capsys, args(sort_by=path, no_headers=True)).split()
    assert "".join(r for r in rows if len(r) == 1) == order


def test_sort_by_a_field_no_item_has_is_refused(capsys) -> None:
    with pytest.raises(CommandError, match="couldn't find any field"):
        emit(args(sort_by=".nope"), listing())


def test_table_no_headers_and_show_labels(capsys) -> None:
    assert out_of(capsys, args(no_headers=True)).splitlines() == ["b   Running", "a   Queued", "c   Running"]
    lines = out_of(capsys, args(show_labels=True)).splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "LABELS"]
    assert lines[1].split() == ["b", "Running", "team=x"]
    assert lines[2].split() == ["a", "Queued", "<none>"]
    assert lines[3].split() == ["c", "Running", "a=1,team=y"]


def test_field_selector_on_item_fields(capsys) -> None:
    a = args(output="jsonpath={.items[*].name}", field_selector="status=Running,name!=c")
    assert out_of(capsys, a) == "b"
    with pytest.raises(CommandError, match="field label not supported: phase"):
        emit(args(field_selector="phase=Running"), listing())


def test_empty_listing_says_so_on_stderr(capsys) -> None:
    assert emit(args(), listing([], empty="No things found.")) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "No things found.\n"


def test_a_bad_template_is_an_error(capsys) -> None:
    with pytest.raises(CommandError, match=re.escape("error parsing jsonpath {.items")):
        emit(args(output="jsonpath={.items"), listing())


# ----------------------------------------------------------------------------- the verb
@pytest.fixture
def no_cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["get", "pools", "-l", "a=b"], "get pools does not take -l/--selector (only get jobs does)"),
        (["get", "quotas", "--key", "k"], "get quotas does not take --key (only get labels does)"),
        (
            ["get", "pools", "--pool", "p"],
            "get pools does not take --pool (only get jobs and get nodes does)",
        ),
        (["get", "jobs", "--gpu-type", "a100"], "get jobs does not take --gpu-type (only get nodes does)"),
        (["get", "nodes", "--show-labels"], "get nodes does not take --show-labels"),
    ],
)
def test_a_flag_a_type_cannot_honour_is_refused(no_cluster, capsys, argv, message) -> None:
    assert main(argv) == 1
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["get", "jobs", "--bogus"], "See 'gpuctl get --help' for usage."),
        (["get", "bogus"], "See 'gpuctl get --help' for usage."),
        (["bogus"], "See 'gpuctl --help' for usage."),
        (["get", "jobs", "-o", "table"], "See 'gpuctl get --help' for usage."),
        (["get", "jobs", "-o", "jsonpath"], "See 'gpuctl get --help' for usage."),
    ],
)
def test_usage_errors_exit_1_with_a_hint(no_cluster, capsys, argv, hint) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.rstrip().endswith(hint), err


def test_output_formats_are_named_when_refused(no_cluster, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["get", "jobs", "-o", "table"])
    assert (
        "allowed formats are: json,yaml,wide,name,jsonpath=...,jsonpath-file=..." in capsys.readouterr().err
    )


def test_help_tells_where_reads_look(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["get", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "the context's namespace, else every gpuctl namespace" in out
    assert "default: the context's namespace, or $DEFAULT_NAMESPACE, or default" not in out


def test_watch_compares_cells_by_column_name() -> None:
    row = {"JOB ID": "p", "CLUSTER": "w1", "NODE": "n", "IP": "10.0.0.1", "AGE": "1m"}
    assert not watch.changed_cells(row, {**row, "AGE": "2m"})  # an AGE tick alone prints nothing
    assert watch.changed_cells(row, {**row, "IP": "10.0.0.2"})  # an IP change (9th column with CLUSTER)
    assert watch.changed_cells(None, row)


# ----------------------------------------------------------------------------- wait
@pytest.mark.parametrize(
    ("status", "admitted", "condition", "expected"),
    [
        ("Queued", False, "admitted", False),
        ("QuotaReserved", False, "admitted", False),
        ("Pending", True, "admitted", True),  # its Workload is Admitted, the pods not scheduled yet
        ("Running", False, "admitted", True),
        ("Succeeded", False, "admitted", True),
        ("Failed", False, "admitted", None),
        ("Admitted", False, "running", False),
        ("Running", False, "running", True),
        ("Failed", False, "running", None),
        ("Running", False, "complete", False),
        ("Succeeded", False, "complete", True),
        ("Failed", False, "complete", None),
        ("Failed", False, "failed", True),
        ("Succeeded", False, "failed", None),
        ("Running", False, "failed", False),
    ],
)
def test_wait_conditions(status, admitted, condition, expected) -> None:
    from gpuctl.domain.status import reached

    wl = {"status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]}}
    if admitted:
        wl["status"]["conditions"].append({"type": "Admitted", "status": "True"})
    assert reached(condition, status, wl) is expected


def test_wait_states_are_the_domains() -> None:
    from gpuctl.cli.wait import FOR
    from gpuctl.domain.status import WAIT_FOR

    assert (*WAIT_FOR, "deleted") == FOR


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("2m", 120), ("1h30m", 5400), ("0", 0), ("-1s", 604800)]
)
def test_wait_timeouts(text, seconds) -> None:
    from gpuctl.cli.wait import timeout_seconds

    assert timeout_seconds(text) == seconds


def test_wait_refuses_a_bad_timeout() -> None:
    from gpuctl.cli.wait import timeout_seconds

    with pytest.raises(CommandError, match="invalid --timeout"):
        timeout_seconds("soon")


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("complete", "complete"),
        ("condition=complete", "complete"),
        ("condition=Failed", "failed"),
        ("delete", "deleted"),
    ],
)
def test_wait_reads_kubectls_spellings(text, word) -> None:
    from gpuctl.cli.wait import condition_of

    assert condition_of(text) == word


def test_wait_refuses_an_unknown_state(no_cluster, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["wait", "job", "x", "--for=condition=Ready"])
    assert (
        e.value.code == 1
        and "use one of admitted, running, complete, failed, deleted" in capsys.readouterr().err
    )


def test_all_namespaces_is_accepted_by_cluster_scoped_gets_as_kubectl_accepts_it(monkeypatch) -> None:
    """`kubectl get nodes -A` lists the nodes (a cluster-scoped type ignores -A); gpuctl refused it."""
    from tests.unit.test_consistency import FakeApiServer, _cli_out, _team_objects

    fake = FakeApiServer(_team_objects())
    for kind in ("pools", "nodes", "labels", "ns"):
        assert _cli_out(monkeypatch, fake, ["get", kind, "-A"]) == _cli_out(
            monkeypatch, fake, ["get", kind]
        ), kind
