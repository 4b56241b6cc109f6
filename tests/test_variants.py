"""Variant specs: the default file, and every bad input named by file, variant and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakeoff.components.defaults import CONFIG as DEFAULT_CONFIG
from bakeoff.components.errors import BakeoffError
from bakeoff.components.spec import from_dict, load_variants

pytestmark = pytest.mark.unit


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "variants.yaml"
    path.write_text(text)
    return path


def test_default_file_holds_the_seed_variants() -> None:
    variants = {variant.name: variant for variant in load_variants(DEFAULT_CONFIG)}
    assert list(variants)[:3] == ["cnn", "dropout", "batch_norm"]  # the baselines, then the search's draws
    assert len(variants) == 9 and all(name.startswith("wide_top-") for name in list(variants)[3:])
    assert all(variant.workers == 2 for variant in variants.values())
    assert variants["cnn"].model_config().filters == (32, 64, 64)
    assert variants["dropout"].model_config().dropout == 0.5
    assert variants["batch_norm"].model_config().batch_norm is True


def test_a_variant_is_added_by_yaml_alone(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
defaults: {workers: 3, training: {epochs: 2}}
variants:
  - {name: wide, model: {type: cnn, filters: [64, 128]}, training: {learning_rate: 0.01, schedule: cosine}}
  - {name: base, model: {type: mlp}, workers: 1}
""",
    )
    wide, base = load_variants(path)
    assert (wide.workers, wide.training.epochs, wide.training.learning_rate, wide.training.schedule) == (
        3,
        2,
        0.01,
        "cosine",
    )
    assert wide.model_config().filters == (64, 128)
    assert (base.workers, base.architecture) == (1, "mlp")


def test_round_trip_through_a_pipeline_parameter() -> None:
    for variant in load_variants(DEFAULT_CONFIG):
        # KFP hands list parameters back with every number as a float.
        as_kfp = {**variant.to_dict(), "workers": float(variant.workers)}
        assert from_dict(as_kfp) == variant


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "variants:\n  - {name: a, model: {type: cnn}, learning_rate: 1}\n",
            "variant 'a': learning_rate: unknown field (known: name, model, training, workers, resources)",
        ),
        (
            "variants:\n  - {name: a, model: {type: cnn, filterz: [1]}}\n",
            "variant 'a': model.filterz: unknown field (known: filters, kernel_size, dense_units, dropout, batch_norm)",
        ),
        (
            "variants:\n  - {name: a, model: {type: transformer}}\n",
            "variant 'a': model.type: unknown architecture 'transformer' (known: cnn, mlp, resnet, backbone)",
        ),
        (
            "variants:\n  - {name: a, model: {type: cnn}}\n  - {name: a, model: {type: mlp}}\n",
            "variant 'a': name: duplicate variant name",
        ),
        (
            "variants:\n  - {name: a, model: {type: cnn}, workers: 0}\n",
            "variant 'a': workers: must be at least 1, got 0",
        ),
        (
            "variants:\n  - {name: a, model: {type: cnn}, training: {epochs: 0}}\n",
            "variant 'a': training.epochs: must be at least 1, got 0",
        ),
        (
            "variants:\n  - {name: a, model: {type: cnn}, training: {epochs: many}}\n",
            "variant 'a': training.epochs: expected int, got 'many'",
        ),
        (
            "variants:\n  - {name: a, model: {type: cnn}, training: {optimizer: lbfgs}}\n",
            "variant 'a': training.optimizer: unknown optimizer 'lbfgs' (known: adam, sgd, rmsprop)",
        ),
        ("variants: []\n", "variants: expected a non-empty list of variants"),
        (
            "variant:\n  - {name: a}\n",
            "variant: unknown top-level field (known: defaults, variants, search, source, image_size)",
        ),
        (
            "source: ''\nvariants:\n  - {name: a, model: {type: cnn}}\n",
            "source: expected a non-empty string (a folder, tfds:NAME or s3://...), got ''",
        ),
        ("variants:\n  - {name: a, model: {type: cnn}\n", "malformed YAML at line 3: fix the syntax"),
    ],
)
def test_bad_configs_name_file_variant_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(BakeoffError) as error:
        load_variants(path)
    assert str(error.value) == f"{path}: {message}"


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(
        BakeoffError,
        match=r"cannot read config '.*nope.yaml' \(No such file or directory\): pass an existing YAML file to --config",
    ):
        load_variants(tmp_path / "nope.yaml")


def test_a_deep_cnn_fits_larger_images_and_is_refused_for_small_ones_naming_the_variant_and_size() -> None:
    from bakeoff.components.spec import check_fits

    deep = from_dict({"name": "deep", "model": {"type": "cnn", "filters": [8, 8, 8, 8], "kernel_size": 3}})
    check_fits([deep], [96, 96, 3])  # 94, 47, 45, 22, 20, 10, 8: fits
    with pytest.raises(BakeoffError, match=r"^variant 'deep': model.filters: .* of the 32x40 image at convolution 4"):
        check_fits([deep], [32, 40, 3])
    wide = from_dict({"name": "wide", "model": {"type": "cnn", "filters": [8], "kernel_size": 33}})
    with pytest.raises(BakeoffError, match=r"^variant 'wide': model.kernel_size: must be at most 32 for 32x40 images"):
        check_fits([wide], [32, 40, 3])
