"""The registry of model families: ``type`` in a variant spec → its config dataclass, builder, cost and hooks.

Each family is a module of its own (``cnn.py``, ``mlp.py``, ``resnet.py``, ``backbone.py``); training, the cost model,
export and serving ask the family through this registry and never special-case one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bakeoff.components.modeling import backbone, cnn, mlp, resnet

if TYPE_CHECKING:
    import tf_keras as keras


def _fits_any(config: Any, shape: tuple[int, int, int]) -> tuple[str, str] | None:
    return None


def _no_hooks(model: keras.Model, config: Any) -> list:
    return []


def _checks_nothing(config: Any) -> tuple[str, str] | None:
    return None


def _fetches_nothing(config: Any, shape: Sequence[int]) -> str | None:
    return None


@dataclasses.dataclass(frozen=True)
class Architecture:
    """A family: its config (strictly parsed from a variant's ``model``), ``build(input_shape, num_classes, config)``,
    ``macs(config, [height, width, channels], classes)`` of one image's forward pass, whether it normalizes batches
    (its step's cost grows with activations), ``fits(config, shape)``: the field and problem where images of
    ``shape`` are too small for it, ``check(config)``: the field and problem its own rules find, ``hooks(model,
    config)``: the Keras callbacks its training needs (a frozen backbone's schedule), and ``rate_factors(model,
    config)``: groups of variables that learn at a factor of the optimizer's rate, ``timing(model)``: the variant's
    ``model`` a calibration job times in its place (the same step, nothing to download), and ``fetch(config,
    shape)``: downloads what the replicas will read (pretrained weights) once, here; why it cannot, in a line."""

    config: type
    build: Callable[..., keras.Model]
    macs: Callable[[Any, tuple[int, int, int], int], int]
    normalizes: Callable[[Any], bool] = lambda config: False
    fits: Callable[[Any, tuple[int, int, int]], tuple[str, str] | None] = _fits_any
    check: Callable[[Any], tuple[str, str] | None] = _checks_nothing
    hooks: Callable[[Any, Any], list] = _no_hooks
    rate_factors: Callable[[Any, Any], list] = _no_hooks
    timing: Callable[[Mapping[str, Any]], Mapping[str, Any]] = lambda model: model
    fetch: Callable[[Any, Sequence[int]], str | None] = _fetches_nothing


ARCHITECTURES: dict[str, Architecture] = {
    "cnn": Architecture(cnn.CnnConfig, cnn.build, cnn.macs, lambda config: config.batch_norm, cnn.fits),
    "mlp": Architecture(mlp.MlpConfig, mlp.build, mlp.macs),
    "resnet": Architecture(resnet.ResnetConfig, resnet.build, resnet.macs, lambda config: True),
    "backbone": Architecture(
        backbone.BackboneConfig,
        backbone.build,
        backbone.macs,
        lambda config: True,
        backbone.fits,
        backbone.check,
        backbone.hooks,
        backbone.rate_factors,
        backbone.timing,
        backbone.fetch,
    ),
}
