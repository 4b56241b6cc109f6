"""`bakeoff deploy`: bakeoff's ServingRuntime and an InferenceService on KServe, rolled to each published version."""

from __future__ import annotations

import copy
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kserve import (
    V1alpha1ServingRuntime,
    V1alpha1ServingRuntimeSpec,
    V1alpha1SupportedModelFormat,
    V1beta1InferenceService,
    V1beta1InferenceServiceSpec,
    V1beta1ModelFormat,
    V1beta1ModelSpec,
    V1beta1PredictorSpec,
)
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from bakeoff.components import defaults
from bakeoff.components.environment import KUBECONFIG_ENV, KUBERNETES_HOST_ENV
from bakeoff.components.errors import BakeoffError
from bakeoff.components.kubeapi import UNDECLARED_FIELD, api_body, api_reason, api_status, unanswered
from bakeoff.components.storage import NAMESPACE_TOKEN, POD_NAMESPACE_FILE, open_store, registry

GROUP = "serving.kserve.io"
ISVC_VERSION, ISVC_PLURAL = "v1beta1", "inferenceservices"
RUNTIME_VERSION, RUNTIME_PLURAL = "v1alpha1", "servingruntimes"
RUNTIME_NAME = "bakeoff"  # manifests/kserve/servingruntime.yaml
CONTAINER = "kserve-container"  # the runtime container KServe merges the predictor's model spec into
SERVER_MODULE = "bakeoff.components.serving.server"
MODEL_DIR = "/mnt/models"  # where KServe's storage initializer puts storageUri
HTTP_PORT = defaults.SERVING_PORT  # the port Knative and KServe's runtimes expect
# KServe's ModelServer default (DEFAULT_GRPC_PORT), where its own Python runtimes serve V2 gRPC beside HTTP.
GRPC_PORT = 8081
# The one port the runtime declares: Knative (KServe's default Serverless mode) refuses a second one and any name but
# "", "http1" or "h2c" (validateContainersPorts, knative.dev/serving pkg/apis/serving/k8s_validation.go); gRPC is
# exposed in Standard mode by the InferenceService's own ports (inferenceservice.yaml).
HTTP_PORT_NAME = "http1"
MODEL_FORMAT, MODEL_FORMAT_VERSION = "tensorflow", "2"
PROTOCOLS = ["v1", "v2"]
SERVICE_ACCOUNT = (
    "bakeoff-s3"  # manifests/kserve/serviceaccount.yaml: carries the S3 secret the storage initializer reads
)
PART_OF = {"app.kubernetes.io/part-of": "bakeoff"}
VERSION_ANNOTATION = (
    "bakeoff/version"  # on the predictor: a new value is a new pod template, so KServe rolls out a new revision
)
IMAGE_ANNOTATION = "bakeoff/image"  # the runtime's image, for the same reason when only the image changes
# The predictor's size when deploy creates it; later deploys leave it to the user (kubectl edit survives).
REQUESTS = {"cpu": "500m", "memory": "1Gi"}
LIMITS = {"cpu": "1", "memory": "2Gi"}
POLL_SECONDS = 5.0
REQUEST_SECONDS = 30  # one API call
# Server-side apply: the API server merges what deploy declares into the object and records deploy's fields under
# this manager; fields others set (gRPC ports, other labels) stay theirs.
FIELD_MANAGER = defaults.FIELD_MANAGER
APPLY_PATCH = "application/apply-patch+yaml"  # JSON is YAML: the client sends the body as JSON
# force: deploy is the one authority on the fields it applies (version and image annotations, storageUri, runtime,
# model format, service account, its label), as a controller is on the objects it manages, and such a controller
# should always force ("Using Server-Side Apply in a controller", kubernetes.io/docs/reference/using-api/
# server-side-apply/); `kubectl apply --server-side` leaves it off because a person there can resolve the conflict.
# Without it, rolling an object that `kubectl apply -k manifests/kserve`, an older deploy (create, merge patch) or
# `kubectl edit` wrote answers 409: their managers own those fields with other values. Fields deploy does not send
# are never touched, and the predictor's size is sent as it stands (_service_config), so forcing takes nothing from
# a user.
FORCE = True
# Strict, as kubectl sends it: the apply's YAML may not repeat a field (applyPatcher, k8s.io/apiserver/pkg/endpoints/
# handlers/patch.go). A field the cluster's KServe does not know fails any apply (kubeapi.UNDECLARED_FIELD).
FIELD_VALIDATION = "Strict"
# Knative names each predictor revision, so its DNS label "<name>-predictor-00001" must stay within 63 characters.
MAX_NAME = 63 - len("-predictor-00001")
_ISVC_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # KServe's IsvcNameFmt


