"""The Kubernetes TFJob backend: the same TFJob object, submitted to the Training Operator."""
from __future__ import annotations

import json
import time
from typing import Any, Optional

from kubeflow.training import KubeflowOrgV1TFJob

from components.backends.backend import Sink, print_line
from components.defaults import LOG_TAIL
from components.errors import BakeoffError

JOB_KIND = "TFJob"


def _api_reason(error: Exception) -> str:
    """One line out of TrainingClient's multi-line error: the API's status and message."""
    cause = error.__cause__
    if getattr(cause, "status", None):
        try:
            message = json.loads(cause.body)["message"]
        except (TypeError, ValueError, KeyError):
            message = cause.reason
        return f"HTTP {cause.status}: {message}"
    return str(error).splitlines()[0]


class KubernetesBackend:
    """Creates the TFJob with TrainingClient, streams the chief's log, and waits for its end."""

    def __init__(
        self,
        client: Optional[Any] = None,
        namespace: Optional[str] = None,
        polling_interval: float = 10,
        grace_seconds: float = 120,
        sink: Sink = print_line,
    ) -> None:
        self._client = client
        self.namespace = namespace
        self.polling_interval = polling_interval
        self.grace_seconds = grace_seconds
        self.sink = sink

    @property
    def client(self) -> Any:
        if self._client is None:
            from kubeflow.training import TrainingClient

            # In a pod: the service account and its namespace; elsewhere: kube-config.
            self._client = TrainingClient(job_kind=JOB_KIND)
        return self._client

    def run(self, job: KubeflowOrgV1TFJob) -> None:
        """Runs ``job`` to Succeeded, or raises BakeoffError with its conditions and last log lines."""
        client = self.client
        namespace = self.namespace or client.namespace
        name = job.metadata.name
        job.metadata.namespace = namespace
        policy = job.spec.run_policy
        # The operator enforces activeDeadlineSeconds; the wait only guards against a stuck operator.
        deadline = time.monotonic() + (policy.active_deadline_seconds or 86400) + self.grace_seconds
        try:
            client.create_job(job=job, namespace=namespace)
        except RuntimeError as error:
            raise BakeoffError(
                f"could not create TFJob {namespace}/{name} ({_api_reason(error)}): check that the Training Operator is installed"
                " and that this service account may create tfjobs (manifests/)"
            ) from None
        self.sink(f"created TFJob {namespace}/{name}")
        try:
            self._wait(name, namespace, {"Running", "Succeeded", "Failed"}, deadline)
            self._stream_chief_log(name, namespace)
            self._wait(name, namespace, {"Succeeded"}, deadline)
        except TimeoutError:
            tail = self._log_tail(name, namespace)  # read before the pods go with the job
            client.delete_job(name=name, namespace=namespace, job_kind=JOB_KIND)
            raise BakeoffError(
                f"TFJob {namespace}/{name} did not finish in time and was deleted:{tail}"
                " raise --timeout or check the Training Operator"
            ) from None
        except RuntimeError:
            raise BakeoffError(f"TFJob {namespace}/{name} failed: {self._conditions(name, namespace)}{self._log_tail(name, namespace)}") from None
        self.sink(f"TFJob {namespace}/{name} succeeded")

    def _wait(self, name: str, namespace: str, conditions: set[str], deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(name)
        self.client.wait_for_job_conditions(
            name=name,
            namespace=namespace,
            job_kind=JOB_KIND,
            expected_conditions=conditions,
            wait_timeout=max(remaining, self.polling_interval),
            polling_interval=self.polling_interval,
        )

    def _stream_chief_log(self, name: str, namespace: str) -> None:
        """Follows worker 0's log into the component's log until the pod ends."""
        logs, _ = self.client.get_job_logs(
            name=name, namespace=namespace, job_kind=JOB_KIND, is_master=False, replica_type="worker", replica_index=0, follow=True
        )
        del logs  # TrainingClient prints each followed line itself

    def _conditions(self, name: str, namespace: str) -> str:
        try:
            job = self.client.get_job(name=name, namespace=namespace, job_kind=JOB_KIND)
        except RuntimeError as error:
            return f"its status is unreadable ({error})"
        conditions = (job.status.conditions or []) if job.status else []
        return "; ".join(f"{c.type}: {c.reason or ''} {c.message or ''}".strip() for c in conditions) or "no conditions reported"

    def _log_tail(self, name: str, namespace: str) -> str:
        try:
            logs, _ = self.client.get_job_logs(name=name, namespace=namespace, job_kind=JOB_KIND, is_master=False, replica_type="worker")
        except Exception as error:  # logs are a courtesy here; the failure itself is what matters
            return f" (logs unavailable: {error})"
        tails = []
        for pod, text in sorted(logs.items()):
            lines = text.rstrip("\n").splitlines()[-LOG_TAIL:]
            tails.append(f" | last lines of {pod}: " + " / ".join(lines))
        return "".join(tails)
