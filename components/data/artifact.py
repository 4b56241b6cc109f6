"""The Dataset artifact: any source, split and shuffled by plan, streamed into shards as they fill, fingerprinted,
and read back per worker.

Ingest lists the source first (labels only), so it knows every split's size before it reads an image; then it
reads the images in the planned order, prepares each one (components/data/preprocess.py), and writes a shard as
soon as it is full. It holds at most one shard per split, whatever the dataset's size. Shards are one .npz per
shard, as before: the worker already streams its disjoint shard files through tf.data.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from bakeoff.components import defaults
from bakeoff.components.data import splits as planning
from bakeoff.components.data.fashion_mnist import Split
from bakeoff.components.data.preprocess import NO_RESIZE, check_resize, prepare
from bakeoff.components.data.sources import SPLITS, Listing, open_source
from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage.folder import FolderStore
from bakeoff.components.storage.records import DatasetMetadata, Preprocessing, SkippedFiles
from bakeoff.components.storage.store import Store

logger = logging.getLogger(__name__)

METADATA_FILE = "metadata.json"
PROGRESS_STEPS = 10  # progress lines per ingest: one each tenth of the images


def check_shards(shards: int) -> int:
    """``shards`` if each split can be written as that many files; one line if not."""
    if shards < 1:
        raise BakeoffError(f"shards must be at least 1, got {shards}")
    return shards


def check_image_size(image_size: list) -> list[int]:
    """``image_size`` as [H, W] ([] for the source's own size) if each side is within defaults.IMAGE_SIDES; one line
    if not."""
    low, high = defaults.IMAGE_SIDES
    sides = [int(side) if isinstance(side, float) and side.is_integer() else side for side in image_size]
    if sides and (len(sides) != 2 or not all(type(side) is int and low <= side <= high for side in sides)):
        raise BakeoffError(
            f"image_size {list(image_size)} is out of range:"
            f" give [height, width], each {low} to {high} pixels, or [] for the source's own size"
        )
    return sides


def check_validation_size(size: int, train_examples: int) -> int:
    return planning.check_validation_size(size, train_examples)


def carve_validation(train: Split, size: int, seed: int) -> tuple[Split, Split]:
    """(train, validation) as ingest carves a source's train split without one, both in ``train``'s order."""
    by_class = np.argsort(train.labels, kind="stable")  # the order a listing holds a split in
    held = np.zeros(len(train), dtype=bool)
    held[
        by_class[
            planning.stratified(
                train.labels[by_class], check_validation_size(size, len(train)), np.random.default_rng(seed)
            )
        ]
    ] = True
    return Split(train.images[~held], train.labels[~held]), Split(train.images[held], train.labels[held])


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.npz"


def label_dtype(classes: int) -> type:
    """The shards' label type: the smallest that holds every label (consumers read any integer type)."""
    return np.uint8 if classes <= 256 else np.int32


class _Fingerprint:
    """A content hash of every split, built as the examples are written: the same data gives the same artifact."""

    def __init__(self) -> None:
        self.parts: dict[str, tuple[hashlib._Hash, hashlib._Hash]] = {}

    def add(self, split: str, images: np.ndarray, labels: np.ndarray) -> None:
        pixels, classes = self.parts.setdefault(split, (hashlib.sha256(), hashlib.sha256()))
        pixels.update(np.ascontiguousarray(images).tobytes())
        classes.update(labels.astype(np.int64).tobytes())

    def hexdigest(self) -> str:
        digest = hashlib.sha256()
        for name in sorted(self.parts):
            pixels, classes = self.parts[name]
            digest.update(name.encode() + pixels.digest() + classes.digest())
        return digest.hexdigest()


def fingerprint(splits: dict[str, Split]) -> str:
    """The fingerprint of splits held in memory, equal to the one ingest computes while it writes them."""
    hashed = _Fingerprint()
    for name, split in splits.items():
        hashed.add(name, split.images, split.labels)
    return hashed.hexdigest()


class _ShardWriter:
    """One split's shards, each written once full; sizes as numpy's array_split gives them (the first ones one
    larger)."""

    def __init__(self, out: Path, split: str, count: int, shards: int, shape: tuple[int, ...], labels: type) -> None:
        base, extra = divmod(count, shards)
        self.sizes = [base + (index < extra) for index in range(shards)]
        self.out, self.split, self.shape, self.labels_type = out, split, shape, labels
        self.shard, self.filled = 0, 0
        self.images = np.empty((self.sizes[0], *shape), dtype=np.uint8)
        self.labels: np.ndarray = np.empty(self.sizes[0], dtype=labels)
        self.written: list[Path] = []
        self._flush_empty()

    def add(self, image: np.ndarray, label: int) -> None:
        self.images[self.filled], self.labels[self.filled] = image, label
        self.filled += 1
        if self.filled == self.sizes[self.shard]:
            self._write()

    def _write(self) -> None:
        path = self.out / shard_name(self.split, self.shard, len(self.sizes))
        with open(path, "wb") as file:
            np.savez(file, images=self.images[: self.filled], labels=self.labels[: self.filled])
        self.written.append(path)
        self.shard, self.filled = self.shard + 1, 0
        if self.shard < len(self.sizes) and self.sizes[self.shard] != len(self.labels):
            self.images = np.empty((self.sizes[self.shard], *self.shape), dtype=np.uint8)
            self.labels = np.empty(self.sizes[self.shard], dtype=self.labels_type)
        self._flush_empty()

    def _flush_empty(self) -> None:
        """Shards of no examples (more shards than examples) are written too: every worker finds its files."""
        while self.shard < len(self.sizes) and self.sizes[self.shard] == 0:
            self._write()

    def done(self) -> bool:
        return self.shard == len(self.sizes)


class _Ingest:
    """The state of one ingest: its preprocessing once known, its writers, its counts, its progress lines."""

    def __init__(self, source: str, out: Path, image_size: list[int], shards: int, log: Callable[[str], None]) -> None:
        self.source, self.out, self.image_size, self.shards, self.log = source, out, image_size, shards, log
        self.preprocessing: Preprocessing | None = None
        self.first = ""  # the first image read: named when another one does not match it
        self.writers: dict[str, _ShardWriter] = {}
        self.fingerprint = _Fingerprint()

    def start(self, name: str, image: np.ndarray, plan: planning.Plan, classes: int) -> Preprocessing:
        height, width = self.image_size or image.shape[:2]
        resize = check_resize(defaults.RESIZE) if self.image_size else NO_RESIZE
        self.preprocessing = Preprocessing(int(height), int(width), int(image.shape[2]), resize)
        self.first = name
        shape = (int(height), int(width), int(image.shape[2]))
        for split in SPLITS:
            self.writers[split] = _ShardWriter(
                self.out, split, plan.counts[split], self.shards, shape, label_dtype(classes)
            )
        return self.preprocessing

    def prepared(self, name: str, image: np.ndarray) -> np.ndarray:
        p = self.preprocessing
        assert p is not None
        if not self.image_size and image.shape[:2] != (p.height, p.width):
            raise BakeoffError(
                f"{self.source} holds images of different sizes: {p.height}x{p.width} ({self.first})"
                f" and {image.shape[0]}x{image.shape[1]} ({name}): declare image_size [H, W] to resize them all"
            )
        if image.shape[2] == 3 and p.channels == 1:
            raise BakeoffError(
                f"{self.source} mixes colour and grayscale images: {name} is in colour, the first one read"
                f" ({self.first}) is not: make them all colour or all grayscale"
            )
        return prepare(image, p)

    def written(self) -> list[Path]:
        return [path for writer in self.writers.values() for path in writer.written]


def build(
    source: str,
    out: Path,
    validation_size: int,
    shards: int,
    seed: int,
    image_size: list | tuple = (),
    log: Callable[[str], None] = logger.info,
) -> DatasetMetadata:
    """Builds the artifact of ``source`` in ``out`` and returns its metadata; one line and nothing left in ``out``
    for any bad input.

    ``image_size`` [H, W] resizes every image as it is read; empty keeps the source's own size, which all its
    images must share. ``log`` takes each progress line (by default this module's logger, at INFO).
    """
    check_shards(shards)
    sides = check_image_size(list(image_size))
    opened = open_source(source)
    listing = opened.listing()
    plan = planning.plan(listing, validation_size, seed)
    total = sum(plan.counts.values())
    _log_listing(log, source, listing, plan)
    out.mkdir(parents=True, exist_ok=True)
    ingest = _Ingest(source, out, sides, shards, log)
    try:
        done, began, next_line = 0, time.monotonic(), total // PROGRESS_STEPS
        for split in listing.splits:
            labels, routes = plan.labels(split, listing), plan.routes[split]
            for position, (name, image) in enumerate(opened.images(split, plan.orders[split])):
                if ingest.preprocessing is None:
                    ingest.start(name, image, plan, len(listing.class_names))
                target = SPLITS[routes[position]]
                prepared = ingest.prepared(name, image)
                ingest.writers[target].add(prepared, labels[position])
                ingest.fingerprint.add(target, prepared, labels[position : position + 1])
                done += 1
                if done >= next_line and done < total:
                    rate = done / max(time.monotonic() - began, 1e-9)
                    log(f"ingest: {done}/{total} images read and written ({rate:.0f} images/s)")
                    next_line += max(total // PROGRESS_STEPS, 1)
        assert ingest.preprocessing is not None and all(writer.done() for writer in ingest.writers.values())
        metadata = DatasetMetadata(
            counts=plan.counts,
            shards=shards,
            image_shape=[ingest.preprocessing.height, ingest.preprocessing.width, ingest.preprocessing.channels],
            class_names=listing.class_names,
            fingerprint=ingest.fingerprint.hexdigest(),
            source=source,
            preprocessing=ingest.preprocessing,
            class_counts=plan.class_counts,
            skipped=SkippedFiles(len(listing.skipped), listing.skipped[: defaults.SKIPPED_NAMES]),
            split_origins=plan.origins,
        )
        (out / METADATA_FILE).write_text(metadata.to_json())
    except BaseException:
        for path in [*ingest.written(), out / METADATA_FILE]:
            path.unlink(missing_ok=True)
        raise
    log(f"ingest: {total}/{total} images read and written ({total / max(time.monotonic() - began, 1e-9):.0f} images/s)")
    return metadata


def _log_listing(log: Callable[[str], None], source: str, listing: Listing, plan: planning.Plan) -> None:
    counts = ", ".join(f"{split} {plan.counts[split]}" for split in SPLITS)
    log(f"ingest: {source}: {len(listing.class_names)} classes, {sum(plan.counts.values())} images ({counts})")
    if listing.skipped:
        named = ", ".join(listing.skipped[: defaults.SKIPPED_NAMES])
        more = len(listing.skipped) - defaults.SKIPPED_NAMES
        log(
            f"ingest: skipped {len(listing.skipped)} files that are not images: {named}"
            + (f" and {more} more" if more > 0 else "")
        )


def write(splits: dict[str, Split], out: Path, shards: int, names: list[str], source: str) -> DatasetMetadata:
    """Writes splits held in memory (images [n, H, W] or [n, H, W, C]) as the artifact ingest writes; for tests and
    benchmarks that make their own data."""
    out.mkdir(parents=True, exist_ok=True)
    shape = next(iter(splits.values())).images.shape[1:]
    shape = (*shape, 1) if len(shape) == 2 else tuple(shape)
    hashed = _Fingerprint()
    for split, data in splits.items():
        writer = _ShardWriter(out, split, len(data), shards, shape, label_dtype(len(names)))
        images = data.images.reshape(len(data), *shape)
        for image, label in zip(images, data.labels, strict=True):
            writer.add(image, label)
        hashed.add(split, images, data.labels)
    metadata = DatasetMetadata(
        counts={split: len(data) for split, data in splits.items()},
        shards=shards,
        image_shape=list(shape),
        class_names=names,
        fingerprint=hashed.hexdigest(),
        source=source,
        preprocessing=Preprocessing(shape[0], shape[1], shape[2], NO_RESIZE),
        class_counts={split: np.bincount(data.labels, minlength=len(names)).tolist() for split, data in splits.items()},
        skipped=SkippedFiles(0, []),
        split_origins=dict.fromkeys(splits, "written by the caller"),
    )
    (out / METADATA_FILE).write_text(metadata.to_json())
    return metadata


def read_metadata(store: Store) -> DatasetMetadata:
    return DatasetMetadata.from_json(store.get_bytes(METADATA_FILE), METADATA_FILE)


def shard_keys(store: Store, split: str, index: int = 0, count: int = 1) -> list[str]:
    """The shard files ``index::count`` of ``split``: one worker's (or input pipeline's) disjoint part."""
    shards = read_metadata(store).shards
    if count > shards:
        raise BakeoffError(
            f"{count} workers need at least {count} shards, the dataset has {shards}:"
            " lower workers or re-ingest with more shards"
        )
    return [shard_name(split, shard, shards) for shard in range(index, shards, count)]


def read_shards(store: Store, split: str, index: int = 0, count: int = 1) -> Split:
    """Reads the shards ``index::count`` of ``split``: one worker's disjoint part, whole."""
    parts = []
    for key in shard_keys(store, split, index, count):
        with np.load(io.BytesIO(store.get_bytes(key))) as npz:
            parts.append((npz["images"], npz["labels"]))
    return Split(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def shard_chunks(store: Store, key: str, examples: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The shard ``key``'s images and labels, ``examples`` at a time, in its order.

    A shard in a folder store is read from its file a chunk at a time (np.savez stores its arrays uncompressed, so
    the images' .npy member streams): what is held is a chunk, whatever the shard's size. Elsewhere (S3) the shard
    is fetched whole first, and held while it is read.
    """
    with contextlib.ExitStack() as stack:
        if isinstance(store, FolderStore):
            file: BinaryIO = stack.enter_context(open(store.root / key, "rb"))
        else:
            file = io.BytesIO(store.get_bytes(key))
        archive = stack.enter_context(zipfile.ZipFile(file))
        with archive.open("labels.npy") as member:
            labels = np.lib.format.read_array(member)
        member = stack.enter_context(archive.open("images.npy"))
        version = np.lib.format.read_magic(member)
        header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = header(member)
        if fortran or dtype != np.uint8 or shape[:1] != labels.shape:
            raise BakeoffError(f"{store.uri_for(key)!r} is not a shard ingest wrote: re-ingest the dataset")
        size = int(np.prod(shape[1:], dtype=np.int64))
        for start in range(0, len(labels), examples):
            count = min(examples, len(labels) - start)
            images = np.frombuffer(member.read(count * size), dtype=np.uint8).reshape(count, *shape[1:])
            yield images, labels[start : start + count]
