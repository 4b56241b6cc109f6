"""The residual family: a strided stem, residual stages with batch norm, global average pooling, a dropout head.

Sized by its fields for any image: at 28×28 a stride-2 stem and narrow stages are cheaper than the seed's CNNs, at
96×96 and up the same stages see 48×48 and wider ones pay. Global pooling keeps the head one weight per channel and
class at every size (no ``Flatten`` of a large image into a dense layer).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bakeoff.components.modeling.layers import BATCH_NORM_MOMENTUM, classifier, planes

if TYPE_CHECKING:
    import tf_keras as keras


@dataclasses.dataclass(frozen=True)
class ResnetConfig:
    """A ResNet of basic blocks (two 3×3 convolutions, batch norm, an identity or 1×1 shortcut)."""

    stem_filters: int = 32
    stem_stride: int = 2  # the stem's convolution halves the image: a quarter of every later layer's work
    filters: Sequence[int] = (32, 64, 128)  # one stage each; every stage after the first starts with stride 2
    blocks: int = 1  # residual blocks per stage
    dropout: float = 0.0  # before the classifier


def build(input_shape: tuple[int, ...], num_classes: int, config: ResnetConfig) -> keras.Model:
    """The network for images of ``input_shape`` ([height, width] or [height, width, channels], 0..255 pixels)."""
    import tf_keras as keras
    from tf_keras import layers

    inputs = layers.Input(shape=input_shape)
    x = layers.Reshape(planes(input_shape))(layers.Rescaling(1 / 255)(inputs))
    x = _normalized(layers.Conv2D(config.stem_filters, 3, config.stem_stride, "same", use_bias=False)(x))
    x = layers.Activation("relu")(x)
    for stage, filters in enumerate(config.filters):
        for block in range(config.blocks):
            x = _block(x, filters, 2 if stage and not block else 1)
    x = layers.GlobalAveragePooling2D()(x)
    if config.dropout:
        x = layers.Dropout(config.dropout)(x)
    for layer in classifier(num_classes):
        x = layer(x)
    return keras.Model(inputs, x, name="resnet")


def _normalized(x: Any) -> Any:
    from tf_keras import layers

    return layers.BatchNormalization(momentum=BATCH_NORM_MOMENTUM)(x)


def _block(x: Any, filters: int, stride: int) -> Any:
    """A basic residual block: conv-bn-relu, conv-bn, plus the input (projected where its shape changes), relu."""
    from tf_keras import layers

    shortcut = x
    if stride != 1 or x.shape[-1] != filters:
        shortcut = _normalized(layers.Conv2D(filters, 1, stride, use_bias=False)(x))
    y = layers.Activation("relu")(_normalized(layers.Conv2D(filters, 3, stride, "same", use_bias=False)(x)))
    y = _normalized(layers.Conv2D(filters, 3, 1, "same", use_bias=False)(y))
    return layers.Activation("relu")(layers.Add()([shortcut, y]))


def macs(config: ResnetConfig, shape: tuple[int, int, int], classes: int) -> int:
    """Multiply-accumulates of one image of ``shape`` ([height, width, channels]) through the forward pass."""
    height, width, channels = shape
    height, width = math.ceil(height / config.stem_stride), math.ceil(width / config.stem_stride)
    total = height * width * 9 * channels * config.stem_filters
    channels = config.stem_filters
    for stage, filters in enumerate(config.filters):
        for block in range(config.blocks):
            stride = 2 if stage and not block else 1
            height, width = math.ceil(height / stride), math.ceil(width / stride)
            total += height * width * 9 * (channels + filters) * filters
            if stride != 1 or channels != filters:
                total += height * width * channels * filters
            channels = filters
    return total + channels * classes
