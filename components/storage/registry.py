"""Published models: ``models/<name>/<version>/`` in TF-Serving layout, a manifest marking each complete."""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
from pathlib import Path

from bakeoff.components.defaults import PUBLISH_ATTEMPTS
from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage.records import Manifest
from bakeoff.components.storage.store import Store

MANIFEST = "manifest.json"
_VERSION_KEY = re.compile(r"^models/[^/]+/(\d+)/(.+)$")


def check_model_name(name: str) -> str:
    """``name`` if it can name a model in a path and a URL; one clear line if not."""
    if not re.fullmatch(r"[A-Za-z0-9][-A-Za-z0-9_.]*", name):
        raise BakeoffError(f"model name {name!r} is not usable in a path: use letters, digits, '-', '_' and '.'")
    return name


def model_prefix(name: str) -> str:
    return f"models/{check_model_name(name)}"


def _versions(store: Store, name: str) -> dict[int, bool]:
    """Every version number present, mapped to whether its manifest (completeness mark) exists."""
    found: dict[int, bool] = {}
    for key in store.list(model_prefix(name)):
        match = _VERSION_KEY.match(key)
        if match:
            version = int(match.group(1))
            found[version] = found.get(version, False) or match.group(2) == MANIFEST
    return found


def publish(store: Store, name: str, model_dir: Path, manifest: Manifest) -> int:
    """Publishes ``model_dir`` as the next integer version, all or nothing; returns the version.

    Concurrent publishers never share a number: the store's publish refuses
    (FileExistsError) a number another holds, and the loser tries the next.
    """
    with tempfile.TemporaryDirectory(prefix="bakeoff-publish-") as scratch:
        staged = Path(scratch) / "version"
        shutil.copytree(model_dir, staged)
        tried = 0
        for _ in range(PUBLISH_ATTEMPTS):
            # Numbers of incomplete versions are skipped too: they may be another publisher at work.
            # Past the last number tried, too: a claim holds a number before any of its files is listed.
            version = max(max(_versions(store, name), default=0), tried) + 1
            (staged / MANIFEST).write_text(dataclasses.replace(manifest, version=version).to_json())
            try:
                store.publish(staged, f"{model_prefix(name)}/{version}", MANIFEST)
            except FileExistsError:
                tried = version
                continue
            return version
    raise BakeoffError(
        f"could not find a free version number for model {name!r} in {PUBLISH_ATTEMPTS} tries:"
        " check the store, then publish again"
    )


def list_versions(store: Store, name: str) -> list[Manifest]:
    """The manifests of the complete versions of ``name``, oldest first."""
    complete = sorted(version for version, done in _versions(store, name).items() if done)
    keys = [f"{model_prefix(name)}/{version}/{MANIFEST}" for version in complete]
    return [Manifest.from_json(store.get_bytes(key), store.uri_for(key)) for key in keys]
