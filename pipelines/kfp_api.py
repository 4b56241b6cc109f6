"""The cluster side of bakeoff: the compiled pipeline uploaded, run and scheduled through a KFP API (``kfp.Client``)."""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import io
import json
import math
import os
import re
import ssl
import time
import urllib.parse
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence, TypeVar

import yaml

from components.errors import BakeoffError

if TYPE_CHECKING:
    import kfp
    import kfp_server_api

T = TypeVar("T")

HEALTHZ_PATH = "/apis/v2beta1/healthz"
HOST_ENV = "KF_PIPELINES_ENDPOINT"  # kfp.Client's own name for the API address
TOKEN_FILE_ENV = "KF_PIPELINES_SA_TOKEN_PATH"  # kfp's name; Kubeflow's PodDefault sets it in notebooks
TOKEN_ENV = "KF_PIPELINES_TOKEN"
POD_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
POLL_SECONDS = 5.0
MAX_CONCURRENCY = 10  # the API server rejects more (RecurringRun.max_concurrency: range [1-10])
FINAL_STATES = ("SUCCEEDED", "FAILED", "SKIPPED", "CANCELED")
REACH_HINT = "e.g. `kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80` and --host http://localhost:8080"
CREDENTIALS_HINT = f"pass --token, set {TOKEN_ENV} or {TOKEN_FILE_ENV}, or pass --cookies from a browser login"


# ---------------------------------------------------------------------------------------------- connecting

@dataclasses.dataclass(frozen=True)
class Target:
    """Where the KFP API is and how to authenticate; secrets stay out of ``repr`` so no log or traceback shows them."""

    host: str
    namespace: Optional[str] = None
    token: Optional[str] = dataclasses.field(default=None, repr=False)
    cookies: Optional[str] = dataclasses.field(default=None, repr=False)
    verify_tls: bool = True
    ca_cert: Optional[Path] = None

    @property
    def has_credentials(self) -> bool:
        return bool(self.token or self.cookies)


def normalize_host(host: Optional[str], environ: Mapping[str, str] = os.environ) -> str:
    """The API base URL without a trailing slash or a UI fragment; a scheme is required, not guessed.

    kfp.Client would prepend https:// to a bare ``localhost:8080`` and fail later
    on TLS; asking for the scheme is clearer.
    """
    host = (host or environ.get(HOST_ENV) or "").strip()
    if not host:
        raise BakeoffError(f"no KFP API address: pass --host URL or set {HOST_ENV} ({REACH_HINT})")
    parts = urllib.parse.urlsplit(host)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BakeoffError(f"--host {host!r} is not an http(s) URL: write e.g. http://localhost:8080 or https://kubeflow.example.com/pipeline")
    return f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")


def resolve_token(flag: Optional[str], environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The bearer token: --token, else the file KF_PIPELINES_SA_TOKEN_PATH names, else $KF_PIPELINES_TOKEN.

    The file comes before the variable because in a pod it is the projected
    service-account token that the kubelet keeps fresh.
    """
    if flag is not None:
        if not flag.strip():
            raise BakeoffError(f"--token is empty: pass the token itself, or leave --token out and set {TOKEN_ENV}")
        return flag.strip()
    path = environ.get(TOKEN_FILE_ENV)
    if path:
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
        except OSError as error:
            raise BakeoffError(f"cannot read the token file {path!r} that {TOKEN_FILE_ENV} names ({error.strerror}): "
                               f"fix or unset {TOKEN_FILE_ENV}, or pass --token") from None
        if not token:
            raise BakeoffError(f"the token file {path!r} that {TOKEN_FILE_ENV} names is empty: fix or unset {TOKEN_FILE_ENV}, or pass --token")
        return token
    return environ.get(TOKEN_ENV, "").strip() or None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Keeps kfp's chatter off our output: it prints links and warns about its version on every call."""
    import urllib3

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)  # --insecure was asked for
        with contextlib.redirect_stdout(io.StringIO()):
            yield


