"""When a recurring run starts runs: a KFP cron or an interval, within an optional window, all checked locally."""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bakeoff.components.errors import BakeoffError

if TYPE_CHECKING:
    import kfp_server_api

CRON_FIELDS = (  # name, lowest, highest, names: KFP's scheduler (robfig/cron) reads 6 fields, seconds first
    ("second", 0, 59, ()),
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    ("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")),
    ("day-of-week", 0, 6, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")),
)
CRON_DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
CRON_EXAMPLE = "e.g. '0 0 3 * * *' for 03:00 every day"
EVERY_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_EVERY_SECONDS = 366 * 86400  # a year: beyond it a schedule is a typo (and the API's int64 overflows far later)


def _cron_value(token: str, low: int, names: Sequence[str]) -> int:
    if token.upper() in names:
        return names.index(token.upper()) + (1 if low == 1 else 0)
    if not token.isdigit():
        raise ValueError(f"{token!r} is not a number")
    return int(token)


def _check_cron_field(text: str, name: str, low: int, high: int, names: Sequence[str]) -> None:
    for item in text.split(","):
        span, slash, step = item.partition("/")
        if slash and (not step.isdigit() or int(step) == 0):
            raise ValueError(f"step {step!r} is not a whole number above 0")
        if span in ("*", "?"):
            if span == "?" and name not in ("day-of-month", "day-of-week"):
                raise ValueError("'?' only stands for a day")
            continue
        first, dash, last = span.partition("-")
        start = _cron_value(first, low, names)
        end = _cron_value(last, low, names) if dash else start
        for value in (start, end):
            if not low <= value <= high:
                raise ValueError(f"{value} is outside {low}-{high}")
        if end < start:
            raise ValueError(f"range {span!r} runs backwards")


def validate_cron(expression: str) -> str:
    """Checks a cron the way KFP's scheduler reads it; a 5-field crontab would silently mean something else there."""
    expression = " ".join(expression.split())
    if expression.lower() in CRON_DESCRIPTORS:
        return expression.lower()
    if expression.lower().startswith("@every"):
        raise BakeoffError(f"--cron {expression!r}: write intervals as --every, e.g. --every 6h")
    fields = expression.split(" ") if expression else []
    if len(fields) != len(CRON_FIELDS):
        raise BakeoffError(
            f"--cron {expression!r} has {len(fields)} fields; KFP's cron has 6, seconds first "
            f"(second minute hour day-of-month month day-of-week): {CRON_EXAMPLE}"
        )
    for text, (name, low, high, names) in zip(fields, CRON_FIELDS, strict=True):
        try:
            _check_cron_field(text, name, low, high, names)
        except ValueError as problem:
            raise BakeoffError(
                f"--cron {expression!r}: {name} field {text!r} is invalid ({problem}): {CRON_EXAMPLE}"
            ) from None
    return expression


def parse_every(text: str) -> int:
    """--every as seconds: a whole number and one unit, the way people write it (90s, 30m, 6h, 1d)."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", text.lower())
    if not match or int(match.group(1)) == 0:
        raise BakeoffError(
            f"--every {text!r} is not an interval: write a whole number above 0 and s, m, h or d, e.g. 90s, 30m, 6h, 1d"
        )
    seconds = int(match.group(1)) * EVERY_UNITS[match.group(2)]
    if seconds > MAX_EVERY_SECONDS:
        raise BakeoffError(f"--every {text!r} is longer than a year: write at most 366d")
    return seconds


def describe_every(seconds: int) -> str:
    for unit, size in sorted(EVERY_UNITS.items(), key=lambda item: -item[1]):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def parse_time(flag: str, text: str) -> datetime.datetime:
    """An ISO 8601 time in UTC; one without an offset is taken as UTC, the cluster's clock."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise BakeoffError(f"{flag} {text!r} is not an ISO 8601 time: write e.g. 2030-01-31T03:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.astimezone(datetime.UTC)


def rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True)
class Trigger:
    """When a recurring run starts runs: exactly one of a cron or an interval, within an optional window."""

    cron: str | None = None
    interval_seconds: int | None = None
    start: str | None = None
    end: str | None = None

    def describe(self) -> str:
        return f"cron {self.cron}" if self.cron else f"every {describe_every(self.interval_seconds or 0)}"


def make_trigger(
    cron: str | None, every: str | None, start: str | None, end: str | None, now: datetime.datetime | None = None
) -> Trigger:
    """Validates the whole schedule locally, so a bad one never reaches the server."""
    if cron is not None and every is not None:
        raise BakeoffError("--cron and --every are both given: choose one trigger")
    if cron is None and every is None:
        raise BakeoffError(f"a schedule needs a trigger: pass --cron ({CRON_EXAMPLE}) or --every (e.g. 6h)")
    starts = parse_time("--start", start) if start else None
    ends = parse_time("--end", end) if end else None
    if starts and ends and ends <= starts:
        raise BakeoffError(f"--end {rfc3339(ends)} is not after --start {rfc3339(starts)}: choose a later --end")
    if ends and ends <= (now or datetime.datetime.now(datetime.UTC)):
        raise BakeoffError(f"--end {rfc3339(ends)} is in the past, so nothing would ever run: choose a later --end")
    return Trigger(
        cron=validate_cron(cron) if cron is not None else None,
        interval_seconds=parse_every(every) if every is not None else None,
        start=rfc3339(starts) if starts else None,
        end=rfc3339(ends) if ends else None,
    )


def describe_trigger(trigger: kfp_server_api.V2beta1Trigger | None) -> str:
    """A recurring run's trigger as the server returns it, worded as Trigger.describe words ours."""
    if trigger is not None and trigger.cron_schedule is not None:
        return f"cron {trigger.cron_schedule.cron}"
    if trigger is not None and trigger.periodic_schedule is not None:
        return f"every {describe_every(int(trigger.periodic_schedule.interval_second or 0))}"
    return "-"
