"""The store interface: keys below a root URI, atomic publish of a folder."""

from __future__ import annotations

import abc
from collections.abc import Iterator
from pathlib import Path

from bakeoff.components.errors import BakeoffError


class Store(abc.ABC):
    """Keys are '/'-separated paths below the store's root URI."""

    uri: str

    def uri_for(self, key: str) -> str:
        """The URI a user (or KServe) can use to reach ``key``."""
        return f"{self.uri.rstrip('/')}/{key}"

    @abc.abstractmethod
    def put_bytes(self, key: str, data: bytes) -> None:
        """Writes one object."""

    @abc.abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """Reads one object; BakeoffError when it does not exist."""

    @abc.abstractmethod
    def list(self, prefix: str) -> list[str]:
        """All keys below ``prefix`` (recursively), sorted."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool:
        """Whether the object ``key`` exists."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Removes the object ``key``; one that does not exist is no error."""

    @abc.abstractmethod
    def publish(self, local_dir: Path, prefix: str, marker: str) -> None:
        """Makes ``local_dir`` appear under ``prefix`` all at once.

        ``marker`` is a file inside ``local_dir`` that readers take as the sign
        of a complete copy, so it is written last wherever the backend cannot
        make the whole directory appear atomically. Raises FileExistsError
        when ``prefix`` is already taken, or held by a concurrent publisher:
        of any number of concurrent publishes to one prefix, at most one
        succeeds, by the store's own guarantees (a rename, a conditional write).
        """

    def check_writable(self) -> None:  # noqa: B027 (a no-op for stores that cannot tell in advance)
        """Fails with a BakeoffError before any work when nothing can be written here."""

    def put_dir(self, local_dir: Path, prefix: str) -> None:
        """Uploads every file below ``local_dir`` under ``prefix``."""
        for path in files_below(local_dir):
            self.put_bytes(f"{prefix}/{path.relative_to(local_dir).as_posix()}", path.read_bytes())

    def get_dir(self, prefix: str, local_dir: Path) -> Path:
        """Downloads every object below ``prefix`` into ``local_dir``."""
        keys = self.list(prefix)
        if not keys:
            raise BakeoffError(
                f"nothing stored at {self.uri_for(prefix)!r}: check the store URI and the run that wrote it"
            )
        for key in keys:
            target = local_dir / key[len(prefix) :].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.get_bytes(key))
        return local_dir


def files_below(root: Path) -> Iterator[Path]:
    return (path for path in sorted(root.rglob("*")) if path.is_file())
