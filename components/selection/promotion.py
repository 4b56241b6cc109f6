"""The promotion gate: a run's winner replaces the published champion only when it is better by a margin."""

from __future__ import annotations

import dataclasses

from bakeoff.components.errors import BakeoffError
from bakeoff.components.selection.ranking import direction


@dataclasses.dataclass(frozen=True)
class Gate:
    """How much better a challenger must be; ``force`` publishes it regardless."""

    min_improvement: float = 0.0
    force: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.min_improvement < 1:
            raise BakeoffError(
                f"min improvement {self.min_improvement!r} must be in [0, 1): a margin of the metric, e.g. 0.002"
            )


def gain(metric: str, challenger: float, champion: float) -> float:
    """How much better ``challenger`` scores than ``champion``, in the metric's own direction."""
    return challenger - champion if direction(metric) == "max" else champion - challenger


def promote(gate: Gate, metric: str, challenger: float, champion: float | None) -> bool:
    """Whether the challenger is published: no champion yet, forced, or better by at least the margin (a tie keeps
    the champion)."""
    if champion is None or gate.force:
        return True
    margin = gain(metric, challenger, champion)
    return margin > 0 and margin >= gate.min_improvement
