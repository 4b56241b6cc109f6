"""Object storage: one small interface (store.py), a folder and an S3 implementation, the model registry."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from bakeoff.components import defaults
from bakeoff.components.environment import S3_ENDPOINT_ENV, S3_INSECURE_ENV
from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage.folder import FolderStore
from bakeoff.components.storage.s3 import S3Store
from bakeoff.components.storage.store import Store

__all__ = [
    "FolderStore",
    "S3Store",
    "Store",
    "check_shared",
    "open_store",
    "use_s3_endpoint",
]

NAMESPACE_TOKEN = "{namespace}"  # in a store URI: the namespace of the pod that opens it
POD_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def use_s3_endpoint(endpoint: str) -> None:
    """Makes a pipeline step's ``s3_endpoint`` parameter the endpoint of every store it and its replicas open.

    An empty value keeps the environment's (the local CLI exports its own).
    """
    if endpoint:
        os.environ[S3_ENDPOINT_ENV] = endpoint


def check_shared(uri: str, name: str) -> str:
    """``uri`` if every pod of a run reaches the same store there (S3); one line naming it as ``name`` if not.

    A folder would be each pod's own: what a train step wrote, select would never see.
    """
    parsed = urlparse(uri)
    if parsed.scheme not in ("s3", "minio") or not parsed.netloc:
        raise BakeoffError(
            f"{name} {uri!r} is not one the cluster's steps can reach: write s3://BUCKET/PREFIX"
            f" (default {defaults.CLUSTER_STORE})"
        )
    return uri


def resolve_namespace(uri: str, namespace_file: Path = POD_NAMESPACE_FILE) -> str:
    """``uri`` with ``{namespace}`` replaced by this pod's namespace.

    Multi-user Kubeflow gives each profile store keys that may write only below
    ``private/<namespace>/`` (and ``shared/``), so one compiled default serves
    every profile (and standalone KFP, whose steps run in ``kubeflow``).
    """
    if NAMESPACE_TOKEN not in uri:
        return uri
    try:
        namespace = namespace_file.read_text(encoding="utf-8").strip()
    except OSError:
        namespace = ""
    if not namespace:
        raise BakeoffError(
            f"store {uri!r} names {NAMESPACE_TOKEN}, which only a pod can resolve (no {namespace_file}):"
            " write the namespace into the store URI"
        )
    return uri.replace(NAMESPACE_TOKEN, namespace)


def open_store(uri: str, s3_endpoint: str | None = None, s3_insecure: bool | None = None) -> Store:
    """Opens the store a URI names: ``file://DIR``, a plain path, or ``s3://BUCKET/PREFIX``.

    S3 settings come from the arguments, else from the environment, so that
    components and worker processes (which inherit the environment) reach the
    same store as the CLI without credentials ever being parameters.
    """
    uri = resolve_namespace(uri)
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        path = uri[len("file://") :] if parsed.scheme == "file" else uri
        if not path:
            raise BakeoffError(f"store {uri!r} names no folder: use file:///path/to/dir or s3://bucket/prefix")
        return FolderStore(Path(path))
    if parsed.scheme in ("s3", "minio"):
        endpoint = s3_endpoint or os.environ.get(S3_ENDPOINT_ENV)
        if not endpoint:
            raise BakeoffError(
                f"store {uri!r} needs an S3 endpoint: pass --s3-endpoint HOST:PORT or set {S3_ENDPOINT_ENV}"
            )
        if not parsed.netloc:
            raise BakeoffError(f"store {uri!r} names no bucket: use s3://bucket/prefix")
        insecure = (
            s3_insecure if s3_insecure is not None else os.environ.get(S3_INSECURE_ENV, "") in ("1", "true", "yes")
        )
        return S3Store(parsed.netloc, parsed.path, endpoint, secure=not insecure)
    raise BakeoffError(
        f"store {uri!r} has an unknown scheme {parsed.scheme!r}: use file:///path/to/dir or s3://bucket/prefix"
    )
