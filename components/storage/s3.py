"""An S3 bucket as a store, through the minio client: passing faults retried, uploads checked, versions claimed."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bakeoff.components import defaults
from bakeoff.components.defaults import S3_REGION
from bakeoff.components.environment import (
    ACCESS_KEY_ENV,
    S3_ENDPOINT_ENV,
    S3_REGION_ENV,
    SECRET_KEY_ENV,
)
from bakeoff.components.errors import BakeoffError
from bakeoff.components.retry import Backoff, retrying
from bakeoff.components.storage.store import Store, files_below

logger = logging.getLogger(__name__)

# Who holds each published prefix, under the store's root: hidden from list() (as the folder store hides
# dot names) and outside every prefix a reader downloads (KServe copies all of models/<name>/).
CLAIMS = ".claims"
OWNER = "owner"  # the claim object of a create-only claim; tokens of claims by listing are hex, never this
# A create-only put: the server refuses it (412) when the key exists.
CREATE_ONLY = {"If-None-Match": "*"}
# S3 error codes that say "try again": a server restarting, overloaded, or a conditional write racing another.
TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "RequestTimeout",
        "ConditionalRequestConflict",
        "XMinioServerNotInitialized",
    }
)

# S3 error codes that say the keys themselves are wrong (unknown, or the secret does not match).
CREDENTIAL_CODES = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"})

T = TypeVar("T")


class UploadMismatch(Exception):
    """What the server stored is not what was sent (a transient fault: the upload is repeated)."""


def _log_retry(line: str) -> None:
    logger.warning("bakeoff: %s", line)


class S3Store(Store):
    """Any S3-compatible server (MinIO, SeaweedFS, AWS) through the minio client.

    Every request that fails for a passing reason (connection refused or reset,
    a timeout, a 5xx, an upload that did not arrive whole) is repeated with
    growing pauses for up to ``retry_seconds`` after its first failure; then it
    fails with one BakeoffError line. Requests the server refuses (4xx) fail at once.
    """

    def __init__(
        self, bucket: str, prefix: str, endpoint: str, secure: bool, retry_seconds: float = defaults.S3_RETRY_SECONDS
    ) -> None:
        import minio
        import urllib3

        access_key = os.environ.get(ACCESS_KEY_ENV)
        secret_key = os.environ.get(SECRET_KEY_ENV)
        if not access_key or not secret_key:
            raise BakeoffError(
                "S3 credentials missing: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment"
            )
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.uri = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self.endpoint = endpoint
        self.retry_seconds = retry_seconds
        self.report: Callable[[str], None] = _log_retry  # where each retry is announced, one line each
        self._create_only: bool | None = None  # whether the server honours CREATE_ONLY; probed at the first publish
        # urllib3 retries nothing: one loop (_call) retries everything, under one bound.
        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=defaults.S3_CONNECT_TIMEOUT, read=defaults.S3_READ_TIMEOUT), retries=False
        )
        # A stated region: otherwise minio asks GetBucketLocation first, which multi-user
        # Kubeflow's per-profile keys are not granted.
        region = os.environ.get(S3_REGION_ENV) or S3_REGION
        self.client = minio.Minio(
            endpoint, access_key=access_key, secret_key=secret_key, secure=secure, region=region, http_client=http
        )
        self._check(endpoint)

    def _check(self, endpoint: str) -> None:
        """Fails in one line unless these keys may list below the store's prefix on a live S3 endpoint.

        A listing of the prefix, not a HEAD of the bucket: multi-user Kubeflow's profile keys
        may list and write below ``private/<namespace>/`` but, on KFP 2.15/2.16 and on 2.17
        until a new profile sets its bucket policy, nothing on the bucket itself. A wrong
        endpoint, bad keys and a missing bucket are still told apart (where the keys may know).
        """
        import minio.error
        import urllib3.exceptions

        folder = f"{self.prefix}/" if self.prefix else ""
        # Not retried: at start, an endpoint that does not answer is far more often a wrong one than an outage.
        try:
            # Not recursive: one request, whose answer is at most the prefix's top level.
            next(iter(self.client.list_objects(self.bucket, prefix=folder)), None)
        except ValueError as error:
            raise BakeoffError(f"S3 endpoint {endpoint!r} is invalid ({error}): give host:port") from None
        except urllib3.exceptions.HTTPError as error:
            raise BakeoffError(
                f"S3 endpoint {endpoint!r} is unreachable ({_reason(error)}): "
                f"check --s3-endpoint/{S3_ENDPOINT_ENV} and --s3-insecure for plain HTTP"
            ) from None
        except minio.error.S3Error as error:
            if error.code == "NoSuchBucket":
                raise BakeoffError(f"bucket {self.bucket!r} does not exist on {endpoint!r}: create it first") from None
            if error.code in CREDENTIAL_CODES:
                raise BakeoffError(
                    f"S3 endpoint {endpoint!r} refused the credentials ({error.code}): "
                    "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
                ) from None
            raise BakeoffError(
                f"S3 endpoint {endpoint!r} refused these keys a listing of {self.uri!r} ({error.code}): "
                "check the bucket and prefix of the store URI"
                f" (a Kubeflow profile's keys may use {defaults.CLUSTER_STORE}) and what the keys may do there"
            ) from None
        except minio.error.MinioException as error:
            raise BakeoffError(
                f"S3 endpoint {endpoint!r} failed ({_reason(error)}): check that it is an S3 server and up"
            ) from None

    def _object(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, action: str, key: str, request: Callable[[], T], expected: tuple[str, ...] = ()) -> T:
        """Runs one request, retrying passing faults with growing pauses for up to ``retry_seconds``.

        S3 errors whose code is in ``expected`` are the caller's to handle and pass through as they are.
        """
        import minio.error

        def passing(error: Exception) -> bool:
            return not (isinstance(error, minio.error.S3Error) and error.code in expected) and _transient(error)

        def announce(error: Exception, wait: float) -> None:
            self.report(f"S3 {action} of {self.uri_for(key)} failed ({_reason(error)}): retrying in {wait:.1f} s")

        def give_up(error: Exception, attempts: int) -> BakeoffError:
            return BakeoffError(
                f"S3 {action} of {self.uri_for(key)!r} still failed after {self.retry_seconds:g} s of retries"
                f" ({_reason(error)}): check that {self.endpoint} is up, then run again"
            )

        backoff = Backoff(
            first=defaults.S3_RETRY_FIRST_PAUSE, longest=defaults.S3_RETRY_MAX_PAUSE, seconds=self.retry_seconds
        )
        try:
            return retrying(request, passing, backoff, announce, give_up)
        except minio.error.MinioException as error:
            if isinstance(error, minio.error.S3Error) and error.code in expected:
                raise
            raise BakeoffError(
                f"S3 {action} of {self.uri_for(key)!r} was refused ({_reason(error)}):"
                " check the store URI and what these keys may do there"
            ) from None

    def _put_checked(self, name: str, data: bytes) -> None:
        """One upload, checked: the ETag of a single-part put is the MD5 of what the server stored."""
        result = self.client.put_object(self.bucket, name, io.BytesIO(data), len(data))
        self._verify(name, data, result.etag)

    def _verify(self, name: str, data: bytes, etag: str | None) -> None:
        if etag == hashlib.md5(data, usedforsecurity=False).hexdigest():
            return
        # A multipart upload's ETag is no MD5 of the whole, nor is an encrypting server's: the size must do.
        size = self.client.stat_object(self.bucket, name).size
        if size != len(data):
            raise UploadMismatch(f"the server stored {size} of {len(data)} bytes")

    def put_bytes(self, key: str, data: bytes) -> None:
        self._call("put", key, lambda: self._put_checked(self._object(key), data))

    def _read(self, name: str) -> bytes:
        response = self.client.get_object(self.bucket, name)
        try:
            return response.read()  # urllib3 checks the length: a body cut short raises, and is retried
        finally:
            response.close()
            response.release_conn()

    def get_bytes(self, key: str) -> bytes:
        import minio.error

        try:
            return self._call("get", key, lambda: self._read(self._object(key)), expected=("NoSuchKey",))
        except minio.error.S3Error:
            raise BakeoffError(f"{self.uri_for(key)!r} does not exist: check the store URI") from None

    def _list_all(self, prefix: str) -> list[str]:
        """Every key below ``prefix`` relative to the store's root, hidden ones too."""
        start = len(self.prefix) + 1 if self.prefix else 0
        # A prefix names a folder, as in the folder store: "a" must not match
        # "ab/...", and "" (the whole store) must not become "<prefix>//".
        folder = "/".join(part for part in (self.prefix, prefix.strip("/")) if part)
        names = self._call(
            "list",
            prefix,
            lambda: [
                obj.object_name
                for obj in self.client.list_objects(self.bucket, prefix=f"{folder}/" if folder else "", recursive=True)
            ],
        )
        return sorted(name[start:] for name in names)

    def list(self, prefix: str) -> list[str]:
        # Dot names are bookkeeping (claims, probes), hidden as the folder store hides its staging folders.
        return [key for key in self._list_all(prefix) if not any(part.startswith(".") for part in key.split("/"))]

    def exists(self, key: str) -> bool:
        import minio.error

        try:
            self._call(
                "stat",
                key,
                lambda: self.client.stat_object(self.bucket, self._object(key)),
                expected=("NoSuchKey", "NotFound"),
            )
        except minio.error.S3Error:
            return False
        return True

    def delete(self, key: str) -> None:
        self._call("delete", key, lambda: self.client.remove_object(self.bucket, self._object(key)))

    def _create(self, key: str, data: bytes) -> bool:
        """Writes ``key`` only if it does not exist yet (where the server honours CREATE_ONLY); whether this call
        wrote it."""
        import minio.error

        attempts = 0

        def request() -> bool:
            nonlocal attempts
            attempts += 1
            name = self._object(key)
            try:
                # Private: minio 7.2.20's put_object takes no headers and would send If-None-Match as x-amz-meta-*.
                result = self.client._put_object(self.bucket, name, data, headers=dict(CREATE_ONLY))
            except minio.error.S3Error as error:
                if error.code == "PreconditionFailed" or error.response.status == 412:
                    return False
                raise
            except minio.error.ServerError as error:  # a 412 without a body
                if error.status_code == 412:
                    return False
                raise
            self._verify(name, data, result.etag)
            return True

        created = self._call("create", key, request)
        if not created and attempts > 1:
            # An earlier attempt may have written it and lost only the answer: then it holds our bytes.
            return self._call("get", key, lambda: self._read(self._object(key))) == data
        return created

    def honours_create_only(self) -> bool:
        """Whether the server refuses to overwrite on a create-only put (S3 conditional writes).

        SeaweedFS (KFP 2.16+), AWS and MinIO since 2024 do; MinIO RELEASE.2019-08-14
        (KFP 2.14/2.15) ignores the header and overwrites. Asked once per store, by
        creating a probe object twice.
        """
        if self._create_only is None:
            probe = f"{CLAIMS}/probe-{uuid.uuid4().hex}"
            self._create_only = self._create(probe, b"first") and not self._create(probe, b"second")
            self._tidy(probe)
        return self._create_only

    def _tidy(self, key: str) -> None:
        """Deletes a bookkeeping object (a probe, a released claim) where these keys may: left, no listing shows it."""
        import minio.error

        try:
            self._call(
                "delete",
                key,
                lambda: self.client.remove_object(self.bucket, self._object(key)),
                expected=("AccessDenied",),
            )
        except (BakeoffError, minio.error.S3Error):  # what it failed to do is housekeeping, never the caller's work
            pass

    def _claim(self, prefix: str) -> str | None:
        """The key of this publisher's claim on ``prefix``, or None when another publisher holds it (see publish)."""
        claims = f"{CLAIMS}/{prefix.strip('/')}"
        if self.honours_create_only():
            owner = f"{claims}/{OWNER}"
            return owner if self._create(owner, uuid.uuid4().hex.encode()) else None
        mine = f"{claims}/{uuid.uuid4().hex}"
        self.put_bytes(mine, b"")
        if self._list_all(claims) == [mine]:
            return mine
        # Another claim is there: yield. Removing ours lets a later publisher have the number should every claimant
        # yield.
        self.delete(mine)
        return None

    def publish(self, local_dir: Path, prefix: str, marker: str) -> None:
        """Claims ``prefix``, then writes every file, the marker last; FileExistsError when another publisher holds it.

        S3 has no atomic rename, so publishers first claim the prefix under the hidden
        ``.claims/<prefix>/``:

        - where the server honours create-only puts (``If-None-Match: *``), the claim is
          a create-only put of ``owner``: of any number of publishers, exactly one gets it;
        - where it does not (MinIO 2019 overwrites), each publisher writes a claim under a
          key of its own, then lists the claims, and holds the prefix only if it sees no
          other (an ``owner`` too). S3 and MinIO list every object whose write finished
          before the listing began, so of two claimants the later writer sees the earlier
          claim and yields: at most one holds a prefix. Both may yield; each then tries
          the next number, so numbers may be skipped but never shared.

        A held claim is released once the prefix holds files (the marker written, or
        another writer's leftovers found): from then on those files refuse the prefix to
        any later claimant. A publisher that dies midway keeps its claim, so its number
        stays taken; it leaves files but never the marker, so no reader takes them for a
        version.
        """
        claim = self._claim(prefix)
        if claim is None:
            raise FileExistsError(prefix)
        # Objects that a writer without claims left (an older bakeoff's crash) would mix with ours.
        if self.list(prefix):
            self._tidy(claim)
            raise FileExistsError(prefix)
        for path in files_below(local_dir):
            name = path.relative_to(local_dir).as_posix()
            if name != marker:
                self.put_bytes(f"{prefix}/{name}", path.read_bytes())
        self.put_bytes(f"{prefix}/{marker}", (local_dir / marker).read_bytes())
        self._tidy(claim)


