"""What every family's network shares: the batch-norm momentum, the channel axis, the float32 softmax."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tf_keras as keras


# Validation, and so a rung's ranking, sees the moving statistics: at Keras' 0.99 they average ~100 steps of fast-
# changing weights, and every batch-norm draw ranked below every plain one after epoch 1. 0.9 is PyTorch's default.
BATCH_NORM_MOMENTUM = 0.9


def planes(input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """[height, width] or the artifact's [height, width, channels] as the convolutions see it: with a channel axis."""
    return (input_shape[0], input_shape[1], input_shape[2] if len(input_shape) == 3 else 1)


def classifier(num_classes: int) -> list:
    """The last layer: class probabilities computed in float32 whatever precision the rest computes in (a bfloat16
    softmax rounds probabilities to 3 digits, a float16 one overflows its loss); one layer, as the seed's was, so a
    float32 network's checkpoints stay as they were."""
    from tf_keras import layers

    return [layers.Dense(num_classes, activation="softmax", dtype="float32")]


def sequential(stack: list, name: str) -> keras.Model:
    import tf_keras as keras

    return keras.Sequential(stack, name=name)
