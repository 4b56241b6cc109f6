"""The pretrained family: a ``tf_keras.applications`` network named in the config, under a pooled head.

The model takes the dataset's own images (float32, 0..255 pixels, its size and channels): inside it they are given
three channels, resized to the backbone's side and preprocessed as the backbone expects, so the export serves them
as every family's does. ``freeze_epochs`` train the head alone on a frozen backbone (its batch norm in inference
mode), then everything fine-tunes, the backbone at ``backbone_learning_rate`` times the head's rate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bakeoff.components.modeling.layers import BATCH_NORM_MOMENTUM, classifier, planes

if TYPE_CHECKING:
    import tf_keras as keras

BACKBONE = "backbone"  # the backbone's layer name in the model: the freeze schedule and the tests find it by it
MIN_SIDE = 32  # the smallest side every listed network accepts
IMAGENET, NONE = "imagenet", "none"
# name → whether it preprocesses its input itself (else: pixels to [-1, 1], as its preprocess_input does)
NETWORKS = {
    "MobileNetV3Small": True,
    "MobileNetV3Large": True,
    "EfficientNetV2B0": True,
    "EfficientNetV2B1": True,
    "ResNet50V2": False,
}


@dataclasses.dataclass(frozen=True)
class BackboneConfig:
    """A pretrained (or freshly initialised) network with a global-average-pooled head."""

    network: str = "MobileNetV3Small"
    weights: str = IMAGENET  # imagenet (downloaded once into ~/.keras), none, or a weights file: a path or s3://...
    image_size: int = 0  # the side the backbone sees; 0: the images' own, at least MIN_SIDE
    dropout: float = 0.2  # before the classifier
    freeze_epochs: int = 0  # epochs that train the head alone, the backbone frozen
    backbone_learning_rate: float = 1.0  # the backbone's learning rate as a factor of the head's, once unfrozen


def side(config: BackboneConfig, shape: Sequence[int]) -> int:
    """The side the backbone sees for images of ``shape`` ([height, width(, channels)])."""
    return config.image_size or max(MIN_SIDE, *shape[:2])


def build(input_shape: tuple[int, ...], num_classes: int, config: BackboneConfig) -> keras.Model:
    """The network for images of ``input_shape`` (0..255 pixels), its weights loaded as ``config.weights`` says."""
    import tf_keras as keras
    from tf_keras import layers

    height, width, channels = planes(input_shape)
    size = side(config, input_shape)
    inputs = layers.Input(shape=input_shape)
    x = layers.Reshape((height, width, channels))(inputs)
    if channels == 1:
        x = layers.Concatenate()([x, x, x])  # grayscale as RGB: what the pretrained filters were trained on
    if (height, width) != (size, size):
        x = layers.Resizing(size, size)(x)
    if not NETWORKS[config.network]:
        x = layers.Rescaling(1 / 127.5, offset=-1)(x)
    weights = IMAGENET if config.weights == IMAGENET else None
    network = getattr(keras.applications, config.network)(
        include_top=False, weights=weights, input_shape=(size, size, 3)
    )
    if config.weights not in (IMAGENET, NONE):
        _load(network, config.weights)
    for layer in network.layers:  # Keras' applications average their statistics over ~1000 steps (0.999): a short
        # job's validation and export would see its initial ones (measured: chance accuracy after 128 steps)
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = BATCH_NORM_MOMENTUM
    backbone = keras.Model(network.inputs, network.outputs, name=BACKBONE)
    x = layers.GlobalAveragePooling2D()(backbone(x))
    if config.dropout:
        x = layers.Dropout(config.dropout)(x)
    for layer in classifier(num_classes):
        x = layer(x)
    return keras.Model(inputs, x, name=f"backbone_{config.network.lower()}")


FETCH_FAILED = "bakeoff-fetch-failed: "  # the child's line that says why the weights cannot be had


def fetch(config: BackboneConfig, shape: Sequence[int]) -> str | None:
    """Downloads ``config``'s ImageNet weights into ~/.keras/models where they are not yet: once, before the replicas,
    each of which would fetch them. Why they cannot be had, in a line; None: they are there, or ``config`` reads
    none. In a child process: TensorFlow's start writes to stderr below any log level, and the command's own
    process stays without TensorFlow's memory."""
    if config.weights != IMAGENET:
        return None
    from bakeoff.components import tfenv

    environ = dict(os.environ)
    tfenv.quiet_tensorflow(environ)
    child = subprocess.run(
        [sys.executable, "-m", __name__, config.network, str(side(config, shape))],
        env=environ,
        capture_output=True,
        text=True,
    )
    if child.returncode == 0:
        return None
    said = [line.removeprefix(FETCH_FAILED) for line in child.stderr.splitlines() if line.startswith(FETCH_FAILED)]
    return said[-1] if said else f"its download exited with {child.returncode}: {child.stderr.strip()[-300:]}"


def _download(network: str, size: int) -> int:
    """``fetch``'s child: the application itself fetches and checks its file (no name or hash of ours to keep in
    step with Keras); its progress bar is not shown."""
    import tf_keras as keras

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            getattr(keras.applications, network)(include_top=False, weights=IMAGENET, input_shape=(size, size, 3))
    except Exception as error:  # Keras raises a bare Exception for a failed download
        sys.stderr.write(FETCH_FAILED + (str(error).strip().splitlines() or [type(error).__name__])[0] + "\n")
        return 1
    return 0


