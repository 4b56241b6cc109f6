"""Image datasets the tests make on disk: an RGB class-folder tree drawn with known classes, and Fashion-MNIST
(or a part of it) as IDX files and as a folder of PNG files.

Shared: any test that needs an RGB artifact writes the tree with ``write_rgb_folder`` and ingests it.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
from PIL import Image

from bakeoff.components.data import fashion_mnist

RGB_CLASSES = ("circle", "square", "stripes")  # each drawn in its own colour on a noisy background


def rgb_image(label: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """One uint8 [size, size, 3] image of class ``label``: a disk (red), a square (green) or stripes (blue), placed
    and sized at random."""
    image = rng.integers(0, 60, (size, size, 3), dtype=np.uint8)
    colour = np.zeros(3, dtype=np.uint8)
    colour[label % 3] = rng.integers(180, 256)
    colour[(label + 1) % 3] = rng.integers(0, 90)
    rows, cols = np.mgrid[:size, :size]
    if label % 3 == 0:
        centre, radius = rng.integers(size // 3, 2 * size // 3, 2), rng.integers(size // 6, size // 3)
        mask = (rows - centre[0]) ** 2 + (cols - centre[1]) ** 2 <= radius**2
    elif label % 3 == 1:
        corner, side = rng.integers(0, size // 2, 2), rng.integers(size // 4, size // 2)
        mask = (rows >= corner[0]) & (rows < corner[0] + side) & (cols >= corner[1]) & (cols < corner[1] + side)
    else:
        mask = (rows // max(size // 8, 1) + rng.integers(0, 2)) % 2 == 0
    image[mask] = colour
    return image


def write_rgb_folder(
    root: Path,
    per_class: int = 12,
    size: int = 32,
    seed: int = 0,
    splits: tuple[str, ...] = (),
    extension: str = "png",
) -> Path:
    """``root/<class>/<n>.<extension>`` (or ``root/<split>/<class>/...`` for each of ``splits``), ``per_class``
    images of each of RGB_CLASSES, each ``size`` x ``size``; returns ``root``."""
    rng = np.random.default_rng(seed)
    for split in splits or ("",):
        for label, name in enumerate(RGB_CLASSES):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(per_class):
                Image.fromarray(rgb_image(label, size, rng)).save(folder / f"{index:05d}.{extension}")
    return root


def _write_idx(path: Path, array: np.ndarray, magic: int) -> None:
    header = struct.pack(f">I{array.ndim}I", magic, *array.shape)
    path.write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes(), compresslevel=1))


def write_fashion_subset(fashion_dir: Path, idx_root: Path, png_root: Path, train: int, test: int) -> None:
    """The first ``train`` and ``test`` examples of Fashion-MNIST, as IDX files in ``idx_root`` and as
    ``png_root/<split>/<label>/<index>.png`` (label folders '0'..'9' sort as the labels do)."""
    splits = fashion_mnist.read_idx_dir(fashion_dir)
    idx_root.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", train), ("test", test)):
        images_file, labels_file, _ = fashion_mnist.IDX_FILES[split]
        images, labels = splits[split].images[:count], splits[split].labels[:count]
        _write_idx(idx_root / images_file, images, 2051)
        _write_idx(idx_root / labels_file, labels, 2049)
        for index, (image, label) in enumerate(zip(images, labels, strict=True)):
            folder = png_root / split / str(label)
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image).save(folder / f"{index:05d}.png")
