"""The argparse types every command shares: a bad value is refused in one line that names its flag."""

from __future__ import annotations

import argparse

import pytest

from bakeoff.components import arguments

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("x", "--n takes a whole number, got 'x'"),
        ("1.5", "--n takes a whole number, got '1.5'"),
        ("0", "--n must be at least 1, got 0"),
        ("-2", "--n must be at least 1, got -2"),
        ("9", "--n must be at most 8 (the cap), got 9"),
    ],
)
def test_whole_refuses_what_is_not_a_count_in_range(text: str, error: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{error.replace('(', '[(]').replace(')', '[)]')}$"):
        arguments.whole("--n", 8, " (the cap)")(text)


def test_whole_takes_the_range_ends() -> None:
    assert [arguments.whole("--n", 8)(text) for text in ("1", "8")] == [1, 8]


@pytest.mark.parametrize("text", ["x", "nan", "inf", "-1", "0"])
def test_number_refuses_what_is_not_finite_and_positive(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"^--s takes seconds, got '{text}'$"):
        arguments.number("--s", "seconds")(text)


def test_number_takes_zero_only_when_allowed() -> None:
    assert arguments.number("--ms", "milliseconds, 0 or more", zero=True)("0") == 0.0
    assert arguments.number("--s", "seconds")("0.25") == 0.25
    with pytest.raises(argparse.ArgumentTypeError):
        arguments.number("--ms", "milliseconds, 0 or more", zero=True)("-0.5")


@pytest.mark.parametrize(("text", "ok"), [("1", True), ("65535", True), ("0", False), ("65536", False), ("h", False)])
def test_port(text: str, ok: bool) -> None:
    if ok:
        assert arguments.port(text) == int(text)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="a port is a whole number from 1 to 65535"):
            arguments.port(text)
