"""The Kubeflow Trainer v2 backend: the variant's TFJob, run as a TrainJob on bakeoff's own runtime.

Kubeflow 1.11 and 26.03 install Trainer v2 (v2.1.0) and no Training Operator v1, so no TFJob runs there. The
variant's training is still described once, by ``build_tfjob``: this backend derives the TrainJob from that
TFJob rather than from a neutral description of both, because the TFJob is the reference the design asks for,
the local backend executes it as it is, and everything a TrainJob needs maps from its one Worker replica spec
(image, command, args, environment with the store secret's references and the thread caps, resources, replica
count, service account). The service account goes where the cluster's Trainer release takes it: v2.1's
``spec.podTemplateOverrides``, which v2.2 removed for ``spec.runtimePatches`` (``identity_field`` reads which one the
served schema has). What has no TrainJob field at v2.1 stays with the runtime (the restarts: its
JobSet's failurePolicy, ``manifests/trainer-v2/``) or with this backend (activeDeadlineSeconds: the runner
deletes the job past it).

The spec is built with the ``kubeflow-trainer-api`` models (v2.1.0, the Trainer's own OpenAPI models); the
calls go through the kubernetes client's CustomObjectsApi, since the ``kubeflow`` SDK's TrainerClient submits
functions and commands of its own making, not a TrainJob given whole. The runner (``kubejob.KubeJobRunner``)
brings log following, retries, adopt-or-replace, the owner reference and the service account. Creates ask
``fieldValidation=Strict``: a field the served schema does not know is refused, not pruned with a warning (the
workers would run as the namespace's ``default`` account).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kubeflow.training import KubeflowOrgV1TFJob
from kubeflow_trainer_api.models import (
    TrainerV1alpha1RuntimeRef,
    TrainerV1alpha1Trainer,
    TrainerV1alpha1TrainJobSpec,
)
from kubernetes.client import ApiClient, V1DeleteOptions, V1ObjectMeta

from bakeoff.components.backends.backend import WORKER
from bakeoff.components.backends.kubejob import JobState, KubeJobRunner
from bakeoff.components.environment import NODES_ENV
from bakeoff.components.errors import BakeoffError
from bakeoff.components.kubeapi import api_reason

GROUP, VERSION, PLURAL, KIND = "trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"
RUNTIME = "bakeoff-tensorflow"  # manifests/trainer-v2/'s ClusterTrainingRuntime
RUNTIME_KIND = "ClusterTrainingRuntime"
NODE = "node"  # the runtime's replicated job and its container (Trainer's constants.Node: the names it fills in)
CONTAINER = NODE
OUTCOMES = {"Complete": "completed", "Failed": "failed"}  # the conditions that end a TrainJob (trainjob_types.go)
# The pods' JobSet labels (labelAndAnnotateObject, kubernetes-sigs/jobset pkg/controllers/jobset_controller.go) and
# the Job controller's completion index annotation (addCompletionIndexAnnotation, k8s pkg/controller/job).
JOBSET_LABEL, REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/jobset-name", "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# JobSet's webhook refuses a JobSet whose longest pod name, <jobset>-node-0-<index>-<5 random>, passes 63 characters
# (ValidateCreate, pkg/webhooks/jobset_webhook.go); the JobSet takes the TrainJob's name.
POD_NAME_MAX = 63
WORKERS_MAX = 64  # components/spec.py MAX_WORKERS: the largest index has two digits
# Where a TrainJob sets its workers' pod spec. Trainer v2.1: spec.podTemplateOverrides (PodTemplateOverride,
# pkg/apis/trainer/v1alpha1/trainjob_types.go at v2.1.0); v2.2.0 removed it for spec.runtimePatches (RuntimePatch,
# the same file at v2.2.0/v2.3.0), a list keyed by a manager that Trainer's webhook wants domain-prefixed
# (validation.IsDomainPrefixedPath in JobSet.Validate, pkg/runtime/framework/plugins/jobset/jobset.go).
OVERRIDES, PATCHES = "podTemplateOverrides", "runtimePatches"
MANAGER = "bakeoff/trainjob-backend"
# The served schemas of the group/version (the API server's OpenAPI v3 discovery, readable by every authenticated
# user through the system:discovery ClusterRole, unlike the CRD object).
OPENAPI_PATH = f"/openapi/v3/apis/{GROUP}/{VERSION}"


def trainjob_name(tfjob_name: str) -> str:
    """The TFJob's name shortened so that every pod name of its JobSet fits: its digest kept, its stem cut."""
    room = POD_NAME_MAX - len(f"-{NODE}-0-{WORKERS_MAX - 1}-abcde")
    stem, _, digest = tfjob_name.rpartition("-")
    return f"{stem[: room - len(digest) - 1].rstrip('-')}-{digest}"


