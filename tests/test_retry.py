"""The one retry helper: what it repeats, how long, and what it raises when it stops."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bakeoff.components.retry import Backoff, retrying

pytestmark = pytest.mark.unit


class Passing(Exception):
    """An error the tests call transient."""


def failing(times: int, error: Exception) -> tuple[Callable[[], str], list[int]]:
    """A call that raises ``error`` ``times`` times, then answers "done"; and the list of its calls."""
    calls: list[int] = []

    def call() -> str:
        calls.append(len(calls) + 1)
        if len(calls) <= times:
            raise error
        return "done"

    return call, calls


class GaveUp(Exception):
    """What the tests make of the last error once the bound is reached."""

    def __init__(self, last: Exception, attempts: int) -> None:
        super().__init__(f"{last} after {attempts} tries")
        self.last, self.attempts = last, attempts


def transient(error: Exception) -> bool:
    return isinstance(error, Passing)


def test_transient_failures_are_retried_and_each_is_announced() -> None:
    call, calls = failing(2, Passing("hiccup"))
    announced: list[tuple[str, float]] = []
    result = retrying(
        call,
        transient,
        Backoff(first=0.001, longest=0.001, attempts=5),
        lambda e, w: announced.append((str(e), w)),
        GaveUp,
    )
    assert result == "done" and calls == [1, 2, 3]
    assert [text for text, _ in announced] == ["hiccup", "hiccup"]
    assert all(0.0005 <= wait <= 0.001 for _, wait in announced)


def test_an_error_the_caller_does_not_call_transient_is_raised_at_once() -> None:
    call, calls = failing(1, KeyError("wrong"))
    with pytest.raises(KeyError):
        retrying(call, transient, Backoff(first=0.001, longest=0.001, attempts=5), lambda e, w: None, GaveUp)
    assert calls == [1]


def test_the_attempts_bound_stops_with_the_last_error_as_the_cause() -> None:
    last = Passing("still down")
    call, calls = failing(100, last)
    with pytest.raises(GaveUp) as raised:
        retrying(call, transient, Backoff(first=0.001, longest=0.001, attempts=3), lambda e, w: None, GaveUp)
    assert calls == [1, 2, 3] and raised.value.attempts == 3 and raised.value.last is last


def test_the_seconds_bound_stops_once_that_long_has_passed_since_the_first_failure() -> None:
    call, calls = failing(10_000, Passing("down"))
    waits: list[float] = []
    with pytest.raises(GaveUp):
        retrying(call, transient, Backoff(first=0.01, longest=0.02, seconds=0.1), lambda e, w: waits.append(w), GaveUp)
    assert 2 <= len(calls) < 30  # pauses of 5 to 20 ms within 0.1 s: it retried, then stopped
    assert max(waits) <= 0.02


def test_pauses_double_up_to_the_longest() -> None:
    call, _ = failing(5, Passing("down"))
    waits: list[float] = []
    retrying(call, transient, Backoff(first=0.001, longest=0.004, attempts=6), lambda e, w: waits.append(w), GaveUp)
    ceilings = [0.001, 0.002, 0.004, 0.004, 0.004]
    assert all(ceiling / 2 <= wait <= ceiling for wait, ceiling in zip(waits, ceilings, strict=True))


def test_a_backoff_without_a_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="needs attempts or seconds"):
        Backoff(first=1, longest=1)
