"""--dry-run in every form becomes one DryRun, once, at parse time; the API's dryRun the same way."""

from __future__ import annotations

import pytest

from gpuctl.cli.main import build_parser
from gpuctl.domain.dryrun import DryRun
from gpuctl.server.api.models import dry_run_mode
from gpuctl.service.lifecycle import delete_by_name

VERBS = {
    "create": ["create", "-f", "x.yaml"],
    "apply": ["apply", "-f", "x.yaml"],
    "delete -f": ["delete", "-f", "x.yaml"],
    "delete job": ["delete", "job", "x"],
    "delete pool": ["delete", "pool", "p"],
    "delete quota": ["delete", "quota", "q"],
    "delete ns": ["delete", "ns", "n"],
    "label": ["label", "node", "n1", "pool=p"],
}
FORMS = [
    ([], DryRun.NONE),
    (["--dry-run"], DryRun.CLIENT),
    (["--dry-run=client"], DryRun.CLIENT),
    (["--dry-run", "client"], DryRun.CLIENT),
    (["--dry-run=server"], DryRun.SERVER),
    (["--dry-run", "server"], DryRun.SERVER),
    (["--dry-run=none"], DryRun.NONE),
]


@pytest.mark.parametrize("verb", list(VERBS))
@pytest.mark.parametrize(("flags", "want"), FORMS)
def test_every_form_of_the_flag_is_one_dry_run(verb, flags, want):
    args = build_parser().parse_args([*VERBS[verb], *flags])
    assert args.dry_run is want


@pytest.mark.parametrize("verb", list(VERBS))
def test_dry_run_before_the_names_and_after_the_flags(verb):
    argv = VERBS[verb]
    args = build_parser().parse_args([argv[0], "--dry-run=server", *argv[1:], "-o", "json"])
    assert args.dry_run is DryRun.SERVER and args.output == "json"


@pytest.mark.parametrize("value", ["bogus", "true", "All", ""])
def test_other_values_are_refused(value, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["create", "-f", "x.yaml", f"--dry-run={value}"])
    assert e.value.code == 1  # a usage error, as kubectl exits
    assert "--dry-run" in capsys.readouterr().err


def test_dry_run_alone_before_a_file_does_not_eat_it():
    args = build_parser().parse_args(["create", "--dry-run", "-f", "x.yaml"])
    assert args.dry_run is DryRun.CLIENT and args.files == ["x.yaml"]


def test_suffixes():
    assert [m.suffix() for m in DryRun] == ["", " (dry run)", " (server dry run)"]


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (False, DryRun.NONE),
        ("none", DryRun.NONE),
        (True, DryRun.CLIENT),
        ("client", DryRun.CLIENT),
        ("server", DryRun.SERVER),
    ],
)
def test_api_dry_run_field(value, want):
    assert dry_run_mode(value) is want


def test_a_bool_is_not_a_dry_run_in_the_service_layer():
    """A caller passing True/False (the old signature) gets an error, never a silent real write."""
    with pytest.raises(ValueError):
        delete_by_name(None, "job", ["x"], namespace="n", dry_run=True)  # type: ignore[arg-type]