def _server_message(body: Any) -> str:
    """The one-line reason inside an error body (grpc-gateway's ``message`` or the upload server's ``error_message``)."""
    try:
        document = json.loads(body)
    except (TypeError, ValueError):
        return ""
    if not isinstance(document, dict):
        return ""
    message = str(document.get("message") or document.get("error_message") or document.get("error") or "")
    message = " ".join(message.split())
    return message if len(message) <= 300 else message[:297] + "..."


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


def _tls_reason(error: BaseException) -> str:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen.verify_message or "certificate not trusted"
        seen = seen.__cause__ or seen.__context__ or getattr(seen, "reason", None)
        if not isinstance(seen, BaseException):
            break
    return "handshake failed"


def _unreachable(host: str, error: BaseException) -> BakeoffError:
    return BakeoffError(f"cannot reach the KFP API at {host} ({_network_reason(error)}): check --host and that the API is reachable from here, {REACH_HINT}")


def _tls_failed(host: str, reason: str) -> BakeoffError:
    return BakeoffError(f"TLS to {host} failed ({reason}): pass --ca-cert FILE with the CA that signed its certificate, or --insecure")


def _refused(target: Target, status: int, message: str) -> BakeoffError:
    """401 and 403, wherever they come from: a proxy in front of KFP or KFP's own authorization."""
    detail = f"HTTP {status}: {message}" if message else f"HTTP {status}"
    if status == 401 and not target.has_credentials:
        return BakeoffError(f"the KFP API at {target.host} requires credentials ({detail}): {CREDENTIALS_HINT}")
    if status == 401:
        return BakeoffError(f"the KFP API at {target.host} rejected the credentials ({detail}): pass a fresh token or fresh --cookies")
    where = f"namespace {target.namespace!r}" if target.namespace else "this namespace"
    return BakeoffError(f"the KFP API at {target.host} denied access ({detail}): use credentials allowed in {where}, or pass --namespace with a profile you belong to")


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
        with _quiet():
            response = pool.request("GET", target.host + HEALTHZ_PATH, headers=headers, redirect=False, retries=False,
                                    timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S))
    except urllib3.exceptions.SSLError as error:
        raise _tls_failed(target.host, _tls_reason(error)) from None
    except urllib3.exceptions.HTTPError as error:
        raise _unreachable(target.host, error) from None
    finally:
        pool.clear()
    status = response.status
    if 300 <= status < 400:
        location = urllib.parse.urlsplit(response.headers.get("Location", ""))
        where = f"{location.scheme}://{location.netloc}{location.path}" if location.netloc else location.path or "elsewhere"
        raise BakeoffError(f"the KFP API at {target.host} redirects to {where}, most likely a login page: "
                           f"pass --token, or --cookies with the session cookie of a browser login")
    if status in (401, 403):
        raise _refused(target, status, _server_message(response.data))
    content_type = response.headers.get("Content-Type", "").split(";")[0].strip() or "no content type"
    if status >= 500:
        raise BakeoffError(f"the KFP API at {target.host} is not healthy (GET {HEALTHZ_PATH} answered HTTP {status}): "
                           f"check the ml-pipeline deployment, e.g. `kubectl -n kubeflow get pods`")
    health = None
    if status == 200 and content_type == "application/json":
        with contextlib.suppress(ValueError):
            health = json.loads(response.data)
    if not isinstance(health, dict):
        raise BakeoffError(f"{target.host} is not a Kubeflow Pipelines API (GET {HEALTHZ_PATH} answered HTTP {status} {content_type}): "
                           f"pass the KFP API address as --host, {REACH_HINT}")
    return health


@dataclasses.dataclass
class Api:
    """A connected kfp.Client plus what our messages need: the host, the namespace, how to word failures."""

    client: "kfp.Client"
    target: Target
    namespace: Optional[str]
    multi_user: bool

    @property
    def host(self) -> str:
        return self.target.host

    def call(self, doing: str, function: Callable[..., T], *args: Any, not_found: Optional[str] = None, **kwargs: Any) -> T:
        """Runs one kfp call quietly and turns its failures into one line that says what to do."""
        with _translated(self.target, doing, not_found), _quiet():
            return function(*args, **kwargs)

    def run_url(self, run_id: str) -> str:
        return f"{self.host}/#/runs/details/{run_id}"


