"""What a run's selection is by and for: the metric, the model name it publishes under, the promotion gate."""

from __future__ import annotations

import dataclasses

from bakeoff.components import defaults
from bakeoff.components.selection.promotion import Gate
from bakeoff.components.selection.ranking import check_metric
from bakeoff.components.storage.registry import check_model_name


@dataclasses.dataclass(frozen=True)
class SelectionSettings:
    """Checked when made: a bad metric or model name is one line before anything is read or trained."""

    model_name: str = defaults.MODEL_NAME
    metric: str = defaults.METRIC
    gate: Gate = Gate()

    def __post_init__(self) -> None:
        check_model_name(self.model_name)
        check_metric(self.metric)
