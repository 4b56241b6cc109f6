"""argparse types shared by `bakeoff`'s commands and the programs it starts: each refuses bad text in one line
naming its flag."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def whole(flag: str, most: int | None = None, why: str = "") -> Callable[[str], int]:
    """A whole number of at least 1 (and at most ``most``, ``why`` saying why), naming ``flag`` when it is not."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes a whole number, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be at least 1, got {value}")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"{flag} must be at most {most}{why}, got {value}")
        return value

    return parse


def number(flag: str, what: str, zero: bool = False) -> Callable[[str], float]:
    """A finite number above 0 (or 0 too, with ``zero``); ``what`` says in the error what ``flag`` takes."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and (value >= 0 if zero else value > 0)):
            raise argparse.ArgumentTypeError(f"{flag} takes {what}, got {text!r}")
        return value

    return parse


def port(text: str) -> int:
    """A TCP port, 1-65535."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a whole number from 1 to 65535, got {text!r}")
    return int(text)
