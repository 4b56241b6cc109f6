"""Where served versions come from: a folder in TF Serving's layout or bakeoff's registry in a store, and which to
serve first."""

from __future__ import annotations

import abc
import hashlib
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path

from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage import Store, registry
from bakeoff.components.storage.records import Manifest

_MANIFEST_KEY = re.compile(rf"/(\d+)/{re.escape(registry.MANIFEST)}$")


def read_manifest(folder: Path) -> Manifest | None:
    """The manifest beside the SavedModel in ``folder``; None where there is none this bakeoff can read."""
    manifest = folder / registry.MANIFEST
    try:
        return Manifest.from_json(manifest.read_text(), str(manifest))
    except (OSError, ValueError, BakeoffError):  # ValueError: not text
        return None


class Source(abc.ABC):
    """Where versions come from: their numbers, and a local folder for each."""

    description: str

    @abc.abstractmethod
    def versions(self) -> list[int]:
        """The complete versions (those whose manifest exists), oldest first."""

    @abc.abstractmethod
    def fetch(self, number: int) -> Path:
        """A local folder holding version ``number``'s SavedModel."""

    def release(self, number: int) -> None:  # noqa: B027 (a no-op unless the source keeps copies)
        """Forgets the local copy of a version no longer served."""


class FolderSource(Source):
    """TF Serving's layout on disk, ``DIR/<version>/``; or DIR itself holding one SavedModel."""

    def __init__(self, model_dir: Path) -> None:
        if not model_dir.is_dir():
            raise BakeoffError(
                f"model folder {str(model_dir)!r} does not exist: pass the folder that holds <version>/ folders"
            )
        self.root = model_dir
        self.description = str(model_dir)

    def _single(self) -> bool:
        return (self.root / "saved_model.pb").is_file()

    def versions(self) -> list[int]:
        if self._single():
            manifest = read_manifest(self.root)
            # a bare SavedModel (or one beside a manifest this bakeoff cannot read): one version, whatever its number
            return [0 if manifest is None else manifest.version]
        return sorted(
            int(entry.name)
            for entry in self.root.iterdir()
            if entry.name.isdigit() and (entry / registry.MANIFEST).is_file()
        )

    def fetch(self, number: int) -> Path:
        return self.root if self._single() else self.root / str(number)


class StoreSource(Source):
    """bakeoff's registry in a store, each version downloaded whole into ``cache`` before it is loaded."""

    def __init__(self, store: Store, name: str, cache: Path | None) -> None:
        self.store, self.prefix = store, registry.model_prefix(name)
        self.description = store.uri_for(self.prefix)
        self.owned = cache is None  # a temporary cache is emptied as versions are replaced, and removed at exit
        base = Path(tempfile.mkdtemp(prefix="bakeoff-serving-")) if cache is None else cache
        # Keyed by store and name: one cache folder may serve several stores without mixing their version numbers.
        self.cache = base / hashlib.sha256(self.description.encode()).hexdigest()[:16]

    def versions(self) -> list[int]:
        # One listing per poll (not a GET per manifest): the manifest, written last, marks a complete version.
        return sorted(
            {int(match.group(1)) for key in self.store.list(self.prefix) if (match := _MANIFEST_KEY.search(key))}
        )

    def fetch(self, number: int) -> Path:
        target = self.cache / str(number)
        if not target.is_dir():
            staging = self.cache / f".download-{uuid.uuid4().hex}"
            try:
                self.store.get_dir(f"{self.prefix}/{number}", staging)
                os.rename(staging, target)  # a folder that exists is a whole copy
            except OSError:
                if not target.is_dir():
                    raise
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        return target

    def release(self, number: int) -> None:
        if self.owned:
            shutil.rmtree(self.cache / str(number), ignore_errors=True)

    def close(self) -> None:
        if self.owned:
            shutil.rmtree(self.cache.parent, ignore_errors=True)


def choose(source: Source, version: int | None) -> int:
    """The version to serve first: ``version``, or the newest complete one."""
    complete = source.versions()
    if not complete:
        raise BakeoffError(
            f"no published version in {source.description} (a version is complete once its {registry.MANIFEST} exists):"
            " publish one with `bakeoff run`"
        )
    if version is None:
        return complete[-1]
    if version not in complete:
        raise BakeoffError(
            f"version {version} is not published in {source.description}: choose one of {', '.join(map(str, complete))}"
        )
    return version