@dataclass(frozen=True)
class Cluster:
    """A connection to the Kubernetes API and the namespace it defaults to."""

    api: client.CustomObjectsApi
    namespace: str
    host: str


@dataclass(frozen=True)
class Deployed:
    """What `deploy` did, and where to look for its rollout."""

    name: str
    namespace: str
    version: int
    previous: int | None  # the version the service had, None when it was created
    action: str  # "created", "updated" or "unchanged"
    runtime: str  # "created", "updated" or "kept"
    image: str
    baseline: tuple[Any, Any] | None  # the rollout mark before the write; None: any status is the new one


# ---------------------------------------------------------------- the objects


def service_name(model_name: str) -> str:
    """The InferenceService's name is the model's, which the v1 URL (/v1/models/<name>:predict) carries too."""
    if not _ISVC_NAME.fullmatch(model_name) or len(model_name) > MAX_NAME:
        raise BakeoffError(
            f"model name {model_name!r} cannot name an InferenceService: use lower-case letters, digits and '-',"
            f" starting with a letter, at most {MAX_NAME} characters (--model-name)"
        )
    return model_name


def check_store(store: str) -> None:
    """Refuses a store KServe's storage initializer cannot read (it reads s3://); needs no cluster, so runs first."""
    parsed = urlparse(store)
    if parsed.scheme not in ("s3", "minio") or not parsed.netloc:
        raise BakeoffError(
            f"store {store!r} is not one KServe can read: pass --store s3://BUCKET/PREFIX, "
            f"the store the pipeline publishes to (default {defaults.CLUSTER_STORE})"
        )


def storage_uri(store: str, namespace: str, model_name: str) -> str:
    """The model's folder in the store, as KServe's storage initializer reads it (s3://)."""
    store = store.replace(NAMESPACE_TOKEN, namespace).rstrip("/")
    check_store(store)
    parsed = urlparse(store)
    return f"s3://{parsed.netloc}{parsed.path}/{registry.model_prefix(model_name)}"


def serving_runtime(image: str) -> V1alpha1ServingRuntime:
    """bakeoff's model server as a ServingRuntime: manifests/kserve/servingruntime.yaml, as an object."""
    container = client.V1Container(
        name=CONTAINER,
        image=image,
        command=["python", "-m", SERVER_MODULE],
        # KServe fills in {{.Name}}, the InferenceService's name, as its own runtimes' --model_name.
        args=[
            "--model-dir",
            MODEL_DIR,
            "--model-name",
            "{{.Name}}",
            "--http-port",
            str(HTTP_PORT),
            "--grpc-port",
            str(GRPC_PORT),
        ],
        ports=[client.V1ContainerPort(container_port=HTTP_PORT, name=HTTP_PORT_NAME, protocol="TCP")],
        security_context=client.V1SecurityContext(
            run_as_non_root=True,
            allow_privilege_escalation=False,
            privileged=False,
            capabilities=client.V1Capabilities(drop=["ALL"]),
        ),
        resources=client.V1ResourceRequirements(requests=dict(REQUESTS), limits=dict(LIMITS)),
    )
    return V1alpha1ServingRuntime(
        api_version=f"{GROUP}/{RUNTIME_VERSION}",
        kind="ServingRuntime",
        metadata=client.V1ObjectMeta(name=RUNTIME_NAME, labels=dict(PART_OF)),
        spec=V1alpha1ServingRuntimeSpec(
            annotations={"prometheus.kserve.io/port": str(HTTP_PORT), "prometheus.kserve.io/path": "/metrics"},
            # autoSelect off: chosen only by name, never for someone else's TensorFlow model.
            supported_model_formats=[
                V1alpha1SupportedModelFormat(name=MODEL_FORMAT, version=MODEL_FORMAT_VERSION, auto_select=False)
            ],
            protocol_versions=list(PROTOCOLS),
            containers=[container],
        ),
    )


