"""`bakeoff deploy`: bakeoff's ServingRuntime and an InferenceService on KServe, rolled to each published version."""

from __future__ import annotations

import copy
import functools
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
from bakeoff.components.errors import BakeoffError
from bakeoff.components.kubeapi import api_body, api_reason, api_status, unanswered
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
WRITE_ATTEMPTS = defaults.DEPLOY_WRITE_ATTEMPTS  # by this name in tests/cluster/test_deploy_cluster.py
# Unknown fields refused, not pruned with a warning (the API server's default): a field the cluster's KServe does not
# know would otherwise vanish from what deploy reports as deployed. kubectl validates the same way by default.
FIELD_VALIDATION = "Strict"
_WRITE = {"field_validation": FIELD_VALIDATION, "_request_timeout": REQUEST_SECONDS}  # every create and patch
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
    if status in (400, 422):
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


def _request(cluster: Cluster, namespace: str, doing: str, call: Callable[[], Any], conflict: bool = False) -> Any:
    """One API call; with ``conflict``, a 409 (taken name, stale resourceVersion) answers None instead of failing."""
    try:
        return call()
    except ApiException as error:
        if conflict and error.status == 409:
            return None
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


def pod_namespace() -> str | None:
    try:
        return POD_NAMESPACE_FILE.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def connect() -> Cluster:
    """In a pod: its service account and namespace; elsewhere: the kube-config's current context (kubectl's rules)."""
    configuration = client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST") and pod_namespace():
        config.load_incluster_config(client_configuration=configuration)
        namespace = pod_namespace() or "default"
    else:
        # Read $KUBECONFIG now: the kubernetes package reads it once, when it is imported.
        files = os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
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


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch, to tell whether a patch would change anything."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge(merged.get(key), value)
    return merged


def _ensure_runtime(cluster: Cluster, namespace: str, image: str | None) -> tuple[str, str]:
    """Creates bakeoff's ServingRuntime when missing; a given image replaces the runtime's. Returns (what was done,
    image)."""
    api = cluster.api
    for _ in range(WRITE_ATTEMPTS):
        current = _get(cluster, namespace, RUNTIME_PLURAL, RUNTIME_NAME)
        if current is None:
            if image is None:
                raise BakeoffError(
                    f"there is no servingruntime {RUNTIME_NAME!r} in {namespace!r} yet, "
                    f"and deploy would create it with {defaults.IMAGE}, which nobody publishes: "
                    "pass --image REGISTRY/bakeoff:TAG, your build of images/Dockerfile, "
                    "or apply manifests/kserve first"
                )
            wanted = image
            body = as_dict(serving_runtime(wanted))
            created = _request(
                cluster,
                namespace,
                f"create servingruntimes.{GROUP} {RUNTIME_NAME!r}",
                functools.partial(
                    api.create_namespaced_custom_object,
                    GROUP,
                    RUNTIME_VERSION,
                    namespace,
                    RUNTIME_PLURAL,
                    body,
                    **_WRITE,
                ),
                conflict=True,
            )
            if created is None:
                continue  # created meanwhile: read it again
            return "created", wanted
        containers = copy.deepcopy(current["spec"].get("containers") or [])
        server = next((c for c in containers if c.get("name") == CONTAINER), None)
        if server is None:
            raise BakeoffError(
                f"servingruntime {RUNTIME_NAME!r} in {namespace!r} has no {CONTAINER!r} container, "
                "so it is not bakeoff's:"
                " delete it, or apply manifests/kserve"
            )
        if image is None or server.get("image") == image:
            return "kept", server.get("image") or ""
        server["image"] = image
        patch = {
            "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "spec": {"containers": containers},
        }
        patched = _request(
            cluster,
            namespace,
            f"patch servingruntimes.{GROUP} {RUNTIME_NAME!r}",
            functools.partial(
                api.patch_namespaced_custom_object,
                GROUP,
                RUNTIME_VERSION,
                namespace,
                RUNTIME_PLURAL,
                RUNTIME_NAME,
                patch,
                **_WRITE,
            ),
            conflict=True,
        )
        if patched is None:
            continue  # changed meanwhile: read it again
        return "updated", image
    raise BakeoffError(
        f"servingruntime {RUNTIME_NAME!r} in {namespace!r} kept changing while deploy wrote it: run deploy again"
    )


def deploy(
    cluster: Cluster, namespace: str, model_name: str, uri: str, version: int, image: str | None = None
) -> Deployed:
    """Creates the InferenceService, or patches the one there so KServe rolls out ``version`` beside the old revision.

    Never deletes: the old revision serves until the new one is Ready. Only what deploy owns is patched
    (runtime, model format, storageUri, service account, the two annotations, labels); resources are set at
    creation and then left to the user.
    """
    name = service_name(model_name)
    runtime, running_image = _ensure_runtime(cluster, namespace, image)
    wanted = as_dict(inference_service(name, uri, version, running_image))
    doing = f"write inferenceservices.{GROUP} {name!r}"
    api = cluster.api
    for _ in range(WRITE_ATTEMPTS):
        current = _get(cluster, namespace, ISVC_PLURAL, name)
        if current is None:
            created = _request(
                cluster,
                namespace,
                doing,
                lambda: api.create_namespaced_custom_object(
                    GROUP, ISVC_VERSION, namespace, ISVC_PLURAL, wanted, **_WRITE
                ),
                conflict=True,
            )
            if created is None:
                continue  # created meanwhile: patch it instead
            return Deployed(name, namespace, version, None, "created", runtime, running_image, None)
        annotations = ((current.get("spec") or {}).get("predictor") or {}).get("annotations") or {}
        previous = (
            int(annotations[VERSION_ANNOTATION]) if str(annotations.get(VERSION_ANNOTATION, "")).isdigit() else None
        )
        predictor = dict(wanted["spec"]["predictor"])
        predictor["model"] = {key: value for key, value in predictor["model"].items() if key != "resources"}
        patch = {
            "metadata": {
                "labels": wanted["metadata"]["labels"],
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
            "spec": {"predictor": predictor},
        }
        if _merge(current, patch) == current:
            return Deployed(name, namespace, version, previous, "unchanged", runtime, running_image, None)
        baseline = _rollout_mark(current)
        patched = _request(
            cluster,
            namespace,
            doing,
            functools.partial(
                api.patch_namespaced_custom_object, GROUP, ISVC_VERSION, namespace, ISVC_PLURAL, name, patch, **_WRITE
            ),
            conflict=True,
        )
        if patched is None:
            continue  # changed meanwhile: read it again
        return Deployed(name, namespace, version, previous, "updated", runtime, running_image, baseline)
    raise BakeoffError(
        f"inferenceservice {name!r} in {namespace!r} kept changing while deploy wrote it: run deploy again"
    )


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
