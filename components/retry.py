"""Repeating a call that fails for a passing reason: bounded tries, growing pauses; the caller says what passes."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Pauses from ``first`` seconds, doubled after each failure up to ``longest``; tries stop at ``attempts``
    tries or ``seconds`` after the first failure, whichever comes first."""

    first: float
    longest: float
    attempts: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        if self.attempts is None and self.seconds is None:
            raise ValueError("a Backoff needs attempts or seconds: without either it would retry forever")


def retrying(
    call: Callable[[], T],
    transient: Callable[[Exception], bool],
    backoff: Backoff,
    announce: Callable[[Exception, float], None],
    give_up: Callable[[Exception, int], Exception],
) -> T:
    """``call()``, repeated after a pause while it fails with an error that ``transient`` accepts.

    Args:
        call: the request.
        transient: whether an error may pass by itself; any other error is raised as it is, at once.
        backoff: the pauses and the bound.
        announce: told each transient error and the seconds until the next try.
        give_up: makes the error to raise, out of the last one and the number of tries, once the bound is reached.

    Returns:
        what ``call`` returned.

    Raises:
        what ``give_up`` made, once the bound is reached; a non-transient error as it is.
    """
    pause = backoff.first
    deadline: float | None = None
    for attempt in itertools.count(1):
        try:
            return call()
        except Exception as error:
            if not transient(error):
                raise
            now = time.monotonic()
            if deadline is None and backoff.seconds is not None:
                deadline = now + backoff.seconds
            if attempt == backoff.attempts or (deadline is not None and now >= deadline):
                raise give_up(error, attempt) from None
            # Jittered, so that many clients of one restarting server do not come back in step.
            wait = pause * random.uniform(0.5, 1.0)
            wait = min(wait, deadline - now) if deadline is not None else wait
            announce(error, wait)
            time.sleep(wait)
            pause = min(pause * 2, backoff.longest)
    raise AssertionError("unreachable: itertools.count never ends")