def _load(network: keras.Model, uri: str) -> None:
    """The weights file at ``uri`` (a path, or s3://bucket/key read through the project's store) into ``network``."""
    if not uri.startswith("s3://"):
        network.load_weights(uri)
        return
    from bakeoff.components.storage import open_store

    folder, _, name = uri.rpartition("/")
    with tempfile.TemporaryDirectory(prefix="bakeoff-weights-") as scratch:
        local = Path(scratch) / name
        local.write_bytes(open_store(folder).get_bytes(name))
        network.load_weights(str(local))


def check(config: BackboneConfig) -> tuple[str, str] | None:
    """The field and problem of a config no backbone can be built from; None: it can."""
    if config.network not in NETWORKS:
        return "model.network", f"unknown network {config.network!r} (known: {', '.join(NETWORKS)})"
    if not config.weights.strip():
        return "model.weights", "expected imagenet, none, a weights file's path or s3://bucket/key"
    if config.image_size and config.image_size < MIN_SIDE:
        return "model.image_size", f"must be 0 (the images' own side) or at least {MIN_SIDE}, got {config.image_size}"
    if not (math.isfinite(config.backbone_learning_rate) and 0 < config.backbone_learning_rate <= 1):
        return "model.backbone_learning_rate", (
            f"must be a factor of the head's rate above 0 and at most 1, got {config.backbone_learning_rate}"
        )
    return None


def fits(config: BackboneConfig, shape: tuple[int, int, int]) -> tuple[str, str] | None:
    """Grayscale and RGB images fit: the model gives them three channels; others do not."""
    if shape[2] not in (1, 3):
        return "model.network", f"takes images of 1 or 3 channels, got {shape[2]}"
    return None


def macs(config: BackboneConfig, shape: tuple[int, int, int], classes: int) -> int:
    """Multiply-accumulates of one image through the backbone at its side, and the head: counted from the network
    itself (built without weights, once per network and side), as no formula of ours knows every application."""
    network, width = _counted(config.network, side(config, shape))
    return network + width * classes


@functools.cache
def _counted(network: str, size: int) -> tuple[int, int]:
    """The backbone's MACs at ``size`` (its convolutions' and dense layers', from their shapes) and its features'
    width."""
    import tf_keras as keras

    model = getattr(keras.applications, network)(include_top=False, weights=None, input_shape=(size, size, 3))
    total = 0
    for layer in model.layers:
        output = layer.output_shape
        if isinstance(output, list):
            continue
        pixels = math.prod(output[1:-1])
        if isinstance(layer, keras.layers.DepthwiseConv2D):
            total += pixels * math.prod(layer.kernel_size) * output[-1]
        elif isinstance(layer, keras.layers.Conv2D):
            total += pixels * math.prod(layer.kernel_size) * layer.input_shape[-1] // layer.groups * output[-1]
        elif isinstance(layer, keras.layers.Dense):
            total += pixels * layer.input_shape[-1] * output[-1]
    width = model.output_shape[-1]
    del model
    return total, width


def timing(model: Mapping[str, Any]) -> Mapping[str, Any]:
    """What a calibration job times for a backbone variant's ``model``: the same network without weights to read (a
    step costs the same; offline, ImageNet's would fail the job) and unfrozen (the costlier step of the two)."""
    return {**model, "weights": NONE, "freeze_epochs": 0}


def hooks(model: keras.Model, config: BackboneConfig) -> list:
    """The freeze schedule: the backbone frozen for ``freeze_epochs``, then trained."""
    return [FreezeSchedule(config.freeze_epochs)] if config.freeze_epochs else []


def rate_factors(model: keras.Model, config: BackboneConfig) -> list[tuple[list[Any], float]]:
    """The backbone's variables and the factor of the learning rate they train at."""
    if config.backbone_learning_rate == 1:
        return []
    return [(model.get_layer(BACKBONE).trainable_variables, config.backbone_learning_rate)]


@functools.cache
def _freeze_schedule() -> type:
    import tf_keras as keras

    class Schedule(keras.callbacks.Callback):
        """Freezes the backbone (trainable off: its batch norm runs in inference mode, its weights stay) for the
        first ``freeze_epochs`` and unfreezes it after, tracing the training step anew at each change. The state
        follows the epoch, so a job resumed from its backup at any epoch trains as the uninterrupted one would."""

        def __init__(self, freeze_epochs: int) -> None:
            super().__init__()
            self.freeze_epochs = freeze_epochs

        def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
            backbone = self.model.get_layer(BACKBONE)
            trainable = epoch >= self.freeze_epochs
            if backbone.trainable != trainable:
                backbone.trainable = trainable
                self.model.make_train_function(force=True)

    return Schedule


def FreezeSchedule(freeze_epochs: int) -> Any:
    """The callback of the freeze schedule (tf-keras is imported only when one is made)."""
    return _freeze_schedule()(freeze_epochs)


if __name__ == "__main__":
    sys.exit(_download(sys.argv[1], int(sys.argv[2])))