@dataclass
class TrainJobRequest:
    """A TrainJob to submit: the kubernetes client's metadata, which the runner fills in, and the Trainer API's spec."""

    metadata: V1ObjectMeta
    spec: TrainerV1alpha1TrainJobSpec
    deadline_seconds: int  # the TFJob's activeDeadlineSeconds, which no TrainJob field holds at v2.1
    account: str | None = None  # the workers' service account; None: the namespace's default

    def body(self, identity: str | None = None) -> dict:
        """The TrainJob, its workers' account set through ``identity`` (OVERRIDES or PATCHES, what the served schema
        has); needed only when there is an account."""
        spec = self.spec.to_dict()
        if self.account:
            if identity is None:
                raise ValueError("a TrainJob with a service account needs the field that sets it")
            spec[identity] = run_as(identity, self.account)
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": ApiClient().sanitize_for_serialization(self.metadata),
            "spec": spec,
        }


def trainjob_for(job: KubeflowOrgV1TFJob) -> TrainJobRequest:
    """The TrainJob that runs ``job``'s Worker replicas on bakeoff's runtime."""
    replica = job.spec.tf_replica_specs[WORKER]
    pod = replica.template.spec
    (container,) = pod.containers  # build_tfjob's one container
    plain = ApiClient().sanitize_for_serialization
    nodes = replica.replicas or 1
    trainer = TrainerV1alpha1Trainer.from_dict(
        {
            "image": container.image,
            "command": container.command,
            "args": container.args,
            "env": [*plain(container.env or []), {"name": NODES_ENV, "value": str(nodes)}],
            "numNodes": nodes,
            "resourcesPerNode": plain(container.resources),
        }
    )
    spec = TrainerV1alpha1TrainJobSpec(
        runtime_ref=TrainerV1alpha1RuntimeRef(name=RUNTIME, kind=RUNTIME_KIND, api_group=GROUP), trainer=trainer
    )
    source = job.metadata
    metadata = V1ObjectMeta(
        name=trainjob_name(source.name), labels=dict(source.labels or {}), annotations=dict(source.annotations or {})
    )
    return TrainJobRequest(
        metadata, spec, job.spec.run_policy.active_deadline_seconds, pod.service_account_name or None
    )


