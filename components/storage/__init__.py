"""Object storage: one small interface (store.py), a folder and an S3 implementation, the model registry."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional
from urllib.parse import urlparse

from components.errors import BakeoffError
from components.storage.folder import FolderStore
from components.storage.s3 import S3_ENDPOINT_ENV, S3_INSECURE_ENV, S3Store
from components.storage.store import Store

__all__ = ["FolderStore", "S3Store", "Store", "S3_ENDPOINT_ENV", "S3_INSECURE_ENV", "open_store"]


def open_store(uri: str, s3_endpoint: Optional[str] = None, s3_insecure: Optional[bool] = None) -> Store:
    """Opens the store a URI names: ``file://DIR``, a plain path, or ``s3://BUCKET/PREFIX``.

    S3 settings come from the arguments, else from the environment, so that
    components and worker processes (which inherit the environment) reach the
    same store as the CLI without credentials ever being parameters.
    """
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        path = uri[len("file://"):] if parsed.scheme == "file" else uri
        if not path:
            raise BakeoffError(f"store {uri!r} names no folder: use file:///path/to/dir or s3://bucket/prefix")
        return FolderStore(Path(path))
    if parsed.scheme in ("s3", "minio"):
        endpoint = s3_endpoint or os.environ.get(S3_ENDPOINT_ENV)
        if not endpoint:
            raise BakeoffError(f"store {uri!r} needs an S3 endpoint: pass --s3-endpoint HOST:PORT or set {S3_ENDPOINT_ENV}")
        if not parsed.netloc:
            raise BakeoffError(f"store {uri!r} names no bucket: use s3://bucket/prefix")
        insecure = s3_insecure if s3_insecure is not None else os.environ.get(S3_INSECURE_ENV, "") in ("1", "true", "yes")
        return S3Store(parsed.netloc, parsed.path, endpoint, secure=not insecure)
    raise BakeoffError(f"store {uri!r} has an unknown scheme {parsed.scheme!r}: use file:///path/to/dir or s3://bucket/prefix")
