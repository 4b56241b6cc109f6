"""The Kubernetes TFJob backend: the same TFJob object, submitted to the Training Operator."""
from __future__ import annotations

import collections
import json
import multiprocessing
import os
import re
import time
from datetime import datetime
from typing import Any, Callable, Iterator, Optional, TypeVar

import urllib3
from kubeflow.training import KubeflowOrgV1TFJob
from kubernetes.client import V1DeleteOptions, V1OwnerReference
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from components.backends.backend import CONTAINER, WORKER, Sink, print_line
from components.defaults import LOG_TAIL
from components.errors import BakeoffError

JOB_KIND = "TFJob"
JOB_GROUP, JOB_PLURAL = "kubeflow.org", "tfjobs"  # the Training Operator v1's CRD
SERVICE_ACCOUNT_ENV = "BAKEOFF_TFJOB_SERVICE_ACCOUNT"  # names the replicas' service account instead of the step's
# This step's pod name: KFP's downward-API variable first (commonEnvs in kubeflow/pipelines
# backend/src/v2/compiler/argocompiler/common.go), since HOSTNAME is cut to 63 characters.
POD_NAME_ENVS = ("KFP_POD_NAME", "POD_NAME", "HOSTNAME")
# Answers that say the server could not serve the request now, not that the request is wrong.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
API_ATTEMPTS = 8  # tries of one API call before a transient failure becomes the step's error
RETRY_DELAY = 1.0  # seconds before the second try; doubled after each failure
RETRY_DELAY_MAX = 30.0
LOG_IDLE_SECONDS = 300  # a followed log silent this long is followed afresh: a half-open connection never ends
SUBMIT_ATTEMPTS = 5  # create → found → adopt or replace rounds, against a job that keeps changing under us
# The kubelet's RFC 3339 line stamps; Go trims the fraction's trailing zeros, so they do not sort as text.
_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)")

T = TypeVar("T")


class _PastDeadline(Exception):
    """The job outlived its activeDeadlineSeconds plus the grace period."""


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and what caused it: TrainingClient wraps the API's exceptions in RuntimeError."""
    seen: set[int] = set()
    current: Optional[BaseException] = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _api_exception(error: BaseException) -> Optional[ApiException]:
    return next((cause for cause in _chain(error) if isinstance(cause, ApiException)), None)


def _api_status(error: BaseException) -> Optional[int]:
    api = _api_exception(error)
    return api.status if api is not None else None


def _transient(error: BaseException) -> bool:
    """A server-side hiccup or a lost connection, as opposed to an answer about the request itself."""
    api = _api_exception(error)
    if api is not None:
        return not api.status or api.status in TRANSIENT_STATUSES
    unanswered = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError, multiprocessing.TimeoutError)
    return any(isinstance(cause, unanswered) for cause in _chain(error))


def _api_reason(error: BaseException) -> str:
    """One line out of a multi-line client error: the API's status and message, else the root cause."""
    api = _api_exception(error)
    if api is not None and api.status:
        try:
            message = json.loads(api.body)["message"]
        except (TypeError, ValueError, KeyError):
            message = api.reason
        return f"HTTP {api.status}: {message}"
    root = list(_chain(error))[-1]
    return f"{type(root).__name__}: {str(root).splitlines()[0] if str(root) else 'no answer'}"


def _names_an_object(error: BaseException) -> bool:
    """Whether a 404 is about an object (a metav1.Status whose details name it), not about the resource type.

    For a resource type it does not serve (no CRD) the API server answers Go's plain "404 page not found"
    (k8s.io/apiserver/pkg/util/notfoundhandler), with no Status at all.
    """
    api = _api_exception(error)
    try:
        return bool((json.loads(api.body).get("details") or {}).get("name")) if api is not None else False
    except (TypeError, ValueError, AttributeError):
        return False


def _pod_name(job: str, index: int) -> str:
    """The operator's pod name for a worker (GenGeneralName in training-operator's pkg/controller.v1/common/util.go)."""
    return f"{job}-{WORKER.lower()}-{index}"


def _has_condition(job: Any, kind: str) -> bool:
    conditions = (job.status.conditions or []) if job.status else []
    return any(c.type == kind and c.status == "True" for c in conditions)


