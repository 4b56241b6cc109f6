"""Object storage behind one small interface: a folder or an S3 bucket."""
from __future__ import annotations

import abc
import io
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Iterator, Optional
from urllib.parse import urlparse

from components.errors import BakeoffError

S3_ENDPOINT_ENV = "BAKEOFF_S3_ENDPOINT"
S3_INSECURE_ENV = "BAKEOFF_S3_INSECURE"
DEFAULT_STORE = "file://./bakeoff-store"


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
    def publish(self, local_dir: Path, prefix: str, marker: str) -> None:
        """Makes ``local_dir`` appear under ``prefix`` all at once.

        ``marker`` is a file inside ``local_dir`` that readers take as the sign
        of a complete copy, so it is written last wherever the backend cannot
        make the whole directory appear atomically. Raises FileExistsError
        when ``prefix`` is already taken.
        """

    def check_writable(self) -> None:
        """Fails with a BakeoffError before any work when nothing can be written here."""

    def put_dir(self, local_dir: Path, prefix: str) -> None:
        """Uploads every file below ``local_dir`` under ``prefix``."""
        for path in _files_below(local_dir):
            self.put_bytes(f"{prefix}/{path.relative_to(local_dir).as_posix()}", path.read_bytes())

    def get_dir(self, prefix: str, local_dir: Path) -> Path:
        """Downloads every object below ``prefix`` into ``local_dir``."""
        keys = self.list(prefix)
        if not keys:
            raise BakeoffError(f"nothing stored at {self.uri_for(prefix)!r}: check the store URI and the run that wrote it")
        for key in keys:
            target = local_dir / key[len(prefix):].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.get_bytes(key))
        return local_dir


def _files_below(root: Path) -> Iterator[Path]:
    return (path for path in sorted(root.rglob("*")) if path.is_file())


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
        if not base.is_dir():
            return []
        return [
            path.relative_to(self.root).as_posix()
            for path in _files_below(base)
            if not any(part.startswith(".") for part in path.relative_to(self.root).parts)
        ]

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

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


class S3Store(Store):
    """Any S3-compatible server (MinIO, SeaweedFS, AWS) through the minio client."""

    def __init__(self, bucket: str, prefix: str, endpoint: str, secure: bool) -> None:
        import minio
        import urllib3

        access_key = os.environ.get("AWS_ACCESS_KEY_ID")
        secret_key = os.environ.get("AWS_SECRET_ACCESS_KEY")
        if not access_key or not secret_key:
            raise BakeoffError(
                "S3 credentials missing: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment"
            )
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.uri = f"s3://{bucket}/{self.prefix}".rstrip("/")
        # Short timeouts and few retries: an unreachable endpoint must be
        # reported in seconds, not after urllib3's default minutes of retries.
        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=5, read=60),
            retries=urllib3.Retry(total=2, connect=1, backoff_factor=0.5, status_forcelist=(500, 502, 503, 504)),
        )
        self.client = minio.Minio(endpoint, access_key=access_key, secret_key=secret_key, secure=secure, http_client=http)
        self._check(endpoint)

    def _check(self, endpoint: str) -> None:
        import minio.error
        import urllib3.exceptions

        try:
            found = self.client.bucket_exists(self.bucket)
        except urllib3.exceptions.HTTPError as error:
            reason = getattr(error, "reason", None) or error
            raise BakeoffError(
                f"S3 endpoint {endpoint!r} is unreachable ({reason}): check --s3-endpoint/{S3_ENDPOINT_ENV}"
                f" and --s3-insecure for plain HTTP"
            ) from None
        except minio.error.S3Error as error:
            raise BakeoffError(
                f"S3 endpoint {endpoint!r} refused the credentials ({error.code}): check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            ) from None
        except ValueError as error:
            raise BakeoffError(f"S3 endpoint {endpoint!r} is invalid ({error}): give host:port") from None
        if not found:
            raise BakeoffError(f"bucket {self.bucket!r} does not exist on {endpoint!r}: create it first")

    def _object(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put_bytes(self, key: str, data: bytes) -> None:
        self.client.put_object(self.bucket, self._object(key), io.BytesIO(data), len(data))

    def get_bytes(self, key: str) -> bytes:
        import minio.error

        try:
            response = self.client.get_object(self.bucket, self._object(key))
        except minio.error.S3Error as error:
            if error.code == "NoSuchKey":
                raise BakeoffError(f"{self.uri_for(key)!r} does not exist: check the store URI") from None
            raise
        try:
            return response.read()
        finally:
            response.close()
            response.release_conn()

    def list(self, prefix: str) -> list[str]:
        start = len(self.prefix) + 1 if self.prefix else 0
        objects = self.client.list_objects(self.bucket, prefix=self._object(prefix.rstrip("/") + "/"), recursive=True)
        return sorted(obj.object_name[start:] for obj in objects)

    def exists(self, key: str) -> bool:
        import minio.error

        try:
            self.client.stat_object(self.bucket, self._object(key))
        except minio.error.S3Error as error:
            if error.code in ("NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def publish(self, local_dir: Path, prefix: str, marker: str) -> None:
        if self.list(prefix):
            raise FileExistsError(prefix)
        # S3 has no atomic rename: everything but the marker goes first, so a
        # crash midway leaves objects that no reader takes for a version.
        for path in _files_below(local_dir):
            name = path.relative_to(local_dir).as_posix()
            if name != marker:
                self.put_bytes(f"{prefix}/{name}", path.read_bytes())
        self.put_bytes(f"{prefix}/{marker}", (local_dir / marker).read_bytes())


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
