"""Running one training job (a custom resource) on Kubernetes: what the TFJob and TrainJob backends share.

Submit (adopting or replacing a job already under the name), follow the chief's log across restarts, wait for
the job's end, retry transient API errors; each backend says how its kind is called, read and named.
"""

from __future__ import annotations

import collections
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from kubernetes.client import ApiClient, V1DeleteOptions, V1OwnerReference
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from bakeoff.components import defaults, tfenv
from bakeoff.components.backends.backend import JobFailed, Sink, print_line
from bakeoff.components.environment import POD_NAME_ENVS, SERVICE_ACCOUNT_ENV
from bakeoff.components.errors import BakeoffError
from bakeoff.components.kubeapi import api_exception, api_reason, api_status, names_an_object, unanswered
from bakeoff.components.retry import Backoff, retrying

# Answers that say the server could not serve the request now, not that the request is wrong.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
LOG_IDLE_SECONDS = 300  # a followed log silent this long is followed afresh: a half-open connection never ends
STARTING_POLL_SECONDS = 1.0  # polls while the chief has not started: a fast job must not end unfollowed
SUBMIT_ATTEMPTS = 5  # create → found → adopt or replace rounds, against a job that keeps changing under us
# What a client raises for an API answer: the kubernetes client's ApiException, or TrainingClient's RuntimeError around
# it.
API_ERRORS = (ApiException, RuntimeError)
# The kubelet's RFC 3339 line stamps; Go trims the fraction's trailing zeros, so they do not sort as text.
_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)")

T = TypeVar("T")
J = TypeVar("J")  # the job object a backend submits


class _PastDeadline(Exception):
    """The job outlived its deadline plus the grace period."""


def _transient(error: BaseException) -> bool:
    """A server-side hiccup or a lost connection, as opposed to an answer about the request itself."""
    api = api_exception(error)
    if api is not None:
        return not api.status or api.status in TRANSIENT_STATUSES
    return unanswered(error)


def _restart_count(pod: Any, container: str) -> int:
    statuses = (pod.status.container_statuses or []) if pod.status else []
    return next((s.restart_count or 0 for s in statuses if s.name == container), 0)


def _log_time(stamp: str) -> tuple[datetime, int] | None:
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
        self.last: tuple[datetime, int] | None = None
        self.at_last = 0  # lines shown that carry exactly ``last``
        self.skip = 0
        self.tail: collections.deque[str] = collections.deque(maxlen=defaults.LOG_TAIL)

    def rewind(self) -> None:
        """A new stream starts: the lines stamped ``last`` come again, and were shown already."""
        self.skip = self.at_last

    def admit(self, line: str) -> str | None:
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


@dataclass(frozen=True)
class JobState:
    """What the runner reads of a job: whose it is, who owns it, and whether it has ended and how."""

    labels: dict[str, str]
    owners: list[dict]  # metadata.ownerReferences as the API serialises them
    resource_version: str
    deleting: bool
    outcome: str | None  # the kind's word for how it ended ("succeeded", "completed", "failed"), None while it runs
    conditions: str  # its conditions in one line, for messages

    @classmethod
    def of(cls, job: Any, outcomes: dict[str, str]) -> JobState:
        """The state of ``job`` (a client model or a dict); ``outcomes`` maps the condition types that end it to
        words."""
        body = ApiClient().sanitize_for_serialization(job)
        metadata, conditions = body.get("metadata") or {}, (body.get("status") or {}).get("conditions") or []
        true = [c["type"] for c in conditions if c.get("status") == "True"]
        return cls(
            labels=metadata.get("labels") or {},
            owners=metadata.get("ownerReferences") or [],
            resource_version=metadata.get("resourceVersion", ""),
            deleting=bool(metadata.get("deletionTimestamp")),
            outcome=next((word for kind, word in outcomes.items() if kind in true), None),
            conditions="; ".join(
                f"{c['type']}: {c.get('reason') or ''} {c.get('message') or ''}".strip() for c in conditions
            )
            or "no conditions reported",
        )


