"""One container: its process started in a sandbox, its output logged, restarted as the pod's restartPolicy says."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.cluster.kubelet import sandbox
from tests.cluster.kubelet.api import now
from tests.cluster.kubelet.config import BACKOFF_FIRST_SECONDS, BACKOFF_MAX_SECONDS, BACKOFF_RESET_SECONDS
from tests.cluster.kubelet.logs import LogFile
from tests.cluster.kubelet.podenv import ConfigError
from tests.cluster.kubelet.status import ContainerStatus, Running, Terminated, Waiting

log = logging.getLogger("kubelet.container")
PUMP_JOIN_SECONDS = 2.0  # a pipe held open by an escaped grandchild stops being read this long after the exit
MESSAGE_BYTES = 4096  # the kubelet's limit on a termination message


@dataclass(frozen=True)
class Launch:
    """What one start of the container needs, resolved just before it (Secrets may have changed)."""

    argv: list[str]
    env: dict[str, str]
    workdir: str
    mounts: list[sandbox.Mount]
    root: Path  # an empty folder: the mount point of the container's tmpfs root
    message_file: Path | None = None
    image: sandbox.ImageRoot | None = None  # an unpacked image's root filesystem, user and preload; None: a venv


# reason, message, warning: an Event on the pod about this container
Report = Callable[[str, str, bool], None]


class ContainerRunner:
    """Runs one container until it is done for good (its policy says so) or stopped (the pod is being deleted)."""

    def __init__(
        self,
        status: ContainerStatus,
        policy: str,
        init: bool,
        prepare: Callable[[], Launch],
        tools: sandbox.Tools,
        hostname: str,
        log_dir: Path,
        changed: Callable[[], None],
        report: Report,
    ) -> None:
        self.status = status
        self.policy = policy
        self.init = init
        self.prepare = prepare
        self.tools = tools
        self.hostname = hostname
        self.log_dir = log_dir
        self.changed = changed
        self.report = report
        self.logs: dict[str, LogFile] = {}  # one per run, by the run's containerID
        self.stopping = threading.Event()
        self.finished = threading.Event()
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._failures = 0

    @property
    def name(self) -> str:
        return self.status.name

    def _restarts(self, exit_code: int) -> bool:
        if self.policy == "Never":
            return False
        if self.init or self.policy == "OnFailure":  # init containers only ever rerun after a failure
            return exit_code != 0
        return True

    def _backoff(self, ran_seconds: float) -> float:
        """The kubelet's restart back-off, short: none the first time, then doubling up to the cap."""
        if ran_seconds >= BACKOFF_RESET_SECONDS:
            self._failures = 0
        self._failures += 1
        if self._failures == 1:
            return 0.0
        return min(BACKOFF_FIRST_SECONDS * 2 ** (self._failures - 2), BACKOFF_MAX_SECONDS)

    def _set(self, state: object = None, **fields: object) -> None:
        if state is not None:
            self.status.state = state  # type: ignore[assignment]
        for key, value in fields.items():
            setattr(self.status, key, value)
        self.changed()

    def run(self) -> None:
        """Runs to the end; returns when done for good or stopped."""
        try:
            first = True
            while not self.stopping.is_set():
                if not first:
                    self.status.restart_count += 1
                first = False
                terminated = self._attempt()
                if terminated is None:  # not configurable yet: wait, then try the same run again
                    first = True
                    self._pause(self._backoff(0.0))
                    continue
                ran = (terminated.finished_at - (terminated.started_at or terminated.finished_at)).total_seconds()
                if self.stopping.is_set() or not self._restarts(terminated.exit_code):
                    self._set(terminated)
                    return
                delay = self._backoff(ran)
                if delay > 0:
                    self.report("BackOff", f"Back-off restarting failed container {self.name}", True)
                    self._set(
                        Waiting("CrashLoopBackOff", f"back-off {delay:g}s restarting failed container={self.name}"),
                        last=terminated,
                    )
                    self._pause(delay)
                else:
                    self.status.last = terminated
        finally:
            self.finished.set()

    def _pause(self, seconds: float) -> None:
        self.stopping.wait(seconds)

    def _attempt(self) -> Terminated | None:
        """One start of the process; None when it could not even be configured."""
        try:
            launch = self.prepare()
            seen = [sandbox.Mount(launch.image.rootfs, "/"), *launch.mounts] if launch.image else launch.mounts
            sandbox.resolve_executable(launch.argv, launch.env, launch.workdir, seen)
        except ConfigError as error:
            self.report("Failed", f"Error: {error}", True)
            self._set(Waiting("CreateContainerConfigError", str(error)))
            return None
        except sandbox.StartError as error:
            self.report("Failed", f"Error: {error}", True)
            moment = now()
            return Terminated(128, None, moment, reason="StartError", message=str(error))
        log_file = LogFile(self.log_dir / f"{self.status.restart_count}.log")
        with self._lock:
            if self.stopping.is_set():
                log_file.close()
                return Terminated(137, None, now())
            launch.root.mkdir(parents=True, exist_ok=True)
            argv = sandbox.command(
                self.tools, launch.root, launch.mounts, self.hostname, launch.workdir, launch.argv, launch.image
            )
            self._process = process = subprocess.Popen(
                argv,
                env=launch.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                cwd="/",
            )
            self.logs[f"process://{process.pid}"] = log_file
        started = now()
        self.report("Pulled", f'Container image "{self.status.image}" already present on machine', False)
        self.report("Created", f"Created container: {self.name}", False)
        self.report("Started", f"Started container {self.name}", False)
        self._set(Running(started), container_id=f"process://{process.pid}")
        pumps = [
            threading.Thread(target=log_file.pump, args=(pipe, stream), daemon=True)
            for pipe, stream in ((process.stdout, "stdout"), (process.stderr, "stderr"))
        ]
        for pump in pumps:
            pump.start()
        code = process.wait()
        self._signal_group(process, signal.SIGKILL)  # what the container started dies with it, as in a container
        for pump in pumps:
            pump.join(PUMP_JOIN_SECONDS)
        log_file.close()
        exit_code = code if code >= 0 else 128 - code
        message = ""
        if launch.message_file is not None and launch.message_file.is_file():
            message = launch.message_file.read_bytes()[:MESSAGE_BYTES].decode("utf-8", "replace")
        return Terminated(exit_code, started, now(), message=message, container_id=self.status.container_id)

    def _signal_group(self, process: subprocess.Popen[bytes], signum: int) -> None:
        try:
            os.killpg(process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def terminate(self) -> None:
        """SIGTERM to the container's process group; no restart after it."""
        with self._lock:
            self.stopping.set()
            process = self._process
        if process is not None and process.poll() is None:
            self.report("Killing", f"Stopping container {self.name}", False)
            self._signal_group(process, signal.SIGTERM)

    def kill(self) -> None:
        with self._lock:
            self.stopping.set()
            process = self._process
        if process is not None:
            self._signal_group(process, signal.SIGKILL)
