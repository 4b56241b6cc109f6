"""The registry of model builders: ``type`` in a variant spec → config dataclass + builder."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tf_keras as keras


# Validation, and so a rung's ranking, sees the moving statistics: at Keras' 0.99 they average ~100 steps of fast-
# changing weights, and every batch-norm draw ranked below every plain one after epoch 1. 0.9 is PyTorch's default.
BATCH_NORM_MOMENTUM = 0.9


@dataclasses.dataclass(frozen=True)
class CnnConfig:
    """The seed project's CNN: conv/pool blocks, a dense layer, softmax."""

    filters: Sequence[int] = (32, 64, 64)
    kernel_size: int = 3
    dense_units: int = 64
    dropout: float = 0.0  # after the second pooling, as in the seed's dropout variant
    batch_norm: bool = False  # after each convolution


@dataclasses.dataclass(frozen=True)
class MlpConfig:
    """A small fully connected baseline."""

    hidden_units: Sequence[int] = (128,)
    dropout: float = 0.0


def build_cnn(input_shape: tuple[int, ...], num_classes: int, config: CnnConfig) -> keras.Model:
    from tf_keras import layers

    # [height, width] or the artifact's [height, width, channels]: the convolutions see a channel axis either way
    planes = (*input_shape[:2], input_shape[2] if len(input_shape) == 3 else 1)
    stack: list = [layers.Input(shape=input_shape), layers.Rescaling(1 / 255), layers.Reshape(planes)]
    for index, filters in enumerate(config.filters):
        stack.append(layers.Conv2D(filters, config.kernel_size, use_bias=not config.batch_norm))
        if config.batch_norm:
            stack.append(layers.BatchNormalization(momentum=BATCH_NORM_MOMENTUM))
        stack.append(layers.Activation("relu"))
        if index < len(config.filters) - 1:
            stack.append(layers.MaxPooling2D())
        if index == 1 and config.dropout:
            stack.append(layers.Dropout(config.dropout))
    stack += [
        layers.Flatten(),
        layers.Dense(config.dense_units, activation="relu"),
        layers.Dense(num_classes, activation="softmax"),
    ]
    return _sequential(stack, "cnn")


def build_mlp(input_shape: tuple[int, ...], num_classes: int, config: MlpConfig) -> keras.Model:
    from tf_keras import layers

    stack: list = [layers.Input(shape=input_shape), layers.Rescaling(1 / 255), layers.Flatten()]
    for units in config.hidden_units:
        stack.append(layers.Dense(units, activation="relu"))
        if config.dropout:
            stack.append(layers.Dropout(config.dropout))
    stack.append(layers.Dense(num_classes, activation="softmax"))
    return _sequential(stack, "mlp")


def _sequential(stack: list, name: str) -> keras.Model:
    import tf_keras as keras

    return keras.Sequential(stack, name=name)


@dataclasses.dataclass(frozen=True)
class Architecture:
    config: type
    build: Callable[..., keras.Model]


ARCHITECTURES: dict[str, Architecture] = {
    "cnn": Architecture(CnnConfig, build_cnn),
    "mlp": Architecture(MlpConfig, build_mlp),
}