class KubeJobRunner(Generic[J]):
    """Creates a job, streams its chief's log, and waits for its end; subclasses say how their kind is called."""

    KIND = ""  # the resource's kind, as messages name it
    PLURAL = ""  # its resource name, as RBAC names it
    CONTAINER = ""  # the training container of each worker pod
    CONTROLLER = ""  # what runs the kind, as messages name it
    INSTALLED = ""  # what must be installed for a create to succeed, as "check that … and that …" says it
    UNOWNED = ""  # what removes a job that has no owner
    FAILED = "failed"  # the outcome word of a failed job
    PAST_DEADLINE = ""  # what the controller's Failed condition says of a job it stopped at its deadline

    def __init__(
        self,
        polling_interval: float = 10,
        grace_seconds: float | None = None,  # None: defaults.JOB_GRACE_SHARE of each job's timeout
        sink: Sink = print_line,
        retry_delay: float = defaults.API_RETRY_FIRST_PAUSE,
        api_attempts: int = defaults.API_ATTEMPTS,
    ) -> None:
        self.polling_interval = polling_interval
        self.grace_seconds = grace_seconds
        self.sink = sink
        self.retry_delay = retry_delay
        self.api_attempts = api_attempts
        self._log_trouble: set[int | None] = set()

    # ------------------------------------------------------------ what each kind says

    @property
    def core_api(self) -> Any:
        """The CoreV1Api that reads pods and their logs."""
        raise NotImplementedError

    def _create(self, job: J, namespace: str) -> None:
        raise NotImplementedError

    def _get(self, name: str, namespace: str) -> JobState:
        raise NotImplementedError

    def _patch(self, name: str, namespace: str, patch: dict) -> None:
        raise NotImplementedError

    def _remove(self, name: str, namespace: str, options: V1DeleteOptions) -> None:
        raise NotImplementedError

    def _metadata(self, job: J) -> Any:
        """The job's V1ObjectMeta."""
        raise NotImplementedError

    def _workers(self, job: J) -> int:
        raise NotImplementedError

    def _lend_account(self, job: J, account: str) -> None:
        """Runs the job's pods as ``account`` unless the job names one."""
        raise NotImplementedError

    def _no_resource(self, name: str, namespace: str, error: BaseException) -> str:
        """The message for a cluster that does not serve the kind at all: what to install, what else to choose."""
        raise NotImplementedError

    def _worker_pod(self, name: str, namespace: str, index: int) -> Any | None:
        """Worker ``index``'s current pod, or None when there is none (yet); raises ApiException when it cannot be
        read."""
        raise NotImplementedError

    def _worker_pod_names(self, name: str, namespace: str, count: int) -> list[str]:
        """Each worker's current pod name (its expected name when it has none)."""
        raise NotImplementedError

    # ------------------------------------------------------------ the run

    def grace(self, seconds: float) -> float:
        """Seconds past a job's timeout of ``seconds`` before its runner stops waiting for the controller."""
        if self.grace_seconds is not None:
            return self.grace_seconds
        low, high = defaults.JOB_GRACE_SECONDS
        return min(max(seconds * defaults.JOB_GRACE_SHARE, low), high)

    def execute(self, job: J, namespace: str, seconds: float) -> None:
        """Runs ``job`` in ``namespace`` to success within ``seconds`` (plus the grace period), or raises
        BakeoffError."""
        metadata = self._metadata(job)
        name = metadata.name
        metadata.namespace = namespace
        deadline = time.monotonic() + seconds + self.grace(seconds)
        self._place(job, namespace)
        self._submit(job, namespace, deadline)
        cursor = _LogCursor()
        try:
            final = self._watch(job, namespace, cursor, deadline)
        except _PastDeadline:
            tail = self._log_tail(job, namespace, cursor)  # read before the pods go with the job
            self._delete(name, namespace)
            raise BakeoffError(
                f"{self.KIND} {namespace}/{name} did not finish in time and was deleted:"
                f"{tail} raise --timeout or check {self.CONTROLLER}"
            ) from None
        if final.outcome == self.FAILED and self.PAST_DEADLINE and self.PAST_DEADLINE in final.conditions:
            # Not JobFailed: its restarts were not spent, so its backup stays for a run with a longer timeout.
            raise BakeoffError(
                f"{self.KIND} {namespace}/{name} ran past its activeDeadlineSeconds and was stopped:"
                f" {final.conditions}{self._log_tail(job, namespace, cursor)} raise --timeout or train less"
            )
        if final.outcome == self.FAILED:
            raise JobFailed(
                f"{self.KIND} {namespace}/{name} failed: {final.conditions}{self._log_tail(job, namespace, cursor)}"
            )
        self.sink(f"{self.KIND} {namespace}/{name} succeeded")

    # ------------------------------------------------------------ API calls

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, tried again after a growing pause while the API fails transiently; other errors go to the
        caller."""
        backoff = Backoff(first=self.retry_delay, longest=defaults.API_RETRY_MAX_PAUSE, attempts=self.api_attempts)

        def announce(error: Exception, wait: float) -> None:
            self.sink(f"Kubernetes API could not {what} ({api_reason(error)}); trying again in {wait:.1f}s")

        def give_up(error: Exception, attempts: int) -> BakeoffError:
            return BakeoffError(
                f"the Kubernetes API failed {attempts} times in a row to {what} ({api_reason(error)}):"
                " check the API server, then retry the run"
            )

        return retrying(call, _transient, backoff, announce, give_up)

    def _read_job(self, name: str, namespace: str) -> JobState | None:
        """The job's state, or None when there is none by that name."""
        try:
            return self._retrying(f"read {self.KIND} {namespace}/{name}", lambda: self._get(name, namespace))
        except API_ERRORS as error:
            if api_status(error) == 404:
                return None
            raise BakeoffError(
                f"could not read {self.KIND} {namespace}/{name} ({api_reason(error)}):"
                f" check that this service account may get {self.PLURAL} (manifests/)"
            ) from None

    def _read_pod(self, name: str, namespace: str) -> Any | None:
        """The pod, or None when there is none by that name."""
        try:
            return self._retrying(
                f"read pod {namespace}/{name}",
                lambda: self.core_api.read_namespaced_pod(name=name, namespace=namespace),
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def _delete(self, name: str, namespace: str) -> None:
        # Foreground: the job stays until the GC has deleted its pods, so a job created again under its name never meets
        # them.
        options = V1DeleteOptions(propagation_policy="Foreground")
        try:
            self._retrying(f"delete {self.KIND} {namespace}/{name}", lambda: self._remove(name, namespace, options))
        except API_ERRORS as error:
            if api_status(error) != 404:
                raise BakeoffError(
                    f"could not delete {self.KIND} {namespace}/{name} ({api_reason(error)}):"
                    f" delete it with kubectl delete {self.KIND.lower()} -n {namespace} {name}"
                ) from None

    # ------------------------------------------------------------ before the job exists

    def _place(self, job: J, namespace: str) -> None:
        """Makes this step's pod the job's owner, so deleting the run deletes the job, and lends it the step's
        service account."""
        pod = self._own_pod(namespace)
        if pod is not None:
            # No blockOwnerDeletion: setting it needs update on pods/finalizers (the
            # OwnerReferencesPermissionEnforcement plugin).
            self._metadata(job).owner_references = [
                V1OwnerReference(api_version="v1", kind="Pod", name=pod.metadata.name, uid=pod.metadata.uid)
            ]
        account = os.environ.get(SERVICE_ACCOUNT_ENV) or (
            pod.spec.service_account_name if pod is not None and pod.spec else None
        )
        if account:
            self._lend_account(job, account)

    def _own_pod(self, namespace: str) -> Any | None:
        """This step's pod, read from the API; None outside a pod."""
        name = next((os.environ[key] for key in POD_NAME_ENVS if os.environ.get(key)), None)
        if not name:
            self.sink(f"not in a pod: the {self.KIND} gets no owner, so {self.UNOWNED}")
            return None
        try:
            pod = self._read_pod(name, namespace)
        except ApiException as error:
            self.sink(
                f"cannot read this step's pod {namespace}/{name} ({api_reason(error)}): the {self.KIND} gets no "
                "owner, so deleting the run leaves it"
            )
            return None
        if pod is None:
            self.sink(f"no pod {namespace}/{name}: not in a pod here, so the {self.KIND} gets no owner")
        return pod

    def _submit(self, job: J, namespace: str, deadline: float) -> None:
        """Creates the job; one already under its name is adopted if it is this very job, else replaced."""
        name = self._metadata(job).name
        for _ in range(SUBMIT_ATTEMPTS):
            try:
                self._retrying(f"create {self.KIND} {namespace}/{name}", lambda: self._create(job, namespace))
                self.sink(f"created {self.KIND} {namespace}/{name}")
                return
            except API_ERRORS as error:
                if api_status(error) == 404 and not names_an_object(error):
                    raise BakeoffError(self._no_resource(name, namespace, error)) from None
                if api_status(error) != 409:
                    raise BakeoffError(
                        f"could not create {self.KIND} {namespace}/{name} ({api_reason(error)}):"
                        f" check that {self.INSTALLED} and that this service account may create {self.PLURAL}"
                        " (manifests/)"
                    ) from None
            # A KFP retry reuses the run id, so an earlier attempt's job may hold the name (it outlives its step).
            existing = self._read_job(name, namespace)
            if existing is None:
                continue  # it went between the create and the read
            why = self._not_adoptable(existing, job)
            if why is None:
                if self._adopt(existing, job, namespace):
                    return
                continue
            self.sink(f"replacing {self.KIND} {namespace}/{name}: {why}")
            self._delete(name, namespace)
            self._wait_gone(name, namespace, deadline)
        raise BakeoffError(
            f"{self.KIND} {namespace}/{name} kept changing while this step tried to create it:"
            " check who else writes it, then retry the run"
        )

    def _not_adoptable(self, existing: JobState, job: J) -> str | None:
        """Why the job found under our name is not ours to carry on with, or None when it is."""
        if existing.deleting:
            return "it is being deleted"
        if any(existing.labels.get(key) != value for key, value in (self._metadata(job).labels or {}).items()):
            return "it is another run's or variant's (its labels differ)"
        if existing.outcome:
            return f"an earlier attempt's job has already {existing.outcome}"
        return None

    def _adopt(self, existing: JobState, job: J, namespace: str) -> bool:
        """Carries on with the earlier attempt's job, adding this pod to its owners; False if it changed meanwhile."""
        name = self._metadata(job).name
        ours = ApiClient().sanitize_for_serialization(self._metadata(job).owner_references or [])
        missing = [ref for ref in ours if all(ref["uid"] != owner.get("uid") for owner in existing.owners)]
        if missing:
            # Else the earlier pod's deletion would collect the job under us: KFP deletes a retried run's failed pods
            # (RetryRun, kubeflow/pipelines backend/src/apiserver/resource/resource_manager.go).
            # resourceVersion makes the merge patch conditional: a job changed meanwhile answers 409.
            patch = {
                "metadata": {"resourceVersion": existing.resource_version, "ownerReferences": existing.owners + missing}
            }
            try:
                self._retrying(
                    f"add an owner to {self.KIND} {namespace}/{name}", lambda: self._patch(name, namespace, patch)
                )
            except API_ERRORS as error:
                if api_status(error) in (404, 409):
                    return False
                raise BakeoffError(
                    f"could not adopt {self.KIND} {namespace}/{name} ({api_reason(error)}):"
                    f" check that this service account may patch {self.PLURAL} (manifests/)"
                ) from None
        self.sink(
            f"adopted {self.KIND} {namespace}/{name}: an earlier attempt of this run and variant started it and it "
            "has not finished"
        )
        return True

    def _wait_gone(self, name: str, namespace: str, deadline: float) -> None:
        while self._read_job(name, namespace) is not None:
            if time.monotonic() >= deadline:
                raise BakeoffError(
                    f"{self.KIND} {namespace}/{name} is still being deleted: check its finalizers"
                    f" (kubectl get {self.KIND.lower()} -n {namespace} {name} -o yaml), then retry the run"
                )
            time.sleep(self.polling_interval)

    # ------------------------------------------------------------ while the job runs

    def _watch(self, job: J, namespace: str, cursor: _LogCursor, deadline: float) -> JobState:
        """Polls the job to its end, following the chief's log whenever its container has started."""
        name = self._metadata(job).name
        seen: tuple[str, int] | None = None  # the chief's pod and its restarts when last followed
        while True:
            current = self._read_job(name, namespace)
            if current is None:
                raise BakeoffError(
                    f"{self.KIND} {namespace}/{name} was deleted while this step waited for it"
                    " (the run was cancelled, or someone deleted it): retry the run"
                )
            chief = self._chief_pod(name, namespace)
            if current.outcome:
                if chief is not None:  # what a broken stream missed, or a new pod that ended between two polls
                    self._note_restart(chief, seen)
                    self._follow(chief.metadata.name, namespace, cursor, deadline, follow=False)
                return current
            if time.monotonic() >= deadline:
                raise _PastDeadline(name)
            pause = min(self.polling_interval, STARTING_POLL_SECONDS)
            # A pending pod has no log yet (and TrainingClient.get_job_logs would skip it and return at once).
            if (
                chief is not None
                and chief.status is not None
                and chief.status.phase not in (None, "Pending", "Unknown")
            ):
                seen = self._note_restart(chief, seen)
                self._follow(chief.metadata.name, namespace, cursor, deadline)
                pause = self.polling_interval
            time.sleep(max(0.0, min(pause, deadline - time.monotonic())))

    def _chief_pod(self, name: str, namespace: str) -> Any | None:
        try:
            return self._worker_pod(name, namespace, 0)
        except ApiException as error:
            self._note_log_trouble(f"{name}'s chief", error)
            return None

    def _note_restart(self, pod: Any, before: tuple[str, int] | None) -> tuple[str, int]:
        now = (pod.metadata.name, _restart_count(pod, self.CONTAINER))
        if before is not None and now[0] != before[0]:
            self.sink(f"{now[0]}: the chief's new pod (its job was started again); following it")
        elif before is not None and now[1] > before[1]:
            self.sink(f"{now[0]}: its container restarted (restart {now[1]}); following the new one")
        return now

    def _follow(self, pod: str, namespace: str, cursor: _LogCursor, deadline: float, follow: bool = True) -> None:
        """Shows the chief container's new log lines until its stream ends: the container exited, or it was quiet too
        long."""
        cursor.rewind()
        idle = max(1.0, min(LOG_IDLE_SECONDS, deadline - time.monotonic()))
        try:
            response = self.core_api.read_namespaced_pod_log(
                name=pod,
                namespace=namespace,
                container=self.CONTAINER,
                follow=follow,
                timestamps=True,
                _preload_content=False,
                _request_timeout=(idle, idle),
            )
            try:
                level = tfenv.log_level()  # the replicas' own: the job passes them this process's level
                for line in iter_resp_lines(response):
                    text = cursor.admit(line)
                    if text is not None and tfenv.shown(text, level):
                        self.sink(f"[{pod}] {text}")
                    if follow and time.monotonic() >= deadline:  # a chief that keeps logging never idles the stream
                        break
            finally:
                response.release_conn()
        except Exception as error:  # the next poll decides: the job may have ended or the container restarted
            self._note_log_trouble(pod, error)

    def _note_log_trouble(self, pod: str, error: Exception) -> None:
        """Says once why the log cannot be followed, unless it is only not there yet (400, 404) or a hiccup."""
        status = api_status(error)
        if status in (400, 404) or _transient(error) or status in self._log_trouble:
            return
        self._log_trouble.add(status)
        self.sink(f"cannot follow {pod}'s log ({api_reason(error)}); waiting for the {self.KIND} without it")

    # ------------------------------------------------------------ after the job

    def _log_tail(self, job: J, namespace: str, cursor: _LogCursor) -> str:
        """The last lines of each worker's log; the chief's as followed when its pod is gone."""
        name = self._metadata(job).name
        try:
            pods = self._worker_pod_names(name, namespace, self._workers(job))
        except (ApiException, BakeoffError) as error:
            reason = api_reason(error) if isinstance(error, ApiException) else error
            followed = f" | last lines of {name}'s chief: " + " / ".join(cursor.tail) if cursor.tail else ""
            return f" | {name}'s pods: unavailable ({reason}){followed}"
        tails = []
        for index, pod in enumerate(pods):
            try:
                lines = self._read_log_tail(pod, namespace)
            except (ApiException, BakeoffError) as error:
                lines = list(cursor.tail) if index == 0 else []
                if not lines:
                    tails.append(
                        f" | {pod}: logs unavailable "
                        f"({api_reason(error) if isinstance(error, ApiException) else error})"
                    )
                    continue
            if lines:
                tails.append(f" | last lines of {pod}: " + " / ".join(lines))
        return "".join(tails)

    def _read_log_tail(self, pod: str, namespace: str) -> list[str]:
        # Raw bytes: the client would otherwise parse a log that happens to look like JSON.
        response = self._retrying(
            f"read pod {namespace}/{pod}'s log",
            lambda: self.core_api.read_namespaced_pod_log(
                name=pod,
                namespace=namespace,
                container=self.CONTAINER,
                tail_lines=defaults.LOG_TAIL,
                _preload_content=False,
            ),
        )
        return response.data.decode("utf-8", "replace").rstrip("\n").splitlines()[-defaults.LOG_TAIL :]