@contextlib.contextmanager
def _translated(target: Target, doing: str, not_found: Optional[str] = None) -> Iterator[None]:
    import kfp_server_api
    import urllib3

    try:
        yield
    except kfp_server_api.ApiException as error:
        status, message = error.status or 0, _server_message(error.body)
        if status == 0:  # kfp_server_api's way of saying TLS failed
            raise _tls_failed(target.host, _tls_reason(error)) from None
        if status in (401, 403):
            raise _refused(target, status, message) from None
        if status == 404 and not_found:
            raise BakeoffError(not_found) from None
        detail = f"HTTP {status}: {message}" if message else f"HTTP {status}"
        raise BakeoffError(f"the KFP API at {target.host} refused to {doing} ({detail}): "
                           f"check the request, or the API server's log (`kubectl -n kubeflow logs deploy/ml-pipeline`)") from None
    except urllib3.exceptions.SSLError as error:
        raise _tls_failed(target.host, _tls_reason(error)) from None
    except urllib3.exceptions.HTTPError as error:
        raise _unreachable(target.host, error) from None
    except TimeoutError:  # kfp.Client's healthz gave up after its retries
        raise BakeoffError(f"the KFP API at {target.host} stopped answering: try again, or check the ml-pipeline deployment") from None
    except ValueError as error:  # kfp's own checks, e.g. two experiments of one name
        raise BakeoffError(f"cannot {doing} ({error}): resolve it on {target.host}, e.g. in its UI") from None


def _pod_namespace() -> Optional[str]:
    """The pod's own namespace, which is the profile's namespace for a Kubeflow notebook."""
    with contextlib.suppress(OSError):
        return POD_NAMESPACE_FILE.read_text(encoding="utf-8").strip() or None
    return None


def connect(target: Target, need_namespace: bool = True) -> Api:
    """Checks the address and the credentials, then builds kfp.Client; nothing on the server changes.

    A multi-user KFP scopes experiments, runs and recurring runs by namespace,
    so commands that touch them need one: --namespace, or the pod's own.
    """
    if target.ca_cert is not None and not target.ca_cert.is_file():
        raise BakeoffError(f"--ca-cert {str(target.ca_cert)!r} is not a file: pass the PEM file of the CA that signed the API's certificate")
    health = _probe(target)
    multi_user = health.get("multi_user") is True
    namespace = target.namespace
    if multi_user and not namespace and need_namespace:
        namespace = _pod_namespace()
        if not namespace:
            raise BakeoffError(f"the KFP API at {target.host} is multi-user: pass --namespace with your profile's namespace")
    target = dataclasses.replace(target, namespace=namespace)
    import kfp

    with _translated(target, "connect"), _quiet():
        client = kfp.Client(
            host=target.host,
            namespace=namespace or "kubeflow",  # kfp's way of saying "none given"
            existing_token=target.token,
            cookies=target.cookies,
            ssl_ca_cert=str(target.ca_cert) if target.ca_cert else None,
            verify_ssl=target.verify_tls,
        )
    return Api(client=client, target=target, namespace=namespace, multi_user=multi_user)


# ------------------------------------------------------------------------------------- the compiled pipeline

PARAMETER_KINDS = {
    "STRING": ("text", "hello"),
    "NUMBER_INTEGER": ("a whole number", "8"),
    "NUMBER_DOUBLE": ("a number", "0.5"),
    "BOOLEAN": ("true or false", "true"),
    "LIST": ("a JSON list", "'[1, 2]'"),
    "STRUCT": ("a JSON object", "'{\"key\": 1}'"),
}


def read_package(path: Path) -> dict:
    """The PipelineSpec document of a compiled package (the first YAML document; the second is the platform spec)."""
    return next(iter(yaml.safe_load_all(path.read_text(encoding="utf-8"))))


