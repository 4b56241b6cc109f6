"""A fake Kubernetes API for the TFJob backend: the Training Operator's CRD and pods, and the API server's own rules.

What it models, and where the real system decides it:

* Every TFJob is checked against the v1 openAPIV3Schema of the operator's CRD (tests/contracts/), and its
  metadata as the API server checks every object's: labels by ValidateLabels
  (k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go, with IsQualifiedName and
  IsValidLabelValue from pkg/util/validation/validation.go) and ownerReferences by ValidateOwnerReferences
  (k8s.io/apimachinery/pkg/api/validation/objectmeta.go).
* A name that is taken answers 409 AlreadyExists (NewAlreadyExists, k8s.io/apimachinery/pkg/api/errors/errors.go),
  also while the object is being deleted. A merge patch that carries a stale metadata.resourceVersion
  answers 409 Conflict (the API server treats it as a precondition of the update).
* Each worker pod is named ``<job>-worker-<i>`` (GenGeneralName, training-operator
  pkg/controller.v1/common/util.go) and owned by its TFJob. Its container restarts in place, in the same pod,
  because the operator copies restartPolicy OnFailure into the pod (SetRestartPolicy, pkg/core/pod.go);
  the pod's phase stays Running while it does.
* A pod's log: 400 while the container is waiting to start, then the current container's lines, each stamped
  by the kubelet in Go's RFC3339Nano (trailing zeros of the fraction trimmed) when ``timestamps=true``;
  a followed stream ends when the container exits. The fake ends every stream at once, as if it had.
* Deletion with propagationPolicy Foreground leaves the object, with a deletionTimestamp and the
  foregroundDeletion finalizer, until the garbage collector has deleted its dependents (here: for
  ``linger`` reads). Deleting an owner deletes every TFJob whose ownerReferences are all dangling:
  owner gone, or present under another UID (isDangling and attemptToDeleteItem,
  pkg/controller/garbagecollector/garbagecollector.go); the fake collects at once, the real one soon after.
* Every request is recorded as RBAC sees it: verb, API group, resource/subresource
  (NewRequestInfo, k8s.io/apiserver/pkg/endpoints/request/requestinfo.go).
* Custom resources exist only for the CRDs in ``crds``. A request for one that no CRD defines, or for a version
  its CRD does not serve, is authorized first and then passed down the handler chain (crdHandler.ServeHTTP in
  k8s.io/apiextensions-apiserver/pkg/apiserver/customresource_handler.go delegates it) to the API server's
  NotFoundHandler (k8s.io/apiserver/pkg/util/notfoundhandler/not_found_handler.go, v0.34), which answers with Go's
  http.NotFound: 404, ``text/plain; charset=utf-8``, body ``404 page not found``, not a metav1.Status (client-go
  turns it into "the server could not find the requested resource").

Kubeflow Trainer v2.1, v2.2 or v2.3 (``trainer``, ``trainer.kubeflow.org``): TrainJobs are checked against that
release's CRD openAPIV3Schema (tests/contracts/) and its two rules on the whole object (metadata.name an RFC 1035
label of at most 63 characters). A field the schema does not know is pruned, recorded in ``violations`` (the API
server's warning), unless the create asks ``fieldValidation=Strict``: then 400 BadRequest with the decoder's
message, as for KServe below. v2.2 removed ``spec.podTemplateOverrides`` for ``spec.runtimePatches``; the worker
pods run as the service account the release's field names (else ``default``). The served schema is readable at
``/openapi/v3/apis/trainer.kubeflow.org/v1alpha1`` (the API server's OpenAPI v3, named after the reversed group as
the CRD OpenAPI builder names it: org.kubeflow.trainer.v1alpha1.TrainJob), recorded in ``openapi_reads``. The
Trainer's validating webhook is played too: from v2.2 it refuses a runtime patch whose manager is not a
domain-prefixed path or whose replicated job the runtime lacks (JobSet.Validate,
pkg/runtime/framework/plugins/jobset/jobset.go); it refuses one whose runtime does not exist (403:
ClusterTrainingRuntime.ValidateObjects, pkg/runtime/core/clustertrainingruntime.go, the API server wrapping the
denial as "admission webhook … denied the request"). The JobSet named after the job gets one Job ``<job>-node-0``
whose pods are ``<job>-node-0-<i>-<5 random>`` (the Job controller's generateName for an indexed Job), labelled
with the JobSet's labels and annotated with their completion index; a pod name past 63 characters is a violation
(JobSet's webhook would refuse the JobSet, and the TrainJob would never start). A restart at a state of
``restarts`` is the JobSet's (bakeoff's runtime: failurePolicy, restartPolicy Never): every worker gets a new pod,
new letters and the next ``jobset.sigs.k8s.io/restart-attempt`` label, and the old pods are gone. A TrainJob reports
no condition while it runs, then Complete or Failed, copied from the JobSet's (the jobset plugin's Status). Pods can be
listed by an equality label selector.

Time is counted in states: each GET of a TFJob by name reports its next state along ``phases`` (condition
types), and its pods are in the state last reported.

KServe (``serving.kserve.io``): InferenceServices (v1beta1) and ServingRuntimes (v1alpha1) are created, read
and merge-patched, each checked against its CRD's openAPIV3Schema (tests/contracts/, KServe v0.20.0), its
metadata as above, and an InferenceService's name against KServe's webhook (IsvcNameFmt,
pkg/apis/serving/v1beta1/inference_service_validation.go). Fields the schema does not know are pruned, as
the API server prunes them by default (recorded in ``violations``, where it sends a warning), unless the
request asks ``fieldValidation=Strict``: then a create answers 400 BadRequest and a merge patch 422 Invalid,
each ending in the decoder's ``strict decoding error: unknown field "<path>"``
(k8s.io/apiserver/pkg/endpoints/handlers/create.go and patch.go). A merge patch that changes nothing keeps
the resourceVersion (no write reaches storage). A create in a namespace not in ``namespaces`` answers 404
``namespaces "<name>" not found`` (the NamespaceLifecycle admission plugin); a group/version no CRD serves
answers the mux's plain-text ``404 page not found``. Every refusal is recorded in ``violations``.

They are also server-side applied (``application/apply-patch+yaml``; PatchResource and applyPatcher in
k8s.io/apiserver/pkg/endpoints/handlers/patch.go, the merge structured-merge-diff's):

* The ``fieldManager`` parameter is required: without it 422 Invalid, ``PatchOptions.meta.k8s.io "" is invalid:
  fieldManager: Required value: is required for apply patch``, before the object is looked up; ``force`` on any
  other patch is refused the same way (ValidatePatchOptions, k8s.io/apimachinery/pkg/apis/meta/v1/validation/
  validation.go).
* Every object keeps ``metadata.managedFields``: who owns which field, as an Apply or an Update (a create or a merge
  patch, under its fieldManager or else the User-Agent's first word: managerOrUserAgent). Fields are what
  structured-merge-diff tracks: map keys and struct fields one by one, an element of a list of type ``map`` by its
  keys, and any other list (``spec.containers`` of a ServingRuntime) whole.
* An apply sets the fields it names and leaves the others; a field its manager applied before and leaves out now is
  removed unless another manager owns it too. A field another manager owns with a different value is a conflict:
  409 ``Apply failed with 1 conflict: conflict with "<manager>" …`` (NewConflictError,
  k8s.io/apimachinery/pkg/util/managedfields/internal/conflict.go), unless ``force=true``, which takes the field.
  An Update takes the fields it changes from every other manager.
* A field the CRD's schema lacks fails the apply before any validation: 500, ``failed to create typed patch object
  (…): .<path>: field not declared in schema`` (structuredMergeManager.Apply,
  k8s.io/apimachinery/pkg/util/managedfields/internal/structuredmerge.go; kubernetes/kubernetes#139253).
* An applied ``metadata.resourceVersion`` is a precondition: 409 Conflict when it is stale.
* An apply that creates answers 201 and needs RBAC's ``create`` besides ``patch`` (withAuthorization in
  PatchResource), refused as the filter refuses a create. One that changes nothing, managedFields included, writes
  nothing: the resourceVersion stays.

tests/cluster/test_deploy_cluster.py holds these rules against the real API server. The InferenceService
controller's status is played by ``isvc_status``:

* Ready is the living condition set of PredictorReady and IngressReady (conditionSet,
  pkg/apis/serving/v1beta1/inference_service_status.go); ``status.url`` is the Knative route,
  ``http://<name>.<namespace>.example.com`` under KServe's default domain.
* ``status.observedGeneration`` is the generation plus ``isvc_observed_offset``: KServe copies it from the
  predictor's Knative Service or Deployment, whose counter need not be the InferenceService's
  (PropagateStatus and PropagateRawStatus; kserve/kserve#6081).
* A spec change bumps ``metadata.generation`` (the status subresource: metadata and status do not), and for
  ``isvc_stale_reads`` GETs after it the status is still the previous one, with the previous
  ``observedGeneration``: the controller has not reconciled yet. Then it is not Ready (the revision is coming
  up) until the ``isvc_ready_after``-th GET since the change, and Ready from then on; with
  ``isvc_ready_after=None`` the revision fails with ``isvc_failure`` and never gets Ready.
* A runtime named by ``spec.predictor.model.runtime`` must exist in the namespace (GetServingRuntime,
  pkg/controller/v1beta1/inferenceservice/utils/utils.go) and list the model's format
  (ModelSpec.RuntimeSupportsModel, pkg/apis/serving/v1beta1/predictor_model.go); otherwise the predictor is
  not Ready, as the predictor reconciler reports it (pkg/controller/v1beta1/inferenceservice/components/predictor.go).
* ``granted``, when set, is RBAC: (group, resource, verb) triples, in every namespace (as one Role bound in
  each); anything else answers 403 Forbidden as the authorization filter words it
  (k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go).
"""

from __future__ import annotations

import copy
import functools
import json
import re
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlparse

