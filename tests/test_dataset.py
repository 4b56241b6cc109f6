"""Ingest on the real Fashion-MNIST files: counts, splits, shards, fingerprint."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from components.data import artifact as dataset
from components.data import fashion_mnist
from components.errors import BakeoffError
from components.storage import open_store


def test_idx_files_hold_fashion_mnist(fashion_dir: Path) -> None:
    splits = fashion_mnist.read_idx_dir(fashion_dir)
    assert splits["train"].images.shape == (60000, 28, 28)
    assert splits["test"].images.shape == (10000, 28, 28)
    assert np.bincount(splits["train"].labels).tolist() == [6000] * 10


def test_artifact_metadata(small_dataset: Path) -> None:
    metadata = json.loads((small_dataset / "metadata.json").read_text())
    assert metadata["counts"] == {"train": 55000, "validation": 5000, "test": 10000}
    assert metadata["class_names"][0] == "T-shirt/top" and len(metadata["class_names"]) == 10
    assert metadata["shards"] == 4


def test_workers_read_disjoint_shards_that_cover_the_split(small_dataset: Path) -> None:
    store = open_store(str(small_dataset))
    whole = dataset.read_shards(store, "train")
    parts = [dataset.read_shards(store, "train", index, 2) for index in range(2)]
    assert sum(len(part) for part in parts) == len(whole) == 55000
    seen = np.concatenate([part.images.reshape(len(part), -1) for part in parts])
    assert len(np.unique(seen, axis=0)) == len(np.unique(whole.images.reshape(len(whole), -1), axis=0))


def test_more_workers_than_shards_is_refused(small_dataset: Path) -> None:
    with pytest.raises(BakeoffError, match=r"5 workers need at least 5 shards, the dataset has 4"):
        dataset.read_shards(open_store(str(small_dataset)), "train", 0, 5)


def test_validation_is_fixed_by_the_seed_and_apart_from_train(fashion_dir: Path) -> None:
    train = fashion_mnist.read_idx_dir(fashion_dir)["train"]
    kept, held = dataset.carve_validation(train, 5000, seed=0)
    again_kept, again_held = dataset.carve_validation(train, 5000, seed=0)
    assert np.array_equal(held.images, again_held.images) and len(kept) == 55000
    _, other = dataset.carve_validation(train, 5000, seed=1)
    assert not np.array_equal(held.labels, other.labels)


def test_same_input_same_fingerprint(fashion_dir: Path, tmp_path: Path, small_dataset: Path) -> None:
    metadata = dataset.build(str(fashion_dir), tmp_path / "again", validation_size=5000, shards=4, seed=0)
    assert metadata["fingerprint"] == json.loads((small_dataset / "metadata.json").read_text())["fingerprint"]


def test_missing_dataset_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(BakeoffError, match=r"Fashion-MNIST not found in .* install Debian's dataset-fashion-mnist"):
        fashion_mnist.read_idx_dir(tmp_path)


def test_truncated_file_is_refused(fashion_dir: Path, tmp_path: Path) -> None:
    for name in fashion_dir.glob("*.gz"):
        shutil.copy(name, tmp_path / name.name)
    data = gzip.decompress((fashion_dir / "t10k-images-idx3-ubyte.gz").read_bytes())
    (tmp_path / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(data[:-100]))
    with pytest.raises(BakeoffError, match=r"is truncated"):
        fashion_mnist.read_idx_dir(tmp_path)