def run_as(identity: str, account: str) -> list[dict]:
    """The ``identity`` field's value that runs the runtime's node pods as ``account``. Plain dicts: the
    kubeflow-trainer-api models stop at v2.1, which has no RuntimePatch."""
    if identity == OVERRIDES:
        return [{"targetJobs": [{"name": NODE}], "spec": {"serviceAccountName": account}}]
    pod = {"spec": {"template": {"spec": {"serviceAccountName": account}}}}
    job = {"name": NODE, "template": pod}
    return [{"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}}}]


def identity_field(openapi: dict) -> str:
    """Which field of the served TrainJob schema (an OpenAPI v3 document of the group/version) sets the workers'
    pod spec: runtimePatches (Trainer v2.2+) or podTemplateOverrides (v2.1)."""
    wanted = {"group": GROUP, "version": VERSION, "kind": KIND}
    for schema in (openapi.get("components") or {}).get("schemas", {}).values():
        if wanted in (schema.get("x-kubernetes-group-version-kind") or []):
            served = ((schema.get("properties") or {}).get("spec") or {}).get("properties") or {}
            found = next((name for name in (PATCHES, OVERRIDES) if name in served), None)
            if found is None:
                raise BakeoffError(
                    f"this cluster's TrainJob ({GROUP}/{VERSION})"
                    f" has neither spec.{PATCHES} (Kubeflow Trainer v2.2 and later) nor spec.{OVERRIDES} (v2.1),"
                    " so bakeoff cannot set its workers' service account:"
                    " install Kubeflow Trainer v2.1 to v2.3, or run with `--param trainer=tfjob`"
                )
            return found
    raise BakeoffError(
        f"this cluster serves {GROUP}/{VERSION} without a {KIND} schema ({OPENAPI_PATH}):"
        " install Kubeflow Trainer v2.1 to v2.3 and `kubectl apply -k manifests/trainer-v2`,"
        " or run with `--param trainer=tfjob`"
    )


def _creation(pod: Any) -> str:
    return pod.metadata.creation_timestamp.isoformat() if pod.metadata.creation_timestamp else ""


class TrainJobBackend(KubeJobRunner[TrainJobRequest]):
    """Creates the TrainJob, streams its chief's log, and waits for its Complete or Failed condition."""

    KIND, PLURAL, CONTAINER, CONTROLLER = KIND, PLURAL, CONTAINER, "Kubeflow Trainer"
    INSTALLED = "Kubeflow Trainer and bakeoff's runtime (`kubectl apply -k manifests/trainer-v2`) are installed"
    UNOWNED = "nothing removes it (a TrainJob has no ttlSecondsAfterFinished at Trainer v2.1)"

    def __init__(self, client: ApiClient | None = None, namespace: str | None = None, **options: Any) -> None:
        """``client``: the API client (default: the pod's service account, else kube-config); ``options``:
        KubeJobRunner's."""
        super().__init__(**options)
        self._api = client
        self.namespace = namespace
        self._identity: str | None = None  # the served schema's identity field, read once

    @property
    def api(self) -> ApiClient:
        if self._api is None:
            from kubeflow.training.utils.utils import is_running_in_k8s
            from kubernetes import config

            # As TrainingClient does for the TFJob: in a pod its service account, elsewhere kube-config.
            if is_running_in_k8s():
                config.load_incluster_config()
            else:
                config.load_kube_config()
            self._api = ApiClient()
        return self._api

    @property
    def custom_api(self) -> Any:
        from kubernetes.client import CustomObjectsApi

        return CustomObjectsApi(self.api)

    @property
    def core_api(self) -> Any:
        from kubernetes.client import CoreV1Api

        return CoreV1Api(self.api)

    def run(self, job: KubeflowOrgV1TFJob) -> None:
        """Runs ``job`` as a TrainJob to Complete, or raises BakeoffError with its conditions and last log lines."""
        from kubeflow.training.utils.utils import get_default_target_namespace

        request = trainjob_for(job)
        self.execute(request, self.namespace or get_default_target_namespace(), request.deadline_seconds)

    # ------------------------------------------------------------ the TrainJob's calls and names

    def _create(self, job: TrainJobRequest, namespace: str) -> None:
        body = job.body(self._identity_field() if job.account else None)
        self.custom_api.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body, field_validation="Strict"
        )

    def _identity_field(self) -> str:
        """The served schema's identity field. Its read fails as the create would (a 404 where Trainer is absent),
        and is retried with it."""
        if self._identity is None:
            response = self.api.call_api(
                OPENAPI_PATH,
                "GET",
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=False,
            )
            self._identity = identity_field(json.loads(response.data))
        return self._identity

    def _get(self, name: str, namespace: str) -> JobState:
        return JobState.of(
            self.custom_api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name), OUTCOMES
        )

    def _patch(self, name: str, namespace: str, patch: dict) -> None:
        # A merge patch: the client sends a dict body as one unless told otherwise.
        self.custom_api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, patch)

    def _remove(self, name: str, namespace: str, options: V1DeleteOptions) -> None:
        self.custom_api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body=options)

    def _metadata(self, job: TrainJobRequest) -> V1ObjectMeta:
        return job.metadata

    def _workers(self, job: TrainJobRequest) -> int:
        return job.spec.trainer.num_nodes if job.spec.trainer and job.spec.trainer.num_nodes else 1

    def _lend_account(self, job: TrainJobRequest, account: str) -> None:
        job.account = job.account or account

    def _no_resource(self, name: str, namespace: str, error: BaseException) -> str:
        return (
            f"cannot create TrainJob {namespace}/{name}: this cluster has no TrainJob resource ({api_reason(error)} for"
            f" {PLURAL}.{GROUP}), so Kubeflow Trainer v2 is not installed (Kubeflow 1.10 and earlier install the "
            "Training"
            " Operator v1, which runs TFJobs): run with `--param trainer=tfjob`, or install Kubeflow Trainer and"
            " `kubectl apply -k manifests/trainer-v2`, then retry the run"
        )

    def _pods(self, name: str, namespace: str) -> dict[int, Any]:
        """Each worker index's current pod: the newest one not being deleted, else the newest."""
        selector = f"{JOBSET_LABEL}={name},{REPLICATED_JOB_LABEL}={NODE}"
        found = self._retrying(
            f"list TrainJob {namespace}/{name}'s pods",
            lambda: self.core_api.list_namespaced_pod(namespace, label_selector=selector),
        ).items
        current: dict[int, Any] = {}
        for pod in sorted(found, key=lambda pod: (pod.metadata.deletion_timestamp is None, _creation(pod))):
            index = (pod.metadata.annotations or {}).get(COMPLETION_INDEX, "")
            if index.isdigit():
                current[int(index)] = pod  # the last in this order wins
        return current

    def _worker_pod(self, name: str, namespace: str, index: int) -> Any | None:
        return self._pods(name, namespace).get(index)

    def _worker_pod_names(self, name: str, namespace: str, count: int) -> list[str]:
        pods = self._pods(name, namespace)
        # A worker with no pod is named by its hostname (<job>-<index>), which its pod's name starts with.
        return [pods[index].metadata.name if index in pods else f"{name}-{NODE}-0-{index}" for index in range(count)]
