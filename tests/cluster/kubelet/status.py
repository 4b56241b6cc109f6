"""Container and pod status as the kubelet reports it: states, phase (its getPhase), conditions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tests.cluster.kubelet.api import now, rfc3339


@dataclass(frozen=True)
class Waiting:
    reason: str
    message: str = ""

    def wire(self) -> dict[str, Any]:
        return {"waiting": {"reason": self.reason, **({"message": self.message} if self.message else {})}}


@dataclass(frozen=True)
class Running:
    started_at: datetime

    def wire(self) -> dict[str, Any]:
        return {"running": {"startedAt": rfc3339(self.started_at)}}


@dataclass(frozen=True)
class Terminated:
    exit_code: int
    started_at: datetime | None
    finished_at: datetime
    reason: str = ""  # Completed or Error unless said otherwise (StartError, ...)
    message: str = ""
    signal: int | None = None
    container_id: str = ""

    @property
    def wire_reason(self) -> str:
        return self.reason or ("Completed" if self.exit_code == 0 else "Error")

    def wire(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "exitCode": self.exit_code,
            "reason": self.wire_reason,
            "finishedAt": rfc3339(self.finished_at),
        }
        if self.started_at is not None:
            body["startedAt"] = rfc3339(self.started_at)
        if self.message:
            body["message"] = self.message
        if self.signal is not None:
            body["signal"] = self.signal
        if self.container_id:
            body["containerID"] = self.container_id
        return {"terminated": body}


State = Waiting | Running | Terminated


@dataclass
class ContainerStatus:
    """One container's status; the container's runner is its only writer."""

    name: str
    image: str
    image_id: str = ""
    state: State = field(default_factory=lambda: Waiting("ContainerCreating"))
    last: Terminated | None = None
    restart_count: int = 0
    container_id: str = ""

    @property
    def running(self) -> bool:
        return isinstance(self.state, Running)

    @property
    def ready(self) -> bool:
        return self.running  # no probes: a running container is ready

    def wire(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "imageID": self.image_id,
            "ready": self.ready,
            "started": self.running,
            "restartCount": self.restart_count,
            "state": self.state.wire(),
            "lastState": self.last.wire() if self.last else {},
        }
        if self.container_id:
            body["containerID"] = self.container_id
        return body


def _failed(state: Terminated | None) -> bool:
    return state is not None and state.exit_code != 0


def phase(policy: str, init: Sequence[ContainerStatus], main: Sequence[ContainerStatus]) -> str:
    """The kubelet's getPhase (pkg/kubelet/kubelet_pods.go, v1.34) for regular init containers."""
    pending_init = 0
    failed_init = 0
    for status in init:
        state = status.state
        if isinstance(state, Terminated):
            failed_init += _failed(state)
        elif isinstance(state, Waiting) and status.last is not None:
            failed_init += _failed(status.last)
        else:
            pending_init += 1
    if failed_init and policy == "Never":
        return "Failed"
    running = waiting = stopped = succeeded = 0
    for status in main:
        state = status.state
        if isinstance(state, Running):
            running += 1
        elif isinstance(state, Terminated):
            stopped += 1
            succeeded += state.exit_code == 0
        elif status.last is not None:
            stopped += 1
        else:
            waiting += 1
    if pending_init or waiting:
        return "Pending"
    if running:
        return "Running"
    if stopped:
        if policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if policy == "Never":
            return "Failed"
        return "Running"
    return "Pending"


class Conditions:
    """The pod conditions the kubelet owns, each with the moment it last changed."""

    def __init__(self) -> None:
        self._since: dict[str, tuple[str, datetime]] = {}

    def _condition(self, kind: str, true: bool, reason: str = "", message: str = "") -> dict[str, Any]:
        status = "True" if true else "False"
        previous = self._since.get(kind)
        if previous is None or previous[0] != status:
            self._since[kind] = (status, now())
        # None, not absent: a strategic merge keeps a field the patch leaves out, and null deletes it.
        return {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": rfc3339(self._since[kind][1]),
            "reason": reason or None,
            "message": message or None,
        }

    def wire(
        self, pod_phase: str, sandbox: bool, init: Sequence[ContainerStatus], main: Sequence[ContainerStatus]
    ) -> list[dict[str, Any]]:
        terminal = pod_phase in ("Succeeded", "Failed")
        unfinished = [s.name for s in init if not (isinstance(s.state, Terminated) and s.state.exit_code == 0)]
        unready = [s.name for s in main if not s.ready]
        if terminal:
            ready = self._condition("ContainersReady", False, "PodCompleted")
            pod_ready = self._condition("Ready", False, "PodCompleted")
        else:
            message = f"containers with unready status: [{' '.join(unready)}]"
            ready = self._condition(
                "ContainersReady", not unready, "" if not unready else "ContainersNotReady", message if unready else ""
            )
            pod_ready = self._condition(
                "Ready", not unready, "" if not unready else "ContainersNotReady", message if unready else ""
            )
        initialized = self._condition(
            "Initialized",
            not unfinished,
            "ContainersNotInitialized" if unfinished else "",
            f"containers with incomplete status: [{' '.join(unfinished)}]" if unfinished else "",
        )
        return [self._condition("PodReadyToStartContainers", sandbox and not terminal), initialized, ready, pod_ready]
