"""What a failed Kubernetes API call says: the ApiException behind a client's error, its status, its message."""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Iterator

import urllib3
from kubernetes.client.rest import ApiException

STRICT_DECODING = "strict decoding error:"  # what the API server's message says from, after quoting the whole object
# A server-side apply with a field the CRD's schema lacks fails converting the patch to a typed object, before any
# field validation: 500 with this message (structuredMergeManager.Apply,
# k8s.io/apimachinery/pkg/util/managedfields/internal/structuredmerge.go; kubernetes/kubernetes#139253 asks for 400).
UNDECLARED_FIELD = "field not declared in schema"


def chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and what caused it: TrainingClient wraps the API's exceptions in RuntimeError."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def api_exception(error: BaseException) -> ApiException | None:
    return next((cause for cause in chain(error) if isinstance(cause, ApiException)), None)


def api_status(error: BaseException) -> int | None:
    api = api_exception(error)
    return api.status if api is not None else None


def api_body(error: BaseException) -> dict:
    """The metav1.Status the API server answered with; {} for a plain-text answer (a path it does not serve)."""
    api = api_exception(error)
    try:
        body = json.loads(api.body) if api is not None else None
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def api_reason(error: BaseException) -> str:
    """One line out of a multi-line client error: the API's status and message, else the root cause."""
    api = api_exception(error)
    if api is not None and api.status:
        message = " ".join(str(api_body(api).get("message") or api.reason or "no message").split())
        # A refused merge patch quotes the whole patched object before the reason: keep the reason.
        return (
            f"HTTP {api.status}: {message[message.find(STRICT_DECODING) :] if STRICT_DECODING in message else message}"
        )
    root = list(chain(error))[-1]
    return f"{type(root).__name__}: {str(root).splitlines()[0] if str(root) else 'no answer'}"


def unanswered(error: BaseException) -> bool:
    """Whether the API never answered: the connection failed or timed out (the client lets these through)."""
    causes = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError, multiprocessing.TimeoutError)
    return any(isinstance(cause, causes) for cause in chain(error))


def names_an_object(error: BaseException) -> bool:
    """Whether a 404 is about an object (a metav1.Status whose details name it), not about the resource type.

    For a resource type it does not serve (no CRD) the API server answers Go's plain "404 page not found"
    (k8s.io/apiserver/pkg/util/notfoundhandler), with no Status at all.
    """
    return bool((api_body(error).get("details") or {}).get("name"))
