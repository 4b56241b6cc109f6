"""The class-folder layout, shared by a local folder and an S3 prefix: ``<class>/<image>`` files, or the same
below ``train/``, ``validation/`` and ``test/``.

Works on the relative names of the files alone, so the folder and the bucket only list and read.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from bakeoff.components.data.preprocess import EXTENSIONS, is_image_name
from bakeoff.components.data.sources import SPLITS, Listing
from bakeoff.components.errors import BakeoffError

# What a class folder's name may not be: a name that is no folder on some system bakeoff's data travels through
# (an S3 key's empty or dot segment, a control character, a Windows-forbidden one), so the class cannot round-trip.
_BAD_NAME = re.compile(r'[\x00-\x1f\x7f\\<>:"|?*]')


@dataclasses.dataclass(frozen=True)
class Tree:
    """A class-folder layout: its listing, and the file behind each position of each split."""

    listing: Listing
    files: dict[str, list[str]]  # split → the relative names, in the listing's order


def check_class_name(name: str, where: str) -> str:
    """``name`` if it can be a folder's name everywhere; one line naming it if not."""
    if name in ("", ".", "..") or _BAD_NAME.search(name) or name != name.strip() or len(name.encode()) > 255:
        raise BakeoffError(
            f"{where}: class folder {name!r} cannot be a folder name everywhere"
            ' (empty, a dot name, a control or \\<>:"|?* character, spaces around it, or over 255 bytes): rename it'
        )
    return name


def layout(names: list[str], where: str, folders: tuple[str, ...] = ()) -> Tree:
    """The layout of the files ``names`` (relative, '/'-separated) of the source ``where``; one line if it has none.

    ``folders`` adds the source's folders that hold no file at all (a listing of files cannot show them).

    Classes are the class folders' names, sorted (the label is the position); within a class the files are
    sorted by name, so a listing does not depend on the order a file system or bucket lists them.
    """
    top = {name.split("/", 1)[0] for name in names if "/" in name}
    split_layout = bool(top) and top <= set(SPLITS)
    if split_layout and "train" not in top:
        raise BakeoffError(f"{where} has {', '.join(sorted(top))}/ but no train/: add the training images there")
    skipped: list[str] = []
    found: dict[str, dict[str, list[str]]] = {}  # split → class → files
    for name in sorted(names):
        parts = name.split("/")
        split, rest = (parts[0], parts[1:]) if split_layout else ("train", parts)
        if name.endswith("/"):  # an S3 folder marker: a folder, not a file
            continue
        if len(rest) != 2 or not is_image_name(rest[1]):
            skipped.append(name)
            continue
        found.setdefault(split, {}).setdefault(check_class_name(rest[0], where), []).append(name)
    classes = sorted({name for per_class in found.values() for name in per_class})
    if not classes:
        raise BakeoffError(
            f"{where} holds no images in class folders: put each class's {'/'.join(EXTENSIONS)} files in "
            f"{where}/<class>/" + (" (or in train/<class>/ ...)" if not split_layout else "")
        )
    if len(classes) == 1:
        raise BakeoffError(f"{where} holds one class ({classes[0]!r}): a classifier needs at least two class folders")
    _check_no_empty_class([*names, *(f"{folder}/" for folder in folders)], found, split_layout, where)
    missing = [name for name in classes if name not in found["train"]]
    if missing:
        raise BakeoffError(f"{where}/train has no folder of class {missing[0]!r}, which the other splits have: add it")
    files, splits = {}, {}
    for split, per_class in sorted(found.items(), key=lambda item: SPLITS.index(item[0])):
        files[split] = [name for label, cls in enumerate(classes) for name in per_class.get(cls, [])]
        splits[split] = np.concatenate(
            [np.full(len(per_class.get(cls, [])), label, dtype=np.int64) for label, cls in enumerate(classes)]
        )
    return Tree(Listing(classes, splits, skipped, any_order=True), files)


def _check_no_empty_class(
    names: list[str], found: dict[str, dict[str, list[str]]], split_layout: bool, where: str
) -> None:
    """A class folder without images is a mistake worth a line (an empty one, one of .tif or .txt files)."""
    depth = 2 if split_layout else 1
    folders = {"/".join(name.split("/")[:depth]) for name in names if name.count("/") >= depth}
    for folder in sorted(folders):
        split, cls = folder.split("/") if split_layout else ("train", folder)
        if not found.get(split, {}).get(cls):
            raise BakeoffError(
                f"{where}/{folder} holds no images: put its {'/'.join(EXTENSIONS)} files there or remove the folder"
            )
