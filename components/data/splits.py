"""Which example of a source goes to which split of the artifact, and in which order: decided from the labels alone,
before any image is read.

A split the source lacks is carved from its train split, stratified (each class keeps its share) with the fixed
seed; a source that can be read in any order is read shuffled with the same seed, so every shard mixes the classes
without ingest ever holding more than a shard's images.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from bakeoff.components import defaults
from bakeoff.components.data.sources import SPLITS, Listing
from bakeoff.components.errors import BakeoffError


@dataclasses.dataclass(frozen=True)
class Plan:
    orders: dict[str, np.ndarray]  # source split → its positions, in the order they are read
    routes: dict[str, np.ndarray]  # source split → the artifact's split (an index into SPLITS) of each read example
    counts: dict[str, int]  # the artifact's split → examples
    class_counts: dict[str, list[int]]  # the artifact's split → examples by label
    origins: dict[str, str]  # the artifact's split → where it came from

    def labels(self, source_split: str, listing: Listing) -> np.ndarray:
        return listing.splits[source_split][self.orders[source_split]]


def check_validation_size(size: int, train_examples: int) -> int:
    """``size`` if it leaves examples on both sides of a train split of ``train_examples``; one line if not."""
    if not 0 < size < train_examples:
        raise BakeoffError(f"validation size {size} must be between 1 and {train_examples - 1}")
    return size


def carved_size(validation_size: int, train_examples: int, splits: int) -> int:
    """The examples each of ``splits`` missing splits takes from train: ``validation_size``, unless together they
    would take more than half of train; then ``CARVED_SHARE`` of train each, so that a folder of a few thousand
    images trains on most of them rather than being refused for the default size."""
    if validation_size * splits <= train_examples // 2:
        return validation_size
    return max(1, int(train_examples * defaults.CARVED_SHARE))


def stratified(labels: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """A mask of ``size`` of ``labels``' positions, each class's share of them as near its share of ``labels`` as
    whole numbers allow (largest remainders, ties to the lower label), drawn within each class by ``rng``."""
    classes, counts = np.unique(labels, return_counts=True)
    exact = size * counts / len(labels)
    quotas = np.floor(exact).astype(int)
    for index in np.argsort(-(exact - quotas), kind="stable")[: size - quotas.sum()]:
        quotas[index] += 1
    held = np.zeros(len(labels), dtype=bool)
    for cls, quota in zip(classes, quotas, strict=True):
        positions = np.flatnonzero(labels == cls)
        held[positions[rng.permutation(len(positions))[:quota]]] = True
    return held


def plan(listing: Listing, validation_size: int, seed: int) -> Plan:
    """The plan for ``listing``: its own splits kept, missing ones carved from train (``validation_size`` each)."""
    rng = np.random.default_rng(seed)
    train = listing.splits["train"]
    missing = [split for split in SPLITS[1:] if split not in listing.splits]
    routes = {
        split: np.full(len(labels), SPLITS.index(split), dtype=np.int8) for split, labels in listing.splits.items()
    }
    origins = dict.fromkeys(listing.splits, "the source's own")
    if missing:
        size = carved_size(validation_size, len(train), len(missing))
        check_validation_size(size * len(missing), len(train))
        free = np.ones(len(train), dtype=bool)
        for split in missing:
            positions = np.flatnonzero(free)
            held = positions[stratified(train[positions], size, rng)]
            routes["train"][held] = SPLITS.index(split)
            free[held] = False
            origins[split] = f"{size} carved from train, stratified by class, seed {seed}"
            if size < validation_size:
                origins[split] += f" ({defaults.CARVED_SHARE:.0%} of train's {len(train)}, less than validation_size)"
        origins["train"] = f"the source's own less {' and '.join(missing)}"
    own = [
        split for split in SPLITS if split in listing.splits
    ]  # in SPLITS' order: the draws do not follow a listing's
    orders = {
        split: rng.permutation(len(listing.splits[split]))
        if listing.any_order
        else np.arange(len(listing.splits[split]))
        for split in own
    }
    classes = len(listing.class_names)
    class_counts = {split: [0] * classes for split in SPLITS}
    for split, labels in listing.splits.items():
        for index, name in enumerate(SPLITS):
            counted = np.bincount(labels[routes[split] == index], minlength=classes)
            class_counts[name] = [a + int(b) for a, b in zip(class_counts[name], counted, strict=True)]
    counts = {split: sum(class_counts[split]) for split in SPLITS}
    routed = {split: routes[split][orders[split]] for split in listing.splits}
    return Plan(orders, routed, counts, class_counts, origins)