def _finished(job: Any) -> Optional[str]:
    """``Succeeded`` or ``Failed`` once the job has ended (the operator's IsFinished), else None."""
    return next((kind for kind in ("Succeeded", "Failed") if _has_condition(job, kind)), None)


def _conditions(job: Any) -> str:
    conditions = (job.status.conditions or []) if job.status else []
    return "; ".join(f"{c.type}: {c.reason or ''} {c.message or ''}".strip() for c in conditions) or "no conditions reported"


def _restart_count(pod: Any) -> int:
    statuses = (pod.status.container_statuses or []) if pod.status else []
    return next((s.restart_count or 0 for s in statuses if s.name == CONTAINER), 0)


def _log_time(stamp: str) -> Optional[tuple[datetime, int]]:
    match = _STAMP.fullmatch(stamp)
    if not match:
        return None
    zone = "+00:00" if match[3] == "Z" else match[3]
    return datetime.fromisoformat(match[1] + zone), int((match[2] or "").ljust(9, "0"))


class _LogCursor:
    """How far the chief's log has been shown, by the kubelet's line stamps: a new stream shows only what is new.

    A stream ends when the container exits (an in-place restart starts a new one) or the connection drops;
    following again re-reads the current container from its start.
    """

    def __init__(self) -> None:
        self.last: Optional[tuple[datetime, int]] = None
        self.at_last = 0  # lines shown that carry exactly ``last``
        self.skip = 0
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)

    def rewind(self) -> None:
        """A new stream starts: the lines stamped ``last`` come again, and were shown already."""
        self.skip = self.at_last

    def admit(self, line: str) -> Optional[str]:
        """The line's text if it is new, else None."""
        stamp, _, text = line.partition(" ")
        key = _log_time(stamp)
        if key is None:
            text = line
        elif self.last is not None and key < self.last:
            return None
        elif key == self.last:
            if self.skip:
                self.skip -= 1
                return None
            self.at_last += 1
        else:
            self.last, self.at_last, self.skip = key, 1, 0
        self.tail.append(text)
        return text


