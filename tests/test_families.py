"""The model families: each parsed strictly, built for any image, priced by its own MACs; a backbone's weights file,
freeze schedule and rate factor; mixed precision's float32 ends."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from bakeoff.components.errors import BakeoffError
from bakeoff.components.modeling import backbone, precision
from bakeoff.components.modeling.architectures import ARCHITECTURES
from bakeoff.components.search import costs
from bakeoff.components.spec import from_dict

pytestmark = pytest.mark.unit

TINY_RESNET = {"type": "resnet", "stem_filters": 8, "filters": [8, 16], "blocks": 1}
TINY_BACKBONE = {"type": "backbone", "network": "MobileNetV3Small", "weights": "none", "image_size": 32}


def variant(model: dict, **training: Any) -> Any:
    return from_dict({"name": "v", "model": model, "training": training})


@pytest.mark.parametrize(
    ("model", "training", "line"),
    [
        (
            {**TINY_BACKBONE, "network": "VGG99"},
            {},
            "variant: variant 'v': model.network: unknown network 'VGG99' (known: MobileNetV3Small, MobileNetV3Large,"
            " EfficientNetV2B0, EfficientNetV2B1, ResNet50V2)",
        ),
        (
            {**TINY_BACKBONE, "backbone_learning_rate": 0},
            {},
            "variant: variant 'v': model.backbone_learning_rate: must be a factor of the head's rate above 0 and at"
            " most 1, got 0.0",
        ),
        (
            {**TINY_BACKBONE, "image_size": 16},
            {},
            "variant: variant 'v': model.image_size: must be 0 (the images' own side) or at least 32, got 16",
        ),
        ({**TINY_RESNET, "blocks": 0}, {}, "variant: variant 'v': model.blocks: must be at least 1, got 0"),
        ({**TINY_RESNET, "stem_stride": 5}, {}, "variant: variant 'v': model.stem_stride: must be at most 4, got 5"),
        ({**TINY_RESNET, "filters": []}, {}, "variant: variant 'v': model.filters: must list 1 to 16 layers, got 0"),
        (
            TINY_RESNET,
            {"precision": "float8"},
            "variant: variant 'v': training.precision: unknown precision 'float8'"
            " (known: auto, float32, mixed_bfloat16, mixed_float16)",
        ),
        (
            TINY_RESNET,
            {"random_crop": 1.0},
            "variant: variant 'v': training.random_crop: must be in [0, 1): the least fraction of the image a crop"
            " keeps (0: off; e.g. 0.5), got 1.0",
        ),
    ],
)
def test_a_family_field_out_of_its_range_is_refused_in_one_line(model: dict, training: dict, line: str) -> None:
    with pytest.raises(BakeoffError) as refused:
        variant(model, **training)
    assert str(refused.value) == line


def test_every_family_fills_its_defaults_and_keeps_what_was_written() -> None:
    written = variant(TINY_RESNET)
    assert written.model == {**TINY_RESNET, "stem_stride": 2, "dropout": 0.0}
    assert variant({"type": "backbone"}).model_config() == backbone.BackboneConfig()


def _counted_macs(model: Any) -> int:
    """A network's MACs from its layers' shapes, as an independent check of a family's formula."""
    import tf_keras as keras

    total = 0
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            pixels = math.prod(layer.output_shape[1:3])
            total += pixels * math.prod(layer.kernel_size) * layer.input_shape[-1] * layer.filters
        elif isinstance(layer, keras.layers.Dense):
            total += layer.input_shape[-1] * layer.units
    return total


@pytest.mark.parametrize("shape", [(28, 28, 1), (96, 96, 3), (33, 47, 3)])
@pytest.mark.parametrize(
    "model",
    [
        {"type": "cnn", "filters": [8, 16], "dense_units": 32},
        {"type": "mlp", "hidden_units": [64, 32]},
        TINY_RESNET,
        {**TINY_RESNET, "stem_stride": 1, "filters": [8, 16, 24], "blocks": 2},
    ],
)
def test_a_family_prices_its_network_at_the_macs_its_layers_compute(model: dict, shape: tuple[int, int, int]) -> None:
    chosen = variant(model)
    built = ARCHITECTURES[chosen.architecture].build(shape, 5, chosen.model_config())
    images = costs.Images(1000, shape, 5)
    assert costs.macs(chosen, images) == _counted_macs(built)


def test_a_backbone_costs_more_at_a_larger_side_and_its_shape_is_normalized() -> None:
    small, large = variant(TINY_BACKBONE), variant({**TINY_BACKBONE, "image_size": 64})
    gray = costs.Images(1000, (28, 28, 1), 10)
    assert 3 < costs.macs(large, gray) / costs.macs(small, gray) < 5  # four times the pixels
    assert costs.shape_of(small, gray).batch_norm and costs.shape_of(variant(TINY_RESNET), gray).batch_norm


