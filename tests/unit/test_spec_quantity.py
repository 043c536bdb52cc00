"""Kubernetes quantity parsing: the table mirrors what the API server accepts and rejects."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuctl.spec import QuantityError, is_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Decimal(0)),
        ("4", Decimal(4)),
        ("500m", Decimal("0.5")),
        ("1.5", Decimal("1.5")),
        (".5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("+2", Decimal(2)),
        ("-1", Decimal(-1)),
        ("100n", Decimal("0.0000001")),
        ("250u", Decimal("0.00025")),
        ("1k", Decimal(1000)),
        ("2M", Decimal(2_000_000)),
        ("3G", Decimal(3 * 10**9)),
        ("1T", Decimal(10**12)),
        ("1P", Decimal(10**15)),
        ("1E", Decimal(10**18)),
        ("1Ki", Decimal(1024)),
        ("512Mi", Decimal(512 * 2**20)),
        ("1Gi", Decimal(1073741824)),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("16Gi", Decimal(16 * 2**30)),
        ("1Ti", Decimal(2**40)),
        ("1Pi", Decimal(2**50)),
        ("1Ei", Decimal(2**60)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("2e-3", Decimal("0.002")),
        ("1.5e+2", Decimal(150)),
        ("8000m", Decimal(8)),
    ],
)
def test_parse_quantity_values(text: str, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "1GiB",
        "1K",
        "1Gb",
        "1 Gi",
        " 1",
        "1 ",
        "Gi",
        ".",
        "1e",
        "1.2.3",
        "--1",
        "1mi",
        "1Ki3",
        "0x10",
        "1e3.5",
    ],
)
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(QuantityError, match="quantity"):
        parse_quantity(text)
    assert is_quantity(text) is False


def test_parse_quantity_rejects_non_strings() -> None:
    with pytest.raises(QuantityError):
        parse_quantity(4)  # type: ignore[arg-type]
    assert is_quantity(4) is False


def test_parse_quantity_huge_exponent_is_an_error_not_a_hang() -> None:
    with pytest.raises(QuantityError, match="out of range"):
        parse_quantity("1e99999999")


def test_parse_quantity_is_exact_for_large_binary_values() -> None:
    assert parse_quantity("123456789Ei") == Decimal(123456789 * 2**60)
    assert parse_quantity("0.001Ki") == Decimal("1.024")
