"""--field-selector on the items of a listing: a field path that names no field is refused, as kubectl
refuses an unsupported field label (issue 42: `status.phase=Running` matched nothing in silence)."""

import pytest

from gpuctl.cli.errors import CommandError
from gpuctl.cli.printers import field_filter

ITEMS = [
    {"name": "a", "status": "Running", "gpu": {"used": 2, "quota": 4}},
    {"name": "b", "status": "Queued", "gpu": {"used": 0, "quota": 4}},
]


def test_fields_and_nested_fields_select() -> None:
    assert [i["name"] for i in ITEMS if field_filter("status=Running", ITEMS)(i)] == ["a"]
    assert [i["name"] for i in ITEMS if field_filter("gpu.used!=0", ITEMS)(i)] == ["a"]


@pytest.mark.parametrize("selector", ["status.phase=Running", "phase=Running", "gpu.nope=1"])
def test_a_path_naming_no_field_is_refused(selector: str) -> None:
    with pytest.raises(CommandError, match=f"field label not supported: {selector.split('=')[0]}"):
        field_filter(selector, ITEMS)
