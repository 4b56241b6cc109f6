"""A source inspected before ingest, and the plan priced on it: its count, image shape and classes, far from
Fashion-MNIST's both ways; and the model's name taken from it."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bakeoff.components import defaults
from bakeoff.components.data import artifact
from bakeoff.components.data.inspection import inspect, model_name
from bakeoff.components.search import costs
from bakeoff.components.spec import load_config
from bakeoff.pipelines.cli.main import main
from tests import samples
from tests.images import write_fashion_subset, write_rgb_folder

pytestmark = pytest.mark.unit

CONFIG = """
variants:
  - {name: small, model: {type: cnn, filters: [8], dense_units: 16}, training: {epochs: 2, batch_size: 32}, workers: 1}
  - {name: wide, model: {type: mlp, hidden_units: [32]}, training: {epochs: 2, batch_size: 32}, workers: 1}
"""


def many_images(root: Path, per_class: int, classes: int, size: tuple[int, int]) -> Path:
    """``classes`` class folders of ``per_class`` files each: one RGB PNG of ``size`` (height, width) per class,
    hard-linked under every name, so that a folder larger than Fashion-MNIST is written in seconds."""
    rng = np.random.default_rng(0)
    for label in range(classes):
        folder = root / f"class-{label}"
        folder.mkdir(parents=True)
        first = folder / f"{0:06d}.png"
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(first)
        for index in range(1, per_class):
            os.link(first, folder / f"{index:06d}.png")
    return root


def test_a_small_rgb_folder_is_counted_as_ingest_carves_it(tmp_path: Path) -> None:
    """36 images of 20x20 in 3 classes: too few for 5,000-image splits, so ingest carves a fifth each."""
    folder = write_rgb_folder(tmp_path / "shapes", per_class=12, size=20)
    inspected = inspect(str(folder))
    assert (inspected.counts, inspected.shape, inspected.classes) == (
        {"train": 22, "validation": 7, "test": 7},
        (20, 20, 3),
        3,
    )
    built = artifact.build(str(folder), tmp_path / "data", defaults.VALIDATION_SIZE, 2, defaults.SEED)
    assert inspected.counts == built.counts and list(inspected.shape) == built.image_shape
    assert inspected.class_names == built.class_names


def test_image_size_sets_the_shape_and_a_grayscale_source_keeps_one_channel(tmp_path: Path, fashion_dir: Path) -> None:
    folder = write_rgb_folder(tmp_path / "shapes", per_class=4, size=20, splits=("train", "test"))
    assert inspect(str(folder), (64, 48)).shape == (64, 48, 3)
    write_fashion_subset(fashion_dir, tmp_path / "idx", tmp_path / "png", train=300, test=100)
    for subset in ("idx", "png"):
        inspected = inspect(str(tmp_path / subset))
        assert (inspected.shape, inspected.classes) == ((28, 28, 1), 10)
        assert inspected.counts == {"train": 240, "validation": 60, "test": 100}


def test_the_default_source_is_counted_from_its_labels(fashion_dir: Path) -> None:
    inspected = inspect(str(fashion_dir))
    assert inspected.counts == {"train": 55000, "validation": 5000, "test": 10000}
    assert inspected.shape == (28, 28, 1) and inspected.classes == 10
    assert costs.Images.of_source(inspected) == dataclasses.replace(costs.FASHION_MNIST, source=str(fashion_dir))


def test_fashion_mnist_s_class_names_are_tfds_s() -> None:
    """The default source's names are written down, so that listing it imports no TFDS: they must stay TFDS's."""
    import tensorflow_datasets as tfds

    from bakeoff.components.data import fashion_mnist

    assert fashion_mnist.class_names() == list(tfds.builder("fashion_mnist").info.features["label"].names)


def plan_document(capsys: pytest.CaptureFixture, config: Path, source: Path) -> dict:
    capsys.readouterr()
    assert main(["plan", "--config", str(config), "--source", str(source), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.long_running
def test_plan_prices_the_source_s_own_count_shape_and_classes_smaller_and_larger(
    tmp_path: Path, cost_cache: Path, capsys: pytest.CaptureFixture
) -> None:
    """A folder of 36 images of 20x20 and one of 68,000 images of 96x72, both RGB, priced on the same per-step costs
    (cached for both shapes, so nothing is measured): each plan names its source and counts its own examples, and
    the larger one's epochs take longer by its steps."""
    config_file = tmp_path / "variants.yaml"
    config_file.write_text(CONFIG)
    config = load_config(config_file)
    small = write_rgb_folder(tmp_path / "small", per_class=12, size=20)
    large = many_images(tmp_path / "large", per_class=17000, classes=4, size=(96, 72))
    shapes = [costs.Images(22, (20, 20, 3), 3), costs.Images(58000, (96, 72, 3), 4)]
    cached = samples.calibration(config)
    steps = [step for images in shapes for step in samples.calibration(config, images=images).steps]
    (cost_cache / "calibration.json").write_text(dataclasses.replace(cached, steps=steps).to_json())
    small_plan, large_plan = (plan_document(capsys, config_file, source) for source in (small, large))
    # each with the validation examples an epoch's end scores: 36 images carve 7, 68,000 carve the default 5,000
    small_shape = {"examples": 22, "shape": [20, 20, 3], "classes": 3, "source": str(small), "validation": 7}
    assert small_plan["dataset"] == small_shape
    large_shape = {"examples": 58000, "shape": [96, 72, 3], "classes": 4, "source": str(large), "validation": 5000}
    assert large_plan["dataset"] == large_shape
    # two variants, two epochs each, of 58,000 // 32 steps at 0.05 s
    assert large_plan["estimated_seconds"] > small_plan["estimated_seconds"] + 4 * (58000 // 32) * 0.05
    capsys.readouterr()
    assert main(["plan", "--config", str(config_file), "--source", str(large)]) == 0
    assert f"priced on {large}: 58,000 training examples of 96x72x3 pixels, 4 classes" in capsys.readouterr().out


@pytest.mark.parametrize(
    "source, name",
    [
        (defaults.SOURCE, "fashion-mnist"),
        ("tfds", "fashion-mnist"),
        ("tfds:cats_vs_dogs:4.0.1@/data/tfds", "cats-vs-dogs"),
        ("s3://bucket/datasets/Pets/", "pets"),
        ("/home/me/My Flowers", "my-flowers"),
        ("/", defaults.MODEL_NAME),
    ],
)
def test_the_model_is_named_after_its_source(source: str, name: str) -> None:
    assert model_name(source) == name


def test_compile_with_a_budget_prices_the_source_where_it_can_list_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A folder here is priced as plan prices it; a prefix only the cluster reaches is Fashion-MNIST's, said in a
    line."""
    from bakeoff.pipelines.compiling import compiled_images

    folder = write_rgb_folder(tmp_path / "shapes", per_class=12, size=20)
    config_file = tmp_path / "variants.yaml"
    config_file.write_text(CONFIG + f"source: {folder}\n")
    assert compiled_images(load_config(config_file)) == costs.Images(22, (20, 20, 3), 3, str(folder), validation=7)
    config_file.write_text(CONFIG + "source: s3://cluster-only/pets/\n")
    assert compiled_images(load_config(config_file)) == costs.FASHION_MNIST
    assert "the budget prices Fashion-MNIST's 55,000 training examples, not s3://cluster-only/pets/" in caplog.text


ONE_MLP = """
variants:
  - {name: tiny, model: {type: mlp, hidden_units: [8]}, training: {epochs: 1, batch_size: 4}, workers: 1}
"""


@pytest.mark.training
def test_run_publishes_under_the_source_s_name(tmp_path: Path) -> None:
    """`run --source .../Pets` without --model-name publishes the winner as pets (--model-name still names it:
    the CLI's tests publish under theirs)."""
    from bakeoff.components.storage import open_store, registry

    config_file = tmp_path / "variants.yaml"
    config_file.write_text(ONE_MLP)
    folder = write_rgb_folder(tmp_path / "Pets", per_class=12, size=20)
    store = tmp_path / "store"
    flags = ["--store", str(store), "--work-dir", str(tmp_path / "work"), "--no-progress"]
    assert main(["run", "--config", str(config_file), "--source", str(folder), *flags]) == 0
    (published,) = registry.list_versions(open_store(store.as_uri()), "pets")
    assert published.variant == "tiny"