@pytest.mark.parametrize("shape", [(28, 28), (28, 28, 1), (40, 56, 3)])
@pytest.mark.parametrize("model", [TINY_RESNET, TINY_BACKBONE])
def test_a_family_takes_any_images_and_answers_float32_probabilities_at_every_precision(
    model: dict, shape: tuple[int, ...]
) -> None:
    chosen = variant(model)
    images = np.random.default_rng(0).integers(0, 256, (4, *shape)).astype(np.float32)
    for computed in (precision.FLOAT32, precision.BFLOAT16):
        with precision.policy(computed):
            built = ARCHITECTURES[chosen.architecture].build(shape, 6, chosen.model_config())
        assert built.input.dtype == "float32"
        answers = built(images, training=False)
        assert answers.dtype == "float32" and answers.shape == (4, 6)
        assert np.allclose(answers.numpy().sum(axis=1), 1, atol=1e-3)
        if computed == precision.BFLOAT16:
            assert built.get_layer(index=len(built.layers) // 2).compute_dtype == "bfloat16"


def test_a_grayscale_image_reaches_the_backbone_as_three_equal_channels_at_its_side() -> None:
    import tf_keras as keras

    built = ARCHITECTURES["backbone"].build((28, 28, 1), 3, variant(TINY_BACKBONE).model_config())
    inner = built.get_layer(backbone.BACKBONE)
    fed_in = inner.get_input_at(len(inner.inbound_nodes) - 1)  # in the outer model: its last call
    fed = keras.Model(built.inputs, fed_in)(np.full((1, 28, 28, 1), 200, np.float32)).numpy()
    assert fed.shape == (1, 32, 32, 3)
    assert np.allclose(fed, 200)


def _backbone(weights: str) -> Any:
    chosen = variant({**TINY_BACKBONE, "weights": weights})
    return ARCHITECTURES["backbone"].build((28, 28, 1), 4, chosen.model_config())


@pytest.mark.training
def test_a_weights_file_loads_into_a_fresh_variant_which_answers_as_the_saved_network(tmp_path: Path) -> None:
    """The user's own weights (here a trained network's backbone, saved as Keras saves the ImageNet ones): a variant
    naming the file answers as the network it was saved from, and one without it does not."""
    trained = _backbone("none")
    images = np.random.default_rng(1).integers(0, 256, (64, 28, 28)).astype(np.float32)
    trained.compile("adam", "sparse_categorical_crossentropy")
    trained.fit(images, np.arange(64) % 4, epochs=1, verbose=0)
    saved = tmp_path / "weights.h5"
    trained.get_layer(backbone.BACKBONE).save_weights(str(saved))

    loaded, fresh = _backbone(str(saved)), _backbone("none")
    for model in (loaded, fresh):  # the same head: the answers differ by the backbone alone
        model.layers[-1].set_weights(trained.layers[-1].get_weights())
    expected = trained(images, training=False).numpy()
    assert np.allclose(loaded(images, training=False).numpy(), expected, atol=1e-5)
    assert not np.allclose(fresh(images, training=False).numpy(), expected, atol=1e-3)


def test_a_missing_weights_file_is_named() -> None:
    with pytest.raises((OSError, ValueError), match=r"no-such-weights\.h5"):
        _backbone("/nowhere/no-such-weights.h5")


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_rate_factor_moves_its_variables_that_part_of_the_way(optimizer: str) -> None:
    import tensorflow as tf

    from bakeoff.components.modeling.optimizers import make_optimizer

    plain, slow = tf.Variable([1.0, -2.0]), tf.Variable([1.0, -2.0])
    made = make_optimizer(optimizer, 0.1, "constant", 10, 1, 0.0, [([slow], 0.25)])
    gradient = tf.constant([0.5, 0.3])
    made.apply_gradients([(gradient, plain), (gradient, slow)])
    moved = plain.numpy() - [1.0, -2.0]
    assert np.all(moved != 0)
    assert np.allclose(slow.numpy() - [1.0, -2.0], 0.25 * moved)


@pytest.mark.training
def test_a_frozen_backbone_keeps_its_weights_and_statistics_until_its_freeze_epochs_end() -> None:
    import tensorflow as tf
    import tf_keras as keras

    from bakeoff.components.training.model import compiled_model, family_hooks

    chosen = from_dict(
        {
            "name": "frozen",
            "model": {**TINY_BACKBONE, "freeze_epochs": 1, "backbone_learning_rate": 0.5},
            "training": {"epochs": 2, "batch_size": 16},
        }
    )
    metadata: Any = SimpleNamespace(image_shape=[28, 28, 1], class_names=["a", "b", "c", "d"])
    model = compiled_model(chosen, tf.distribute.get_strategy(), metadata, 4)
    inner = model.get_layer(backbone.BACKBONE)
    statistics = [v for v in inner.non_trainable_variables if "moving_mean" in v.name]
    head = model.layers[-1].kernel
    kernel = inner.weights[0]  # its first convolution's

    def snapshot() -> tuple[np.ndarray, ...]:
        return kernel.numpy().copy(), statistics[0].numpy().copy(), head.numpy().copy()

    seen: list[tuple[np.ndarray, ...]] = []

    class Snapshot(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            seen.append(snapshot())

    before = snapshot()
    images = np.random.default_rng(2).integers(0, 256, (64, 28, 28, 1)).astype(np.float32)
    model.fit(
        images,
        np.arange(64) % 4,
        batch_size=16,
        epochs=2,
        verbose=0,
        callbacks=[*family_hooks(chosen, model), Snapshot()],
    )
    frozen, unfrozen = seen
    assert np.array_equal(frozen[0], before[0]) and np.array_equal(frozen[1], before[1])  # weights and statistics
    assert not np.array_equal(frozen[2], before[2])  # the head trained
    assert not np.array_equal(unfrozen[0], frozen[0]) and not np.array_equal(unfrozen[1], frozen[1])


def test_auto_precision_is_float16_on_a_gpu_and_bfloat16_only_where_measured_faster() -> None:
    bf16 = frozenset({"avx512f", "avx512_bf16"})
    assert precision.resolve("auto", 1, bf16) == precision.FLOAT16
    assert precision.resolve("auto", 0, bf16) == precision.FLOAT32  # not measured
    assert precision.resolve("auto", 0, bf16, bf16_faster=True) == precision.BFLOAT16
    assert precision.resolve("auto", 0, bf16, bf16_faster=False) == precision.FLOAT32
    assert precision.resolve("auto", 0, frozenset({"avx2"}), bf16_faster=True) == precision.FLOAT32
    assert precision.resolve("mixed_bfloat16", 0, frozenset()) == precision.BFLOAT16


def test_the_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16\n\nprocessor\t: 1\n")
    assert precision.cpu_flags(cpuinfo) == {"fpu", "avx512f", "avx512_bf16"}
    assert precision.cpu_flags(tmp_path / "missing") == frozenset()


@pytest.mark.training
@pytest.mark.parametrize("computed", [precision.FLOAT32, precision.BFLOAT16, precision.FLOAT16])
def test_a_replica_s_model_compiles_and_trains_at_each_precision(computed: str) -> None:
    """As the worker builds it: float16 gets Keras' loss scaling, a rate factor survives it, the weights move."""
    import tensorflow as tf
    import tf_keras as keras

    from bakeoff.components.training.model import compiled_model

    chosen = from_dict({"name": "p", "model": {**TINY_BACKBONE, "backbone_learning_rate": 0.5}})
    metadata: Any = SimpleNamespace(image_shape=[28, 28, 1], class_names=["a", "b", "c", "d"])
    model = compiled_model(chosen, tf.distribute.get_strategy(), metadata, 2, computed)
    assert model.layers[-1].compute_dtype == "float32"
    assert model.get_layer(backbone.BACKBONE).compute_dtype == computed.removeprefix("mixed_")
    before = model.layers[-1].kernel.numpy().copy()
    images = np.random.default_rng(3).integers(0, 256, (32, 28, 28, 1)).astype(np.float32)
    # float16's loss scale starts high and halves at each overflowing step, which it skips: a few steps do nothing
    history = model.fit(images, np.arange(32) % 4, batch_size=4, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"][-1])
    scaled = isinstance(model.optimizer, keras.mixed_precision.LossScaleOptimizer)
    assert scaled == (computed == precision.FLOAT16)
    assert not np.array_equal(model.layers[-1].kernel.numpy(), before)


@pytest.mark.training
def test_a_backbone_s_batch_norm_follows_its_training_batches_as_every_family_s_does() -> None:
    """Keras' applications average their statistics over ~1000 steps: a short job's export would answer with its
    initial ones (MobileNetV3Small from scratch, 64 steps of Fashion-MNIST: test accuracy 0.11 at 0.999, 0.57 at
    0.9)."""
    import tf_keras as keras

    from bakeoff.components.modeling.layers import BATCH_NORM_MOMENTUM

    inner = _backbone("none").get_layer(backbone.BACKBONE)
    norms = [layer for layer in inner.layers if isinstance(layer, keras.layers.BatchNormalization)]
    assert len(norms) > 10 and {layer.momentum for layer in norms} == {BATCH_NORM_MOMENTUM}


def test_a_calibration_times_a_backbone_without_its_weights_and_unfrozen() -> None:
    """A step costs the same whatever the weights: offline, ImageNet's download would fail the timing job; and the
    fine-tuning step is the costlier one."""
    written = variant({**TINY_BACKBONE, "weights": "imagenet", "freeze_epochs": 2})
    (timed,) = costs.timed([written])
    assert timed.model == {**written.model, "weights": "none", "freeze_epochs": 0}
    assert (costs.shape_of(timed), costs.macs(timed)) == (costs.shape_of(written), costs.macs(written))
    (plain,) = costs.timed([variant(TINY_RESNET)])
    assert plain == variant(TINY_RESNET)
