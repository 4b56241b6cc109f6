"""The Kubernetes TFJob backend: the same TFJob object, submitted to the Training Operator."""

from __future__ import annotations

from typing import Any

from kubeflow.training import KubeflowOrgV1TFJob
from kubernetes.client import V1DeleteOptions

from bakeoff.components.backends.backend import CONTAINER, WORKER
from bakeoff.components.backends.kubejob import JobState, KubeJobRunner
from bakeoff.components.kubeapi import api_reason

JOB_KIND = "TFJob"
JOB_GROUP, JOB_PLURAL = "kubeflow.org", "tfjobs"  # the Training Operator v1's CRD
OUTCOMES = {"Succeeded": "succeeded", "Failed": "failed"}  # the conditions that end a TFJob (the operator's IsFinished)


def _pod_name(job: str, index: int) -> str:
    """The operator's pod name for a worker (GenGeneralName in training-operator's pkg/controller.v1/common/util.go)."""
    return f"{job}-{WORKER.lower()}-{index}"


class KubernetesBackend(KubeJobRunner[KubeflowOrgV1TFJob]):
    """Creates the TFJob with TrainingClient, streams the chief's log, and waits for its end."""

    KIND, PLURAL, CONTAINER, CONTROLLER = JOB_KIND, JOB_PLURAL, CONTAINER, "the Training Operator"
    INSTALLED = "the Training Operator is installed"
    UNOWNED = "only its ttlSecondsAfterFinished removes it"
    # training-operator v1.9, pkg/controller.v1/common/job.go, JobController.ReconcileJobs: its failureMessage
    PAST_DEADLINE = "active longer than specified deadline"

    def __init__(self, client: Any | None = None, namespace: str | None = None, **options: Any) -> None:
        """``client``: a TrainingClient (default: from the pod's service account, else kube-config); ``options``:
        KubeJobRunner's."""
        super().__init__(**options)
        self._client = client
        self.namespace = namespace

    @property
    def client(self) -> Any:
        if self._client is None:
            from kubeflow.training import TrainingClient

            # In a pod: the service account and its namespace; elsewhere: kube-config.
            self._client = TrainingClient(job_kind=JOB_KIND)
        return self._client

    @property
    def core_api(self) -> Any:
        return self.client.core_api

    def run(self, job: KubeflowOrgV1TFJob) -> None:
        """Runs ``job`` to Succeeded, or raises BakeoffError with its conditions and last log lines."""
        # The operator checks activeDeadlineSeconds only when an event makes it reconcile (its requeue at the deadline
        # goes to a queue nothing reads, kubeflow/trainer#3358): the runner's own deadline stops a job that trains on.
        self.execute(job, self.namespace or self.client.namespace, job.spec.run_policy.active_deadline_seconds or 86400)

    # ------------------------------------------------------------ the TFJob's calls and names

    def _create(self, job: KubeflowOrgV1TFJob, namespace: str) -> None:
        self.client.create_job(job=job, namespace=namespace)

    def _get(self, name: str, namespace: str) -> JobState:
        return JobState.of(self.client.get_job(name=name, namespace=namespace, job_kind=JOB_KIND), OUTCOMES)

    def _patch(self, name: str, namespace: str, patch: dict) -> None:
        self.client.update_job(patch, name=name, namespace=namespace, job_kind=JOB_KIND)

    def _remove(self, name: str, namespace: str, options: V1DeleteOptions) -> None:
        self.client.delete_job(name=name, namespace=namespace, job_kind=JOB_KIND, delete_options=options)

    def _metadata(self, job: KubeflowOrgV1TFJob) -> Any:
        return job.metadata

    def _workers(self, job: KubeflowOrgV1TFJob) -> int:
        return job.spec.tf_replica_specs[WORKER].replicas or 1

    def _lend_account(self, job: KubeflowOrgV1TFJob, account: str) -> None:
        for replica in job.spec.tf_replica_specs.values():
            if not replica.template.spec.service_account_name:
                replica.template.spec.service_account_name = account

    def _no_resource(self, name: str, namespace: str, error: BaseException) -> str:
        return (
            f"cannot create TFJob {namespace}/{name}: this cluster has no TFJob resource ({api_reason(error)} for"
            f" {JOB_PLURAL}.{JOB_GROUP}), so the Kubeflow Training Operator v1 is not installed (Kubeflow 1.11 and "
            "later"
            " install Trainer v2 instead, which runs no TFJob): run with `--param trainer=trainjob`, or install it with"
            " `kubectl apply --server-side -k manifests/training-operator`, then retry the run"
        )

    def _worker_pod(self, name: str, namespace: str, index: int) -> Any | None:
        return self._read_pod(_pod_name(name, index), namespace)

    def _worker_pod_names(self, name: str, namespace: str, count: int) -> list[str]:
        return [_pod_name(name, index) for index in range(count)]