import jsonschema
import yaml

CRD = Path(__file__).resolve().parent / "contracts" / "kubeflow.org_tfjobs.yaml"
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"
CONTAINER = "tensorflow"  # kubeflowv1.TFJobDefaultContainerName
TRAINER_GROUP, TRAINER_VERSION, TRAINJOBS = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
TRAINER_CONTAINER = "node"  # the container Trainer fills in (constants.Node)
TRAINJOB_CRD = f"{TRAINJOBS}.{TRAINER_GROUP}"
TRAINJOB_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # the CRD's rule on metadata.name, with size <= 63
# The condition each state gives a TrainJob: (type, reason, message) of the JobSet's, jobset pkg/constants/constants.go.
TRAINJOB_CONDITIONS = {
    "Succeeded": ("Complete", "AllJobsCompleted", "jobset completed successfully"),
    "Failed": ("Failed", "FailedJobs", "jobset failed due to one or more job failures"),
}
# The Failed condition's message by why the operator failed a TFJob: training-operator v1.9,
# pkg/controller.v1/common/job.go, JobController.ReconcileJobs (the backoff limit, else activeDeadlineSeconds).
TFJOB_FAILURES = {
    "backoff": "Job {name} has failed because it has reached the specified backoff limit",
    "deadline": "Job {name} has failed because it was active longer than specified deadline",
}
# The worker pods' phase while the job shows each condition.
POD_PHASE = {
    "Created": "Pending",
    "Running": "Running",
    "Restarting": "Running",
    "Succeeded": "Succeeded",
    "Failed": "Failed",
}
LOG_EPOCH = datetime(2026, 11, 29, tzinfo=UTC)
LINE_SPACING = timedelta(milliseconds=50)  # so stamps like .1 and .15 meet: they do not sort as text
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@functools.cache
def crd_schema(file: str, version: str) -> dict:
    """The openAPIV3Schema of ``version`` in the CRD ``file`` of tests/contracts/."""
    crd = yaml.load((CRD.parent / file).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return served["schema"]["openAPIV3Schema"]


def tfjob_schema() -> dict:
    """The v1 TFJob openAPIV3Schema from the Training Operator's own CRD."""
    return crd_schema(CRD.name, VERSION)


# Each Trainer release's TrainJob CRD in tests/contracts/ (kubeflow/trainer manifests/base/crds/ at the tag).
TRAINER_RELEASES = {
    "v2.1.0": f"{TRAINER_GROUP}_{TRAINJOBS}.yaml",
    "v2.2.0": f"{TRAINER_GROUP}_{TRAINJOBS}_v2.2.0.yaml",
    "v2.3.0": f"{TRAINER_GROUP}_{TRAINJOBS}_v2.3.0.yaml",
}
TRAINER_OPENAPI = f"/openapi/v3/apis/{TRAINER_GROUP}/{TRAINER_VERSION}"
RUNTIME_JOBS = frozenset({TRAINER_CONTAINER})  # manifests/trainer-v2/'s replicated jobs


@functools.cache
def trainjob_schema(trainer: str = "v2.1.0") -> dict:
    """The v1alpha1 TrainJob openAPIV3Schema from the ``trainer`` release's own CRD."""
    return crd_schema(TRAINER_RELEASES[trainer], TRAINER_VERSION)


def trainjob_openapi(trainer: str) -> dict:
    """The OpenAPI v3 document the API server serves for trainer.kubeflow.org/v1alpha1: the CRD's schema under its
    definition name, tagged with its group/version/kind."""
    schema = dict(
        trainjob_schema(trainer),
        **{
            "x-kubernetes-group-version-kind": [
                {"group": TRAINER_GROUP, "version": TRAINER_VERSION, "kind": "TrainJob"}
            ]
        },
    )
    return {"openapi": "3.0.0", "components": {"schemas": {"org.kubeflow.trainer.v1alpha1.TrainJob": schema}}}


def trainjob_account(body: dict, trainer: str) -> str:
    """The workers' service account: from the field the release honours; any other field was pruned."""
    spec = body["spec"]
    if trainer == "v2.1.0":
        overrides = [o["spec"] for o in spec.get("podTemplateOverrides") or [] if o.get("spec")]
        return next((o["serviceAccountName"] for o in overrides if o.get("serviceAccountName")), "default")
    patches = [
        job.get("template", {}).get("spec", {}).get("template", {}).get("spec", {})
        for patch in spec.get("runtimePatches") or []
        for job in patch.get("trainingRuntimeSpec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", [])
        if job.get("name") == TRAINER_CONTAINER
    ]
    # Merged in order (mergeRuntimePatches, pkg/runtime/core/trainingruntime.go): the last one that sets it wins.
    return next((p["serviceAccountName"] for p in reversed(patches) if p.get("serviceAccountName")), "default")


def trainjob_errors(body: dict, trainer: str = "v2.1.0") -> list[str]:
    """What the API server refuses in a TrainJob: its schema, unknown fields, metadata, and the CRD's rules on the
    name."""
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft7Validator(trainjob_schema(trainer)).iter_errors(body)
    ]
    errors += [f"unknown field {name!r}" for name in unknown_fields(trainjob_schema(trainer), body)]
    errors += metadata_errors(body.get("metadata") or {})
    name = (body.get("metadata") or {}).get("name", "")
    if not TRAINJOB_NAME.fullmatch(name):
        errors.append("metadata.name must match RFC 1035 DNS label format")
    if len(name) > 63:
        errors.append("metadata.name must be no more than 63 characters")
    return errors


def trainjob_pod_name(job: str, index: int, attempt: int = 0) -> str:
    """Worker ``index``'s pod: the Job controller's generateName <job>-<index>- for Job <trainjob>-node-0, plus 5
    letters; each restart ``attempt`` of the JobSet makes new pods, hence new letters."""
    letters = "bcdfghjklmnpqrstvwxz"
    return f"{job}-{TRAINER_CONTAINER}-0-{index}-" + "".join(
        letters[(len(job) + index * 7 + attempt * 3 + i) % 20] for i in range(5)
    )


KSERVE_GROUP = "serving.kserve.io"
# plural → (version, kind) of the KServe objects the fake serves
KSERVE_KINDS = {"inferenceservices": ("v1beta1", "InferenceService"), "servingruntimes": ("v1alpha1", "ServingRuntime")}
TFJOB_CRD = f"{PLURAL}.{GROUP}"
KSERVE_CRDS = frozenset(f"{plural}.{KSERVE_GROUP}" for plural in KSERVE_KINDS)
PAGE_NOT_FOUND = (
    "404 page not found\n"  # Go's http.NotFound: the API server's answer for a resource type it does not serve
)
KSERVE_DOMAIN = "example.com"  # KServe's and Knative's default ingress domain
_ISVC_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # IsvcNameFmt
_TRANSITION_TIME = "2026-11-29T00:00:00Z"


