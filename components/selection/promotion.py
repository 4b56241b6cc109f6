"""The promotion gate: a run's winner replaces the published champion only when a paired test on the validation split
says it is better beyond noise, and by at least a margin."""

from __future__ import annotations

import dataclasses

from bakeoff.components import defaults
from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage.records import Comparison


@dataclasses.dataclass(frozen=True)
class Gate:
    """How sure and how much better a challenger must be; ``force`` publishes it regardless."""

    min_improvement: float = defaults.MIN_IMPROVEMENT
    force: bool = False
    confidence: float = defaults.PROMOTION_CONFIDENCE

    def __post_init__(self) -> None:
        if not 0 <= self.min_improvement < 1:
            raise BakeoffError(
                f"min improvement {self.min_improvement!r} must be in [0, 1): a margin of the metric, e.g. 0.002"
            )
        if not 0 <= self.confidence < 1:
            raise BakeoffError(
                f"confidence {self.confidence!r} must be in [0, 1): the paired test's level, e.g. 0.95 (0: any gain)"
            )


def promote(gate: Gate, comparison: Comparison | None) -> bool:
    """Whether the challenger is published: no champion yet (``comparison`` None), forced, or better than the champion
    beyond noise (its whole interval above 0) and by at least the margin; a tie keeps the champion."""
    if comparison is None or gate.force:
        return True
    return comparison.low > 0 and comparison.gain > 0 and comparison.gain >= gate.min_improvement


def verdict(gate: Gate, comparison: Comparison) -> str:
    """Why the gate decided as it did, for the decision's line: the gain, its interval and what that means."""
    if comparison.gain <= 0:
        why = "is no gain"
    elif comparison.low <= 0:
        why = "is within noise"
    elif comparison.gain < gate.min_improvement:
        why = f"is below the margin {gate.min_improvement:g} (--min-improvement)"
    else:
        why = "is beyond noise"
    interval = (
        f" ({comparison.low:+.4f} … {comparison.high:+.4f}, {comparison.confidence:.0%} {comparison.test})"
        if comparison.confidence
        else ""
    )
    forced = ", published by --force-publish" if gate.force else ""
    return f"the challenger's {comparison.gain:+.4f}{interval} {why}{forced}"