class KubernetesBackend:
    """Creates the TFJob with TrainingClient, streams the chief's log, and waits for its end."""

    def __init__(
        self,
        client: Optional[Any] = None,
        namespace: Optional[str] = None,
        polling_interval: float = 10,
        grace_seconds: float = 120,
        sink: Sink = print_line,
        retry_delay: float = RETRY_DELAY,
        api_attempts: int = API_ATTEMPTS,
    ) -> None:
        self._client = client
        self.namespace = namespace
        self.polling_interval = polling_interval
        self.grace_seconds = grace_seconds
        self.sink = sink
        self.retry_delay = retry_delay
        self.api_attempts = api_attempts
        self._log_trouble: set[Optional[int]] = set()

    @property
    def client(self) -> Any:
        if self._client is None:
            from kubeflow.training import TrainingClient

            # In a pod: the service account and its namespace; elsewhere: kube-config.
            self._client = TrainingClient(job_kind=JOB_KIND)
        return self._client

    def run(self, job: KubeflowOrgV1TFJob) -> None:
        """Runs ``job`` to Succeeded, or raises BakeoffError with its conditions and last log lines."""
        namespace = self.namespace or self.client.namespace
        name = job.metadata.name
        job.metadata.namespace = namespace
        policy = job.spec.run_policy
        # The operator enforces activeDeadlineSeconds; this deadline only guards against a stuck operator.
        deadline = time.monotonic() + (policy.active_deadline_seconds or 86400) + self.grace_seconds
        self._place(job, namespace)
        self._submit(job, deadline)
        cursor = _LogCursor()
        try:
            final = self._watch(job, cursor, deadline)
        except _PastDeadline:
            tail = self._log_tail(job, cursor)  # read before the pods go with the job
            self._delete(name, namespace)
            raise BakeoffError(
                f"TFJob {namespace}/{name} did not finish in time and was deleted:{tail}"
                " raise --timeout or check the Training Operator"
            ) from None
        if _finished(final) == "Failed":
            raise BakeoffError(f"TFJob {namespace}/{name} failed: {_conditions(final)}{self._log_tail(job, cursor)}")
        self.sink(f"TFJob {namespace}/{name} succeeded")

    # ------------------------------------------------------------ API calls

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, tried again after a growing pause while the API fails transiently; other errors go to the caller."""
        delay = self.retry_delay
        for attempt in range(1, self.api_attempts + 1):
            try:
                return call()
            except Exception as error:
                if not _transient(error):
                    raise
                if attempt == self.api_attempts:
                    raise BakeoffError(
                        f"the Kubernetes API failed {attempt} times in a row to {what} ({_api_reason(error)}):"
                        " check the API server, then retry the run"
                    ) from None
                self.sink(f"Kubernetes API could not {what} ({_api_reason(error)}); trying again in {delay:g}s")
                time.sleep(delay)
                delay = min(delay * 2, RETRY_DELAY_MAX)
        raise AssertionError("unreachable")

    def _read_job(self, name: str, namespace: str) -> Optional[Any]:
        """The TFJob, or None when there is none by that name."""
        try:
            return self._retrying(f"read TFJob {namespace}/{name}", lambda: self.client.get_job(name=name, namespace=namespace, job_kind=JOB_KIND))
        except RuntimeError as error:
            if _api_status(error) == 404:
                return None
            raise BakeoffError(f"could not read TFJob {namespace}/{name} ({_api_reason(error)}): check that this service account may get tfjobs (manifests/)") from None

    def _read_pod(self, name: str, namespace: str) -> Optional[Any]:
        """The pod, or None when there is none by that name."""
        try:
            return self._retrying(f"read pod {namespace}/{name}", lambda: self.client.core_api.read_namespaced_pod(name=name, namespace=namespace))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def _delete(self, name: str, namespace: str) -> None:
        # Foreground: the job stays until the GC has deleted its pods, so a job created again under its name never meets them.
        options = V1DeleteOptions(propagation_policy="Foreground")
        try:
            self._retrying(
                f"delete TFJob {namespace}/{name}",
                lambda: self.client.delete_job(name=name, namespace=namespace, job_kind=JOB_KIND, delete_options=options),
            )
        except RuntimeError as error:
            if _api_status(error) != 404:
                raise BakeoffError(
                    f"could not delete TFJob {namespace}/{name} ({_api_reason(error)}): delete it with kubectl delete tfjob -n {namespace} {name}"
                ) from None

    # ------------------------------------------------------------ before the job exists

    def _place(self, job: KubeflowOrgV1TFJob, namespace: str) -> None:
        """Makes this step's pod the job's owner, so deleting the run deletes the job, and lends it the step's service account."""
        pod = self._own_pod(namespace)
        if pod is not None:
            # No blockOwnerDeletion: setting it needs update on pods/finalizers (the OwnerReferencesPermissionEnforcement plugin).
            job.metadata.owner_references = [V1OwnerReference(api_version="v1", kind="Pod", name=pod.metadata.name, uid=pod.metadata.uid)]
        account = os.environ.get(SERVICE_ACCOUNT_ENV) or (pod.spec.service_account_name if pod is not None and pod.spec else None)
        for replica in job.spec.tf_replica_specs.values():
            if account and not replica.template.spec.service_account_name:
                replica.template.spec.service_account_name = account

    def _own_pod(self, namespace: str) -> Optional[Any]:
        """This step's pod, read from the API; None outside a pod."""
        name = next((os.environ[key] for key in POD_NAME_ENVS if os.environ.get(key)), None)
        if not name:
            self.sink("not in a pod: the TFJob gets no owner, so only its ttlSecondsAfterFinished removes it")
            return None
        try:
            pod = self._read_pod(name, namespace)
        except ApiException as error:
            self.sink(f"cannot read this step's pod {namespace}/{name} ({_api_reason(error)}): the TFJob gets no owner, so deleting the run leaves it")
            return None
        if pod is None:
            self.sink(f"no pod {namespace}/{name}: not in a pod here, so the TFJob gets no owner")
        return pod

    def _submit(self, job: KubeflowOrgV1TFJob, deadline: float) -> None:
        """Creates the TFJob; one already under its name is adopted if it is this very job, else replaced."""
        name, namespace = job.metadata.name, job.metadata.namespace
        for _ in range(SUBMIT_ATTEMPTS):
            try:
                self._retrying(f"create TFJob {namespace}/{name}", lambda: self.client.create_job(job=job, namespace=namespace))
                self.sink(f"created TFJob {namespace}/{name}")
                return
            except RuntimeError as error:
                if _api_status(error) == 404 and not _names_an_object(error):
                    raise BakeoffError(
                        f"cannot create TFJob {namespace}/{name}: this cluster has no TFJob resource ({_api_reason(error)} for"
                        f" {JOB_PLURAL}.{JOB_GROUP}), so the Kubeflow Training Operator v1 is not installed (Kubeflow 1.11 and later"
                        " install Trainer v2 instead, which runs no TFJob): install it with"
                        " `kubectl apply --server-side -k manifests/training-operator`, then retry the run"
                    ) from None
                if _api_status(error) != 409:
                    raise BakeoffError(
                        f"could not create TFJob {namespace}/{name} ({_api_reason(error)}): check that the Training Operator is installed"
                        " and that this service account may create tfjobs (manifests/)"
                    ) from None
            # A KFP retry reuses the run id, so an earlier attempt's job may hold the name (ttlSecondsAfterFinished keeps it).
            existing = self._read_job(name, namespace)
            if existing is None:
                continue  # it went between the create and the read
            why = self._not_adoptable(existing, job)
            if why is None:
                if self._adopt(existing, job):
                    return
                continue
            self.sink(f"replacing TFJob {namespace}/{name}: {why}")
            self._delete(name, namespace)
            self._wait_gone(name, namespace, deadline)
        raise BakeoffError(f"TFJob {namespace}/{name} kept changing while this step tried to create it: check who else writes it, then retry the run")

    @staticmethod
    def _not_adoptable(existing: Any, job: KubeflowOrgV1TFJob) -> Optional[str]:
        """Why the job found under our name is not ours to carry on with, or None when it is."""
        if existing.metadata.deletion_timestamp:
            return "it is being deleted"
        labels = existing.metadata.labels or {}
        if any(labels.get(key) != value for key, value in (job.metadata.labels or {}).items()):
            return "it is another run's or variant's (its labels differ)"
        finished = _finished(existing)
        if finished:
            return f"an earlier attempt's job has already {finished.lower()}"
        return None

    def _adopt(self, existing: Any, job: KubeflowOrgV1TFJob) -> bool:
        """Carries on with the earlier attempt's job, adding this pod to its owners; False if it changed meanwhile."""
        name, namespace = job.metadata.name, job.metadata.namespace
        owners = list(existing.metadata.owner_references or [])
        missing = [ref for ref in job.metadata.owner_references or [] if all(ref.uid != owner.uid for owner in owners)]
        if missing:
            # Else the earlier pod's deletion would collect the job under us: KFP deletes a retried run's failed pods
            # (RetryRun, kubeflow/pipelines backend/src/apiserver/resource/resource_manager.go).
            # resourceVersion makes the merge patch conditional: a job changed meanwhile answers 409.
            patch = {"metadata": {"resourceVersion": existing.metadata.resource_version, "ownerReferences": owners + missing}}
            try:
                self._retrying(f"add an owner to TFJob {namespace}/{name}", lambda: self.client.update_job(patch, name=name, namespace=namespace, job_kind=JOB_KIND))
            except RuntimeError as error:
                if _api_status(error) in (404, 409):
                    return False
                raise BakeoffError(
                    f"could not adopt TFJob {namespace}/{name} ({_api_reason(error)}): check that this service account may patch tfjobs (manifests/)"
                ) from None
        self.sink(f"adopted TFJob {namespace}/{name}: an earlier attempt of this run and variant started it and it has not finished")
        return True

    def _wait_gone(self, name: str, namespace: str, deadline: float) -> None:
        while self._read_job(name, namespace) is not None:
            if time.monotonic() >= deadline:
                raise BakeoffError(
                    f"TFJob {namespace}/{name} is still being deleted: check its finalizers (kubectl get tfjob -n {namespace} {name} -o yaml), then retry the run"
                )
            time.sleep(self.polling_interval)

    # ------------------------------------------------------------ while the job runs

    def _watch(self, job: KubeflowOrgV1TFJob, cursor: _LogCursor, deadline: float) -> Any:
        """Polls the job to its end, following the chief's log whenever its container has started."""
        name, namespace = job.metadata.name, job.metadata.namespace
        chief = _pod_name(name, 0)
        restarts: Optional[int] = None
        while True:
            current = self._read_job(name, namespace)
            if current is None:
                raise BakeoffError(
                    f"TFJob {namespace}/{name} was deleted while this step waited for it (the run was cancelled, or someone deleted it): retry the run"
                )
            if _finished(current):
                self._follow(chief, namespace, cursor, deadline, follow=False)  # what a broken stream missed
                return current
            if time.monotonic() >= deadline:
                raise _PastDeadline(name)
            pod = self._chief_pod(chief, namespace)
            # A pending pod has no log yet (and TrainingClient.get_job_logs would skip it and return at once).
            if pod is not None and pod.status is not None and pod.status.phase not in (None, "Pending", "Unknown"):
                restarts = self._note_restart(chief, pod, restarts)
                self._follow(chief, namespace, cursor, deadline)
            time.sleep(max(0.0, min(self.polling_interval, deadline - time.monotonic())))

    def _chief_pod(self, chief: str, namespace: str) -> Optional[Any]:
        try:
            return self._read_pod(chief, namespace)
        except ApiException as error:
            self._note_log_trouble(chief, error)
            return None

    def _note_restart(self, chief: str, pod: Any, before: Optional[int]) -> int:
        count = _restart_count(pod)
        if before is not None and count > before:
            self.sink(f"{chief}: its container restarted (restart {count}); following the new one")
        return count

    def _follow(self, pod: str, namespace: str, cursor: _LogCursor, deadline: float, follow: bool = True) -> None:
        """Shows the chief container's new log lines until its stream ends: the container exited, or it was quiet too long."""
        cursor.rewind()
        idle = max(1.0, min(LOG_IDLE_SECONDS, deadline - time.monotonic()))
        try:
            response = self.client.core_api.read_namespaced_pod_log(
                name=pod, namespace=namespace, container=CONTAINER, follow=follow, timestamps=True,
                _preload_content=False, _request_timeout=(idle, idle),
            )
            try:
                for line in iter_resp_lines(response):
                    text = cursor.admit(line)
                    if text is not None:
                        self.sink(f"[{pod}] {text}")
            finally:
                response.release_conn()
        except Exception as error:  # the next poll decides: the job may have ended or the container restarted
            self._note_log_trouble(pod, error)

    def _note_log_trouble(self, pod: str, error: Exception) -> None:
        """Says once why the log cannot be followed, unless it is only not there yet (400, 404) or a hiccup."""
        status = _api_status(error)
        if status in (400, 404) or _transient(error) or status in self._log_trouble:
            return
        self._log_trouble.add(status)
        self.sink(f"cannot follow {pod}'s log ({_api_reason(error)}); waiting for the TFJob without it")

    # ------------------------------------------------------------ after the job

    def _log_tail(self, job: KubeflowOrgV1TFJob, cursor: _LogCursor) -> str:
        """The last lines of each worker's log; the chief's as followed when its pod is gone."""
        name, namespace = job.metadata.name, job.metadata.namespace
        tails = []
        for index in range(job.spec.tf_replica_specs[WORKER].replicas or 1):
            pod = _pod_name(name, index)
            try:
                lines = self._read_log_tail(pod, namespace)
            except (ApiException, BakeoffError) as error:
                lines = list(cursor.tail) if index == 0 else []
                if not lines:
                    tails.append(f" | {pod}: logs unavailable ({_api_reason(error) if isinstance(error, ApiException) else error})")
                    continue
            if lines:
                tails.append(f" | last lines of {pod}: " + " / ".join(lines))
        return "".join(tails)

    def _read_log_tail(self, pod: str, namespace: str) -> list[str]:
        # Raw bytes: the client would otherwise parse a log that happens to look like JSON.
        response = self._retrying(
            f"read pod {namespace}/{pod}'s log",
            lambda: self.client.core_api.read_namespaced_pod_log(
                name=pod, namespace=namespace, container=CONTAINER, tail_lines=LOG_TAIL, _preload_content=False
            ),
        )
        return response.data.decode("utf-8", "replace").rstrip("\n").splitlines()[-LOG_TAIL:]