@functools.cache
def kserve_schema(plural: str) -> dict:
    """The openAPIV3Schema of KServe's CRD for ``plural`` (``inferenceservices`` or ``servingruntimes``)."""
    version = KSERVE_KINDS[plural][0]
    crd = yaml.load(
        (CRD.parent / f"{KSERVE_GROUP}_{plural}.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return served["schema"]["openAPIV3Schema"]


@functools.cache
def kserve_validator(plural: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(kserve_schema(plural))


def unknown_fields(schema: dict, value: Any, path: str = "") -> list[str]:
    """Fields of ``value`` that a structural schema does not declare: what the API server prunes.

    Stops where the schema keeps unknown fields (x-kubernetes-preserve-unknown-fields) or declares no
    properties (``metadata``, which the API server checks itself).
    """
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    found: list[str] = []
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            if key not in schema["properties"]:
                found.append(f"{path}.{key}".lstrip("."))
            else:
                found += unknown_fields(schema["properties"][key], item, f"{path}.{key}")
    elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key, item in value.items():
            found += unknown_fields(schema["additionalProperties"], item, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            found += unknown_fields(schema["items"], item, f"{path}[{index}]")
    return found


def pruned(schema: dict, value: Any) -> Any:
    """``value`` without the fields ``unknown_fields`` finds: what the API server stores."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return value
    if isinstance(value, dict) and "properties" in schema:
        return {
            key: pruned(schema["properties"][key], item) for key, item in value.items() if key in schema["properties"]
        }
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        return {key: pruned(schema["additionalProperties"], item) for key, item in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [pruned(schema["items"], item) for item in value]
    return value


def strict_decoding(unknown: list[str]) -> str:
    """The decoder's message for unknown fields under fieldValidation=Strict."""
    return "strict decoding error: " + ", ".join(f'unknown field "{name}"' for name in unknown)


def kserve_errors(plural: str, body: dict) -> list[str]:
    """Why the API server (schema, metadata) or KServe's webhook (name) would refuse ``body``; unknown fields
    included."""
    version, kind = KSERVE_KINDS[plural]
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in kserve_validator(plural).iter_errors(body)]
    errors += [f"unknown field {name!r}" for name in unknown_fields(kserve_schema(plural), body)]
    errors += metadata_errors(body.get("metadata") or {})
    if (body.get("apiVersion"), body.get("kind")) != (f"{KSERVE_GROUP}/{version}", kind):
        errors.append(
            f"apiVersion/kind {body.get('apiVersion')}/{body.get('kind')} is not {KSERVE_GROUP}/{version}/{kind}"
        )
    name = (body.get("metadata") or {}).get("name", "")
    if plural == "inferenceservices" and not _ISVC_NAME.fullmatch(name):
        errors.append(
            f"The InferenceService {name!r} is invalid: a InferenceService name must consist of lower case alphanumeric"
            " characters or '-', and must start with alphabetical character (regex used for validation is "
            f"'{_ISVC_NAME.pattern}')"
        )
    return errors


def merge_ports(runtime: list[dict], model: list[dict]) -> list[dict]:
    """A strategic merge of container ports by containerPort, in the order the API machinery gives them.

    mergeSlice and normalizeElementOrder (k8s.io/apimachinery/pkg/util/strategicpatch/patch.go): ports in both
    are merged, the patch's fields winning; then the runtime-only ports are woven into the patch's by their
    place in the runtime, and a patch port the runtime lacks comes before them.
    """
    by_port = {port["containerPort"]: port for port in runtime}
    patched = [dict(by_port.get(port["containerPort"], {}), **port) for port in model]
    server_only = [port for port in runtime if port["containerPort"] not in {p["containerPort"] for p in model}]
    order = [port["containerPort"] for port in runtime]
    merged, left, right = [], list(server_only), list(patched)
    while left or right:  # mergeSortedSlice
        if (
            left
            and right
            and right[0]["containerPort"] in order
            and order.index(left[0]["containerPort"]) < order.index(right[0]["containerPort"])
        ):
            merged.append(left.pop(0))
        elif right:
            merged.append(right.pop(0))
        else:
            merged.append(left.pop(0))
    return merged


def merge_runtime_container(container: dict, model: dict) -> dict:
    """The predictor's container as KServe builds it from the runtime's container and the InferenceService's model.

    MergeRuntimeContainers (pkg/controller/v1beta1/inferenceservice/utils/utils.go, v0.20.0): a strategic merge
    patch of the model's container fields over the runtime's (pkg/utils/container_merge.go), then the args
    concatenated, the runtime's first. Ports merge by containerPort (``merge_ports``); other fields here are
    replaced whole (env and volumeMounts would merge by name: not used).
    """
    fields = {
        key: value
        for key, value in model.items()
        if key not in ("modelFormat", "runtime", "runtimeVersion", "storageUri", "protocolVersion")
    }
    merged = dict(container, **fields)
    merged["args"] = list(container.get("args") or []) + list(model.get("args") or [])
    if container.get("ports") or model.get("ports"):
        merged["ports"] = merge_ports(container.get("ports") or [], model.get("ports") or [])
    return merged


def knative_port_errors(containers: list[dict]) -> list[str]:
    """Why Knative would refuse these containers' ports in a Service (KServe's Serverless mode).

    validateContainersPorts and validateContainerPorts (knative.dev/serving pkg/apis/serving/k8s_validation.go,
    knative-v1.21.1, the Knative of Kubeflow 26.03): one port across all containers, TCP, named "", "http1" or "h2c".
    """
    ports = [port for container in containers for port in container.get("ports") or []]
    errors = (
        ["more than one container port is set: Only a single port is allowed across all containers"]
        if len(ports) > 1
        else []
    )
    for port in ports[:1]:
        if port.get("name", "") not in ("", "h2c", "http1"):
            errors.append(f"Port name {port['name']} is not allowed: Name must be empty, or one of: 'h2c', 'http1'")
        if port.get("protocol", "TCP") != "TCP":
            errors.append(f"invalid value: {port['protocol']}: protocol")
    return errors


def kserve_invalid(plural: str, name: str, errors: list[str]) -> dict:
    """422 Invalid as the API server words a refused object (NewInvalid: the kind, not the resource, in its details)."""
    kind = KSERVE_KINDS[plural][1]
    return status(
        422,
        "Invalid",
        f'{kind}.{KSERVE_GROUP} "{name}" is invalid: ' + "; ".join(errors),
        name=name,
        group=KSERVE_GROUP,
        kind=kind,
    )


def kserve_not_found(plural: str, name: str) -> dict:
    return status(
        404, "NotFound", f'{plural}.{KSERVE_GROUP} "{name}" not found', name=name, group=KSERVE_GROUP, kind=plural
    )


def kserve_conflict(plural: str, name: str) -> dict:
    """NewConflict for a stale resourceVersion (the registry store's OptimisticLockErrorMsg)."""
    return status(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {plural}.{KSERVE_GROUP} "{name}": the object has been modified; please'
        " apply your changes to the latest version and try again",
        name=name,
        group=KSERVE_GROUP,
        kind=plural,
    )


def _now() -> str:
    """A managedFields entry's time: RFC 3339, in seconds."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def forbidden(call: Call, namespace: str, user: str) -> dict:
    """403 Forbidden for ``call``, as the authorization filter answers it."""
    return status(
        403,
        "Forbidden",
        forbidden_message(call, namespace, user),
        group=call.group,
        kind=call.resource,
        **({"name": call.name} if call.name else {}),
    )


def forbidden_message(call: Call, namespace: str, user: str) -> str:
    """forbiddenMessage of the API server's authorization filter."""
    kind = call.resource.partition("/")[0] + (f".{call.group}" if call.group else "")
    name = f' "{call.name}"' if call.name else ""
    group = f' in API group "{call.group}"'
    return (
        f'{kind}{name} is forbidden: User "{user}" cannot {call.verb} resource "{call.resource}"{group} in the '
        f'namespace "{namespace}"'
    )


def condition(kind: str, state: str, reason: str = "", message: str = "") -> dict:
    """A Knative condition (knative.dev/pkg/apis Condition), as KServe's status carries them."""
    found = {"type": kind, "status": state, "lastTransitionTime": _TRANSITION_TIME}
    if state != "True":
        found.update(reason=reason, message=message)
    return found


class Call(NamedTuple):
    """One request as RBAC authorizes it; ``resource`` includes the subresource (``pods/log``)."""

    verb: str
    group: str
    resource: str
    name: str


class LogRead(NamedTuple):
    """One request for a pod's log, with the pod's state when it came."""

    pod: str
    phase: str
    restarts: int
    follow: bool


def request_info(method: str, path: str, query: str) -> Call | None:
    """NewRequestInfo for namespaced resource paths: /api/v1/namespaces/… and /apis/<group>/<version>/namespaces/…"""
    parts = [part for part in path.split("/") if part]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if len(rest) < 3 or rest[0] != "namespaces":
        return None
    resource, name = rest[2], rest[3] if len(rest) > 3 else ""
    if len(rest) > 4:
        resource = f"{resource}/{rest[4]}"
    if method == "GET":
        verb = "get" if name else ("watch" if go_bool(parse_qs(query), "watch") else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}[method]
    return Call(verb, group, resource, name)


def go_bool(query: dict, key: str) -> bool:
    """A boolean query parameter as the API server reads it (Go's strconv.ParseBool: the Python client sends "True")."""
    return query.get(key, ["false"])[0] in ("1", "t", "T", "TRUE", "true", "True")


def go_strict(query: dict) -> bool:
    """fieldValidation=Strict: unknown fields refused, not pruned."""
    return query.get("fieldValidation", [""])[0] == "Strict"


def metadata_errors(metadata: dict) -> list[str]:
    """What ValidateLabels and ValidateOwnerReferences reject in an object's metadata."""
    errors = []
    for key, value in (metadata.get("labels") or {}).items():
        prefix, _, name = key.rpartition("/")
        if (
            (prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)))
            or len(name) > 63
            or not _LABEL_NAME.fullmatch(name)
        ):
            errors.append(f"metadata.labels: Invalid value: {key!r}: not a qualified name")
        if not isinstance(value, str) or len(value) > 63 or (value and not _LABEL_NAME.fullmatch(value)):
            errors.append(
                f"metadata.labels: Invalid value: {value!r}: a valid label must be an empty string or consist of "
                "alphanumeric"
                " characters, '-', '_' or '.', and must start and end with an alphanumeric character (at most 63)"
            )
    controllers = 0
    for ref in metadata.get("ownerReferences") or []:
        version = (ref.get("apiVersion") or "").rpartition("/")[2]
        for field_name, present in (
            ("apiVersion", version),
            ("kind", ref.get("kind")),
            ("name", ref.get("name")),
            ("uid", ref.get("uid")),
        ):
            if not present:
                errors.append(f"metadata.ownerReferences.{field_name}: Invalid value: must not be empty")
        if (ref.get("apiVersion"), ref.get("kind")) == ("v1", "Event"):
            errors.append("metadata.ownerReferences: Invalid value: /v1, Kind=Event is disallowed from being an owner")
        controllers += bool(ref.get("controller"))
    if controllers > 1:
        errors.append("metadata.ownerReferences: Invalid value: Only one reference can have Controller set to true")
    return errors


def status(code: int, reason: str, message: str, **details: str) -> dict:
    """A metav1.Status failure, as the API server answers errors."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }


def rfc3339nano(moment: datetime) -> str:
    """Go's time.RFC3339Nano in UTC: the fraction's trailing zeros trimmed, none at all when it is zero."""
    fraction = f"{moment.microsecond * 1000:09d}".rstrip("0")
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, null removes, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


# ---------------------------------------------------------------- server-side apply's field ownership

# A field as structured-merge-diff names it: map keys and struct fields by name, an element of a list of type map
# by its keys (("k", ((key, value), ...))). Lists of any other type, and maps marked atomic, are one field.
FieldPath = tuple[Any, ...]
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
# Not owned by anyone: what managedfields' stripMeta drops (k8s.io/apimachinery/pkg/util/managedfields/internal/
# stripmeta.go), and status, which the status subresource resets on the main resource.
UNOWNED_METADATA = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    }
)
_MISSING = object()


def owned_fields(body: dict, schema: dict) -> dict[FieldPath, Any]:
    """Every field of ``body`` that a manager can own, with its value (structured-merge-diff's leaves)."""
    found: dict[FieldPath, Any] = {}
    for key, value in body.items():
        if key in ("apiVersion", "kind", "status"):
            continue
        if key == "metadata":
            value = {name: item for name, item in (value or {}).items() if name not in UNOWNED_METADATA}
            if not value:
                continue
        _walk_fields(value, (schema.get("properties") or {}).get(key) or {}, (key,), found)
    return found


def _walk_fields(value: Any, schema: dict, path: FieldPath, found: dict[FieldPath, Any]) -> None:
    if isinstance(value, dict) and value and schema.get("x-kubernetes-map-type") != "atomic":
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = (schema.get("properties") or {}).get(key) or (extra if isinstance(extra, dict) else {})
            _walk_fields(item, sub, (*path, key), found)
    elif isinstance(value, list) and value and schema.get("x-kubernetes-list-type") == "map":
        keys = schema["x-kubernetes-list-map-keys"]
        for item in value:
            element = ("k", tuple((key, item.get(key)) for key in keys))
            _walk_fields(item, schema.get("items") or {}, (*path, element), found)
    else:
        found[path] = value


def _is_element(part: Any) -> bool:
    return isinstance(part, tuple) and part[:1] == ("k",)


def set_field(body: dict, path: FieldPath, value: Any) -> None:
    node: Any = body
    for index, part in enumerate(path):
        last = index == len(path) - 1
        if _is_element(part):
            keys = dict(part[1])
            element = next((e for e in node if all(e.get(k) == v for k, v in keys.items())), None)
            if element is None:
                element = dict(keys)
                node.append(element)
            node = element
        elif last:
            node[part] = copy.deepcopy(value)
        else:
            following = path[index + 1]
            if not isinstance(node.get(part), list if _is_element(following) else dict):
                node[part] = [] if _is_element(following) else {}
            node = node[part]


def remove_field(body: dict, path: FieldPath) -> None:
    """Removes the field; a map-list element left with only its keys goes too (its keys are removed with it, never
    alone), and so does a map left empty, below the top level."""
    trail: list[tuple[Any, Any, dict | None]] = []  # (container, key or element, the element's keys) from the top
    node: Any = body
    for part in path:
        if _is_element(part):
            keys = dict(part[1])
            found = next((e for e in node if all(e.get(k) == v for k, v in keys.items())), None)
            if found is None:
                return
            trail.append((node, found, keys))
            node = found
        else:
            if not isinstance(node, dict) or part not in node:
                return
            trail.append((node, part, None))
            node = node[part]
    container, member, _ = trail.pop()
    if not (trail and trail[-1][2] is not None and member in trail[-1][2]):
        del container[member]
    while trail:
        parent, member, element_keys = trail.pop()
        child = member if element_keys is not None else parent[member]
        bare = set(child) <= set(element_keys) if element_keys is not None else not child
        if not bare or not trail:
            return
        if element_keys is not None:
            parent.remove(member)
        else:
            del parent[member]


def path_text(path: FieldPath) -> str:
    """fieldpath.Path's String: ``.name`` for a field, ``[key=value,...]`` for a map-list element."""
    return "".join(
        "[" + ",".join(f"{key}={json.dumps(value)}" for key, value in part[1]) + "]"
        if _is_element(part)
        else f".{part}"
        for part in path
    )


def fields_v1(paths: set[FieldPath]) -> dict:
    """A manager's fields as metadata.managedFields[].fieldsV1 writes them (``f:`` fields, ``k:`` elements)."""
    tree: dict = {}
    for path in sorted(paths, key=repr):
        node = tree
        for part in path:
            if _is_element(part):
                node = node.setdefault("k:" + json.dumps(dict(part[1]), sort_keys=True, separators=(",", ":")), {})
                node.setdefault(".", {})
            else:
                node = node.setdefault(f"f:{part}", {})
    return tree


def manager_name(query: dict, user_agent: str) -> str:
    """managerOrUserAgent (k8s.io/apiserver/pkg/endpoints/handlers/rest.go): the fieldManager parameter, else the
    User-Agent up to its first "/" (the Python client's is "OpenAPI-Generator/<version>/python")."""
    return query.get("fieldManager", [""])[0] or user_agent.split("/", 1)[0][:128]


def conflict_message(conflicts: list[tuple[Owner, FieldPath]]) -> str:
    """NewConflictError's message (getConflictMessage and printManager, k8s.io/apimachinery/pkg/util/managedfields/
    internal/conflict.go): an Update manager is printed with its apiVersion and time."""

    def who(owner: Owner) -> str:
        return f'"{owner.manager}"' + (
            f" using {owner.api_version} at {owner.time}" if owner.operation == "Update" else ""
        )

    if len(conflicts) == 1:
        owner, path = conflicts[0]
        return f"Apply failed with 1 conflict: conflict with {who(owner)}: {path_text(path)}"
    lines = []
    for manager in sorted({owner.manager for owner, _ in conflicts}):
        mine = [(owner, path) for owner, path in conflicts if owner.manager == manager]
        lines.append(f"conflicts with {who(mine[0][0])}:")
        lines += [f"- {path_text(path)}" for _, path in mine]
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)


@dataclass
class Owner:
    """One entry of metadata.managedFields: a manager, its operation, and the fields it owns."""

    manager: str
    operation: str  # "Apply" or "Update"
    api_version: str
    time: str
    fields: set[FieldPath]

    def entry(self) -> dict:
        return {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(self.fields),
        }


@dataclass
class _Timeline:
    """One TFJob's states: its condition types and its worker pods' phases, by state."""

    phases: list[str]
    pod_phases: list[str]
    gets: int = 0
    linger: int | None = None  # reads left while it is being deleted in the foreground

    @property
    def now(self) -> int:
        """The state last reported."""
        return min(max(self.gets - 1, 0), len(self.phases) - 1)

    def pod_phase(self) -> str:
        return self.pod_phases[min(self.now, len(self.pod_phases) - 1)]


@dataclass
class _Failure:
    verb: str
    resource: str
    times: int
    answer: int | str  # an HTTP status, or "drop": close the connection without an answer


@dataclass
class _Served:
    """A KServe object, and what its controller has reported since its spec last changed."""

    body: dict
    reads: int = 0  # GETs since the spec last changed
    reported: dict | None = None  # the status last reported
    owners: list[Owner] = field(default_factory=list)  # metadata.managedFields, kept in body's metadata too


@dataclass
class FakeKubernetes:
    """Holds TFJobs, their worker pods and other pods; see the module docstring for the rules it follows.

    ``log`` is worker 0's log, one string per container when it restarts at the states in ``restarts``;
    ``worker_logs`` gives the other workers' logs by index.
    """

    phases: list[str]
    log: str | Sequence[str] = ""
    namespace: str = "team-a"
    pod_phases: list[str] | None = None
    restarts: Sequence[int] = ()
    worker_logs: dict[int, str] = field(default_factory=dict)
    linger: int = 2
    isvc_ready_after: int | None = 3  # the GET after a spec change from which an InferenceService is Ready; None: never
    isvc_stale_reads: int = 1  # GETs after a spec change that still show the previous status
    isvc_failure: str = "Container failed with: exit code 1"  # why the revision fails when it never gets Ready
    isvc_observed_offset: int = (
        0  # observedGeneration minus generation: KServe copies a child's counter (kserve/kserve#6081)
    )
    granted: set[tuple[str, str, str]] | None = None  # RBAC (group, resource, verb); None: everything
    user: str = "system:serviceaccount:team-a:default-editor"  # who the 403s name
    crds: frozenset[str] = frozenset(
        {TFJOB_CRD, TRAINJOB_CRD, *KSERVE_CRDS}
    )  # <plural>.<group> of the custom resources installed
    runtimes: frozenset[str] = frozenset({"bakeoff-tensorflow"})  # the ClusterTrainingRuntimes installed
    trainer: str = "v2.1.0"  # the Kubeflow Trainer release whose TrainJob CRD is served: a key of TRAINER_RELEASES
    namespaces: set[str] | None = None  # the namespaces that exist; None: every one
    failure: str = "backoff"  # why a TFJob that reaches Failed failed: a key of TFJOB_FAILURES

    def __post_init__(self) -> None:
        self.validator = jsonschema.Draft7Validator(tfjob_schema())
        self.jobs: dict[str, dict] = {}
        self.pods: dict[str, dict] = {}  # pods other than the workers (a pipeline step's)
        self.timelines: dict[str, _Timeline] = {}  # by the job's uid
        self.calls: list[Call] = []
        self.deleted: list[str] = []
        self.propagations: list[str | None] = []  # each TFJob deletion's propagationPolicy
        self.collected: list[str] = []  # TFJobs the garbage collector deleted
        self.violations: list[str] = []
        self.openapi_reads = 0
        self.log_reads: list[LogRead] = []
        self.on_state: dict[int, Callable[[], None]] = {}  # run once when a job first reports that state
        self.failures: list[_Failure] = []
        self.kserve: dict[tuple[str, str, str], _Served] = {}  # (plural, namespace, name) → KServe object
        self.isvc_reports: list[
            tuple[int, int | None, bool]
        ] = []  # each InferenceService GET: generation, observed, Ready
        self._version = 0
        self._lock = threading.RLock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeKubernetes:
        # A short poll: shutdown() waits for the serving loop to look up.
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------ set-up and inspection for tests

    def add_pod(self, name: str, service_account: str = "default") -> str:
        """A pod that is not a TFJob's (a pipeline step's); returns its uid."""
        uid = str(uuid.uuid4())
        self.pods[name] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "uid": uid,
                "resourceVersion": self._next_version(),
            },
            "spec": {"serviceAccountName": service_account, "containers": [{"name": "main", "image": "bakeoff"}]},
            "status": {"phase": "Running"},
        }
        return uid

    def add_job(self, body: dict, phases: list[str]) -> dict:
        """A TFJob that was there before the test: another attempt's or another run's."""
        with self._lock:
            return self._store(copy.deepcopy(body), phases)

    def delete_pod(self, name: str) -> None:
        """Deletes a pod the way kubectl or KFP would, and lets the garbage collector act."""
        with self._lock:
            self.pods.pop(name, None)
            self._collect_garbage()

    def fail(self, verb: str, resource: str, times: int = 1, answer: int | str = 500) -> None:
        """The next ``times`` matching requests get ``answer`` (a status, or "drop") instead of being served."""
        self.failures.append(_Failure(verb, resource, times, answer))

    def job_uid(self, name: str) -> str:
        return self.jobs[name]["metadata"]["uid"]

    def kserve_object(self, plural: str, name: str, namespace: str | None = None) -> dict | None:
        """The stored InferenceService or ServingRuntime (without the controller's status), or None."""
        served = self.kserve.get((plural, namespace or self.namespace, name))
        return copy.deepcopy(served.body) if served else None

    def add_kserve(self, body: dict, namespace: str | None = None, manager: str = "kubectl-client-side-apply") -> dict:
        """A KServe object that was there before the test: by default applied from manifests/kserve by kubectl's
        client-side apply, which creates it as an Update under that manager."""
        plural = next(p for p, (_, kind) in KSERVE_KINDS.items() if kind == body["kind"])
        with self._lock:
            return self._kserve_store(plural, namespace or self.namespace, copy.deepcopy(body), manager)

    def effective_container(self, name: str, namespace: str | None = None) -> dict:
        """The predictor's container: its runtime's kserve-container merged with the model's fields (see
        ``merge_runtime_container``) and ``{{.Name}}`` filled in (ReplacePlaceholders,
        pkg/controller/v1beta1/inferenceservice/utils/utils.go: the container's JSON as a Go template over the
        InferenceService's metadata; only ``.Name`` is modelled)."""
        namespace = namespace or self.namespace
        isvc = self.kserve[("inferenceservices", namespace, name)].body
        model = isvc["spec"]["predictor"]["model"]
        runtime = self.kserve[("servingruntimes", namespace, model["runtime"])].body
        (container,) = [c for c in runtime["spec"]["containers"] if c["name"] == "kserve-container"]
        return json.loads(json.dumps(merge_runtime_container(container, model)).replace("{{.Name}}", name))

    # ------------------------------------------------------------ KServe's objects and the InferenceService controller

    def _kserve_store(self, plural: str, namespace: str, body: dict, manager: str, operation: str = "Update") -> dict:
        """Stores a new object; ``manager`` owns every field it set (as an Update for a create, an Apply for an
        apply)."""
        body.pop("status", None)
        body["metadata"].update(
            namespace=namespace,
            uid=str(uuid.uuid4()),
            resourceVersion=self._next_version(),
            creationTimestamp=rfc3339nano(LOG_EPOCH),
            generation=1,
        )
        fields = set(owned_fields(body, kserve_schema(plural)))
        served = _Served(body, owners=[Owner(manager, operation, body["apiVersion"], _now(), fields)] if fields else [])
        body["metadata"]["managedFields"] = [owner.entry() for owner in served.owners]
        self.kserve[(plural, namespace, body["metadata"]["name"])] = served
        return body

    def _runtime_problem(self, namespace: str, model: dict) -> tuple[str, str] | None:
        """(reason, message) when the named runtime cannot serve the model; only namespaced runtimes are modelled."""
        name = model.get("runtime")
        if name is None:
            return None
        runtime = self.kserve.get(("servingruntimes", namespace, name))
        if runtime is None:
            return "RuntimeNotRecognized", f"No ServingRuntimes or ClusterServingRuntimes with the name: {name}"
        # RuntimeSupportsModel with a runtime named: every listed format counts, autoSelect or not.
        labels = set()
        for supported in runtime.body["spec"].get("supportedModelFormats") or []:
            labels.add(supported["name"])
            if supported.get("version") is not None:
                labels.add(f"{supported['name']}:{supported['version']}")
        wanted = model["modelFormat"]["name"] + (
            f":{model['modelFormat']['version']}" if model["modelFormat"].get("version") else ""
        )
        protocol = model.get("protocolVersion", "v1")
        if wanted not in labels or protocol not in (runtime.body["spec"].get("protocolVersions") or ["v1"]):
            return "NoSupportingRuntime", f"Specified runtime {name} does not support specified framework/version"
        return None

    def isvc_status(self, served: _Served, namespace: str) -> dict | None:
        """The status the InferenceService controller reports at this GET (see the module docstring)."""
        body = served.body
        name, generation = body["metadata"]["name"], body["metadata"]["generation"]
        if served.reads <= self.isvc_stale_reads:
            return served.reported
        revision = f"{name}-predictor-{generation:05d}"  # Knative names a configuration's revisions by its generation
        problem = self._runtime_problem(namespace, body["spec"]["predictor"]["model"])
        ready = problem is None and self.isvc_ready_after is not None and served.reads >= self.isvc_ready_after
        status: dict = {
            "observedGeneration": generation + self.isvc_observed_offset,
            "deploymentMode": "Serverless",
            "components": {"predictor": {"latestCreatedRevision": revision}},
        }
        if ready:
            status["conditions"] = [
                condition(kind, "True")
                for kind in (
                    "IngressReady",
                    "LatestDeploymentReady",
                    "PredictorConfigurationReady",
                    "PredictorReady",
                    "PredictorRouteReady",
                    "Ready",
                    "RoutesReady",
                )
            ]
            status["url"] = f"http://{name}.{namespace}.{KSERVE_DOMAIN}"
            status["address"] = {"url": f"http://{name}-predictor.{namespace}.svc.cluster.local"}
            status["components"]["predictor"]["latestReadyRevision"] = revision
            status["modelStatus"] = {
                "transitionStatus": "UpToDate",
                "states": {"activeModelState": "Loaded", "targetModelState": "Loaded"},
                "copies": {"failedCopies": 0, "totalCopies": 1},
            }
            return status
        if problem is not None:
            reason, message = problem
            status["modelStatus"] = {
                "transitionStatus": "InvalidSpec",
                "lastFailureInfo": {"reason": reason, "message": message},
            }
            state = "False"
        elif self.isvc_ready_after is None and served.reads > self.isvc_stale_reads + 1:
            reason, message = "RevisionFailed", f'Revision "{revision}" failed with message: {self.isvc_failure}.'
            status["modelStatus"] = {
                "transitionStatus": "BlockedByFailedLoad",
                "lastFailureInfo": {"reason": "ModelLoadFailed", "message": self.isvc_failure},
            }
            state = "False"
        else:
            reason, message = (
                "RevisionMissing",
                f'Configuration "{name}-predictor" is waiting for a Revision to become ready.',
            )
            status["modelStatus"] = {
                "transitionStatus": "InProgress",
                "states": {"activeModelState": "Pending", "targetModelState": "Loading"},
            }
            state = "Unknown"
        status["conditions"] = [
            condition("IngressReady", "Unknown", reason, message),
            condition("PredictorReady", state, reason, message),
            condition("Ready", state, reason, message),
        ]
        if served.reported and served.reported.get("url"):
            status["url"] = served.reported["url"]  # the route keeps its address while a new revision comes up
        return status

    def _kserve_get(self, plural: str, namespace: str, name: str) -> dict | None:
        served = self.kserve.get((plural, namespace, name))
        if served is None:
            return None
        answer = copy.deepcopy(served.body)
        if plural == "inferenceservices":
            served.reads += 1
            served.reported = self.isvc_status(served, namespace)
            reported = served.reported or {}
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in reported.get("conditions") or [])
            self.isvc_reports.append((served.body["metadata"]["generation"], reported.get("observedGeneration"), ready))
            if served.reported is not None:
                answer["status"] = copy.deepcopy(served.reported)
        return answer

    def _kserve_patch(
        self, plural: str, namespace: str, name: str, patch: dict, manager: str, strict: bool = False
    ) -> tuple[int, dict]:
        """A merge patch: an Update, whose manager takes the fields it changes from every other (the
        managedFieldsUpdater's Update, k8s.io/apimachinery/pkg/util/managedfields/internal/managedfieldsupdater.go)."""
        served = self.kserve.get((plural, namespace, name))
        if served is None:
            return 404, kserve_not_found(plural, name)
        current = served.body
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            return 409, kserve_conflict(plural, name)
        patched = merge_patch(current, {key: value for key, value in patch.items() if key != "status"})
        for immutable in ("name", "namespace", "uid", "creationTimestamp", "generation"):
            patched["metadata"][immutable] = current["metadata"][immutable]
        unknown = unknown_fields(kserve_schema(plural), patched)
        if unknown and strict:
            self.violations.extend(f"unknown field {field!r}" for field in unknown)
            return 422, status(
                422,
                "Invalid",
                f' "" is invalid: patch: Invalid value: "{json.dumps(patched)}": {strict_decoding(unknown)}',
            )
        self.violations.extend(f"unknown field {field!r} pruned" for field in unknown)
        patched = pruned(kserve_schema(plural), patched)
        errors = kserve_errors(plural, patched)
        if errors:
            self.violations.extend(errors)
            return 422, kserve_invalid(plural, name, errors)
        if patched == current:
            return 200, self._kserve_answer(plural, served)  # nothing to write: the resourceVersion stays
        schema = kserve_schema(plural)
        before, after = owned_fields(current, schema), owned_fields(patched, schema)
        changed = {path for path, value in after.items() if before.get(path, _MISSING) != value}
        gone = set(before) - set(after)
        for owner in served.owners:
            owner.fields -= changed | gone
        mine = next((o for o in served.owners if (o.manager, o.operation) == (manager, "Update")), None)
        if changed and mine is None:
            served.owners.append(Owner(manager, "Update", current["apiVersion"], _now(), changed))
        elif changed and mine is not None:
            mine.fields |= changed
            mine.time = _now()
        self._kserve_write(plural, served, patched)
        return 200, self._kserve_answer(plural, served)

    def _kserve_write(self, plural: str, served: _Served, new: dict) -> None:
        """Stores ``new``: a new resourceVersion; a new generation only when the spec changed (the status
        subresource's rule), which restarts the controller's reads."""
        served.owners = [owner for owner in served.owners if owner.fields]
        new["metadata"]["managedFields"] = [owner.entry() for owner in served.owners]
        if new.get("spec") != served.body.get("spec"):
            new["metadata"]["generation"] = served.body["metadata"]["generation"] + 1
            served.reads = 0
        new["metadata"]["resourceVersion"] = self._next_version()
        served.body = new

    def _kserve_answer(self, plural: str, served: _Served) -> dict:
        """A write's answer: the object as stored, with the status the controller last reported (not a read)."""
        answer = copy.deepcopy(served.body)
        if plural == "inferenceservices" and served.reported is not None:
            answer["status"] = copy.deepcopy(served.reported)
        return answer

    def _kserve_apply(
        self, call: Call, namespace: str, body: Any, query: dict, may_create: Callable[[], dict | None]
    ) -> tuple[int, dict]:
        """A server-side apply (PatchResource and applyPatcher, k8s.io/apiserver/pkg/endpoints/handlers/patch.go;
        the merge is structured-merge-diff's), in the order the API server checks it.

        ``may_create`` is the create authorization an apply that creates needs besides patch: None, or the 403.
        """
        plural, name = call.resource, call.name
        version, kind = KSERVE_KINDS[plural]
        manager = query.get("fieldManager", [""])[0]
        if not manager:  # ValidatePatchOptions, k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go
            return 422, dict(
                status(
                    422,
                    "Invalid",
                    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
                    group="meta.k8s.io",
                    kind="PatchOptions",
                ),
                details={
                    "group": "meta.k8s.io",
                    "kind": "PatchOptions",
                    "causes": [
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value: is required for apply patch",
                            "field": "fieldManager",
                        }
                    ],
                },
            )
        if not isinstance(body, dict):
            return 400, status(400, "BadRequest", "error decoding YAML: the body is not an object")
        if body.get("apiVersion") != f"{KSERVE_GROUP}/{version}":  # structuredMergeManager.Apply
            return 400, status(
                400,
                "BadRequest",
                f"Incorrect version specified in apply patch. Specified patch version: {body.get('apiVersion')},"
                f" expected: {KSERVE_GROUP}/{version}",
            )
        schema = kserve_schema(plural)
        unknown = unknown_fields(schema, body)
        if unknown:
            # ObjectToTyped fails before any field validation: a plain error, so 500 (kubernetes/kubernetes#139253).
            self.violations.extend(f"unknown field {field!r}" for field in unknown)
            meta = body.get("metadata") or {}
            where = f"{meta.get('namespace', '')}/{meta.get('name', '')}; {KSERVE_GROUP}/{version}, Kind={kind}"
            undeclared = f".{unknown[0]}: field not declared in schema"
            return 500, {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"failed to create typed patch object ({where}): {undeclared}",
                "code": 500,
            }
        served = self.kserve.get((plural, namespace, name))
        live = (
            copy.deepcopy(served.body)
            if served is not None
            else {"apiVersion": body["apiVersion"], "kind": kind, "metadata": {}}
        )
        owners = copy.deepcopy(served.owners) if served is not None else []
        config, current = owned_fields(body, schema), owned_fields(live, schema)
        conflicts = [
            (owner, path)
            for owner in owners
            if (owner.manager, owner.operation) != (manager, "Apply")
            for path in sorted(owner.fields & set(config), key=repr)
            if current.get(path, _MISSING) != config[path]
        ]
        if conflicts and not go_bool(query, "force"):
            return 409, dict(
                status(409, "Conflict", conflict_message(conflicts)),
                details={
                    "causes": [
                        {
                            "reason": "FieldManagerConflict",
                            "message": f'conflict with "{owner.manager}"'
                            + (f" using {owner.api_version}" if owner.operation == "Update" else ""),
                            "field": path_text(path),
                        }
                        for owner, path in conflicts
                    ]
                },
            )
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and (served is None or wanted != served.body["metadata"]["resourceVersion"]):
            # The applied resourceVersion is a precondition, as in any update (the registry store's Update,
            # k8s.io/apiserver/pkg/registry/generic/registry/store.go); an object gone meanwhile is not found.
            return (404, kserve_not_found(plural, name)) if served is None else (409, kserve_conflict(plural, name))
        for owner, path in conflicts:  # forced: the fields change hands
            owner.fields.discard(path)
        mine = next((o for o in owners if (o.manager, o.operation) == (manager, "Apply")), None)
        new = live
        for path, value in config.items():
            set_field(new, path, value)
        others = set().union(*(o.fields for o in owners if o is not mine))
        for path in (mine.fields if mine else set()) - set(config) - others:
            remove_field(new, path)  # applied before, left out now, owned by nobody else: removed
        if mine is None:
            mine = Owner(manager, "Apply", body["apiVersion"], _now(), set())
            owners.append(mine)
        mine.fields = set(config)
        new["metadata"].update(name=(body.get("metadata") or {}).get("name", name))
        if new["metadata"]["name"] != name:  # checkName, k8s.io/apiserver/pkg/endpoints/handlers/rest.go
            return 400, status(
                400,
                "BadRequest",
                f"the name of the object ({new['metadata']['name']}) does not match the name on the URL ({name})",
            )
        if served is None:
            if self.namespaces is not None and namespace not in self.namespaces:
                return 404, status(
                    404, "NotFound", f'namespaces "{namespace}" not found', name=namespace, kind="namespaces"
                )
            errors = kserve_errors(plural, new)
            if errors:
                self.violations.extend(errors)
                return 422, kserve_invalid(plural, name, errors)
            refused = may_create()
            if refused is not None:
                return 403, refused
            stored = self._kserve_store(plural, namespace, new, manager, "Apply")
            return 201, copy.deepcopy(stored)
        errors = kserve_errors(plural, new)
        if errors:
            self.violations.extend(errors)
            return 422, kserve_invalid(plural, name, errors)
        changed = new != served.body or [o.entry() | {"time": ""} for o in owners if o.fields] != [
            o.entry() | {"time": ""} for o in served.owners
        ]
        if changed:
            if new != served.body:
                mine.time = _now()  # managedFieldsUpdater.Apply: the time moves only when the object does
            served.owners = owners
            self._kserve_write(plural, served, new)
        return 200, self._kserve_answer(plural, served)

    # ------------------------------------------------------------ the API's state

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _store(self, body: dict, phases: list[str]) -> dict:
        metadata = body["metadata"]
        metadata.update(
            namespace=self.namespace,
            uid=str(uuid.uuid4()),
            resourceVersion=self._next_version(),
            creationTimestamp=rfc3339nano(LOG_EPOCH),
            generation=1,
        )
        self.jobs[metadata["name"]] = body
        pod_phases = self.pod_phases or [POD_PHASE[phase] for phase in phases]
        self.timelines[metadata["uid"]] = _Timeline(list(phases), list(pod_phases))
        self._collect_garbage()
        return body

    def _holds(self, call: Call) -> bool:
        """Whether a job of the request's resource is stored under the request's name."""
        body = self.jobs.get(call.name)
        return body is not None and body["kind"] == ("TrainJob" if call.resource == TRAINJOBS else "TFJob")

    def _job_errors(self, plural: str, body: dict) -> list[str]:
        if plural == TRAINJOBS:
            return trainjob_errors(body, self.trainer)
        return [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in self.validator.iter_errors(body)
        ] + metadata_errors(body.get("metadata") or {})

    def _trainer_webhook(self, body: dict) -> str | None:
        """Why Trainer's TrainJob webhook denies ``body``: its runtime does not exist (only ClusterTrainingRuntimes
        are modelled)."""
        ref = body["spec"]["runtimeRef"]
        prefix = 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: '
        for patch in body["spec"].get("runtimePatches") or []:
            host, _, path = patch.get("manager", "").partition("/")
            if not (path and len(host) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(host)):
                return (
                    f'{prefix}spec.runtimePatches.manager: Invalid value: "{patch.get("manager")}": must be a '
                    'domain-prefixed path (such as "acme.io/foo")'
                )
            jobs = patch.get("trainingRuntimeSpec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", [])
            if any(job.get("name") not in RUNTIME_JOBS for job in jobs):
                return (
                    f"{prefix}spec.runtimePatches: must not have replicated job that doesn't exist in the runtime"
                    " job template"
                )
        if ref.get("kind", "ClusterTrainingRuntime") == "ClusterTrainingRuntime" and ref["name"] in self.runtimes:
            return None
        return (
            'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: spec.RuntimeRef: '
            "Invalid value:"
            f' {json.dumps(ref)}: clustertrainingruntimes.trainer.kubeflow.org "{ref["name"]}" not found: specified'
            " clusterTrainingRuntime must be created before the TrainJob is created"
        )

    def _phases_for(self, body: dict) -> list[str]:
        """The job's states; a TrainJob whose JobSet JobSet's webhook refuses never starts."""
        if body["kind"] == "TrainJob":
            longest = trainjob_pod_name(body["metadata"]["name"], self._workers_of(body) - 1)
            if len(longest) > 63:
                self.violations.append(
                    f"JobSet {body['metadata']['name']}: pod names generated for this JobSet will exceed 63 characters"
                )
                return ["Created"]
        return self.phases

    def _timeline(self, name: str) -> _Timeline:
        return self.timelines[self.job_uid(name)]

    def _conditions(self, timeline: _Timeline, name: str, kind: str = "TFJob") -> list[dict]:
        types = timeline.phases[: timeline.now + 1]
        if kind == "TrainJob":
            ended = TRAINJOB_CONDITIONS.get(types[-1])
            return (
                [
                    {
                        "type": ended[0],
                        "status": "True",
                        "reason": ended[1],
                        "message": ended[2],
                        "lastTransitionTime": _TRANSITION_TIME,
                    }
                ]
                if ended
                else []
            )
        return [
            {
                "type": kind,
                "status": "True" if index == len(types) - 1 or kind == "Created" else "False",
                "reason": f"TFJob{kind}",
                "message": TFJOB_FAILURES[self.failure].format(name=name)
                if kind == "Failed"
                else f"TFJob is {kind.lower()}.",
                "lastTransitionTime": "2026-11-29T00:00:00Z",
            }
            for index, kind in enumerate(types)
        ]

    def _read_job(self, name: str) -> dict | None:
        """Reports the job's next state; a job lingering in foreground deletion disappears after ``linger`` reads."""
        if name not in self.jobs:
            return None
        timeline = self._timeline(name)
        if timeline.linger is not None:
            if timeline.linger == 0:
                self._remove_job(name)
                return None
            timeline.linger -= 1
        else:
            timeline.gets += 1
            hook = self.on_state.pop(timeline.now, None) if timeline.gets - 1 == timeline.now else None
            if hook:
                hook()
                if name not in self.jobs:
                    return None
        return dict(self.jobs[name], status={"conditions": self._conditions(timeline, name, self.jobs[name]["kind"])})

    def _remove_job(self, name: str) -> None:
        body = self.jobs.pop(name)
        self.timelines.pop(body["metadata"]["uid"], None)

    def _delete_job(self, name: str, propagation: str | None) -> dict:
        body = self.jobs[name]
        self.deleted.append(name)
        self.propagations.append(propagation)
        timeline = self._timeline(name)
        if propagation == "Foreground":
            if timeline.linger is None:
                body["metadata"].update(deletionTimestamp=rfc3339nano(LOG_EPOCH), finalizers=["foregroundDeletion"])
                timeline.linger = self.linger
        else:
            self._remove_job(name)
        return body

    def _dangling(self, ref: dict) -> bool:
        """isDangling for the owners this fake knows (pods); any other kind counts as present."""
        if (ref.get("apiVersion"), ref.get("kind")) != ("v1", "Pod"):
            return False
        pod = self.pods.get(ref.get("name", ""))
        return pod is None or pod["metadata"]["uid"] != ref.get("uid")

    def _collect_garbage(self) -> None:
        for name, body in list(self.jobs.items()):
            refs = body["metadata"].get("ownerReferences") or []
            if refs and all(self._dangling(ref) for ref in refs):
                self._remove_job(name)
                self.collected.append(name)

    @staticmethod
    def _workers_of(body: dict) -> int:
        if body["kind"] == "TrainJob":
            return (body["spec"].get("trainer") or {}).get("numNodes", 1)
        return body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"]

    def _pod_name_of(self, job: str, body: dict, index: int) -> str:
        if body["kind"] == "TrainJob":
            return trainjob_pod_name(job, index, self._restarts(self._timeline(job)))
        return f"{job}-worker-{index}"

    def _live_workers(self) -> list[tuple[str, int, _Timeline]]:
        """(job, index, timeline) of every worker pod that exists now; a job being deleted has lost its pods."""
        return [
            (name, index, self._timeline(name))
            for name, body in self.jobs.items()
            if self._timeline(name).linger is None
            for index in range(self._workers_of(body))
        ]

    def _worker(self, pod_name: str) -> tuple[str, int, _Timeline] | None:
        """(job, index, timeline) of the worker pod named ``pod_name`` if it exists now."""
        return next(
            (
                worker
                for worker in self._live_workers()
                if self._pod_name_of(worker[0], self.jobs[worker[0]], worker[1]) == pod_name
            ),
            None,
        )

    def _restarts(self, timeline: _Timeline) -> int:
        """The restarts so far: worker 0's container's in a TFJob, the whole JobSet's in a TrainJob."""
        return sum(1 for state in self.restarts if state <= timeline.now)

    def _restart_count(self, job: str, index: int, timeline: _Timeline) -> int:
        """A container's restartCount: a TrainJob's pods never restart in place."""
        return self._restarts(timeline) if index == 0 and self.jobs[job]["kind"] != "TrainJob" else 0

    def _worker_pod(self, job: str, index: int, timeline: _Timeline) -> dict:
        body = self.jobs[job]
        phase = timeline.pod_phase()
        state = {
            "Pending": {"waiting": {"reason": "ContainerCreating"}},
            "Running": {"running": {"startedAt": "2026-11-29T00:00:00Z"}},
        }.get(phase, {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1}})
        uid = body["metadata"]["uid"]
        if body["kind"] == "TrainJob":
            container, image = TRAINER_CONTAINER, body["spec"]["trainer"]["image"]
            account = trainjob_account(body, self.trainer)
            restart_policy = "Never"
            metadata = {  # labelAndAnnotateObject (JobSet) and the Job controller's index annotation
                "labels": {
                    "jobset.sigs.k8s.io/jobset-name": job,
                    "jobset.sigs.k8s.io/replicatedjob-name": TRAINER_CONTAINER,
                    "jobset.sigs.k8s.io/job-index": "0",
                    "batch.kubernetes.io/job-completion-index": str(index),
                    "jobset.sigs.k8s.io/restart-attempt": str(self._restarts(timeline)),
                },
                "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": f"{job}-{TRAINER_CONTAINER}-0",
                        "uid": f"{uid}-job",
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            }
        else:
            template = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]
            container, image = CONTAINER, template["spec"]["containers"][0]["image"]
            account = template["spec"].get("serviceAccountName", "default")
            restart_policy = "OnFailure"
            metadata = {
                "labels": {
                    "training.kubeflow.org/job-name": job,
                    "training.kubeflow.org/replica-type": "worker",
                    "training.kubeflow.org/replica-index": str(index),
                },
                "ownerReferences": [
                    {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": "TFJob",
                        "name": job,
                        "uid": uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self._pod_name_of(job, body, index),
                "namespace": self.namespace,
                "uid": f"{uid}-{index}" + (f"-{self._restarts(timeline)}" if body["kind"] == "TrainJob" else ""),
                "creationTimestamp": rfc3339nano(LOG_EPOCH),
                **metadata,
            },
            "spec": {
                "restartPolicy": restart_policy,
                "serviceAccountName": account,
                "containers": [{"name": container, "image": image}],
            },
            "status": {
                "phase": phase,
                "containerStatuses": [
                    {
                        "name": container,
                        "restartCount": self._restart_count(job, index, timeline),
                        "ready": phase == "Running",
                        "state": state,
                        "image": "bakeoff",
                        "imageID": "",
                        "containerID": f"containerd://{index}",
                    }
                ],
            },
        }

    def _log_lines(self, index: int, timeline: _Timeline) -> list[str]:
        """The current container's lines, each with the kubelet's stamp."""
        if index:
            text, container = self.worker_logs.get(index, ""), 0
        else:
            container = self._restarts(timeline)  # the restarted container's, or the JobSet's new pod's
            logs = [self.log] if isinstance(self.log, str) else list(self.log)
            text = logs[min(container, len(logs) - 1)]
        start = LOG_EPOCH + timedelta(minutes=container)
        return [
            f"{rfc3339nano(start + LINE_SPACING * (number + 1))} {line}"
            for number, line in enumerate(text.splitlines())
        ]

    # ------------------------------------------------------------ HTTP

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, body: object, content_type: str = "application/json") -> None:
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _page_not_found(self) -> None:
                """The NotFoundHandler's answer (see the module docstring)."""
                data = PAGE_NOT_FOUND.encode()
                self.send_response(404)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("X-Content-Type-Options", "nosniff")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                if not length:
                    return None
                data = self.rfile.read(length)
                # An apply's body is YAML (of which JSON is a part); everything else here is JSON.
                return yaml.safe_load(data) if self.headers.get("Content-Type") == APPLY_PATCH else json.loads(data)

            def _serve(self, method: str) -> None:
                url = urlparse(self.path)
                if (method, url.path) == ("GET", TRAINER_OPENAPI):
                    fake.openapi_reads += 1  # a non-resource URL: system:discovery, not the Role, allows it
                    if TRAINJOB_CRD not in fake.crds:
                        return self._page_not_found()  # no such group/version: a 404, as for its resources
                    return self._send(200, trainjob_openapi(fake.trainer))
                call = request_info(method, url.path, url.query)
                body = self._body()
                with fake._lock:
                    if call is None:
                        return self._send(404, status(404, "NotFound", f"no route {url.path}"))
                    fake.calls.append(call)
                    if fake.granted is not None and (call.group, call.resource, call.verb) not in fake.granted:
                        namespace = url.path.split("/namespaces/")[1].split("/")[0]
                        return self._send(403, forbidden(call, namespace, fake.user))
                    if call.group and f"{call.resource.partition('/')[0]}.{call.group}" not in fake.crds:
                        return self._page_not_found()
                    failure = next(
                        (f for f in fake.failures if f.times and (f.verb, f.resource) == (call.verb, call.resource)),
                        None,
                    )
                    if failure is not None:
                        failure.times -= 1
                        if failure.answer == "drop":
                            self.close_connection = True
                            return None
                        return self._send(
                            int(failure.answer),
                            status(int(failure.answer), "InternalError", "etcdserver: request timed out"),
                        )
                    route = getattr(self, f"_{call.verb}_{call.resource.replace('/', '_')}", None)
                    if route is None:
                        return self._send(
                            405, status(405, "MethodNotAllowed", f"the fake does not serve {call.verb} {call.resource}")
                        )
                    route(call, body, parse_qs(url.query))

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def do_PATCH(self) -> None:
                self._serve("PATCH")

            def do_DELETE(self) -> None:
                self._serve("DELETE")

            def _create_job(self, call: Call, body: dict, query: dict) -> None:
                if call.resource == TRAINJOBS:
                    schema = trainjob_schema(fake.trainer)
                    unknown = unknown_fields(schema, body)
                    if unknown and go_strict(query):
                        fake.violations.extend(f"unknown field {field!r}" for field in unknown)
                        message = f"TrainJob in version {TRAINER_VERSION!r} cannot be handled as a TrainJob: "
                        return self._send(
                            400, status(400, "BadRequest", message.replace("'", '"') + strict_decoding(unknown))
                        )
                    fake.violations.extend(f"unknown field {field!r} pruned" for field in unknown)
                    body = pruned(schema, body)
                errors = fake._job_errors(call.resource, body)
                if errors:
                    fake.violations.extend(errors)
                    return self._send(422, status(422, "Invalid", "; ".join(errors)))
                denied = fake._trainer_webhook(body) if call.resource == TRAINJOBS else None
                if denied:
                    return self._send(403, status(403, "Forbidden", denied))
                name = body["metadata"]["name"]
                if name in fake.jobs:
                    return self._send(
                        409,
                        status(
                            409,
                            "AlreadyExists",
                            f'{call.resource}.{call.group} "{name}" already exists',
                            name=name,
                            group=call.group,
                            kind=call.resource,
                        ),
                    )
                self._send(201, fake._store(body, fake._phases_for(body)))

            def _not_found(self, resource: str, name: str) -> None:
                self._send(404, status(404, "NotFound", f'{resource} "{name}" not found', name=name, kind=resource))

            def _get_job(self, call: Call, body: None, query: dict) -> None:
                job = fake._read_job(call.name) if fake._holds(call) else None
                if job is None:
                    return self._not_found(f"{call.resource}.{call.group}", call.name)
                self._send(200, job)

            def _patch_job(self, call: Call, body: dict, query: dict) -> None:
                if self.headers.get("Content-Type") != "application/merge-patch+json":
                    return self._send(
                        415,
                        status(
                            415,
                            "UnsupportedMediaType",
                            f"the fake takes merge patches, not {self.headers.get('Content-Type')}",
                        ),
                    )
                if not fake._holds(call):
                    return self._not_found(f"{call.resource}.{call.group}", call.name)
                current = fake.jobs[call.name]
                wanted = (body.get("metadata") or {}).get("resourceVersion")
                if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
                    return self._send(
                        409,
                        status(
                            409,
                            "Conflict",
                            f'Operation cannot be fulfilled on {call.resource}.{call.group} "{call.name}":'
                            " the object has been modified; please apply your changes to the latest version and try "
                            "again",
                        ),
                    )
                patched = merge_patch(current, body)
                for immutable in ("name", "namespace", "uid", "creationTimestamp"):
                    patched["metadata"][immutable] = current["metadata"][immutable]
                errors = fake._job_errors(call.resource, patched)
                if errors:
                    fake.violations.extend(errors)
                    return self._send(422, status(422, "Invalid", "; ".join(errors)))
                patched["metadata"]["resourceVersion"] = fake._next_version()
                fake.jobs[call.name] = patched
                fake._collect_garbage()
                self._send(200, patched)

            def _delete_job(self, call: Call, body: dict | None, query: dict) -> None:
                if not fake._holds(call):
                    return self._not_found(f"{call.resource}.{call.group}", call.name)
                self._send(200, fake._delete_job(call.name, (body or {}).get("propagationPolicy")))

            _create_tfjobs = _create_trainjobs = _create_job
            _get_tfjobs = _get_trainjobs = _get_job
            _patch_tfjobs = _patch_trainjobs = _patch_job
            _delete_tfjobs = _delete_trainjobs = _delete_job

            def _list_pods(self, call: Call, body: None, query: dict) -> None:
                wanted = dict(pair.split("=", 1) for pair in query.get("labelSelector", [""])[0].split(",") if pair)
                pods = list(fake.pods.values()) + [fake._worker_pod(*worker) for worker in fake._live_workers()]
                found = [
                    pod
                    for pod in pods
                    if all((pod["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
                ]
                self._send(
                    200,
                    {
                        "apiVersion": "v1",
                        "kind": "PodList",
                        "metadata": {"resourceVersion": fake._next_version()},
                        "items": found,
                    },
                )

            def _get_pods(self, call: Call, body: None, query: dict) -> None:
                if call.name in fake.pods:
                    return self._send(200, fake.pods[call.name])
                worker = fake._worker(call.name)
                if worker is None:
                    return self._not_found("pods", call.name)
                self._send(200, fake._worker_pod(*worker))

            def _delete_pods(self, call: Call, body: dict | None, query: dict) -> None:
                if call.name not in fake.pods:
                    return self._not_found("pods", call.name)
                pod = fake.pods[call.name]
                fake.delete_pod(call.name)
                self._send(200, pod)

            def _kserve_namespace(self) -> str:
                return urlparse(self.path).path.split("/namespaces/")[1].split("/")[0]

            def _kserve_unserved(self, call: Call) -> bool:
                """Answers as for a resource no CRD defines when the path's group/version is not one the CRD serves."""
                parts = urlparse(self.path).path.split("/")
                if call.group == KSERVE_GROUP and parts[3] == KSERVE_KINDS[call.resource][0]:
                    return False
                self._page_not_found()
                return True

            def _create_kserve(self, call: Call, body: dict, query: dict) -> None:
                if self._kserve_unserved(call):
                    return None
                namespace = self._kserve_namespace()
                given = (body.get("metadata") or {}).get("namespace")
                if given and given != namespace:
                    return self._send(
                        400,
                        status(
                            400,
                            "BadRequest",
                            "the namespace of the provided object does not match the namespace sent on the request",
                        ),
                    )
                if fake.namespaces is not None and namespace not in fake.namespaces:
                    return self._send(
                        404,
                        status(
                            404, "NotFound", f'namespaces "{namespace}" not found', name=namespace, kind="namespaces"
                        ),
                    )
                version, kind = KSERVE_KINDS[call.resource]
                unknown = unknown_fields(kserve_schema(call.resource), body)
                if unknown and go_strict(query):
                    fake.violations.extend(f"unknown field {field!r}" for field in unknown)
                    return self._send(
                        400,
                        status(
                            400,
                            "BadRequest",
                            f'{kind} in version "{version}" cannot be handled as a {kind}: {strict_decoding(unknown)}',
                        ),
                    )
                fake.violations.extend(f"unknown field {field!r} pruned" for field in unknown)
                body = pruned(kserve_schema(call.resource), body)
                errors = kserve_errors(call.resource, body)
                if errors:
                    fake.violations.extend(errors)
                    return self._send(
                        422, kserve_invalid(call.resource, (body.get("metadata") or {}).get("name", ""), errors)
                    )
                name = body["metadata"]["name"]
                if (call.resource, namespace, name) in fake.kserve:
                    return self._send(
                        409,
                        status(
                            409,
                            "AlreadyExists",
                            f'{call.resource}.{KSERVE_GROUP} "{name}" already exists',
                            name=name,
                            group=KSERVE_GROUP,
                            kind=call.resource,
                        ),
                    )
                manager = manager_name(query, self.headers.get("User-Agent", ""))
                self._send(201, copy.deepcopy(fake._kserve_store(call.resource, namespace, body, manager)))

            def _get_kserve(self, call: Call, body: None, query: dict) -> None:
                if self._kserve_unserved(call):
                    return None
                found = fake._kserve_get(call.resource, self._kserve_namespace(), call.name)
                if found is None:
                    return self._send(
                        404,
                        status(
                            404,
                            "NotFound",
                            f'{call.resource}.{KSERVE_GROUP} "{call.name}" not found',
                            name=call.name,
                            group=KSERVE_GROUP,
                            kind=call.resource,
                        ),
                    )
                self._send(200, found)

            def _patch_kserve(self, call: Call, body: Any, query: dict) -> None:
                if self._kserve_unserved(call):
                    return None
                kind = self.headers.get("Content-Type")
                namespace = self._kserve_namespace()
                if kind == APPLY_PATCH:
                    return self._send(
                        *fake._kserve_apply(call, namespace, body, query, lambda: self._may_create(call, namespace))
                    )
                if kind != MERGE_PATCH:
                    return self._send(
                        415, status(415, "UnsupportedMediaType", f"the fake takes merge and apply patches, not {kind}")
                    )
                if "force" in query:  # ValidatePatchOptions
                    return self._send(
                        422,
                        status(
                            422,
                            "Invalid",
                            'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for'
                            " non-apply patch",
                            group="meta.k8s.io",
                            kind="PatchOptions",
                        ),
                    )
                manager = manager_name(query, self.headers.get("User-Agent", ""))
                self._send(*fake._kserve_patch(call.resource, namespace, call.name, body, manager, go_strict(query)))

            def _may_create(self, call: Call, namespace: str) -> dict | None:
                """An apply that creates is authorized for create too (withAuthorization in PatchResource), and
                refused in the words of the authorization filter."""
                create = Call("create", call.group, call.resource, call.name)
                fake.calls.append(create)
                if fake.granted is None or (call.group, call.resource, "create") in fake.granted:
                    return None
                return forbidden(create, namespace, fake.user)

            _create_inferenceservices = _create_servingruntimes = _create_kserve
            _get_inferenceservices = _get_servingruntimes = _get_kserve
            _patch_inferenceservices = _patch_servingruntimes = _patch_kserve

            def _get_pods_log(self, call: Call, body: None, query: dict) -> None:
                worker = fake._worker(call.name)
                if worker is None:
                    return self._not_found("pods", call.name)
                job, index, timeline = worker
                phase = timeline.pod_phase()
                fake.log_reads.append(
                    LogRead(call.name, phase, fake._restart_count(job, index, timeline), go_bool(query, "follow"))
                )
                expected = TRAINER_CONTAINER if fake.jobs[job]["kind"] == "TrainJob" else CONTAINER
                container = query.get("container", [expected])[0]
                if container != expected:
                    return self._send(
                        400, status(400, "BadRequest", f"container {container} is not valid for pod {call.name}")
                    )
                if phase == "Pending":
                    return self._send(
                        400,
                        status(
                            400,
                            "BadRequest",
                            f'container "{expected}" in pod "{call.name}" is waiting to start: ContainerCreating',
                        ),
                    )
                lines = fake._log_lines(index, timeline)
                if "tailLines" in query:
                    lines = lines[-int(query["tailLines"][0]) :] if int(query["tailLines"][0]) else []
                if not go_bool(query, "timestamps"):
                    lines = [line.partition(" ")[2] for line in lines]
                self._send(200, "".join(f"{line}\n" for line in lines), "text/plain")

        return Handler
