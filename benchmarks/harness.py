"""What benchmark entries share: a figure, the context they run in, and timing helpers."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from pathlib import Path

GLOBAL_BATCH = 128  # the training entries' global batch, on any number of workers


@dataclasses.dataclass
class Figure:
    """One measured number and how it was measured; a headline figure's goal is in benchmarks/headline.py."""

    key: str
    value: float
    unit: str
    detail: str = ""


@dataclasses.dataclass
class Context:
    """What entries share: scratch space, the ingested dataset, repetitions, and raw samples for the record."""

    scratch: Path
    repetitions: int
    samples: dict = dataclasses.field(default_factory=dict)
    _dataset: Path | None = None

    def dataset(self) -> Path:
        if self._dataset is None:
            from bakeoff.components import defaults
            from bakeoff.components.data import artifact as dataset

            self._dataset = self.scratch / "dataset"
            dataset.build(
                defaults.SOURCE,
                self._dataset,
                validation_size=defaults.VALIDATION_SIZE,
                shards=defaults.SHARDS,
                seed=defaults.SEED,
            )
        return self._dataset


def median(values: list[float]) -> float:
    return statistics.median(values)


def timed(func: Callable[[], object]) -> float:
    started = time.perf_counter()
    func()
    return time.perf_counter() - started
