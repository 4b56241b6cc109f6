"""benchmarks/datasets.py's digits: scikit-learn's bundled images as an RGB class-folder tree with a held-out test
split the SVC reference is scored on too, coloured so that colour tells nothing of the class."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bakeoff.components.data import artifact
from bakeoff.components.storage import open_store
from benchmarks.datasets import DIGITS_SIDE, write_digits

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