def pipeline_parameters(spec: Mapping) -> dict[str, str]:
    """Input parameter name → KFP parameterType, from the IR's root.inputDefinitions."""
    parameters = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    return {name: definition.get("parameterType", "STRING") for name, definition in parameters.items()}


def _convert(kind: str, text: str) -> Any:
    """--param text as the JSON value the parameter type takes; ValueError when it does not fit."""
    if kind == "NUMBER_INTEGER":
        if not re.fullmatch(r"[+-]?\d+", text.strip()):
            raise ValueError
        return int(text)
    if kind == "NUMBER_DOUBLE":
        value = float(text)
        if not math.isfinite(value):
            raise ValueError
        return value
    if kind == "BOOLEAN":
        lowered = text.strip().lower()
        if lowered not in ("true", "false"):
            raise ValueError
        return lowered == "true"
    if kind in ("LIST", "STRUCT"):
        value = json.loads(text)
        if not isinstance(value, list if kind == "LIST" else dict):
            raise ValueError
        return value
    return text


def parse_params(pairs: Sequence[str], parameters: Mapping[str, str]) -> dict[str, Any]:
    """KEY=VALUE pairs checked against the pipeline's inputs and typed as the IR says, before anything is sent."""
    values: dict[str, Any] = {}
    for pair in pairs:
        key, equals, text = pair.partition("=")
        key = key.strip()
        if not equals or not key:
            raise BakeoffError(f"--param {pair!r} is not KEY=VALUE: write e.g. --param shards=4")
        if key not in parameters:
            raise BakeoffError(f"--param {key!r}: the pipeline has no such parameter: use one of {', '.join(sorted(parameters))}")
        if key in values:
            raise BakeoffError(f"--param {key!r} is given twice: give each parameter once")
        kind = parameters[key]
        description, example = PARAMETER_KINDS.get(kind, ("text", "hello"))
        try:
            values[key] = _convert(kind, text)
        except ValueError:
            raise BakeoffError(f"--param {key}={text!r}: {key} takes {description} ({kind}): write e.g. --param {key}={example}") from None
    return values


@contextlib.contextmanager
def compiled(settings: Mapping[str, Any]) -> Iterator[tuple[Path, dict]]:
    """The pipeline compiled with the same settings as `bakeoff compile`, as a file kfp can send, and its IR."""
    import tempfile

    from pipelines.compiling import compile_pipeline

    with tempfile.TemporaryDirectory(prefix="bakeoff-package-") as scratch:
        package = compile_pipeline(Path(scratch) / "bakeoff.yaml", **settings)
        yield package, read_package(package)


# ----------------------------------------------------------------------------------------------- schedules

CRON_FIELDS = (  # name, lowest, highest, names: KFP's scheduler (robfig/cron) reads 6 fields, seconds first
    ("second", 0, 59, ()),
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    ("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")),
    ("day-of-week", 0, 6, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")),
)
CRON_DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
CRON_EXAMPLE = "e.g. '0 0 3 * * *' for 03:00 every day"
EVERY_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _cron_value(token: str, low: int, names: Sequence[str]) -> int:
    if token.upper() in names:
        return names.index(token.upper()) + (1 if low == 1 else 0)
    if not token.isdigit():
        raise ValueError(f"{token!r} is not a number")
    return int(token)


def _check_cron_field(text: str, name: str, low: int, high: int, names: Sequence[str]) -> None:
    for item in text.split(","):
        span, slash, step = item.partition("/")
        if slash and (not step.isdigit() or int(step) == 0):
            raise ValueError(f"step {step!r} is not a whole number above 0")
        if span in ("*", "?"):
            if span == "?" and name not in ("day-of-month", "day-of-week"):
                raise ValueError("'?' only stands for a day")
            continue
        first, dash, last = span.partition("-")
        start = _cron_value(first, low, names)
        end = _cron_value(last, low, names) if dash else start
        for value in (start, end):
            if not low <= value <= high:
                raise ValueError(f"{value} is outside {low}-{high}")
        if end < start:
            raise ValueError(f"range {span!r} runs backwards")


