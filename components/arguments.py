"""argparse types shared by `bakeoff`'s commands and the programs it starts: each refuses bad text in one line
naming its flag."""

from __future__ import annotations

import argparse
import math
import re
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


UNITS = {"s": 1 / 60, "m": 1.0, "min": 1.0, "h": 60.0}  # minutes in each unit a duration may name
DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(s|m|min|h)?")


def duration(flag: str, most: float) -> Callable[[str], float]:
    """A time in minutes from ``15m``, ``90s``, ``1.5h`` or a bare number of minutes, above 0 and at most ``most``;
    ``none`` is ``math.inf`` (no limit)."""

    def parse(text: str) -> float:
        if text.strip().lower() == "none":
            return math.inf
        match = DURATION.fullmatch(text.strip())
        if match is None:
            raise argparse.ArgumentTypeError(f"{flag} takes a time such as 15m, 90s or 1h (or none), got {text!r}")
        minutes = float(match[1]) * UNITS[match[2] or "m"]
        if not 0 < minutes <= most:
            raise argparse.ArgumentTypeError(f"{flag} must be above 0 and at most {most:g} min, got {text!r}")
        return minutes

    return parse
