"""The registries of optimizers and learning-rate schedules a variant's ``training`` section can name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _constant(rate: float, total_steps: int, epochs: int) -> Any:
    return rate


def _cosine(rate: float, total_steps: int, epochs: int) -> Any:
    import tf_keras as keras

    return keras.optimizers.schedules.CosineDecay(rate, decay_steps=total_steps)  # to 0 over the whole run


def _exponential(rate: float, total_steps: int, epochs: int) -> Any:
    import tf_keras as keras

    return keras.optimizers.schedules.ExponentialDecay(rate, decay_steps=max(1, total_steps // epochs), decay_rate=0.7)


def _keras_optimizer(name: str) -> Callable[[Any, float], Any]:
    def make(rate: Any, ema_momentum: float) -> Any:
        import tf_keras as keras

        if not ema_momentum:
            return getattr(keras.optimizers, name)(rate)
        return getattr(keras.optimizers, name)(rate, use_ema=True, ema_momentum=ema_momentum)

    return make


# name → (initial rate, total steps, epochs) → a rate or a schedule
SCHEDULES: dict[str, Callable[[float, int, int], Any]] = {
    "constant": _constant,
    "cosine": _cosine,
    "exponential": _exponential,
}
# name → (rate or schedule, momentum of a moving average of the weights, 0: none) → a tf-keras optimizer
OPTIMIZERS: dict[str, Callable[[Any, float], Any]] = {
    name.lower(): _keras_optimizer(name) for name in ("Adam", "SGD", "RMSprop")
}


def make_optimizer(
    optimizer: str, learning_rate: float, schedule: str, total_steps: int, epochs: int, ema_momentum: float
) -> Any:
    """The named optimizer, its rate following the named schedule over ``total_steps``, keeping a moving average of
    the weights when ``ema_momentum`` is set."""
    return OPTIMIZERS[optimizer](SCHEDULES[schedule](learning_rate, total_steps, epochs), ema_momentum)
