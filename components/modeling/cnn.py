"""The seed project's CNN family: valid conv/pool blocks, a dense layer, softmax."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bakeoff.components.modeling.layers import BATCH_NORM_MOMENTUM, classifier, planes, sequential

if TYPE_CHECKING:
    import tf_keras as keras


@dataclasses.dataclass(frozen=True)
class CnnConfig:
    """The seed project's CNN: conv/pool blocks, a dense layer, softmax."""

    filters: Sequence[int] = (32, 64, 64)
    kernel_size: int = 3
    dense_units: int = 64
    dropout: float = 0.0  # after the second pooling, as in the seed's dropout variant
    batch_norm: bool = False  # after each convolution


def build(input_shape: tuple[int, ...], num_classes: int, config: CnnConfig) -> keras.Model:
    """The network for images of ``input_shape`` ([height, width] or [height, width, channels])."""
    from tf_keras import layers

    stack: list = [layers.Input(shape=input_shape), layers.Rescaling(1 / 255), layers.Reshape(planes(input_shape))]
    for index, filters in enumerate(config.filters):
        stack.append(layers.Conv2D(filters, config.kernel_size, use_bias=not config.batch_norm))
        if config.batch_norm:
            stack.append(layers.BatchNormalization(momentum=BATCH_NORM_MOMENTUM))
        stack.append(layers.Activation("relu"))
        if index < len(config.filters) - 1:
            stack.append(layers.MaxPooling2D())
        if index == 1 and config.dropout:
            stack.append(layers.Dropout(config.dropout))
    stack += [layers.Flatten(), layers.Dense(config.dense_units, activation="relu"), *classifier(num_classes)]
    return sequential(stack, "cnn")


def macs(config: CnnConfig, shape: tuple[int, int, int], classes: int) -> int:
    """Multiply-accumulates of one image of ``shape`` ([height, width, channels]) through the forward pass."""
    (height, width, channels), total = shape, 0
    for index, filters in enumerate(config.filters):
        height, width = height - (config.kernel_size - 1), width - (config.kernel_size - 1)  # valid convolutions
        total += height * width * config.kernel_size**2 * channels * filters
        channels = filters
        if index < len(config.filters) - 1:
            height, width = height // 2, width // 2  # each pooling but the last
    flat = height * width * channels
    return total + flat * config.dense_units + config.dense_units * classes


def fits(config: CnnConfig, shape: tuple[int, int, int]) -> tuple[str, str] | None:
    """The field and the problem where the valid convolutions leave no pixels of images of ``shape``; None: they fit."""
    height, width = shape[:2]
    kernel, side = config.kernel_size, min(height, width)
    if kernel > side:
        return "model.kernel_size", f"must be at most {side} for {height}x{width} images, got {kernel}"
    # Each convolution (no padding) trims kernel_size - 1 pixels and each pooling but the last halves the side.
    for index in range(len(config.filters)):
        side = side - (kernel - 1)
        if side < 1:
            return "model.filters", (
                f"{len(config.filters)} convolutions of kernel_size {kernel} leave no pixels of the"
                f" {height}x{width} image at convolution {index + 1}:"
                " list fewer filters or use a smaller kernel_size"
            )
        if index < len(config.filters) - 1:
            side //= 2
    return None
