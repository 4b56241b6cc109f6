"""An S3 bucket as a store, through the minio client."""
from __future__ import annotations

import io
import os
from pathlib import Path

from components.defaults import S3_REGION
from components.errors import BakeoffError
from components.storage.store import Store, files_below

S3_ENDPOINT_ENV = "BAKEOFF_S3_ENDPOINT"
S3_INSECURE_ENV = "BAKEOFF_S3_INSECURE"
S3_REGION_ENV = "BAKEOFF_S3_REGION"


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
        # A stated region: otherwise minio asks GetBucketLocation first, which multi-user
        # Kubeflow's per-profile keys are not granted.
        region = os.environ.get(S3_REGION_ENV) or S3_REGION
        self.client = minio.Minio(endpoint, access_key=access_key, secret_key=secret_key, secure=secure, region=region, http_client=http)
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
        # A prefix names a folder, as in the folder store: "a" must not match
        # "ab/...", and "" (the whole store) must not become "<prefix>//".
        folder = "/".join(part for part in (self.prefix, prefix.strip("/")) if part)
        objects = self.client.list_objects(self.bucket, prefix=f"{folder}/" if folder else "", recursive=True)
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
        for path in files_below(local_dir):
            name = path.relative_to(local_dir).as_posix()
            if name != marker:
                self.put_bytes(f"{prefix}/{name}", path.read_bytes())
        self.put_bytes(f"{prefix}/{marker}", (local_dir / marker).read_bytes())