def validate_cron(expression: str) -> str:
    """Checks a cron the way KFP's scheduler reads it; a 5-field crontab would silently mean something else there."""
    expression = " ".join(expression.split())
    if expression.lower() in CRON_DESCRIPTORS:
        return expression.lower()
    if expression.lower().startswith("@every"):
        raise BakeoffError(f"--cron {expression!r}: write intervals as --every, e.g. --every 6h")
    fields = expression.split(" ") if expression else []
    if len(fields) != len(CRON_FIELDS):
        raise BakeoffError(f"--cron {expression!r} has {len(fields)} fields; KFP's cron has 6, seconds first "
                           f"(second minute hour day-of-month month day-of-week): {CRON_EXAMPLE}")
    for text, (name, low, high, names) in zip(fields, CRON_FIELDS):
        try:
            _check_cron_field(text, name, low, high, names)
        except ValueError as problem:
            raise BakeoffError(f"--cron {expression!r}: {name} field {text!r} is invalid ({problem}): {CRON_EXAMPLE}") from None
    return expression


def parse_every(text: str) -> int:
    """--every as seconds: a whole number and one unit, the way people write it (90s, 30m, 6h, 1d)."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", text.lower())
    if not match or int(match.group(1)) == 0:
        raise BakeoffError(f"--every {text!r} is not an interval: write a whole number above 0 and s, m, h or d, e.g. 90s, 30m, 6h, 1d")
    return int(match.group(1)) * EVERY_UNITS[match.group(2)]


def describe_every(seconds: int) -> str:
    for unit, size in sorted(EVERY_UNITS.items(), key=lambda item: -item[1]):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def parse_time(flag: str, text: str) -> datetime.datetime:
    """An ISO 8601 time in UTC; one without an offset is taken as UTC, the cluster's clock."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise BakeoffError(f"{flag} {text!r} is not an ISO 8601 time: write e.g. 2030-01-31T03:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc)


def rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True)
class Trigger:
    """When a recurring run starts runs: exactly one of a cron or an interval, within an optional window."""

    cron: Optional[str] = None
    interval_seconds: Optional[int] = None
    start: Optional[str] = None
    end: Optional[str] = None

    def describe(self) -> str:
        return f"cron {self.cron}" if self.cron else f"every {describe_every(self.interval_seconds or 0)}"


def make_trigger(cron: Optional[str], every: Optional[str], start: Optional[str], end: Optional[str],
                 now: Optional[datetime.datetime] = None) -> Trigger:
    """Validates the whole schedule locally, so a bad one never reaches the server."""
    if cron is not None and every is not None:
        raise BakeoffError("--cron and --every are both given: choose one trigger")
    if cron is None and every is None:
        raise BakeoffError(f"a schedule needs a trigger: pass --cron ({CRON_EXAMPLE}) or --every (e.g. 6h)")
    starts = parse_time("--start", start) if start else None
    ends = parse_time("--end", end) if end else None
    if starts and ends and ends <= starts:
        raise BakeoffError(f"--end {rfc3339(ends)} is not after --start {rfc3339(starts)}: choose a later --end")
    if ends and ends <= (now or datetime.datetime.now(datetime.timezone.utc)):
        raise BakeoffError(f"--end {rfc3339(ends)} is in the past, so nothing would ever run: choose a later --end")
    return Trigger(
        cron=validate_cron(cron) if cron is not None else None,
        interval_seconds=parse_every(every) if every is not None else None,
        start=rfc3339(starts) if starts else None,
        end=rfc3339(ends) if ends else None,
    )


def check_max_concurrency(value: int) -> int:
    if not 1 <= value <= MAX_CONCURRENCY:
        raise BakeoffError(f"--max-concurrency {value} is outside 1-{MAX_CONCURRENCY}, the range KFP accepts: choose one within it")
    return value