def inference_service(name: str, uri: str, version: int, image: str) -> V1beta1InferenceService:
    """The InferenceService that serves ``uri`` with bakeoff's runtime: manifests/kserve/inferenceservice.yaml, as an
    object."""
    return V1beta1InferenceService(
        api_version=f"{GROUP}/{ISVC_VERSION}",
        kind="InferenceService",
        metadata=client.V1ObjectMeta(name=name, labels=dict(PART_OF)),
        spec=V1beta1InferenceServiceSpec(
            predictor=V1beta1PredictorSpec(
                service_account_name=SERVICE_ACCOUNT,
                annotations={VERSION_ANNOTATION: str(version), IMAGE_ANNOTATION: image},
                model=V1beta1ModelSpec(
                    name=None,  # the SDK's default is "", which would name the container ""
                    model_format=V1beta1ModelFormat(name=MODEL_FORMAT),
                    runtime=RUNTIME_NAME,
                    storage_uri=uri,
                    resources=client.V1ResourceRequirements(requests=dict(REQUESTS), limits=dict(LIMITS)),
                ),
            )
        ),
    )


def as_dict(model: Any) -> dict:
    """An SDK object as the JSON the API takes (camelCase, no unset fields)."""
    return client.ApiClient().sanitize_for_serialization(model)


# ---------------------------------------------------------------- talking to the API


def _failure(error: BaseException, doing: str, cluster: Cluster, namespace: str) -> BakeoffError:
    """One line for a failed API call: what was refused, and what to do."""
    status, reason = api_status(error), api_reason(error)
    if status == 401:
        return BakeoffError(
            f"the Kubernetes API at {cluster.host} does not accept your credentials ({reason}):"
            " log in again, or check your kube-config context"
        )
    if status == 403:
        return BakeoffError(
            f"not allowed to {doing} in namespace {namespace!r} ({reason}): "
            f"you need get, create and patch on inferenceservices and servingruntimes ({GROUP}) there, "
            "or another --namespace"
        )
    if status == 409:
        return BakeoffError(
            f"cannot {doing} in namespace {namespace!r}: someone changed it after deploy read it ({reason}):"
            " run deploy again"
        )
    if status == 404 and (api_body(error).get("details") or {}).get("kind") == "namespaces":
        return BakeoffError(
            f"cannot {doing}: namespace {namespace!r} does not exist on {cluster.host} ({reason}):"
            " pass --namespace with your profile's namespace, or leave it out for the kube-config's"
        )
    if status == 404:
        return BakeoffError(
            f"cannot {doing}: the API at {cluster.host} has no {GROUP} resources ({reason}):"
            " install KServe on the cluster first"
        )
    if status in (400, 422) or (status == 500 and UNDECLARED_FIELD in reason):
        return BakeoffError(
            f"the API at {cluster.host} refused to {doing} in namespace {namespace!r} ({reason}):"
            f" the cluster's {GROUP} CRDs refuse the field named; an older KServe may lack it: upgrade KServe there"
        )
    if status:
        return BakeoffError(f"cannot {doing} in namespace {namespace!r} ({reason})")
    return BakeoffError(
        f"cannot reach the Kubernetes API at {cluster.host} to {doing} ({reason}):"
        " check the kube-config context (kubectl config current-context) and the network"
    )


def _request(cluster: Cluster, namespace: str, doing: str, call: Callable[[], Any]) -> Any:
    """One API call; a refusal or no answer becomes one line (``_failure``)."""
    try:
        return call()
    except ApiException as error:
        raise _failure(error, doing, cluster, namespace) from None
    except Exception as error:  # the client lets urllib3's and the socket's errors through
        if unanswered(error):
            raise _failure(error, doing, cluster, namespace) from None
        raise


