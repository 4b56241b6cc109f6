"""The built-in searches: which one fits the data's shape and size (what ``bakeoff plan`` prices and ``bakeoff run``
trains without ``--config``), and the pretrained weights a search reads, fetched once before anything is measured."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from bakeoff.components import defaults
from bakeoff.components.errors import BakeoffError
from bakeoff.components.modeling.architectures import ARCHITECTURES
from bakeoff.components.search.costs import FASHION_MNIST, Images
from bakeoff.components.spec import Config

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


def fetched(config: Config, shape: Sequence[int], built_in: bool) -> tuple[Config, str]:
    """``config`` once what its variants read is here (each family's ``fetch``: a backbone's ImageNet weights,
    downloaded once rather than by every replica), and a line on what it left out. A built-in search goes on without
    the variants whose weights cannot be had (a machine offline); a config the user wrote is refused in one line."""
    missing: dict[str, str] = {}
    tried: dict[tuple[str, str], str | None] = {}  # one download per distinct model
    for variant in config.variants:
        model = variant.model_config()
        key = (variant.architecture, repr(model))  # a config may hold lists: not hashable
        if key not in tried:
            tried[key] = ARCHITECTURES[variant.architecture].fetch(model, shape)
        if tried[key] is not None:
            missing[variant.name] = str(tried[key])
    if not missing:
        return config, ""
    name, why = next(iter(missing.items()))
    if not built_in:
        raise BakeoffError(
            f"{config.source}: variant {name!r}: its pretrained weights cannot be had here ({why}):"
            " let it download them once into ~/.keras/models, or set model.weights to none or a weights file"
            " (docs/models.md)"
        )
    keep = [variant for variant in config.variants if variant.name not in missing]
    config = dataclasses.replace(
        config, variants=keep, expansions={variant.name: config.expansions[variant.name] for variant in keep}
    )
    return config, (
        f"search: {', '.join(missing)} left out: pretrained weights cannot be had here ({why}); put them in"
        " ~/.keras/models, or bake them into the image (docs/models.md)"
    )
