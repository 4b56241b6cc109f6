"""benchmarks/datasets.py's digits: scikit-learn's bundled images as an RGB class-folder tree with a held-out test
split the SVC reference is scored on too, coloured so that colour tells nothing of the class."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bakeoff.components.data import artifact
from bakeoff.components.spec import parse_config
from bakeoff.components.storage import open_store
from benchmarks.datasets import DIGITS_SIDE, SHAPES, write_digits, write_shapes

pytestmark = pytest.mark.unit


def test_the_digits_become_a_tree_with_the_svcs_test_split_in_colours_that_tell_nothing(tmp_path: Path) -> None:
    from sklearn.datasets import load_digits  # type: ignore[import-untyped]

    target = load_digits().target
    train, test = write_digits(tmp_path / "digits", seed=0)
    assert sorted([*train, *test]) == list(range(len(target))) and len(test) == 360
    assert np.bincount(target[test], minlength=10).min() >= 35, "stratified: each digit holds its share of the test"
    metadata = artifact.build(str(tmp_path / "digits"), tmp_path / "out", 5000, 2, 0, (), lambda line: None)
    assert metadata.class_names == [str(digit) for digit in range(10)]
    assert metadata.image_shape == [DIGITS_SIDE, DIGITS_SIDE, 3]
    # bakeoff's test split is the SVC's; its validation is carved from the SVC's training images
    assert metadata.class_counts["test"] == np.bincount(target[test], minlength=10).tolist()
    assert metadata.counts["train"] + metadata.counts["validation"] == len(train)
    images = artifact.read_shards(open_store(str(tmp_path / "out")), "test")
    for digit in range(10):
        strokes = images.images[images.labels == digit].reshape(-1, DIGITS_SIDE * DIGITS_SIDE, 3).max(axis=1)
        assert len({tuple(colour) for colour in strokes}) > len(strokes) // 2, f"digit {digit} is drawn in one colour"


def test_the_shapes_become_a_64_pixel_rgb_tree_of_six_classes_the_same_for_a_seed(tmp_path: Path) -> None:
    """The harder dataset: six shapes, a train and a test split of their own, drawn the same for the same seed."""
    write_shapes(tmp_path / "a", 5, 2, 64, seed=0)
    write_shapes(tmp_path / "b", 5, 2, 64, seed=0)
    metadata = artifact.build(str(tmp_path / "a"), tmp_path / "out", 6, 1, 0, (), lambda line: None)
    assert metadata.class_names == sorted(SHAPES) and metadata.image_shape == [64, 64, 3]
    assert metadata.class_counts["test"] == [2] * 6
    assert metadata.counts["train"] + metadata.counts["validation"] == 30
    files = sorted(path.relative_to(tmp_path / "a") for path in (tmp_path / "a").rglob("*.png"))
    assert files == sorted(path.relative_to(tmp_path / "b") for path in (tmp_path / "b").rglob("*.png"))
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    images = artifact.read_shards(open_store(str(tmp_path / "out")), "test").images
    assert len({image.tobytes() for image in images}) == len(images), "each image drawn anew"


def test_ingest_s_peak_memory_is_its_own_not_the_forking_process_s(tmp_path: Path) -> None:
    """`make bench` starts ingest from a process holding TensorFlow: the peak it reports is ingest's alone (ru_maxrss
    carried the parent's 1.4 GB across execve)."""
    from benchmarks import ingest_memory

    tree = ingest_memory.write_tree(tmp_path / "tree", 200, 32)
    held = np.ones(1 << 26)  # 512 MiB, touched, in the process that starts ingest
    measured = ingest_memory.measure(tree, tmp_path / "out", 20, 2)
    assert held.sum() == 1 << 26
    assert measured["images"] == 200
    assert measured["peak_rss_mb"] < 256, f"ingest of 200 small images reported {measured['peak_rss_mb']} MB"


def test_the_digits_search_is_one_bakeoff_reads_without_flips_and_with_enough_steps_an_epoch() -> None:
    from benchmarks.datasets import FULL, digits_search

    config = parse_config(digits_search(FULL.digits_max_epochs) | {"source": "digits"}, "digits_search")
    assert config.search is not None and config.search.halving is not None
    assert config.search.halving.max_epochs == FULL.digits_max_epochs
    for variant in config.variants:
        # a mirrored digit is another glyph; 1,150 images at 16 a replica on 2 workers make 36 steps an epoch
        assert not variant.training.random_flip and variant.training.random_shift == 3
        assert variant.training.batch_size * variant.workers <= 32