def _get(cluster: Cluster, namespace: str, plural: str, name: str) -> dict | None:
    """The object, or None when it does not exist (a 404 that names it; one for the resource type means no KServe)."""
    version = ISVC_VERSION if plural == ISVC_PLURAL else RUNTIME_VERSION

    def read() -> dict | None:
        try:
            return cluster.api.get_namespaced_custom_object(
                GROUP, version, namespace, plural, name, _request_timeout=REQUEST_SECONDS
            )
        except ApiException as error:
            if error.status == 404 and (api_body(error).get("details") or {}).get("name") == name:
                return None
            raise

    return _request(cluster, namespace, f"read {plural}.{GROUP} {name!r}", read)


def server_side_apply(
    api: client.CustomObjectsApi,
    namespace: str,
    plural: str,
    body: dict,
    field_manager: str | None = FIELD_MANAGER,
    force: bool | None = FORCE,
) -> tuple[dict, int, Any]:
    """PATCH ``body`` as a server-side apply: (the object as stored, the HTTP status, the headers).

    The generated client's patch method sends merge patches only, so this is its request with apply's content type.
    201 means the apply created the object.
    """
    version = ISVC_VERSION if plural == ISVC_PLURAL else RUNTIME_VERSION
    name = body["metadata"]["name"]
    options = [("fieldManager", field_manager), ("force", force), ("fieldValidation", FIELD_VALIDATION)]
    return api.api_client.call_api(
        "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}",
        "PATCH",
        {"group": GROUP, "version": version, "namespace": namespace, "plural": plural, "name": name},
        [(key, value) for key, value in options if value is not None],
        {"Accept": "application/json", "Content-Type": APPLY_PATCH},
        body=body,
        response_type="object",
        auth_settings=["BearerToken"],
        _return_http_data_only=False,
        _request_timeout=REQUEST_SECONDS,
    )


def _apply(cluster: Cluster, namespace: str, plural: str, body: dict, existed: bool) -> tuple[dict, bool]:
    """Applies ``body`` as bakeoff's field manager: (the object as stored, whether the apply created it).

    Creating through apply needs RBAC's create as well as patch (PatchResource's createAuthorizerAttributes,
    k8s.io/apiserver/pkg/endpoints/handlers/patch.go): what deploy was doing, as its read knows, names the call.
    """
    doing = f"{'patch' if existed else 'create'} {plural}.{GROUP} {body['metadata']['name']!r}"
    stored, status, _ = _request(
        cluster, namespace, doing, lambda: server_side_apply(cluster.api, namespace, plural, body)
    )
    return stored, status == 201


def pod_namespace() -> str | None:
    try:
        return POD_NAMESPACE_FILE.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def connect() -> Cluster:
    """In a pod: its service account and namespace; elsewhere: the kube-config's current context (kubectl's rules)."""
    configuration = client.Configuration()
    if os.environ.get(KUBERNETES_HOST_ENV) and pod_namespace():
        config.load_incluster_config(client_configuration=configuration)
        namespace = pod_namespace() or "default"
    else:
        # Read $KUBECONFIG now: the kubernetes package reads it once, when it is imported.
        files = os.environ.get(KUBECONFIG_ENV) or str(Path("~/.kube/config").expanduser())
        try:
            config.load_kube_config(config_file=files, client_configuration=configuration)
            _, active = config.list_kube_config_contexts(config_file=files)
        except (config.ConfigException, OSError, TypeError) as error:
            raise BakeoffError(
                f"no Kubernetes API to deploy to: not in a pod, and no usable kube-config at {files}"
                f" ({' '.join(str(error).split()) or type(error).__name__}): "
                "set KUBECONFIG or run `kubectl config use-context`"
            ) from None
        namespace = (active.get("context") or {}).get("namespace") or "default"
    return Cluster(client.CustomObjectsApi(client.ApiClient(configuration)), namespace, configuration.host)


def latest_version(
    store: str, namespace: str, model_name: str, s3_endpoint: str | None, s3_insecure: bool | None
) -> int:
    """The newest complete version in the store, read as `bakeoff models list` reads it."""
    uri = store.replace(NAMESPACE_TOKEN, namespace).rstrip("/")
    try:
        versions = registry.list_versions(open_store(uri, s3_endpoint, s3_insecure), model_name)
    except BakeoffError as error:
        raise BakeoffError(
            f"cannot read the published versions ({error}); or pass --version N (see `bakeoff models list`)"
        ) from None
    if not versions:
        raise BakeoffError(
            f"no published version of {model_name!r} in {uri}: run the pipeline first, "
            "or check --store and --model-name"
        )
    return versions[-1].version


