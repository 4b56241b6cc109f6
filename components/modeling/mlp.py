"""The fully connected family: a small baseline."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bakeoff.components.modeling.layers import classifier, sequential

if TYPE_CHECKING:
    import tf_keras as keras


@dataclasses.dataclass(frozen=True)
class MlpConfig:
    """A small fully connected baseline."""

    hidden_units: Sequence[int] = (128,)
    dropout: float = 0.0


def build(input_shape: tuple[int, ...], num_classes: int, config: MlpConfig) -> keras.Model:
    """The network for images of ``input_shape``: flattened, dense layers, softmax."""
    from tf_keras import layers

    stack: list = [layers.Input(shape=input_shape), layers.Rescaling(1 / 255), layers.Flatten()]
    for units in config.hidden_units:
        stack.append(layers.Dense(units, activation="relu"))
        if config.dropout:
            stack.append(layers.Dropout(config.dropout))
    stack += classifier(num_classes)
    return sequential(stack, "mlp")


def macs(config: MlpConfig, shape: tuple[int, int, int], classes: int) -> int:
    """Multiply-accumulates of one image of ``shape`` through the dense layers."""
    height, width, channels = shape
    widths = [height * width * channels, *config.hidden_units, classes]
    return sum(a * b for a, b in itertools.pairwise(widths))
