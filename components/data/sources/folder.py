"""A local folder of class folders (``ROOT/<class>/*.png``, or ``ROOT/train/<class>/...``) as a source."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bakeoff.components.data.preprocess import decode
from bakeoff.components.data.sources import Listing
from bakeoff.components.data.sources.tree import Tree, layout
from bakeoff.components.errors import BakeoffError


class FolderSource:
    def __init__(self, text: str) -> None:
        self.text = text
        self.root = Path(text)
        self._tree: Tree | None = None

    def _names(self) -> tuple[list[str], tuple[str, ...]]:
        """Every file below the root, relative, and the folders that hold nothing; hidden names left out."""
        files, empty = [], []
        for folder, dirs, names in os.walk(self.root):
            dirs[:] = [name for name in dirs if not name.startswith(".")]
            relative = Path(folder).relative_to(self.root).as_posix()
            if not dirs and not names and relative != ".":
                empty.append(relative)
            files += [f"{relative}/{name}" if relative != "." else name for name in names if not name.startswith(".")]
        return files, tuple(empty)

    def tree(self) -> Tree:
        if self._tree is None:
            if not self.root.is_dir():
                raise BakeoffError(f"source {self.text!r} is not a folder: give a folder of class folders")
            files, empty = self._names()
            self._tree = layout(files, self.text, empty)
        return self._tree

    def listing(self) -> Listing:
        return self.tree().listing

    def images(self, split: str, order: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
        files = self.tree().files[split]
        for position in order:
            name = f"{self.text}/{files[position]}"
            yield name, decode((self.root / files[position]).read_bytes(), name)

    def digest(self) -> str:
        """Every file's name and bytes, in name order: a changed, added, renamed or removed image changes it."""
        hashed = hashlib.sha256()
        files, empty = self._names()
        for name in sorted([*files, *(f"{folder}/" for folder in empty)]):
            hashed.update(name.encode() + b"\0")
            if not name.endswith("/"):
                hashed.update(hashlib.sha256((self.root / name).read_bytes()).digest())
        return hashed.hexdigest()
