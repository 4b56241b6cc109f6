"""The registries of optimizers and learning-rate schedules a variant's ``training`` section can name."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any


def _constant(rate: float, total_steps: int, epochs: int) -> Any:
    return rate


def _cosine(rate: float, total_steps: int, epochs: int) -> Any:
    import tf_keras as keras

    return keras.optimizers.schedules.CosineDecay(rate, decay_steps=total_steps)  # to 0 over the whole run


def _exponential(rate: float, total_steps: int, epochs: int) -> Any:
    import tf_keras as keras

    return keras.optimizers.schedules.ExponentialDecay(rate, decay_steps=max(1, total_steps // epochs), decay_rate=0.7)


def _keras_optimizer(name: str) -> Callable[[Any, float, bool], Any]:
    def make(rate: Any, ema_momentum: float, scaled: bool) -> Any:
        import tf_keras as keras

        kind = getattr(keras.optimizers, name)
        kind = _scaled(kind) if scaled else kind
        if not ema_momentum:
            return kind(rate)
        return kind(rate, use_ema=True, ema_momentum=ema_momentum)

    return make


# name → (initial rate, total steps, epochs) → a rate or a schedule
SCHEDULES: dict[str, Callable[[float, int, int], Any]] = {
    "constant": _constant,
    "cosine": _cosine,
    "exponential": _exponential,
}
# name → (rate or schedule, momentum of a moving average of the weights (0: none), whether some variables learn at a
# factor of the rate) → a tf-keras optimizer
OPTIMIZERS: dict[str, Callable[[Any, float, bool], Any]] = {
    name.lower(): _keras_optimizer(name) for name in ("Adam", "SGD", "RMSprop")
}


def make_optimizer(
    optimizer: str,
    learning_rate: float,
    schedule: str,
    total_steps: int,
    epochs: int,
    ema_momentum: float,
    rate_factors: Sequence[tuple[Sequence[Any], float]] = (),
) -> Any:
    """The named optimizer, its rate following the named schedule over ``total_steps``, keeping a moving average of
    the weights when ``ema_momentum`` is set; each group of ``rate_factors``' variables learns at its factor of the
    rate (a fine-tuned backbone's)."""
    made = OPTIMIZERS[optimizer](
        SCHEDULES[schedule](learning_rate, total_steps, epochs), ema_momentum, bool(rate_factors)
    )
    if rate_factors:
        factors = {made._var_key(var): factor for variables, factor in rate_factors for var in variables}
        object.__setattr__(made, "rate_factors", factors)  # not tracked: checkpoints hold what they held before
    return made


@functools.cache
def _scaled(optimizer: type) -> type:
    """``optimizer``'s class whose update of a variable with a rate factor moves it that factor of the way: the
    update is the rate times a direction for each of Adam, SGD and RMSprop, so this is the factor on its rate."""
    import tensorflow as tf

    class Scaled(optimizer):
        rate_factors: dict[str, float] = {}  # noqa: RUF012 (set on each instance by make_optimizer)

        def update_step(self, gradient: Any, variable: Any) -> Any:
            factor = self.rate_factors.get(self._var_key(variable))
            if factor is None:
                return super().update_step(gradient, variable)
            before = tf.identity(variable)
            super().update_step(gradient, variable)
            return variable.assign(before + factor * (variable - before))

    Scaled.__name__ = Scaled.__qualname__ = optimizer.__name__  # checkpoints and logs name the optimizer as before
    return Scaled
