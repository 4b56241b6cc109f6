"""Fashion-MNIST's four IDX files (Debian's dataset-fashion-mnist) as a source: the offline default."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bakeoff.components.data import fashion_mnist
from bakeoff.components.data.sources import Listing

LEGACY_TFDS = fashion_mnist.TFDS_SOURCE  # the source 'tfds' of earlier bakeoffs: tfds:fashion_mnist


def holds_idx_files(folder: Path) -> bool:
    return all((folder / name).is_file() for name in fashion_mnist.IDX_NAMES)


class IdxSource:
    """The 70,000 images are 55 MB: read whole, once, and streamed from memory in any order."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._splits: dict[str, fashion_mnist.Split] | None = None
        self._order: dict[str, np.ndarray] = {}

    def _read(self) -> dict[str, fashion_mnist.Split]:
        if self._splits is None:
            self._splits = fashion_mnist.read_idx_dir(Path(self.text))
        return self._splits

    def listing(self) -> Listing:
        """Each split by class, then by position in the file, as a folder of PNG files named by position lists it.
        Only the label files and the images files' headers are read: the pixels wait for ``images``."""
        splits = {}
        for name, labels in fashion_mnist.read_labels(Path(self.text)).items():
            self._order[name] = np.argsort(labels, kind="stable")
            splits[name] = labels[self._order[name]].astype(np.int64)
        return Listing(fashion_mnist.class_names(), splits, [], any_order=True)

    def images(self, split: str, order: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
        if split not in self._order:
            self.listing()
        images, by_class = self._read()[split].images, self._order[split]
        for position in order:
            yield f"{self.text} {split}[{by_class[position]}]", images[by_class[position]][..., np.newaxis]

    def digest(self) -> str:
        return fashion_mnist.digest(self.text)
