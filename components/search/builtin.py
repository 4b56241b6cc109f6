"""The built-in searches: which one fits the data's shape and size, as ``bakeoff plan`` names it (``bakeoff run``
trains ``variants.yaml`` unless ``--config`` names one: search_large's backbones download ImageNet weights, which a
machine offline cannot)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bakeoff.components import defaults
from bakeoff.components.search.costs import FASHION_MNIST, Images

SEARCHES = defaults.CONFIG.parent  # beside variants.yaml, the Fashion-MNIST default
SMALL = SEARCHES / "search_small.yaml"  # small grayscale: the seed's CNNs and residual networks
LARGE = SEARCHES / "search_large.yaml"  # larger or colour: residual networks and pretrained backbones
LARGE_SIDE = 64  # pixels: from this side up a Flatten network's dense layer is most of its cost, and ImageNet's
# filters see enough of an image to help


@dataclasses.dataclass(frozen=True)
class Builtin:
    """A built-in search and why it fits the data, as ``bakeoff plan`` says it."""

    path: Path
    reason: str


def builtin_search(images: Images) -> Builtin:
    """The built-in search for ``images``: Fashion-MNIST's own default for it, the small search for other small
    grayscale images, the large one for images of ``LARGE_SIDE`` pixels and up or in colour."""
    height, width, channels = images.shape
    shown = f"{height}x{width}x{channels}, {images.classes} classes, {images.examples} training images"
    if images == FASHION_MNIST:
        return Builtin(defaults.CONFIG, f"Fashion-MNIST ({shown}): its own tuned default")
    if channels == 1 and min(height, width) < LARGE_SIDE:
        return Builtin(SMALL, f"small grayscale images ({shown}): CNNs and residual networks from scratch")
    why = "colour" if channels != 1 else f"{LARGE_SIDE} pixels a side and up"
    return Builtin(LARGE, f"{why} ({shown}): residual networks from scratch and pretrained backbones fine-tuned")