# ---------------------------------------------------------------- deploying


def _rollout_mark(body: dict | None) -> tuple[Any, Any] | None:
    """What changes in the status once the controller has seen a new spec.

    observedGeneration (which KServe copies from the predictor's Knative Service or Deployment, not always the
    InferenceService's own generation: kserve/kserve#6081), and the predictor's latest created revision.
    """
    status = (body or {}).get("status") or {}
    predictor = (status.get("components") or {}).get("predictor") or {}
    return status.get("observedGeneration"), predictor.get("latestCreatedRevision")


def _generation(body: dict | None) -> Any:
    return ((body or {}).get("metadata") or {}).get("generation")


def _outcome(before: dict | None, after: dict, created: bool) -> str:
    """What an apply did: "created", "updated" (a new spec: a new generation) or "unchanged".

    The API server counts a new generation only when more than metadata (and a status subresource) changes, so an
    apply of the version already served starts no new revision, and deploy says so.
    """
    if created:
        return "created"
    return "updated" if _generation(after) != _generation(before) else "unchanged"


def _server(runtime: dict, namespace: str) -> dict:
    """The runtime's kserve-container, which makes it bakeoff's."""
    server = next((c for c in runtime["spec"].get("containers") or [] if c.get("name") == CONTAINER), None)
    if server is None:
        raise BakeoffError(
            f"servingruntime {RUNTIME_NAME!r} in {namespace!r} has no {CONTAINER!r} container, so it is not bakeoff's:"
            " delete it, or apply manifests/kserve"
        )
    return server


def _runtime_config(current: dict | None, namespace: str, image: str) -> dict:
    """What deploy applies to its ServingRuntime: the whole runtime when it makes it; else the runtime's spec as it
    stands with the new image, on the condition that it still stands.

    ``spec.containers`` is an atomic list (the CRD declares no list type), so the image cannot be applied alone, and
    an apply drops what its manager applied before and leaves out: the spec is sent whole, so that the user's changes
    to the runtime (its size, say) stay. Its resourceVersion is the apply's precondition (as in any update: see
    kubernetes/website#40179): 409 if the runtime changed since the read, rather than the stale copy forced over
    that change. No controller writes a ServingRuntime, so only another writer trips it.
    """
    body = as_dict(serving_runtime(image))
    if current is not None:
        spec = copy.deepcopy(current["spec"])
        _server({"spec": spec}, namespace)["image"] = image
        body["spec"] = spec
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    return body


def _ensure_runtime(cluster: Cluster, namespace: str, image: str | None) -> tuple[str, str]:
    """Applies bakeoff's ServingRuntime with ``image``; without one, keeps the runtime there. Returns (what was done,
    image)."""
    current = _get(cluster, namespace, RUNTIME_PLURAL, RUNTIME_NAME)
    if image is None:
        if current is None:
            raise BakeoffError(
                f"there is no servingruntime {RUNTIME_NAME!r} in {namespace!r} yet, "
                f"and deploy would create it with {defaults.IMAGE}, which nobody publishes: "
                "pass --image REGISTRY/bakeoff:TAG, your build of images/Dockerfile, "
                "or apply manifests/kserve first"
            )
        return "kept", _server(current, namespace).get("image") or ""
    body = _runtime_config(current, namespace, image)
    stored, created = _apply(cluster, namespace, RUNTIME_PLURAL, body, existed=current is not None)
    done = _outcome(current, stored, created)
    return ("kept" if done == "unchanged" else done), image