def _transient(error: Exception) -> bool:
    """Whether ``error`` may pass by itself: the request is worth repeating."""
    import minio.error
    import urllib3.exceptions

    if isinstance(error, UploadMismatch):
        return True
    if isinstance(error, urllib3.exceptions.HTTPError):  # refused, reset, timed out, cut short
        return not isinstance(error, ValueError)  # a malformed URL stays malformed
    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    if isinstance(error, minio.error.S3Error):
        return error.code in TRANSIENT_CODES or error.response.status >= 500
    if isinstance(error, minio.error.ServerError):
        return error.status_code >= 500
    if isinstance(error, minio.error.InvalidResponseError):  # an error page, as a proxy or a starting server sends
        return getattr(error, "_code", 0) >= 500
    return False


def _reason(error: BaseException) -> str:
    """The cause of a failure in a few words: 'Connection refused', 'InternalError', 'HTTP 503'."""
    import minio.error

    if isinstance(error, minio.error.S3Error):
        return error.code or "an S3 error"
    if isinstance(error, minio.error.ServerError):
        return f"HTTP {error.status_code}"
    if isinstance(error, minio.error.InvalidResponseError):
        return f"HTTP {getattr(error, '_code', '?')}"
    # urllib3 wraps the socket's error, sometimes twice: the innermost says what happened.
    cause: BaseException | None = error
    last, seen = error, set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        last = cause
        nested = (getattr(cause, "reason", None), cause.__cause__, cause.__context__, *cause.args)
        cause = next((item for item in nested if isinstance(item, BaseException)), None)
    text = str(last).strip().splitlines()
    return text[0] if text else type(last).__name__
