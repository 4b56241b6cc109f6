"""A stand-in KFP v2beta1 REST API on loopback that checks every request against KFP's own swagger spec."""

from __future__ import annotations

import dataclasses
import datetime
import email.parser
import email.policy
import http.server
import json
import re
import ssl
import threading
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SPEC_PATH = Path(__file__).resolve().parent / "contracts" / "kfp_api_v2beta1_2.17.0.swagger.json"
# Each release's v2beta1 spec (tests/contracts/README.md): 2.15.0 (Kubeflow 1.11) and 2.16.0 (26.03) lack 2.17's
# tags, plugins_input and plugins_output, so their gateway refuses those fields as unknown.
SPECS = {
    version: SPEC_PATH.with_name(f"kfp_api_v2beta1_{version}.swagger.json")
    for version in ("2.15.0", "2.16.0", "2.17.0")
}
# What the upload handler answers when KFP's own authorization (a SubjectAccessReview in multi-user mode) refuses:
# 400 with the upload server's JSON error, not 403 (writeErrorToResponse after canUploadVersionedPipeline,
# backend/src/apiserver/server/pipeline_upload_server.go: lines 134/289 at 2.15.0 and 2.16.0, 135/307 at 2.17.0).
UPLOAD_DENIED = {
    "UploadPipeline": "Failed to create a pipeline",
    "UploadPipelineVersion": "Failed to create a pipeline version",
}
# validation.ValidateFieldLength's limit on Pipeline.Name (backend/src/apiserver/validation/length.go, the same in
# 2.15.0-2.17.0), which the upload handler answers with Go's http.Error: plain text, not JSON.
PIPELINE_NAME_MAX = 128
# HTTP → google.rpc.Code, as grpc-gateway maps them
STATUS_CODES = {400: 3, 401: 16, 403: 7, 404: 5, 409: 6, 500: 13, 501: 12}
UPLOAD_OPERATIONS = ("UploadPipeline", "UploadPipelineVersion")  # served by KFP's own HTTP handler, not the gateway


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _protojson(schema: Any) -> Any:
    """The swagger schema as KFP's gateway (protojson) reads JSON.

    Stricter where protojson is: unknown fields are errors. As lenient as
    protojson: a field may use its proto name or its lowerCamel JSON name,
    int64 may be a number or a decimal string, and an enum a name or a number.
    """
    if isinstance(schema, list):
        return [_protojson(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    schema = dict(schema)
    if "properties" in schema:
        properties = {}
        for name, sub in schema["properties"].items():
            properties[name] = properties[_camel(name)] = _protojson(sub)
        schema["properties"] = properties
        schema.setdefault("additionalProperties", False)
    if isinstance(schema.get("additionalProperties"), dict):
        schema["additionalProperties"] = _protojson(schema["additionalProperties"])
    if "items" in schema:
        schema["items"] = _protojson(schema["items"])
    if schema.get("type") == "string" and schema.get("format") in ("int64", "uint64"):
        return {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": r"^-?[0-9]+$"}]}
    if schema.get("type") == "string" and "enum" in schema:
        return {"anyOf": [{"type": "string", "enum": schema["enum"]}, {"type": "integer"}]}
    return schema


def _strict(schema: Any) -> Any:
    """The swagger schema as the server writes JSON (proto names, int64 as strings): for checking our answers."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    schema = {
        key: _strict(value) if key != "properties" else {k: _strict(v) for k, v in value.items()}
        for key, value in schema.items()
    }
    if "properties" in schema:
        schema.setdefault("additionalProperties", False)
    return schema


@dataclasses.dataclass(frozen=True)
class Violation:
    """A request (or, if ``kind`` is 'response', an answer of this fake) that breaks KFP's API spec."""

    operation: str
    kind: str
    problem: str


@dataclasses.dataclass(frozen=True)
class Operation:
    operation_id: str
    method: str
    pattern: re.Pattern
    path_names: tuple[str, ...]
    spec: dict


class ApiError(Exception):
    def __init__(self, status: int, message: str, plain: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.plain = plain  # answered as Go's http.Error does: text/plain, the message and a newline


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_pipeline_spec(document: Any) -> dict:
    """Parses a pipeline spec the way the API server does (protobuf, unknown fields rejected); returns it as a dict."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    if not isinstance(document, dict):
        raise ApiError(400, "Invalid input error: pipeline spec is not an object")
    spec, platform = (
        (document["pipeline_spec"], document.get("platform_spec", {}))
        if "pipeline_spec" in document
        else (document, {})
    )
    try:
        json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
        json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec())
    except json_format.ParseError as error:
        raise ApiError(400, f"Invalid input error: invalid pipeline spec: {error}") from None
    if not spec.get("pipelineInfo", {}).get("name") or "root" not in spec:
        raise ApiError(400, "Invalid input error: pipeline spec has no pipelineInfo.name or root")
    return spec


def stored_spec(spec: dict, platform: dict | None = None) -> dict:
    """A pipeline version's spec as the API server answers it, given the uploaded file's documents.

    The server keeps what it parsed, not the file: protojson of the PipelineSpec and PlatformSpec messages
    (V2Spec.Bytes, backend/src/apiserver/template/v2_template.go), so defaults are dropped and int64 fields become
    strings; it answers that text as one Struct, or, where a platform spec has a `kubernetes` entry, as
    ``{pipeline_spec, platform_spec}`` (YamlStringToPipelineSpecStruct, backend/src/apiserver/server/api_util.go;
    IsPlatformSpecWithKubernetesConfig, v2_template.go). The same in 2.15.0-2.17.0.
    """
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    pipeline = json_format.MessageToDict(json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec()))
    if "kubernetes" not in (platform or {}).get("platforms", {}):
        return pipeline
    platform_spec = json_format.MessageToDict(json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec()))
    return {"pipeline_spec": pipeline, "platform_spec": platform_spec}


class FakeKfpApi:
    """KFP's REST API as kfp.Client 2.17 uses it, on 127.0.0.1 with a free port.

    Every JSON body, query and multipart upload is checked against the spec in
    ``shared/kfp-api``; a breach is answered with 400 and kept in
    ``violations``. What was created stays in ``pipelines``, ``versions``,
    ``experiments``, ``runs`` and ``recurring_runs``. Knobs: ``token`` /
    ``cookie`` (required credentials, else 401), ``forbidden`` (403),
    ``healthz_open`` (healthz skips auth, as the API server itself does),
    ``read_only`` (KFP denies writes only), ``multi_user``, ``answer`` ('kfp'; 'html' or 'not-found' for a server that
    is no KFP API, 'login' for a login redirect, 'unavailable' for 503), and ``run_outcome`` / ``polls_until_done`` for
    runs.
    """

    def __init__(
        self, spec_path: Path = SPEC_PATH, tls: tuple[Path, Path] | None = None, version: str | None = None
    ) -> None:
        """``version``: the KFP release whose spec is served (a key of SPECS), else ``spec_path``'s."""
        self.tls = tls  # (certificate, key) to serve https
        spec_path = SPECS[version] if version else spec_path
        self.spec = json.loads(spec_path.read_text(encoding="utf-8"))
        self._request_definitions = {name: _protojson(schema) for name, schema in self.spec["definitions"].items()}
        self._response_definitions = _strict(self.spec["definitions"])
        self.operations = self._operations()
        self.token: str | None = None
        self.cookie: str | None = None
        self.forbidden = False
        self.read_only = False  # KFP's own authorization lets reads through and denies every write (a profile viewer)
        self.healthz_open = False
        self.multi_user = False
        self.answer = "kfp"
        self.run_outcome = "SUCCEEDED"
        self.run_error = "task train-2 failed: replica worker-1 exited with code 1"
        self.polls_until_done = 1
        self.pipelines: dict[str, dict] = {}
        self.versions: dict[str, dict] = {}
        self.experiments: dict[str, dict] = {}
        self.runs: dict[str, dict] = {}
        self.recurring_runs: dict[str, dict] = {}
        self.calls: list[str] = []  # operation ids, in order
        self.validated: list[str] = []  # operation ids whose body or upload passed the spec
        self.authorization_headers: list[str | None] = []
        self.violations: list[Violation] = []
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None

    # ------------------------------------------------------------------------------------------ life cycle

    def __enter__(self) -> FakeKfpApi:
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake._handle(self)

            do_POST = do_DELETE = do_PATCH = do_GET

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if self.tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*map(str, self.tls))
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self._server.server_address[1]}"

    def created(self) -> dict[str, int]:
        """How many of each thing exist: the tests' measure of "nothing was created"."""
        return {
            kind: len(getattr(self, kind))
            for kind in ("pipelines", "versions", "experiments", "runs", "recurring_runs")
        }

    # ------------------------------------------------------------------------------------------ the spec

    def _operations(self) -> list[Operation]:
        operations = []
        for path, methods in self.spec["paths"].items():
            names = tuple(re.findall(r"{([^}]+)}", path))
            regex = re.escape(path)
            for name in names:
                regex = regex.replace(re.escape("{" + name + "}"), "([^/:]+)")
            for method, spec in methods.items():
                operations.append(Operation(spec["operationId"], method.upper(), re.compile(f"^{regex}$"), names, spec))
        return sorted(operations, key=lambda op: len(op.path_names))  # literal segments win over parameters

    def _validator(self, schema: dict, definitions: dict) -> jsonschema.Draft4Validator:
        return jsonschema.Draft4Validator(
            {"allOf": [schema], "definitions": definitions}, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER
        )

    def _check(self, operation: str, kind: str, schema: dict, value: Any) -> None:
        errors = sorted(self._validator(_protojson(schema), self._request_definitions).iter_errors(value), key=str)
        if errors:
            where = "/".join(str(part) for part in errors[0].absolute_path) or "(root)"
            problem = f"{kind} {where}: {errors[0].message}"
            self.violations.append(Violation(operation, kind, problem))
            raise ApiError(400, f"Invalid input error: {problem}")

    def _check_query(self, operation: Operation, query: dict[str, list[str]]) -> dict[str, str]:
        declared = {p["name"]: p for p in operation.spec.get("parameters", []) if p["in"] == "query"}
        values = {}
        for name, items in query.items():
            if name not in declared:
                self.violations.append(Violation(operation.operation_id, "query", f"unknown query parameter {name!r}"))
                raise ApiError(400, f"Invalid input error: unknown query parameter {name!r}")
            value = items[-1]
            kind = declared[name].get("type")
            if kind == "integer" and not re.fullmatch(r"-?\d+", value):
                self.violations.append(
                    Violation(operation.operation_id, "query", f"{name}={value!r} is not an integer")
                )
                raise ApiError(400, f"Invalid input error: {name} is not an integer")
            if kind == "boolean" and value not in ("true", "false"):
                self.violations.append(Violation(operation.operation_id, "query", f"{name}={value!r} is not a boolean"))
                raise ApiError(400, f"Invalid input error: {name} is not a boolean")
            if "enum" in declared[name] and value not in declared[name]["enum"]:
                self.violations.append(
                    Violation(
                        operation.operation_id, "query", f"{name}={value!r} is not one of {declared[name]['enum']}"
                    )
                )
                raise ApiError(400, f"Invalid input error: bad {name}")
            values[name] = value
        if values.get("filter"):
            try:
                document = json.loads(values["filter"])
            except ValueError:
                self.violations.append(Violation(operation.operation_id, "query", "filter is not JSON"))
                raise ApiError(400, "Invalid input error: filter is not JSON") from None
            self._check(operation.operation_id, "filter", {"$ref": "#/definitions/v2beta1Filter"}, document)
        return values

    # ------------------------------------------------------------------------------------------ requests

    def _handle(self, request: http.server.BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(request.path)
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        if self.answer == "html":
            return self._reply(request, 200, b"<!doctype html><title>Welcome</title>", "text/html; charset=utf-8")
        if self.answer == "not-found":
            return self._reply(request, 404, b"404 page not found\n", "text/plain; charset=utf-8")
        if self.answer == "login":  # oauth2-proxy / Dex in front of KFP, without a session
            location = f"{self.url}/dex/auth?client_id=kubeflow-oidc-authservice&state=s3cr3t-state"
            return self._reply(request, 302, b"", "text/html; charset=utf-8", {"Location": location})
        if self.answer == "unavailable":
            return self._reply(request, 503, b"upstream connect error", "text/plain; charset=utf-8")
        operation, path_values = self._route(request.command, url.path)
        if operation is None:
            self.violations.append(Violation(f"{request.command} {url.path}", "route", "no such operation in the spec"))
            return self._error(request, None, 404, f"Not Found: {request.command} {url.path}")
        with self._lock:
            self.calls.append(operation.operation_id)
            self.authorization_headers.append(request.headers.get("Authorization"))
        refusal = self._refusal(operation, request.headers)
        if refusal == 403 and (self.healthz_open or self.read_only) and operation.operation_id in UPLOAD_DENIED:
            # KFP itself refuses (its healthz answered): the upload handler's answer, see UPLOAD_DENIED.
            return self._error(request, operation, 400, UPLOAD_DENIED[operation.operation_id])
        if refusal:
            return self._error(
                request,
                operation,
                refusal,
                "Unauthenticated" if refusal == 401 else "PermissionDenied: access to the namespace is forbidden",
            )
        try:
            query = self._check_query(operation, urllib.parse.parse_qs(url.query, keep_blank_values=True))
            payload = self._payload(operation, request.headers, body)
            handler: Callable[..., dict] | None = getattr(self, f"op_{operation.operation_id}", None)
            if handler is None:
                self.violations.append(
                    Violation(operation.operation_id, "unimplemented", "the fake does not serve this operation")
                )
                raise ApiError(501, f"{operation.operation_id} is not implemented by the fake")
            with self._lock:
                try:
                    answer = handler(path_values, query, payload)
                except ApiError as error:
                    if error.status == 400:  # the server's own checks of a request the schema let through
                        self.violations.append(Violation(operation.operation_id, "semantics", error.message))
                    raise
        except ApiError as error:
            if error.plain:
                return self._reply(request, error.status, f"{error.message}\n".encode(), "text/plain; charset=utf-8")
            return self._error(request, operation, error.status, error.message)
        self._check_answer(operation, answer)
        self._reply(request, 200, json.dumps(answer).encode(), "application/json")

    def _route(self, method: str, path: str) -> tuple[Operation | None, dict[str, str]]:
        for operation in self.operations:
            match = operation.pattern.match(path)
            if operation.method == method and match:
                return operation, dict(
                    zip(operation.path_names, map(urllib.parse.unquote, match.groups()), strict=True)
                )
        return None, {}

    def _refusal(self, operation: Operation, headers: Any) -> int | None:
        if operation.operation_id == "HealthzService_GetHealthz" and self.healthz_open:
            return None
        if self.token or self.cookie:
            bearer = self.token is not None and headers.get("Authorization") == f"Bearer {self.token}"
            cookie = self.cookie is not None and self.cookie in [
                c.strip() for c in (headers.get("Cookie") or "").split(";")
            ]
            if not (bearer or cookie):
                return 401
        return 403 if self.forbidden or (self.read_only and operation.method != "GET") else None

    def _payload(self, operation: Operation, headers: Any, body: bytes) -> Any:
        parameters = operation.spec.get("parameters", [])
        body_parameter = next((p for p in parameters if p["in"] == "body"), None)
        if any(p["in"] == "formData" for p in parameters):
            return self._upload(operation, headers, body)
        if body_parameter is None:
            if body.strip() not in (b"", b"{}", b"null"):
                self.violations.append(Violation(operation.operation_id, "body", "a body where the spec has none"))
                raise ApiError(400, "Invalid input error: unexpected body")
            return None
        if not (headers.get("Content-Type") or "").startswith("application/json"):
            self.violations.append(
                Violation(operation.operation_id, "body", f"Content-Type {headers.get('Content-Type')!r}")
            )
            raise ApiError(400, "Invalid input error: body is not JSON")
        try:
            document = json.loads(body)
        except ValueError:
            self.violations.append(Violation(operation.operation_id, "body", "not JSON"))
            raise ApiError(400, "Invalid input error: body is not JSON") from None
        self._check(operation.operation_id, "body", body_parameter["schema"], document)
        self.validated.append(operation.operation_id)
        return document

    def _upload(self, operation: Operation, headers: Any, body: bytes) -> dict:
        content_type = headers.get("Content-Type") or ""
        if not content_type.startswith("multipart/form-data"):
            self.violations.append(Violation(operation.operation_id, "upload", f"Content-Type {content_type!r}"))
            raise ApiError(400, "Failed to read pipeline from file")
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
        )
        files: dict[Any, tuple[str | None, Any]] = {
            part.get_param("name", header="content-disposition"): (part.get_filename(), part.get_payload(decode=True))
            for part in message.iter_parts()
        }
        if set(files) != {"uploadfile"} or not files["uploadfile"][0]:
            self.violations.append(
                Violation(
                    operation.operation_id,
                    "upload",
                    f"form fields {sorted(map(str, files))}; the spec has one file, uploadfile",
                )
            )
            raise ApiError(400, "Failed to read pipeline from file")
        filename, content = files["uploadfile"]
        # ReadPipelineFile (backend/src/apiserver/server/util.go, 2.15.0-2.17.0) takes a YAML or JSON file by its name
        # (isYamlFile, isJSONFile), or a zip or tarball by its bytes, which the fake does not read.
        if not filename or not filename.endswith((".yaml", ".yml", ".json")):
            self.violations.append(
                Violation(operation.operation_id, "upload", f"{filename!r}: the fake reads YAML and JSON packages only")
            )
            raise ApiError(400, "Failed to read a pipeline spec file")
        try:
            documents = list(yaml.safe_load_all(content))
        except yaml.YAMLError:
            self.violations.append(Violation(operation.operation_id, "upload", "not YAML"))
            raise ApiError(400, "Failed to read a pipeline spec file") from None
        platform = documents[1] if len(documents) > 1 else {}
        try:
            _parse_pipeline_spec({"pipeline_spec": documents[0], "platform_spec": platform})
        except ApiError as error:
            self.violations.append(Violation(operation.operation_id, "upload", error.message))
            raise
        self.validated.append(operation.operation_id)
        return {"filename": filename, "spec": stored_spec(documents[0], platform)}

    def _check_answer(self, operation: Operation, answer: dict) -> None:
        schema = operation.spec["responses"]["200"]["schema"]
        errors = list(self._validator(schema, self._response_definitions).iter_errors(answer))
        if errors:
            self.violations.append(Violation(operation.operation_id, "response", errors[0].message))

    def _error(
        self, request: http.server.BaseHTTPRequestHandler, operation: Operation | None, status: int, message: str
    ) -> None:
        document: dict[str, Any]
        if operation is not None and operation.operation_id in UPLOAD_OPERATIONS:
            document = {"error_message": message, "error_details": message}
        else:
            document = {"code": STATUS_CODES.get(status, 2), "message": message, "details": []}
        self._reply(request, status, json.dumps(document).encode(), "application/json")

    @staticmethod
    def _reply(
        request: http.server.BaseHTTPRequestHandler,
        status: int,
        data: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        request.send_response(status)
        for name, value in (headers or {}).items():
            request.send_header(name, value)
        request.send_header("Content-Type", content_type)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    # ------------------------------------------------------------------------------------------ semantics

    @staticmethod
    def _filtered(items: list[dict], query: dict[str, str]) -> list[dict]:
        """EQUALS predicates on string keys, which is all kfp.Client and bakeoff send."""
        if not query.get("filter"):
            return items
        for predicate in json.loads(query["filter"]).get("predicates", []):
            if predicate.get("operation") not in ("EQUALS", 1):
                raise ApiError(400, "Invalid input error: the fake filters with EQUALS only")
            value = predicate.get("string_value", predicate.get("stringValue"))
            items = [item for item in items if item.get(predicate["key"]) == value]
        return items

    @staticmethod
    def _page(items: list[dict], query: dict[str, str], key: str, identity: str) -> dict:
        """A page of ``items``, sorted as KFP's list package sorts: by ``sort_by``'s field, ties by the primary key
        (``identity``) in the same direction (Options.AddSortingToSelect, backend/src/apiserver/list/list.go). Times
        are whole seconds there as here, so two things made in one second list in the order of their ids."""
        sort_by = query.get("sort_by") or ""
        if sort_by:
            field, _, direction = sort_by.partition(" ")
            items = sorted(items, key=lambda item: (item.get(field) or "", item[identity]), reverse=direction == "desc")
        start = int(query.get("page_token") or 0)
        size = int(query.get("page_size") or 0) or len(items) or 1
        page = items[start : start + size]
        answer: dict[str, Any] = {"total_size": len(items)}
        if page:
            answer[key] = [{k: v for k, v in item.items() if not k.startswith("_")} for item in page]
        if start + size < len(items):
            answer["next_page_token"] = str(start + size)
        return answer

    def _namespace_required(self, query: dict[str, str], what: str) -> None:
        if self.multi_user and not query.get("namespace") and not query.get("experiment_id"):
            raise ApiError(400, f"Invalid input error: In multi-user mode, {what} requires filtering by namespace")

    def op_HealthzService_GetHealthz(self, path: dict, query: dict, body: Any) -> dict:
        return {"multi_user": self.multi_user, "pipeline_store": "database"}

    def op_ExperimentService_ListExperiments(self, path: dict, query: dict, body: Any) -> dict:
        self._namespace_required(query, "ListExperiments")
        items = [e for e in self.experiments.values() if e.get("namespace", "") == query.get("namespace", "")]
        return self._page(self._filtered(items, query), query, "experiments", "experiment_id")

    def op_ExperimentService_CreateExperiment(self, path: dict, query: dict, body: dict) -> dict:
        name, namespace = body.get("display_name", ""), body.get("namespace", "")
        if not name:
            raise ApiError(400, "Invalid input error: Experiment display name is empty")
        if self.multi_user and not namespace:
            raise ApiError(400, "Invalid input error: Experiment namespace is empty in multi-user mode")
        if any(e["display_name"] == name and e.get("namespace", "") == namespace for e in self.experiments.values()):
            raise ApiError(409, f"Already exist error: experiment {name!r} exists")
        experiment = {
            "experiment_id": str(uuid.uuid4()),
            "display_name": name,
            "namespace": namespace,
            "created_at": _now(),
            "storage_state": "AVAILABLE",
        }
        if body.get("description"):
            experiment["description"] = body["description"]
        self.experiments[experiment["experiment_id"]] = experiment
        return {k: v for k, v in experiment.items() if not k.startswith("_")}

    def op_ExperimentService_GetExperiment(self, path: dict, query: dict, body: Any) -> dict:
        experiment = self.experiments.get(path["experiment_id"])
        if experiment is None:
            raise ApiError(404, f"NotFound: experiment {path['experiment_id']}")
        return {k: v for k, v in experiment.items() if not k.startswith("_")}

    def op_PipelineService_ListPipelines(self, path: dict, query: dict, body: Any) -> dict:
        items = [p for p in self.pipelines.values() if p.get("namespace", "") == query.get("namespace", "")]
        return self._page(self._filtered(items, query), query, "pipelines", "pipeline_id")

    def op_PipelineService_GetPipeline(self, path: dict, query: dict, body: Any) -> dict:
        pipeline = self.pipelines.get(path["pipeline_id"])
        if pipeline is None:
            raise ApiError(404, f"NotFound: pipeline {path['pipeline_id']}")
        return {k: v for k, v in pipeline.items() if not k.startswith("_")}

    def _new_pipeline(self, name: str, display_name: str, namespace: str, description: str = "") -> dict:
        if not name:
            raise ApiError(400, "Invalid input error: pipeline name is empty")
        if any(p["name"] == name and p.get("namespace", "") == namespace for p in self.pipelines.values()):
            raise ApiError(409, "Failed to create a pipeline and a pipeline version. The pipeline already exists.")
        pipeline: dict[str, Any] = {
            "pipeline_id": str(uuid.uuid4()),
            "name": name,
            "display_name": display_name or name,
            "namespace": namespace,
            "created_at": _now(),
        }
        if description:
            pipeline["description"] = description
        self.pipelines[pipeline["pipeline_id"]] = pipeline
        return pipeline

    def _new_version(self, pipeline_id: str, name: str, display_name: str, spec: dict) -> dict:
        if pipeline_id not in self.pipelines:
            raise ApiError(404, f"NotFound: pipeline {pipeline_id}")
        if any(v["pipeline_id"] == pipeline_id and v["name"] == name for v in self.versions.values()):
            raise ApiError(409, "Failed to create a pipeline version. The pipeline already exists.")
        version: dict[str, Any] = {
            "pipeline_version_id": str(uuid.uuid4()),
            "pipeline_id": pipeline_id,
            "name": name,
            "display_name": display_name or name,
            "created_at": _now(),
            "pipeline_spec": spec,
        }
        self.versions[version["pipeline_version_id"]] = version
        return version

    def op_PipelineService_CreatePipeline(self, path: dict, query: dict, body: dict) -> dict:
        pipeline = self._new_pipeline(
            body.get("name", ""), body.get("display_name", ""), body.get("namespace", ""), body.get("description", "")
        )
        return {k: v for k, v in pipeline.items() if not k.startswith("_")}

    def op_UploadPipeline(self, path: dict, query: dict, upload: dict) -> dict:
        # buildPipelineName (pipeline_server.go): the name, else the display name, else the file's name as it is.
        name = query.get("name") or query.get("display_name") or upload["filename"]
        if len(name) > PIPELINE_NAME_MAX:
            raise ApiError(
                400, f"Invalid input error: Pipeline.Name length cannot exceed {PIPELINE_NAME_MAX}", plain=True
            )
        pipeline = self._new_pipeline(
            name, query.get("display_name", ""), query.get("namespace", ""), query.get("description", "")
        )
        self._new_version(pipeline["pipeline_id"], pipeline["name"], pipeline["display_name"], upload["spec"])
        return {k: v for k, v in pipeline.items() if not k.startswith("_")}

    def op_UploadPipelineVersion(self, path: dict, query: dict, upload: dict) -> dict:
        if not query.get("pipelineid"):
            raise ApiError(400, "Failed to create a pipeline version due to error reading pipeline id")
        name = query.get("name") or query.get("display_name") or upload["filename"]
        version = self._new_version(query["pipelineid"], name, query.get("display_name", ""), upload["spec"])
        return {k: v for k, v in version.items() if not k.startswith("_")}

    def op_PipelineService_ListPipelineVersions(self, path: dict, query: dict, body: Any) -> dict:
        if path["pipeline_id"] not in self.pipelines:
            raise ApiError(404, f"NotFound: pipeline {path['pipeline_id']}")
        items = [v for v in self.versions.values() if v["pipeline_id"] == path["pipeline_id"]]
        return self._page(self._filtered(items, query), query, "pipeline_versions", "pipeline_version_id")

    def _runnable(self, operation: str, body: dict, refused: str) -> dict:
        """What the server checks of a run or recurring run before it accepts one.

        A pipeline spec it cannot parse is answered 500 with ``refused`` (ResourceManager.CreateRun and CreateJob,
        backend/src/apiserver/resource/resource_manager.go, wrap fetchTemplateFromPipelineSpec's error as an
        InternalServerError), and kept here as a violation all the same.
        """
        if not body.get("display_name"):
            raise ApiError(400, "Invalid input error: display name is empty")
        if body.get("experiment_id") and body["experiment_id"] not in self.experiments:
            raise ApiError(404, f"NotFound: experiment {body['experiment_id']}")
        if ("pipeline_spec" in body) == ("pipeline_version_reference" in body):
            raise ApiError(400, "Invalid input error: give either pipeline_spec or pipeline_version_reference")
        if "pipeline_spec" not in body:
            return {}
        try:
            return _parse_pipeline_spec(body["pipeline_spec"])
        except ApiError as error:
            self.violations.append(Violation(operation, "semantics", error.message))
            raise ApiError(500, f"InternalServerError: {refused}: {error.message}") from None

    def op_RunService_CreateRun(self, path: dict, query: dict, body: dict) -> dict:
        self._runnable("RunService_CreateRun", body, "Failed to create a run due to error fetching manifest")
        run = {
            **body,
            "_body": body,
            "run_id": str(uuid.uuid4()),
            "state": "PENDING",
            "created_at": _now(),
            "storage_state": "AVAILABLE",
            "_polls": 0,
        }
        self.runs[run["run_id"]] = run
        return {k: v for k, v in run.items() if not k.startswith("_")}

    def op_RunService_GetRun(self, path: dict, query: dict, body: Any) -> dict:
        run = self.runs.get(path["run_id"])
        if run is None:
            raise ApiError(404, f"NotFound: run {path['run_id']}")
        run["_polls"] += 1
        if run["state"] not in ("SUCCEEDED", "FAILED"):
            run["state"] = self.run_outcome if run["_polls"] >= self.polls_until_done else "RUNNING"
            if run["state"] in ("SUCCEEDED", "FAILED"):
                run["finished_at"] = _now()
            if run["state"] == "FAILED":
                run["error"] = {"code": 2, "message": self.run_error}
        return {k: v for k, v in run.items() if not k.startswith("_")}

    def op_RecurringRunService_CreateRecurringRun(self, path: dict, query: dict, body: dict) -> dict:
        self._runnable(
            "RecurringRunService_CreateRecurringRun",
            body,
            "Failed to create a recurring run with an invalid pipeline spec manifest",
        )
        trigger = body.get("trigger") or {}
        if len([kind for kind in ("cron_schedule", "periodic_schedule") if kind in trigger]) != 1:
            raise ApiError(
                400, "Invalid input error: a trigger needs exactly one of cron_schedule and periodic_schedule"
            )
        # toModelJob, backend/src/apiserver/server/api_converter.go (cron at line 1974 in 2.15.0/2.16.0, 2088 in
        # 2.17.0; the interval 6 lines below): max concurrency, the cron as robfig/cron v1.2.0's Parse reads it
        # (seconds first: 5 or 6 fields, or a @descriptor), an interval of at least 1 second. Its refusal reaches
        # the client wrapped (JobServer.CreateRecurringRun, server/job_server.go, wraps it; UserError.GRPCStatus,
        # backend/src/common/util/error.go, answers the wrapped chain).
        refused = "Failed to create a recurring run due to conversion error: Invalid input error:"
        concurrency = int(body.get("max_concurrency", 0))
        if not 1 <= concurrency <= 10:
            raise ApiError(
                400,
                f"{refused} Max concurrency of a recurring run must be at least 1 and at most 10. Received"
                f" {concurrency}",
            )
        cron = (trigger.get("cron_schedule") or {}).get("cron")
        if cron is not None and not (cron.startswith("@") or len(cron.split()) in (5, 6)):
            raise ApiError(
                400,
                f"{refused} Schedule cron is not a supported format(https://godoc.org/github.com/robfig/cron). Error:"
                f" Expected 5 to 6 fields, found {len(cron.split())}: {cron}",
            )
        interval = (trigger.get("periodic_schedule") or {}).get("interval_second")
        if interval is not None and int(interval) < 1:
            raise ApiError(
                400,
                f"{refused} Found invalid period schedule interval {int(interval)}. Set at interval to least 1 second",
            )
        if body.get("mode") not in ("ENABLE", "DISABLE"):
            raise ApiError(400, "Invalid input error: mode must be ENABLE or DISABLE")
        recurring = {
            **body,
            "_body": body,
            "recurring_run_id": str(uuid.uuid4()),
            "created_at": _now(),
            "updated_at": _now(),
            "status": "ENABLED" if body["mode"] == "ENABLE" else "DISABLED",
        }
        recurring["max_concurrency"] = str(body["max_concurrency"])  # int64 leaves the server as a string
        if "periodic_schedule" in trigger:
            periodic = dict(trigger["periodic_schedule"])
            periodic["interval_second"] = str(periodic["interval_second"])
            recurring["trigger"] = {"periodic_schedule": periodic}
        if self.multi_user:
            recurring["namespace"] = self.experiments[body["experiment_id"]].get("namespace", "")
        self.recurring_runs[recurring["recurring_run_id"]] = recurring
        return {k: v for k, v in recurring.items() if not k.startswith("_")}

    def _recurring(self, path: dict) -> dict:
        recurring = self.recurring_runs.get(path["recurring_run_id"])
        if recurring is None:
            raise ApiError(404, f"NotFound: recurring run {path['recurring_run_id']}")
        return recurring

    def op_RecurringRunService_ListRecurringRuns(self, path: dict, query: dict, body: Any) -> dict:
        self._namespace_required(query, "ListRecurringRuns")
        items = list(self.recurring_runs.values())
        if query.get("namespace"):
            items = [
                r for r in items if self.experiments[r["experiment_id"]].get("namespace", "") == query["namespace"]
            ]
        if query.get("experiment_id"):
            items = [r for r in items if r["experiment_id"] == query["experiment_id"]]
        return self._page(self._filtered(items, query), query, "recurringRuns", "recurring_run_id")

    def op_RecurringRunService_GetRecurringRun(self, path: dict, query: dict, body: Any) -> dict:
        return {k: v for k, v in self._recurring(path).items() if not k.startswith("_")}

    def op_RecurringRunService_EnableRecurringRun(self, path: dict, query: dict, body: Any) -> dict:
        self._recurring(path).update(status="ENABLED", mode="ENABLE", updated_at=_now())
        return {}

    def op_RecurringRunService_DisableRecurringRun(self, path: dict, query: dict, body: Any) -> dict:
        self._recurring(path).update(status="DISABLED", mode="DISABLE", updated_at=_now())
        return {}

    def op_RecurringRunService_DeleteRecurringRun(self, path: dict, query: dict, body: Any) -> dict:
        self._recurring(path)
        del self.recurring_runs[path["recurring_run_id"]]
        return {}
