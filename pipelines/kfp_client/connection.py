"""Connecting to the KFP API: a healthz probe that fails fast and clearly, then kfp.Client wrapped as Api."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import urllib.parse
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage import POD_NAMESPACE_FILE
from bakeoff.pipelines.kfp_client.endpoint import CONNECT_TIMEOUT_S, REACH_HINT, READ_TIMEOUT_S, Target
from bakeoff.pipelines.kfp_client.failures import (
    foreign_server,
    refused,
    server_message,
    tls_failed,
    tls_reason,
    translated,
    unreachable,
)

if TYPE_CHECKING:
    import kfp

T = TypeVar("T")

HEALTHZ_PATH = "/apis/v2beta1/healthz"


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Keeps kfp's chatter off our output: it prints links and warns about its version on every call."""
    import urllib3

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)  # --insecure was asked for
        with contextlib.redirect_stdout(io.StringIO()):
            yield


def _probe(target: Target) -> dict:
    """GET healthz once, with short timeouts and no retries, before kfp.Client (5 tries 5 s apart) is built.

    It also tells a KFP API from anything else on that address (a UI, a login
    page, another web server) and catches a refused token before any write.
    """
    import certifi
    import urllib3

    pool = urllib3.PoolManager(
        cert_reqs="CERT_REQUIRED" if target.verify_tls else "CERT_NONE",
        ca_certs=str(target.ca_cert) if target.ca_cert else certifi.where(),  # what kfp_server_api trusts
    )
    headers = {"Accept": "application/json"}
    if target.token:
        headers["Authorization"] = f"Bearer {target.token}"
    if target.cookies:
        headers["Cookie"] = target.cookies
    try:
        with quiet():
            response = pool.request(
                "GET",
                target.host + HEALTHZ_PATH,
                headers=headers,
                redirect=False,
                retries=False,
                timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S),
            )
    except urllib3.exceptions.SSLError as error:
        raise tls_failed(target.host, tls_reason(error)) from None
    except urllib3.exceptions.HTTPError as error:
        raise unreachable(target.host, error) from None
    finally:
        pool.clear()
    status = response.status
    if 300 <= status < 400:
        location = urllib.parse.urlsplit(response.headers.get("Location", ""))
        where = (
            f"{location.scheme}://{location.netloc}{location.path}" if location.netloc else location.path or "elsewhere"
        )
        raise BakeoffError(
            f"the KFP API at {target.host} redirects to {where}, most likely a login page: "
            f"pass --token, or --cookies with the session cookie of a browser login"
        )
    content_type = response.headers.get("Content-Type", "").split(";")[0].strip() or "no content type"
    if status in (401, 403):
        foreign = foreign_server(content_type, response.headers, response.data)
        if foreign:
            what, reason = foreign
            raise BakeoffError(
                f"{target.host} is not a Kubeflow Pipelines API but {what}, which refused GET {HEALTHZ_PATH}"
                f" (HTTP {status}{': ' + reason if reason else ''}): pass the KFP API address as --host, {REACH_HINT}"
            )
        raise refused(target, status, server_message(response.data))
    if status >= 500:
        raise BakeoffError(
            f"the KFP API at {target.host} is not healthy (GET {HEALTHZ_PATH} answered HTTP {status}): "
            f"check the ml-pipeline deployment, e.g. `kubectl -n kubeflow get pods`"
        )
    health = None
    if status == 200 and content_type == "application/json":
        with contextlib.suppress(ValueError):
            health = json.loads(response.data)
    if not isinstance(health, dict):
        raise BakeoffError(
            f"{target.host} is not a Kubeflow Pipelines API"
            f" (GET {HEALTHZ_PATH} answered HTTP {status} {content_type}): "
            f"pass the KFP API address as --host, {REACH_HINT}"
        )
    return health


@dataclasses.dataclass
class Api:
    """A connected kfp.Client plus what our messages need: the host, the namespace, how to word failures."""

    client: kfp.Client
    target: Target
    namespace: str | None
    multi_user: bool

    @property
    def host(self) -> str:
        return self.target.host

    def call(
        self, doing: str, function: Callable[..., T], *args: Any, not_found: str | None = None, **kwargs: Any
    ) -> T:
        """Runs one kfp call quietly and turns its failures into one line that says what to do."""
        with translated(self.target, doing, not_found), quiet():
            return function(*args, **kwargs)

    def run_url(self, run_id: str) -> str:
        return f"{self.host}/#/runs/details/{run_id}"


def _pod_namespace() -> str | None:
    """The pod's own namespace, which is the profile's namespace for a Kubeflow notebook."""
    with contextlib.suppress(OSError):
        return POD_NAMESPACE_FILE.read_text(encoding="utf-8").strip() or None
    return None


def connect(target: Target, need_namespace: bool = True, or_else: str = "") -> Api:
    """Checks the address and the credentials, then builds kfp.Client; nothing on the server changes.

    A multi-user KFP scopes experiments, runs, recurring runs and private
    pipelines by namespace, so commands that touch them need one: --namespace,
    or the pod's own. ``or_else`` ends the line that asks for one (another way).
    """
    if target.ca_cert is not None and not target.ca_cert.is_file():
        raise BakeoffError(
            f"--ca-cert {str(target.ca_cert)!r} is not a file: "
            "pass the PEM file of the CA that signed the API's certificate"
        )
    health = _probe(target)
    multi_user = health.get("multi_user") is True
    namespace = target.namespace
    if multi_user and not namespace and need_namespace:
        namespace = _pod_namespace()
        if not namespace:
            raise BakeoffError(
                f"the KFP API at {target.host} is multi-user: pass --namespace with your profile's namespace"
                + (f" {or_else}" if or_else else "")
            )
    target = dataclasses.replace(target, namespace=namespace)
    import kfp

    with translated(target, "connect"), quiet():
        client = kfp.Client(
            host=target.host,
            namespace=namespace or "kubeflow",  # kfp's way of saying "none given"
            existing_token=target.token,
            cookies=target.cookies,
            ssl_ca_cert=str(target.ca_cert) if target.ca_cert else None,
            verify_ssl=target.verify_tls,
        )
    return Api(client=client, target=target, namespace=namespace, multi_user=multi_user)
