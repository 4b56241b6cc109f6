"""Where a dataset's images come from: one small protocol, one module per kind of source.

A source is read once, by ingest: it lists its classes and splits (labels only, no pixels), then streams
each split's decoded images in an order ingest chooses (or, where it cannot be read out of order, its own).
The kinds, by the ``source`` string that names them:

- ``tfds:NAME[:VERSION][@DATA_DIR]``: a TFDS image-classification builder (tfds.py)
- ``s3://BUCKET/PREFIX``: class folders below an S3 prefix, read with the store's keys (bucket.py)
- a folder of class folders, optionally in train/ validation/ test/ (folder.py)
- a folder of Fashion-MNIST's four IDX files, the offline default; ``tfds`` alone is ``tfds:fashion_mnist`` (idx.py)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import numpy as np

from bakeoff.components import defaults
from bakeoff.components.data import fashion_mnist
from bakeoff.components.errors import BakeoffError

TFDS_PREFIX = "tfds:"
S3_PREFIXES = ("s3://", "minio://")
SPLITS = ("train", "validation", "test")


@dataclasses.dataclass(frozen=True)
class Listing:
    """What a source holds, known before any image is read."""

    class_names: list[str]  # by label
    splits: dict[str, np.ndarray]  # the source's own splits (some of SPLITS, train always): labels, in its fixed order
    skipped: list[str]  # files that are not images, relative to the source, sorted
    any_order: bool  # False: images() streams only its own order (TFDS: shuffled by its builder already)


class Source(Protocol):
    text: str  # the source string it was opened from

    def listing(self) -> Listing: ...

    def images(self, split: str, order: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
        """The split's images at the positions ``order`` of its listing, in that order: (a name for messages, the
        pixels decoded as uint8 [h, w, c])."""
        ...

    def digest(self) -> str:
        """A hash of the source's contents (not their times): it changes when the data does."""
        ...


def open_source(text: str) -> Source:
    """The source ``text`` names; one line if it names none this bakeoff reads (nothing read yet)."""
    from bakeoff.components.data.sources import bucket, folder, idx, tfds

    if text == idx.LEGACY_TFDS:
        return tfds.TfdsSource(f"{TFDS_PREFIX}fashion_mnist", text)
    if text.startswith(TFDS_PREFIX):
        return tfds.TfdsSource(text)
    if text.startswith(S3_PREFIXES):
        return bucket.BucketSource(text)
    path = Path(text)
    if text == defaults.SOURCE or (not path.is_dir() and path.name == Path(defaults.SOURCE).name):
        return idx.IdxSource(text)  # the offline default: its own line says how to install it
    if not path.is_dir():
        raise BakeoffError(
            f"source {text!r} is not a folder, an s3:// prefix or tfds:NAME:"
            " give a folder of class folders, s3://BUCKET/PREFIX/ or tfds:NAME[:VERSION][@DATA_DIR];"
            " for the default Fashion-MNIST, install Debian's dataset-fashion-mnist"
            " (apt-get install dataset-fashion-mnist)"
        )
    if idx.holds_idx_files(path):
        return idx.IdxSource(text)
    return folder.FolderSource(text)


def check_source(text: str) -> str:
    """``text`` if it names a source of a kind this bakeoff reads and, for a folder, one that is there (nothing is read:
    ingest reads it); one line if not."""
    if text.startswith(S3_PREFIXES) and not text.split("://", 1)[1].split("/", 1)[0]:
        raise BakeoffError(f"source {text!r} names no bucket: write s3://BUCKET/PREFIX/")
    from bakeoff.components.data.sources import idx

    source = open_source(text)
    if isinstance(source, idx.IdxSource):
        fashion_mnist.check_source(text)
    return text


def digest(text: str) -> str:
    """The content hash of the source ``text`` names: a run's cache key changes when its data does."""
    return open_source(text).digest()
