"""Fashion-MNIST as a sharded dataset artifact: read, split, write, read back."""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import struct
from pathlib import Path
from typing import Optional

import numpy as np

from components.errors import BakeoffError
from components.store import Store

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
IMAGE_SHAPE = (28, 28)
SPLITS = ("train", "validation", "test")
METADATA_FILE = "metadata.json"
TFDS_SOURCE = "tfds"
_IDX_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 60000),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 10000),
}


@dataclasses.dataclass(frozen=True)
class Split:
    """Images as uint8 [n, 28, 28] and labels as uint8 [n]."""

    images: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


def _read_idx(path: Path, magic: int, dims: int) -> np.ndarray:
    """Reads one gzipped IDX file and checks its header against what it holds."""
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    header = 4 + 4 * dims
    found_magic, *shape = struct.unpack(f">I{dims}I", data[:header])
    if found_magic != magic:
        raise BakeoffError(f"{str(path)!r} is not an IDX file of the expected kind (magic {found_magic}, want {magic})")
    array = np.frombuffer(data, dtype=np.uint8, offset=header)
    if array.size != int(np.prod(shape)):
        raise BakeoffError(f"{str(path)!r} is truncated: header says {shape}, found {array.size} bytes")
    return array.reshape(shape)


def read_idx_dir(source: Path) -> dict[str, Split]:
    """The original train/test splits from the four IDX files in ``source``."""
    missing = [name for images, labels, _ in _IDX_FILES.values() for name in (images, labels) if not (source / name).is_file()]
    if missing:
        raise BakeoffError(
            f"Fashion-MNIST not found in {str(source)!r} (missing {', '.join(missing)}):"
            " install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or pass --source tfds on a machine with internet"
        )
    splits = {}
    for split, (images_file, labels_file, count) in _IDX_FILES.items():
        images = _read_idx(source / images_file, 2051, 3)
        labels = _read_idx(source / labels_file, 2049, 1)
        if images.shape != (count, *IMAGE_SHAPE) or labels.shape != (count,):
            raise BakeoffError(
                f"{str(source)!r} does not hold Fashion-MNIST's {split} split: got images {images.shape}, labels {labels.shape}"
            )
        if labels.max() >= 10:
            raise BakeoffError(f"{str(source / labels_file)!r} has labels outside 0..9")
        splits[split] = Split(images, labels)
    return splits


def read_tfds(data_dir: Optional[str] = None) -> dict[str, Split]:
    """The original splits through TFDS's own download and preparation."""
    import tensorflow_datasets as tfds

    splits = {}
    for split in ("train", "test"):
        images, labels = tfds.as_numpy(
            tfds.load("fashion_mnist", split=split, batch_size=-1, as_supervised=True, data_dir=data_dir)
        )
        splits[split] = Split(images.reshape(-1, *IMAGE_SHAPE).astype(np.uint8), labels.astype(np.uint8))
    return splits


def class_names() -> list[str]:
    """The label names as TFDS's fashion_mnist builder declares them."""
    import tensorflow_datasets as tfds

    return list(tfds.builder("fashion_mnist").info.features["label"].names)


def carve_validation(train: Split, size: int, seed: int) -> tuple[Split, Split]:
    """Splits ``size`` examples off ``train`` with a fixed seed: (train, validation)."""
    if not 0 < size < len(train):
        raise BakeoffError(f"validation size {size} must be between 1 and {len(train) - 1}")
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


def write(splits: dict[str, Split], out: Path, shards: int, names: list[str], source: str) -> dict:
    """Writes each split as ``shards`` .npz files plus metadata.json; returns the metadata.

    Every split gets the same shard count so any worker count up to
    ``shards`` can read a disjoint set of whole files.
    """
    out.mkdir(parents=True, exist_ok=True)
    for split, data in splits.items():
        # array_split slices (views) and savez streams to the file: no copy of the split is made.
        parts = zip(np.array_split(data.images, shards), np.array_split(data.labels, shards))
        for index, (images, labels) in enumerate(parts):
            with open(out / shard_name(split, index, shards), "wb") as file:
                np.savez(file, images=images, labels=labels)
    metadata = {
        "counts": {split: len(data) for split, data in splits.items()},
        "shards": shards,
        "image_shape": list(IMAGE_SHAPE),
        "class_names": names,
        "fingerprint": fingerprint(splits),
        "source": source,
    }
    (out / METADATA_FILE).write_text(json.dumps(metadata, indent=2))
    return metadata


def read_metadata(store: Store) -> dict:
    return json.loads(store.get_bytes(METADATA_FILE))


def read_shards(store: Store, split: str, index: int = 0, count: int = 1) -> Split:
    """Reads the shards ``index::count`` of ``split``: one worker's disjoint part."""
    shards = read_metadata(store)["shards"]
    if count > shards:
        raise BakeoffError(f"{count} workers need at least {count} shards, the dataset has {shards}: lower workers or re-ingest with more shards")
    parts = []
    for shard in range(index, shards, count):
        with np.load(io.BytesIO(store.get_bytes(shard_name(split, shard, shards)))) as npz:
            parts.append((npz["images"], npz["labels"]))
    return Split(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def build(source: str, out: Path, validation_size: int, shards: int, seed: int) -> dict:
    """Builds the artifact in ``out``; ``source`` is an IDX folder or 'tfds' (download)."""
    if shards < 1:
        raise BakeoffError(f"shards must be at least 1, got {shards}")
    if source == TFDS_SOURCE:
        original = read_tfds()
    else:
        original = read_idx_dir(Path(source))
    train, validation = carve_validation(original["train"], validation_size, seed)
    splits = {"train": train, "validation": validation, "test": original["test"]}
    return write(splits, out, shards, class_names(), source)
