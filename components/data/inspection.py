"""A source inspected before ingest: its splits' counts as ingest would carve them, one image's shape, its classes.

What a plan prices and what ``run``, ``plan`` and the check step refuse a bad source with: the source's listing
(labels only) and the first image ingest would read, decoded; no other pixels.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

from bakeoff.components import defaults
from bakeoff.components.data import splits as planning
from bakeoff.components.data.sources import S3_PREFIXES, TFDS_PREFIX, check_source, open_source
from bakeoff.components.errors import BakeoffError


@dataclasses.dataclass(frozen=True)
class Inspected:
    """A source as ingest would make it: the examples of each split, one image's [height, width, channels] after
    ``image_size``, the class names."""

    source: str
    counts: dict[str, int]  # the artifact's split → examples, as ingest carves the missing ones
    shape: tuple[int, int, int]
    class_names: list[str]

    @property
    def classes(self) -> int:
        return len(self.class_names)


def inspect(
    source: str,
    image_size: Sequence[int] = (),
    validation_size: int = defaults.VALIDATION_SIZE,
    seed: int = defaults.SEED,
) -> Inspected:
    """``source`` listed and its first image (in ingest's order) decoded; one line for a source ingest would refuse
    on its listing (missing, empty, one class, an empty class folder, an unknown TFDS name, an unreadable prefix).

    The shape is ``image_size``'s [H, W] where given, else the first image's own: ingest refuses a source of
    several sizes without ``image_size``, so a source it ingests has that size throughout. The channels are the
    first image's, as ingest keeps them.
    """
    opened = open_source(check_source(source))
    listing = opened.listing()
    plan = planning.plan(listing, validation_size, seed)
    if not plan.counts["train"]:
        raise BakeoffError(f"{source} has no training images: put images in its class folders")
    _name, first = next(iter(opened.images("train", plan.orders["train"][:1])))
    height, width = (int(side) for side in image_size) if image_size else first.shape[:2]
    return Inspected(source, dict(plan.counts), (height, width, int(first.shape[2])), list(listing.class_names))


def model_name(source: str) -> str:
    """A published model's name taken from ``source``: the dataset's or the folder's (prefix's) last name, in the
    letters a model name may hold; Fashion-MNIST's for the default and ``tfds``."""
    from bakeoff.components.data.sources import idx

    if source in (defaults.SOURCE, idx.LEGACY_TFDS):
        return defaults.MODEL_NAME
    if source.startswith(TFDS_PREFIX):
        name = source[len(TFDS_PREFIX) :].partition("@")[0].partition(":")[0]
    elif source.startswith(S3_PREFIXES):
        name = source.split("://", 1)[1].rstrip("/").rsplit("/", 1)[-1]
    else:
        name = Path(source).resolve().name
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name.replace("_", "-")).strip("-._").lower()
    return slug or defaults.MODEL_NAME
