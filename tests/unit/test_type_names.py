"""kubectl's TYPE/NAME arguments (issue 42: `job/NAME` and several names were refused)."""

import pytest

from gpuctl.cli import delete, describe, get
from gpuctl.cli.errors import CommandError
from gpuctl.cli.main import build_parser
from gpuctl.cli.typenames import split_type_names


def split(argv: list[str], verb: str, types: dict) -> list[str]:
    return split_type_names(argv, verb, build_parser(only=verb), types)


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["describe", "job/a"], ["describe", "job", "a"]),
        (["-n", "t", "describe", "job/a", "jobs/b"], ["-n", "t", "describe", "job", "a", "b"]),
        (["describe", "pool/p", "-o", "json"], ["describe", "pool", "p", "-o", "json"]),
        # what -o name prints, read back: a gpuctl job is a Job, a Deployment or a StatefulSet
        (["describe", "statefulset.apps/nb", "deployment.apps/web"], ["describe", "job", "nb", "web"]),
        (["describe", "job", "a"], ["describe", "job", "a"]),
    ],
)
def test_describe_type_slash_names(argv: list[str], want: list[str]) -> None:
    assert split(argv, "describe", describe.TYPES) == want


def test_option_values_are_never_rewritten() -> None:
    argv = ["delete", "-f", "job/x.yaml", "--kubeconfig", "pool/k"]
    assert split(argv, "delete", delete.TYPES) == argv
    assert split(["delete", "job/a", "job/b", "--force"], "delete", delete.TYPES) == [
        "delete",
        "job",
        "a",
        "b",
        "--force",
    ]
    assert split(["get", "job/a", "-o", "yaml"], "get", get.TYPES) == ["get", "job", "a", "-o", "yaml"]


def test_kubectls_refusals() -> None:
    with pytest.raises(CommandError, match="no need to specify a resource type as a separate argument"):
        split(["describe", "job", "job/a"], "describe", describe.TYPES)
    with pytest.raises(CommandError, match="one type at a time"):
        split(["delete", "job/a", "pool/b"], "delete", delete.TYPES)


def test_describe_takes_several_names_but_one_with_o() -> None:
    args = build_parser().parse_args(["describe", "job", "a", "b"])
    assert args.names == ["a", "b"]
    with pytest.raises(CommandError, match="takes one NAME"):
        args.output = "json"
        args.run(args)


@pytest.mark.parametrize("resource", ["Job", "Deployment", "StatefulSet", "LeaderWorkerSet"])
def test_what_every_job_object_prints_as_its_name_is_read_back(resource: str) -> None:
    """`-o name`, `delete`, `stop`, `keep` print gpuctl.cluster.type_name; the TYPE/NAME reader takes it
    back (and kubectl's plural form) for every object a gpuctl job is (one table: gpuctl.cluster.paths)."""
    from gpuctl.cluster import type_name
    from gpuctl.cluster.paths import RESOURCES, api_group

    plural = f"{RESOURCES[resource].plural}.{api_group(resource)}/x"
    for printed in (type_name(resource, "x"), plural):
        assert split(["describe", printed], "describe", describe.TYPES) == ["describe", "job", "x"], printed
