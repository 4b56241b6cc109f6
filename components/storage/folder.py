"""The embedded default store: a folder on this machine."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage.store import Store


class FolderStore(Store):
    """The embedded default: a folder on this machine (``file://``)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.uri = f"file://{self.root}"

    def check_writable(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tempfile.NamedTemporaryFile(dir=self.root, prefix=".probe-").close()
        except OSError as error:
            raise BakeoffError(
                f"store {self.uri!r} is not writable ({error.strerror}): choose another --store"
            ) from None

    def _path(self, key: str) -> Path:
        return self.root / key

    def put_bytes(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}.partial")
        partial.write_bytes(data)
        os.replace(partial, path)

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise BakeoffError(f"{self.uri_for(key)!r} does not exist: check the store URI") from None

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not base.is_dir() or any(part.startswith(".") for part in base.relative_to(self.root).parts):
            return []
        keys: list[str] = []
        # Hidden entries are other writers' work in flight (staging folders,
        # partial files): never entered, as a staging folder renamed into
        # place mid-walk would make the walk fail.
        for folder, dirs, files in os.walk(base, onerror=_raise_unless_gone):
            dirs[:] = [name for name in dirs if not name.startswith(".")]
            relative = Path(folder).relative_to(self.root)
            keys.extend((relative / name).as_posix() for name in files if not name.startswith("."))
        # Sorted as strings, as S3 lists keys ("a/b.txt" before "a/b/c").
        return sorted(keys)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        path = self._path(key)
        path.unlink(missing_ok=True)
        # Folders left empty go too, as on S3 where a prefix exists only through its objects.
        for folder in path.parents:
            if folder == self.root or not folder.is_relative_to(self.root):
                break
            try:
                folder.rmdir()
            except OSError:  # not empty (or already gone): its objects keep it
                break

    def publish(self, local_dir: Path, prefix: str, marker: str) -> None:
        target = self._path(prefix)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.parent / f".staging-{uuid.uuid4().hex}"
        shutil.copytree(local_dir, staging)
        try:
            # rename(2) onto an existing non-empty directory fails, which is
            # what makes two concurrent publishers pick different versions.
            os.rename(staging, target)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            if target.exists():
                raise FileExistsError(prefix) from None
            raise


def _raise_unless_gone(error: OSError) -> None:
    """os.walk's error hook: a folder removed while listing is simply not listed."""
    if not isinstance(error, FileNotFoundError):
        raise error
