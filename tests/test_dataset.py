"""Ingest on the real Fashion-MNIST files: counts, splits, shards, fingerprint."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bakeoff.components.data import artifact as dataset
from bakeoff.components.data import fashion_mnist
from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage import open_store

pytestmark = pytest.mark.unit


def examples(*splits: fashion_mnist.Split) -> np.ndarray:
    """The (image, label) pairs of ``splits``, one opaque value per example."""
    rows = np.concatenate(
        [np.concatenate([split.images.reshape(len(split), -1), split.labels[:, None]], axis=1) for split in splits]
    )
    return np.ascontiguousarray(rows).view(np.dtype((np.void, rows.shape[1]))).ravel()


def unmatched(these: np.ndarray, those: np.ndarray) -> tuple[int, int]:
    """Compared as multisets: how many of ``these`` are not among ``those``, and the other way round."""
    values, inverse = np.unique(np.concatenate([these, those]), return_inverse=True)
    surplus = np.bincount(inverse[: len(these)], minlength=len(values)) - np.bincount(
        inverse[len(these) :], minlength=len(values)
    )
    return int(surplus[surplus > 0].sum()), int(-surplus[surplus < 0].sum())


def test_idx_files_hold_fashion_mnist(fashion_dir: Path) -> None:
    splits = fashion_mnist.read_idx_dir(fashion_dir)
    assert splits["train"].images.shape == (60000, 28, 28)
    assert splits["test"].images.shape == (10000, 28, 28)
    assert np.bincount(splits["train"].labels).tolist() == [6000] * 10


def test_artifact_metadata(small_dataset: Path) -> None:
    metadata = dataset.read_metadata(open_store(f"file://{small_dataset}"))
    assert metadata.counts == {"train": 55000, "validation": 5000, "test": 10000}
    assert metadata.class_names[0] == "T-shirt/top" and len(metadata.class_names) == 10
    assert metadata.shards == 4


def test_workers_read_disjoint_shards_that_cover_the_split(small_dataset: Path) -> None:
    """Two workers' shards are a partition of the split: every example once, none twice, none missing."""
    store = open_store(str(small_dataset))
    whole = dataset.read_shards(store, "train")
    parts = [dataset.read_shards(store, "train", index, 2) for index in range(2)]
    assert sum(len(part) for part in parts) == len(whole) == 55000
    assert unmatched(examples(*parts), examples(whole)) == (0, 0)


def test_more_workers_than_shards_is_refused(small_dataset: Path) -> None:
    with pytest.raises(BakeoffError, match=r"5 workers need at least 5 shards, the dataset has 4"):
        dataset.read_shards(open_store(str(small_dataset)), "train", 0, 5)


def test_validation_is_fixed_by_the_seed(fashion_dir: Path) -> None:
    """The same seed carves the same validation set; another seed another one."""
    train = fashion_mnist.read_idx_dir(fashion_dir)["train"]
    _, held = dataset.carve_validation(train, 5000, seed=0)
    _, again = dataset.carve_validation(train, 5000, seed=0)
    assert np.array_equal(held.images, again.images) and np.array_equal(held.labels, again.labels)
    _, other = dataset.carve_validation(train, 5000, seed=1)
    assert not np.array_equal(held.labels, other.labels)


def test_validation_and_train_partition_the_original_train_split(fashion_dir: Path) -> None:
    """No example is in both validation and train, and none of the original is lost or made up."""
    original = fashion_mnist.read_idx_dir(fashion_dir)["train"]
    kept, held = dataset.carve_validation(original, 5000, seed=0)
    assert (len(kept), len(held)) == (55000, 5000)
    assert unmatched(examples(kept, held), examples(original)) == (0, 0)  # (in both, lost)


def test_same_input_same_fingerprint(fashion_dir: Path, tmp_path: Path, small_dataset: Path) -> None:
    """Ingesting the same files again gives the same fingerprint, so the artifact is recognised."""
    metadata = dataset.build(str(fashion_dir), tmp_path / "again", validation_size=5000, shards=4, seed=0)
    assert metadata.fingerprint == json.loads((small_dataset / "metadata.json").read_text())["fingerprint"]


def test_one_changed_pixel_changes_the_fingerprint(fashion_dir: Path) -> None:
    """The fingerprint covers every pixel of every split: equal data hash equal, one changed pixel does not."""
    original = fashion_mnist.read_idx_dir(fashion_dir)
    kept, held = dataset.carve_validation(original["train"], 5000, seed=0)
    splits = {"train": kept, "validation": held, "test": original["test"]}
    copied = {name: fashion_mnist.Split(split.images.copy(), split.labels.copy()) for name, split in splits.items()}
    assert dataset.fingerprint(copied) == dataset.fingerprint(splits)
    for name in splits:
        images = splits[name].images.copy()
        images[len(images) // 2, 14, 14] ^= 1
        changed = {**splits, name: fashion_mnist.Split(images, splits[name].labels)}
        assert dataset.fingerprint(changed) != dataset.fingerprint(splits), f"a pixel of {name} went unnoticed"


def test_missing_dataset_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(BakeoffError, match=r"Fashion-MNIST not found in .* install Debian's dataset-fashion-mnist"):
        fashion_mnist.read_idx_dir(tmp_path)


def test_truncated_file_is_refused(fashion_dir: Path, tmp_path: Path) -> None:
    for name in fashion_dir.glob("*.gz"):
        shutil.copy(name, tmp_path / name.name)
    data = gzip.decompress((fashion_dir / "t10k-images-idx3-ubyte.gz").read_bytes())
    (tmp_path / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(data[:-100], compresslevel=1))
    with pytest.raises(BakeoffError, match=r"is truncated"):
        fashion_mnist.read_idx_dir(tmp_path)
