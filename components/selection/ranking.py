"""Selection metrics, each with the direction that is better, and the ranking they give."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from bakeoff.components.errors import BakeoffError

# metric → the direction that is better; a metric never travels without it
METRICS = {"val_accuracy": "max", "val_loss": "min"}


def check_metric(metric: str) -> str:
    """``metric`` if it is a known selection metric; one clear line for any other."""
    if metric not in METRICS:
        raise BakeoffError(f"unknown selection metric {metric!r}: use one of {', '.join(METRICS)}")
    return metric


def direction(metric: str) -> str:
    """``max`` or ``min`` for a known metric; one clear line for any other."""
    return METRICS[check_metric(metric)]


class Scored(Protocol):
    """A record of a variant with a value of the selection metric (bakeoff.components.storage.records)."""

    @property
    def variant(self) -> str: ...

    def score(self, metric: str) -> float: ...


S = TypeVar("S", bound=Scored)


def rank(candidates: Iterable[S], metric: str) -> list[S]:
    """Best first by ``metric`` in its own direction; ties go to the variant whose name sorts first, so reruns agree."""
    sign = -1 if direction(metric) == "max" else 1
    return sorted(candidates, key=lambda c: (sign * c.score(metric), c.variant))