# ---------------------------------------------------------------------------------------------- operations

def _equals(key: str, value: str) -> str:
    return json.dumps({"predicates": [{"operation": "EQUALS", "key": key, "string_value": value}]})


def _pipeline_id(api: Api, name: str) -> Optional[str]:
    """The id of the pipeline called ``name`` in our namespace (or the shared ones), if there is one."""
    listing = api.call(f"look up pipeline {name!r}", api.client.list_pipelines,
                       filter=_equals("display_name", name), namespace=api.namespace, page_size=10)
    matches = [p for p in listing.pipelines or [] if name in (p.display_name, p.name)]
    if len(matches) > 1:
        raise BakeoffError(f"{len(matches)} pipelines are named {name!r} on {api.host}: pass --name of a unique one")
    return matches[0].pipeline_id if matches else None


def _versions(api: Api, pipeline_id: str) -> list["kfp_server_api.V2beta1PipelineVersion"]:
    versions, token = [], ""
    while True:
        page = api.call("list the pipeline's versions", api.client.list_pipeline_versions, pipeline_id,
                        page_token=token, page_size=100, sort_by="created_at desc")
        versions.extend(page.pipeline_versions or [])
        token = page.next_page_token or ""
        if not token:
            return versions


def default_version_name(package: Path) -> str:
    """UTC time (sortable) plus the package's hash (same content, same suffix), unique within a pipeline."""
    digest = hashlib.sha256(package.read_bytes()).hexdigest()[:8]
    return f"{datetime.datetime.now(datetime.timezone.utc):%Y%m%d-%H%M%S}-{digest}"


@dataclasses.dataclass(frozen=True)
class Uploaded:
    """What upload made, for the report line and the UI link."""

    pipeline_id: str
    pipeline_name: str
    version_id: str
    version_name: str
    new_pipeline: bool
    url: str


def upload(api: Api, package: Path, name: str, version: Optional[str] = None) -> Uploaded:
    """A new pipeline, or a new version of the one already called ``name``.

    A new pipeline uploaded whole gets its first version named after it (KFP's
    rule); when --version names it, the pipeline is created first and the
    package added as that version.
    """
    import kfp_server_api

    pipeline_id = _pipeline_id(api, name)
    if pipeline_id is None and version is None:
        pipeline = api.call(f"upload pipeline {name!r}", api.client.upload_pipeline, str(package),
                            pipeline_name=name, namespace=api.namespace)
        first = _versions(api, pipeline.pipeline_id)[0]
        return Uploaded(pipeline.pipeline_id, name, first.pipeline_version_id, first.display_name or first.name, True,
                        f"{api.host}/#/pipelines/details/{pipeline.pipeline_id}/version/{first.pipeline_version_id}")
    version = version or default_version_name(package)
    if pipeline_id is not None:
        if any(version in (v.display_name, v.name) for v in _versions(api, pipeline_id)):
            raise BakeoffError(f"pipeline {name!r} already has a version {version!r}: choose another --version, or leave it out for a new name")
    new_pipeline = pipeline_id is None
    if new_pipeline:
        body = kfp_server_api.V2beta1Pipeline(name=name, display_name=name, namespace=api.namespace)
        pipeline_id = api.call(f"create pipeline {name!r}", api.client.pipelines.pipeline_service_create_pipeline, body).pipeline_id
    created = api.call(f"upload version {version!r} of pipeline {name!r}", api.client.upload_pipeline_version, str(package),
                       pipeline_version_name=version, pipeline_id=pipeline_id)
    return Uploaded(pipeline_id, name, created.pipeline_version_id, version, new_pipeline,
                    f"{api.host}/#/pipelines/details/{pipeline_id}/version/{created.pipeline_version_id}")


def _experiment_id(api: Api, name: str) -> str:
    """The experiment's id, creating it on first use (kfp's create_experiment gets before it creates)."""
    experiment = api.call(f"get or create experiment {name!r}", api.client.create_experiment, name, namespace=api.namespace)
    return experiment.experiment_id