def _service_config(name: str, uri: str, version: int, image: str, current: dict | None) -> dict:
    """What deploy applies to the InferenceService: the fields it owns (runtime, model format, storageUri, service
    account, the two annotations, its label) and the predictor's size.

    The size is deploy's default only when it creates the service; after that it is sent as it stands, so a resize by
    the user stays: an apply removes a field its manager applied before and now leaves out. No resourceVersion here:
    KServe writes the status all along, which would make such a condition fail; a resize in the instant between
    deploy's read and its apply would be undone.
    """
    body = as_dict(inference_service(name, uri, version, image))
    if current is not None:
        model = body["spec"]["predictor"]["model"]
        resources = (((current.get("spec") or {}).get("predictor") or {}).get("model") or {}).get("resources")
        if resources:
            model["resources"] = resources
        else:
            model.pop("resources", None)
    return body


def deploy(
    cluster: Cluster, namespace: str, model_name: str, uri: str, version: int, image: str | None = None
) -> Deployed:
    """Applies the InferenceService (server-side apply), so KServe rolls out ``version`` beside the old revision.

    Never deletes: the old revision serves until the new one is Ready. Only what deploy owns is applied (runtime,
    model format, storageUri, service account, the two annotations, its label); resources are set at creation and
    then left to the user. The read before the apply gives the version it replaces.
    """
    name = service_name(model_name)
    runtime, running_image = _ensure_runtime(cluster, namespace, image)
    current = _get(cluster, namespace, ISVC_PLURAL, name)
    annotations = (((current or {}).get("spec") or {}).get("predictor") or {}).get("annotations") or {}
    previous = int(annotations[VERSION_ANNOTATION]) if str(annotations.get(VERSION_ANNOTATION, "")).isdigit() else None
    stored, created = _apply(
        cluster,
        namespace,
        ISVC_PLURAL,
        _service_config(name, uri, version, running_image, current),
        existed=current is not None,
    )
    action = _outcome(current, stored, created)
    # The apply's answer carries the status as it was before the controller saw the new spec.
    baseline = _rollout_mark(stored) if action == "updated" else None
    return Deployed(name, namespace, version, previous, action, runtime, running_image, baseline)


def _conditions(body: dict | None) -> str:
    conditions = ((body or {}).get("status") or {}).get("conditions") or []
    shown = [
        f"{c.get('type')}={c.get('status')}"
        + (f" ({c['reason']}: {' '.join(str(c.get('message', '')).split())})" if c.get("reason") else "")
        for c in conditions
        if c.get("status") != "True" or c.get("type") == "Ready"
    ]
    return "; ".join(shown) or "no conditions reported yet"


def _ready(body: dict, baseline: tuple[Any, Any] | None) -> bool:
    """Ready for the spec deploy wrote: the Ready condition True in a status that has moved past ``baseline``."""
    status = body.get("status") or {}
    if baseline is not None and _rollout_mark(body) == baseline:
        return False  # still the status of the previous spec: the controller has not reconciled the new one
    predictor = (status.get("components") or {}).get("predictor") or {}
    created, ready_revision = predictor.get("latestCreatedRevision"), predictor.get("latestReadyRevision")
    if created and ready_revision and created != ready_revision:
        return False  # the new revision is not serving yet
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def wait_ready(cluster: Cluster, deployed: Deployed, timeout: float, poll: float | None = None) -> str:
    """Polls the InferenceService until it is Ready for what deploy wrote; returns its URL, or raises after
    ``timeout`` s."""
    poll = POLL_SECONDS if poll is None else poll
    deadline = time.monotonic() + timeout
    last: dict | None = None
    while True:
        last = _get(cluster, deployed.namespace, ISVC_PLURAL, deployed.name)
        if last is None:
            raise BakeoffError(
                f"inferenceservice {deployed.name!r} in {deployed.namespace!r} was deleted while deploy waited for it"
            )
        if _ready(last, deployed.baseline):
            url = (last.get("status") or {}).get("url")
            if url:
                return url
        if time.monotonic() >= deadline:
            raise BakeoffError(
                f"inferenceservice {deployed.name!r} in {deployed.namespace!r} is not Ready after {timeout:g} s"
                f" ({_conditions(last)}): "
                f"see `kubectl describe inferenceservice {deployed.name} -n {deployed.namespace}` and the predictor pod's logs"  # noqa: E501 (a clause kept whole, so that grep finds it)
            )
        time.sleep(max(0.0, min(poll, deadline - time.monotonic())))
