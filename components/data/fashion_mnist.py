"""Fashion-MNIST from its sources: Debian's IDX files (offline) or TFDS's own download."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import struct
from pathlib import Path

import numpy as np

from bakeoff.components.errors import BakeoffError

IMAGE_SHAPE = (28, 28)
CLASSES = 10
TRAIN_IMAGES, TEST_IMAGES = 60000, 10000
TFDS_SOURCE = "tfds"
IDX_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", TRAIN_IMAGES),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", TEST_IMAGES),
}
IDX_NAMES = tuple(name for images, labels, _ in IDX_FILES.values() for name in (images, labels))


@dataclasses.dataclass(frozen=True)
class Split:
    """Images as uint8 [n, 28, 28] (IDX files) or [n, H, W, C] (an artifact's shards) and integer labels [n]."""

    images: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


def _header(path: Path, data: bytes, magic: int, dims: int) -> list[int]:
    """The shape an IDX file's header declares; one line if it is not of the ``magic`` kind."""
    header = 4 + 4 * dims
    if len(data) < header:
        raise BakeoffError(f"{str(path)!r} is truncated: it ends within its IDX header")
    found_magic, *shape = struct.unpack(f">I{dims}I", data[:header])
    if found_magic != magic:
        raise BakeoffError(f"{str(path)!r} is not an IDX file of the expected kind (magic {found_magic}, want {magic})")
    return shape


def _read_idx(path: Path, magic: int, dims: int) -> np.ndarray:
    """Reads one gzipped IDX file and checks its header against what it holds."""
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    header = 4 + 4 * dims
    shape = _header(path, data, magic, dims)
    array = np.frombuffer(data, dtype=np.uint8, offset=header)
    if array.size != int(np.prod(shape)):
        raise BakeoffError(f"{str(path)!r} is truncated: header says {shape}, found {array.size} bytes")
    return array.reshape(shape)


def check_source(source: str) -> str:
    """``source`` if it is 'tfds' or a folder holding the four IDX files (not read: ingest reads them); one line if
    not."""
    if source == TFDS_SOURCE:
        return source
    folder = Path(source)
    missing = [
        name for images, labels, _ in IDX_FILES.values() for name in (images, labels) if not (folder / name).is_file()
    ]
    if missing:
        raise BakeoffError(
            f"Fashion-MNIST not found in {source!r} (missing {', '.join(missing)}):"
            " install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist)"
            " or pass --source tfds on a machine with internet"
        )
    return source


def read_idx_dir(source: Path) -> dict[str, Split]:
    """The original train/test splits from the four IDX files in ``source``."""
    check_source(str(source))
    splits = {}
    for split, (images_file, labels_file, _) in IDX_FILES.items():
        images = _read_idx(source / images_file, 2051, 3)
        labels = _read_idx(source / labels_file, 2049, 1)
        # Any count (a subset in Fashion-MNIST's own format reads too), but 28x28 images, one label each.
        if images.shape[1:] != IMAGE_SHAPE or labels.shape != images.shape[:1]:
            raise BakeoffError(
                f"{str(source)!r} does not hold Fashion-MNIST's {split} split:"
                f" got images {images.shape}, labels {labels.shape}"
            )
        if labels.max() >= 10:
            raise BakeoffError(f"{str(source / labels_file)!r} has labels outside 0..9")
        splits[split] = Split(images, labels)
    return splits


def read_tfds(data_dir: str | None = None) -> dict[str, Split]:
    """The original splits through TFDS's own download and preparation."""
    import tensorflow_datasets as tfds

    splits = {}
    for split in ("train", "test"):
        images, labels = tfds.as_numpy(
            tfds.load("fashion_mnist", split=split, batch_size=-1, as_supervised=True, data_dir=data_dir)
        )
        splits[split] = Split(images.reshape(-1, *IMAGE_SHAPE).astype(np.uint8), labels.astype(np.uint8))
    return splits


def read_labels(source: Path) -> dict[str, np.ndarray]:
    """The train/test labels from the IDX files in ``source``, each checked against its images file's header (of
    which only the header is read): a listing's cheap read, with read_idx_dir's lines for a wrong file."""
    check_source(str(source))
    splits = {}
    for split, (images_file, labels_file, _) in IDX_FILES.items():
        with gzip.open(source / images_file, "rb") as handle:
            images = _header(source / images_file, handle.read(16), 2051, 3)
        labels = _read_idx(source / labels_file, 2049, 1)
        if tuple(images[1:]) != IMAGE_SHAPE or list(labels.shape) != images[:1]:
            raise BakeoffError(
                f"{str(source)!r} does not hold Fashion-MNIST's {split} split:"
                f" got images {tuple(images)}, labels {labels.shape}"
            )
        if labels.max(initial=0) >= CLASSES:
            raise BakeoffError(f"{str(source / labels_file)!r} has labels outside 0..9")
        splits[split] = labels
    return splits


# The label names as TFDS's fashion_mnist builder declares them (tests/test_sources.py holds them to it): known
# without importing TFDS, so that listing the default source costs its label files alone.
CLASS_NAMES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)


def class_names() -> list[str]:
    """The label names as TFDS's fashion_mnist builder declares them."""
    return list(CLASS_NAMES)


def read(source: str) -> dict[str, Split]:
    """The original train/test splits from ``source``: an IDX folder, or 'tfds' to download."""
    return read_tfds() if source == TFDS_SOURCE else read_idx_dir(Path(source))


def digest(source: str) -> str:
    """A content hash of the files ``source`` names, so a cache keyed on it sees changed files.

    TFDS versions its own downloads, so 'tfds' stands for itself.
    """
    if source == TFDS_SOURCE:
        return TFDS_SOURCE
    folder = Path(source)
    read_idx_dir(folder)  # the same one-line errors as ingest, before any work
    hashed = hashlib.sha256()
    for name in sorted(name for images, labels, _ in IDX_FILES.values() for name in (images, labels)):
        hashed.update(name.encode())
        hashed.update((folder / name).read_bytes())
    return hashed.hexdigest()
