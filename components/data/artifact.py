"""The Dataset artifact: Fashion-MNIST split, fingerprinted, written as shards, and read back per worker."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np

from bakeoff.components.data.fashion_mnist import IMAGE_SHAPE, Split, class_names, read
from bakeoff.components.data.preprocess import NO_RESIZE
from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage.records import DatasetMetadata, Preprocessing, SkippedFiles
from bakeoff.components.storage.store import Store

SPLITS = ("train", "validation", "test")
METADATA_FILE = "metadata.json"


def check_validation_size(size: int, train_examples: int) -> int:
    """``size`` if it leaves examples on both sides of a train split of ``train_examples``; one line if not."""
    if not 0 < size < train_examples:
        raise BakeoffError(f"validation size {size} must be between 1 and {train_examples - 1}")
    return size


def check_shards(shards: int) -> int:
    """``shards`` if each split can be written as that many files; one line if not."""
    if shards < 1:
        raise BakeoffError(f"shards must be at least 1, got {shards}")
    return shards


def carve_validation(train: Split, size: int, seed: int) -> tuple[Split, Split]:
    """Splits ``size`` examples off ``train`` with a fixed seed: (train, validation)."""
    check_validation_size(size, len(train))
    order = np.random.default_rng(seed).permutation(len(train))
    keep, held = np.sort(order[size:]), np.sort(order[:size])
    return Split(train.images[keep], train.labels[keep]), Split(train.images[held], train.labels[held])


def fingerprint(splits: dict[str, Split]) -> str:
    """A content hash of every split, so the same data gives the same artifact."""
    digest = hashlib.sha256()
    for name in sorted(splits):
        digest.update(name.encode())
        digest.update(splits[name].images.tobytes())
        digest.update(splits[name].labels.tobytes())
    return digest.hexdigest()


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.npz"


def write(splits: dict[str, Split], out: Path, shards: int, names: list[str], source: str) -> DatasetMetadata:
    """Writes each split as ``shards`` .npz files plus metadata.json; returns the metadata.

    Every split gets the same shard count so any worker count up to
    ``shards`` can read a disjoint set of whole files.
    """
    out.mkdir(parents=True, exist_ok=True)
    for split, data in splits.items():
        images = data.images[..., np.newaxis]  # [n, 28, 28, 1]: the artifact's images always carry their channels
        # array_split slices (views) and savez streams to the file: no copy of the split is made.
        parts = zip(np.array_split(images, shards), np.array_split(data.labels, shards), strict=True)
        for index, (images, labels) in enumerate(parts):
            with open(out / shard_name(split, index, shards), "wb") as file:
                np.savez(file, images=images, labels=labels)
    metadata = DatasetMetadata(
        counts={split: len(data) for split, data in splits.items()},
        shards=shards,
        image_shape=[*IMAGE_SHAPE, 1],
        class_names=names,
        fingerprint=fingerprint(splits),
        source=source,
        preprocessing=Preprocessing(*IMAGE_SHAPE, channels=1, resize=NO_RESIZE),
        class_counts={split: np.bincount(data.labels, minlength=len(names)).tolist() for split, data in splits.items()},
        skipped=SkippedFiles(0, []),
        split_origins={"train": "source", "validation": "carved from train, seeded", "test": "source"},
    )
    (out / METADATA_FILE).write_text(metadata.to_json())
    return metadata


def read_metadata(store: Store) -> DatasetMetadata:
    return DatasetMetadata.from_json(store.get_bytes(METADATA_FILE), METADATA_FILE)


def read_shards(store: Store, split: str, index: int = 0, count: int = 1) -> Split:
    """Reads the shards ``index::count`` of ``split``: one worker's disjoint part."""
    shards = read_metadata(store).shards
    if count > shards:
        raise BakeoffError(
            f"{count} workers need at least {count} shards, the dataset has {shards}: lower workers or re-ingest with "
            "more shards"
        )
    parts = []
    for shard in range(index, shards, count):
        with np.load(io.BytesIO(store.get_bytes(shard_name(split, shard, shards)))) as npz:
            parts.append((npz["images"], npz["labels"]))
    return Split(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def build(source: str, out: Path, validation_size: int, shards: int, seed: int) -> DatasetMetadata:
    """Builds the artifact in ``out``; ``source`` is an IDX folder or 'tfds' (download)."""
    check_shards(shards)
    original = read(source)
    train, validation = carve_validation(original["train"], validation_size, seed)
    splits = {"train": train, "validation": validation, "test": original["test"]}
    return write(splits, out, shards, class_names(), source)