def default_run_name(prefix: str = "bakeoff") -> str:
    return f"{prefix} {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S}"


@dataclasses.dataclass(frozen=True)
class Submitted:
    """The run that submit created and where the UI shows it."""

    run_id: str
    name: str
    url: str


def submit(api: Api, package: Path, experiment: str, params: Mapping[str, Any], run_name: str) -> Submitted:
    """One run of the compiled package (its spec travels inline, no upload needed) in ``experiment``."""
    experiment_id = _experiment_id(api, experiment)
    run = api.call("create the run", api.client.run_pipeline, experiment_id=experiment_id, job_name=run_name,
                   pipeline_package_path=str(package), params=dict(params))
    return Submitted(run.run_id, run_name, api.run_url(run.run_id))


def wait_for_run(api: Api, run_id: str, report: Callable[[str], None] = lambda state: None) -> "kfp_server_api.V2beta1Run":
    """Polls the run until it ends and reports each new state.

    Not kfp.Client.wait_for_run_completion: that one never returns for a
    CANCELED run (its finish states are succeeded/failed/skipped/error).
    """
    last = None
    while True:
        run = api.call(f"follow run {run_id}", api.client.get_run, run_id)
        state = run.state or "RUNTIME_STATE_UNSPECIFIED"
        if state != last:
            report(state)
            last = state
        if state in FINAL_STATES:
            return run
        time.sleep(POLL_SECONDS)


@dataclasses.dataclass(frozen=True)
class Scheduled:
    """The recurring run that schedule created and where the UI shows it."""

    recurring_run_id: str
    name: str
    url: str


def schedule(api: Api, package: Path, experiment: str, trigger: Trigger, params: Mapping[str, Any], name: str,
             max_concurrency: int = 1, no_catchup: bool = False) -> Scheduled:
    """A recurring run of the compiled package, enabled from the start."""
    experiment_id = _experiment_id(api, experiment)
    created = api.call("create the recurring run", api.client.create_recurring_run,
                       experiment_id=experiment_id, job_name=name, start_time=trigger.start, end_time=trigger.end,
                       interval_second=trigger.interval_seconds, cron_expression=trigger.cron,
                       max_concurrency=max_concurrency, no_catchup=no_catchup, params=dict(params),
                       pipeline_package_path=str(package), enabled=True)
    return Scheduled(created.recurring_run_id, name, f"{api.host}/#/recurringrun/details/{created.recurring_run_id}")


def list_schedules(api: Api) -> list["kfp_server_api.V2beta1RecurringRun"]:
    """Every recurring run in our namespace (all pages), newest first."""
    found, token = [], ""
    while True:
        page = api.call("list recurring runs", api.client.list_recurring_runs, page_token=token, page_size=100,
                        sort_by="created_at desc", namespace=api.namespace)
        found.extend(page.recurring_runs or [])
        token = page.next_page_token or ""
        if not token:
            return found


def describe_trigger(trigger: Optional["kfp_server_api.V2beta1Trigger"]) -> str:
    if trigger is not None and trigger.cron_schedule is not None:
        return f"cron {trigger.cron_schedule.cron}"
    if trigger is not None and trigger.periodic_schedule is not None:
        return f"every {describe_every(int(trigger.periodic_schedule.interval_second or 0))}"
    return "-"


SCHEDULE_ACTIONS = {
    "enable": ("enable_recurring_run", "enabled"),
    "disable": ("disable_recurring_run", "disabled"),
    "delete": ("delete_recurring_run", "deleted"),
}


def change_schedule(api: Api, action: str, recurring_run_id: str) -> str:
    """enable, disable or delete one recurring run; returns the past tense for the report line."""
    method, done = SCHEDULE_ACTIONS[action]
    api.call(f"{action} recurring run {recurring_run_id!r}", getattr(api.client, method), recurring_run_id,
             not_found=f"no recurring run {recurring_run_id!r} on {api.host}: `bakeoff schedules list` shows the ids")
    return done
