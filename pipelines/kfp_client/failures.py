"""Failures of the KFP API or of the network on the way, each turned into one line that says what to do."""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import Iterator
from typing import Any

from bakeoff.components.errors import BakeoffError
from bakeoff.pipelines.kfp_client.endpoint import (
    CONNECT_TIMEOUT_S,
    CREDENTIALS_HINT,
    REACH_HINT,
    READ_TIMEOUT_S,
    Target,
)


def server_message(body: Any) -> str:
    """The one-line reason inside an error body (grpc-gateway's ``message`` or the upload server's
    ``error_message``)."""
    try:
        document = json.loads(body)
    except (TypeError, ValueError):
        # The upload handler answers some refusals with Go's http.Error: the message as plain text
        # (pipeline_upload_server.go, e.g. a pipeline name past validation.ValidateFieldLength's limit).
        text = body.decode(errors="replace") if isinstance(body, bytes) else body if isinstance(body, str) else ""
        first = text.strip().splitlines()[0] if text.strip() else ""
        return "" if first.lstrip().startswith("<") else _one_line(first)  # an HTML page says nothing here
    if not isinstance(document, dict):
        return ""
    return _one_line(str(document.get("message") or document.get("error_message") or document.get("error") or ""))


def _one_line(message: str) -> str:
    message = " ".join(message.split())
    return message if len(message) <= 300 else message[:297] + "..."


# The upload handler's whole answer when KFP's authorization refuses an upload (400, not 403): writeErrorToResponse
# after canUploadVersionedPipeline in backend/src/apiserver/server/pipeline_upload_server.go (2.15.0-2.17.0). The
# same words follow a failed store write (500), which is why only a 400 is read as a refusal.
UPLOAD_DENIED = ("Failed to create a pipeline", "Failed to create a pipeline version")


def _network_reason(error: BaseException) -> str:
    import urllib3.exceptions as e

    if isinstance(error, e.MaxRetryError) and error.reason is not None:
        error = error.reason
    if isinstance(error, e.NameResolutionError):
        return "unknown host name"
    if isinstance(error, e.NewConnectionError):
        cause = error.__cause__ or error.__context__
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror.lower()
        return "no connection"
    if isinstance(error, e.ConnectTimeoutError):
        return f"no connection within {CONNECT_TIMEOUT_S:g} s"
    if isinstance(error, e.ReadTimeoutError):
        return f"no answer within {READ_TIMEOUT_S:g} s"
    if isinstance(error, e.ProtocolError):
        return "the connection broke off"
    return type(error).__name__


def tls_reason(error: BaseException) -> str:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen.verify_message or "certificate not trusted"
        seen = seen.__cause__ or seen.__context__ or getattr(seen, "reason", None)
        if not isinstance(seen, BaseException):
            break
    return "handshake failed"


def unreachable(host: str, error: BaseException) -> BakeoffError:
    return BakeoffError(
        f"cannot reach the KFP API at {host} ({_network_reason(error)}): "
        f"check --host and that the API is reachable from here, {REACH_HINT}"
    )


def tls_failed(host: str, reason: str) -> BakeoffError:
    return BakeoffError(
        f"TLS to {host} failed ({reason}): pass --ca-cert FILE with the CA that signed its certificate, or --insecure"
    )


def foreign_server(content_type: str, headers: Any, body: bytes) -> tuple[str, str] | None:
    """What answered a refusal, where it is plainly not KFP's API or a proxy in front of it, and its reason.

    A kube-apiserver answers with a Kubernetes ``Status`` object; an S3 server (SeaweedFS, MinIO, AWS) with its XML
    ``<Error>`` document and an ``x-amz-request-id``. KFP's own refusals are grpc-gateway's JSON (``code``,
    ``message``), and a mesh or proxy in front of it (Istio's ``RBAC: access denied``) says neither.
    """
    import re

    document: Any = None
    if content_type == "application/json":
        with contextlib.suppress(ValueError):
            document = json.loads(body)
    if isinstance(document, dict) and document.get("kind") == "Status" and "apiVersion" in document:
        return "a Kubernetes API server", _one_line(str(document.get("message") or document.get("reason") or ""))
    text = body.decode(errors="replace")
    code = re.search(r"<Error>.*?<Code>([^<]*)</Code>", text, re.DOTALL)
    if code or any(name.lower() == "x-amz-request-id" for name in headers):
        return "an S3 server", _one_line(code[1] if code else "")
    return None


def refused(target: Target, status: int, message: str) -> BakeoffError:
    """401 and 403, wherever they come from: a proxy in front of KFP or KFP's own authorization."""
    detail = f"HTTP {status}: {message}" if message else f"HTTP {status}"
    if status == 401 and not target.has_credentials:
        return BakeoffError(f"the KFP API at {target.host} requires credentials ({detail}): {CREDENTIALS_HINT}")
    if status == 401:
        return BakeoffError(
            f"the KFP API at {target.host} rejected the credentials ({detail}): pass a fresh token or fresh --cookies"
        )
    where = f"namespace {target.namespace!r}" if target.namespace else "this namespace"
    return BakeoffError(
        f"the KFP API at {target.host} denied access ({detail}): use credentials allowed in {where}, "
        "or pass --namespace with a profile you belong to"
    )


@contextlib.contextmanager
def translated(target: Target, doing: str, not_found: str | None = None) -> Iterator[None]:
    """Turns what kfp, kfp_server_api and urllib3 raise while ``doing`` something into one BakeoffError line."""
    import kfp_server_api
    import urllib3

    try:
        yield
    except kfp_server_api.ApiException as error:
        status, message = error.status or 0, server_message(error.body)
        if status == 0:  # kfp_server_api's way of saying TLS failed
            raise tls_failed(target.host, tls_reason(error)) from None
        if status in (401, 403):
            raise refused(target, status, message) from None
        if status == 404 and not_found:
            raise BakeoffError(not_found) from None
        if status == 400 and message in UPLOAD_DENIED:
            where = f"namespace {target.namespace!r}" if target.namespace else "the namespace you upload to"
            raise BakeoffError(
                f"the KFP API at {target.host} refused to {doing} (HTTP 400: {message}):"
                f" KFP's upload answers this when its authorization denies you,"
                f" so use credentials that may create pipelines in {where}"
                " (or pass --namespace with a profile you belong to); else see the API server's log"
                " (`kubectl -n kubeflow logs deploy/ml-pipeline`)"
            ) from None
        detail = f"HTTP {status}: {message}" if message else f"HTTP {status}"
        raise BakeoffError(
            f"the KFP API at {target.host} refused to {doing} ({detail}): "
            f"check the request, or the API server's log (`kubectl -n kubeflow logs deploy/ml-pipeline`)"
        ) from None
    except urllib3.exceptions.SSLError as error:
        raise tls_failed(target.host, tls_reason(error)) from None
    except urllib3.exceptions.HTTPError as error:
        raise unreachable(target.host, error) from None
    except TimeoutError:  # kfp.Client's healthz gave up after its retries
        raise BakeoffError(
            f"the KFP API at {target.host} stopped answering: try again, or check the ml-pipeline deployment"
        ) from None
    except ValueError as error:  # kfp's own checks, e.g. two experiments of one name
        raise BakeoffError(f"cannot {doing} ({error}): resolve it on {target.host}, e.g. in its UI") from None
