"""Class folders below an S3 prefix (``s3://BUCKET/PREFIX/<class>/*.png``) as a source.

Opened as the store is (components/storage: the same keys, endpoint and retried reads), listed once, and read
object by object in parallel, a bounded number in flight: never copied whole first.
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import itertools
from collections.abc import Iterator

import numpy as np

from bakeoff.components import defaults
from bakeoff.components.data.preprocess import decode
from bakeoff.components.data.sources import Listing
from bakeoff.components.data.sources.tree import Tree, layout
from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage import S3Store, open_store


class BucketSource:
    def __init__(self, text: str, readers: int = defaults.SOURCE_READERS) -> None:
        self.text = text.rstrip("/")
        self.readers = readers
        self._store: S3Store | None = None
        self._tree: Tree | None = None
        self._etags: dict[str, str] = {}

    def store(self) -> S3Store:
        """The prefix as a store: its opening fails in one line on missing or refused keys, or no bucket."""
        if self._store is None:
            try:
                store = open_store(self.text)
            except BakeoffError as error:  # the store's line, about the source: not the --store it might be taken for
                raise BakeoffError(f"source {self.text!r}: {error}") from None
            assert isinstance(store, S3Store)
            self._store = store
        return self._store

    def _list(self) -> dict[str, str]:
        """Every object below the prefix, relative, with its ETag (the server's hash of its content)."""
        import minio.error

        store = self.store()
        folder = f"{store.prefix}/" if store.prefix else ""
        try:
            objects = list(store.client.list_objects(store.bucket, prefix=folder, recursive=True))
        except minio.error.S3Error as error:
            raise BakeoffError(
                f"{self.text!r} cannot be listed with these keys ({error.code}):"
                " check the prefix and what AWS_ACCESS_KEY_ID may read"
            ) from None
        listed = {obj.object_name[len(folder) :]: obj.etag or "" for obj in objects if obj.object_name}
        if not listed:
            raise BakeoffError(f"{self.text!r} is empty: upload the class folders there, or check the prefix")
        return listed

    def tree(self) -> Tree:
        if self._tree is None:
            self._etags = self._list()
            self._tree = layout(sorted(self._etags), self.text)
        return self._tree

    def listing(self) -> Listing:
        return self.tree().listing

    def images(self, split: str, order: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
        """Decoded in order, ``readers`` objects fetched at once and at most twice that many held."""
        files, store = self.tree().files[split], self.store()
        ahead = iter([files[position] for position in order])
        with concurrent.futures.ThreadPoolExecutor(self.readers, thread_name_prefix="source") as pool:
            window = collections.deque(
                (name, pool.submit(store.get_bytes, name)) for name in itertools.islice(ahead, 2 * self.readers)
            )
            while window:
                name, read = window.popleft()
                following = next(ahead, None)
                if following is not None:
                    window.append((following, pool.submit(store.get_bytes, following)))
                yield f"{self.text}/{name}", decode(read.result(), f"{self.text}/{name}")

    def digest(self) -> str:
        """Every object's name and ETag: the content hash the server keeps, so nothing is downloaded for it."""
        hashed = hashlib.sha256()
        for name, etag in sorted(self._list().items()):
            hashed.update(f"{name}\0{etag}\0".encode())
        return hashed.hexdigest()
