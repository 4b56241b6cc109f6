"""The local TFJob backend: each replica a process, with the TF_CONFIG the Training Operator would set."""
from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional, TextIO

from kubeflow.training import KubeflowOrgV1TFJob

from components.backends import allocator
from components.backends.backend import Sink, print_line
from components.defaults import LOG_TAIL
from components.errors import ERROR_PREFIX, BakeoffError

# Replica types in the order the Training Operator lists them in TF_CONFIG.
REPLICA_TYPES = ("Chief", "Master", "PS", "Worker", "Evaluator")
RESTARTING_POLICIES = ("OnFailure", "Always", "ExitCode")


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def tf_configs(job: KubeflowOrgV1TFJob) -> dict[tuple[str, int], dict]:
    """TF_CONFIG per replica, as the operator builds it, with localhost ports for addresses."""
    specs = job.spec.tf_replica_specs
    kinds = [kind for kind in REPLICA_TYPES if kind in specs] + sorted(set(specs) - set(REPLICA_TYPES))
    ports = iter(_free_ports(sum(specs[kind].replicas or 1 for kind in kinds)))
    cluster = {
        kind.lower(): [f"localhost:{next(ports)}" for _ in range(specs[kind].replicas or 1)]
        for kind in kinds
        if kind != "Evaluator"
    }
    return {
        (kind, index): {"cluster": cluster, "task": {"type": kind.lower(), "index": index}, "environment": "cloud"}
        for kind in kinds
        for index in range(specs[kind].replicas or 1)
    }


def thread_cap(replicas: int, concurrent_jobs: int, cores: Optional[int] = None) -> int:
    """Threads per replica so that all concurrently running replicas share the cores."""
    cores = cores or os.cpu_count() or 1
    return max(1, cores // max(1, replicas * concurrent_jobs))


class _Replica:
    """One running replica: its process and the last lines of its log."""

    def __init__(self, label: str, command: list[str], env: dict[str, str], sink: Sink) -> None:
        self.label = label
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
        self.process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            start_new_session=True,  # so a stop reaches the replica's own children too
        )
        self.reader = threading.Thread(target=self._pump, args=(self.process.stdout, sink), daemon=True)
        self.reader.start()

    def _pump(self, stream: TextIO, sink: Sink) -> None:
        for line in stream:
            line = line.rstrip("\n")
            self.tail.append(line)
            sink(f"[{self.label}] {line}")

    def stop(self, grace: float = 5.0) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.reader.join(timeout=grace)

    def last_error(self) -> str:
        """The most telling line of the tail: our own error line, else the last line."""
        for line in reversed(self.tail):
            if line.startswith(ERROR_PREFIX):
                return line[len(ERROR_PREFIX):].strip()
        return self.tail[-1] if self.tail else "(no output)"


class LocalBackend:
    """Runs a TFJob's replicas as processes of this machine, honouring its run policy."""

    def __init__(self, concurrent_jobs: int = 1, sink: Sink = print_line) -> None:
        self.concurrent_jobs = concurrent_jobs
        self.sink = sink
        self.tcmalloc = allocator.tcmalloc()

    def run(self, job: KubeflowOrgV1TFJob) -> None:
        """Runs ``job`` to success, or raises BakeoffError saying which replica failed and why."""
        name = job.metadata.name
        if not self.tcmalloc:
            self.sink(f"[{name}] tcmalloc not found: replicas use the default malloc and train about half as fast"
                      f" ({allocator.INSTALL_HINT}; `make run` installs it)")
        policy = job.spec.run_policy
        deadline = time.monotonic() + policy.active_deadline_seconds if policy and policy.active_deadline_seconds else None
        backoff_limit = policy.backoff_limit if policy and policy.backoff_limit is not None else 0
        restartable = all(spec.restart_policy in RESTARTING_POLICIES for spec in job.spec.tf_replica_specs.values())
        restarts = 0
        while True:
            failed, timed_out = self._attempt(job, deadline)
            if failed is None:
                return
            if timed_out:
                raise BakeoffError(
                    f"TFJob {name!r} ran past activeDeadlineSeconds={policy.active_deadline_seconds} and was stopped:"
                    " raise the timeout or train less"
                )
            if not restartable or restarts >= backoff_limit:
                raise BakeoffError(
                    f"TFJob {name!r} failed: replica {failed.label} exited with code {failed.process.returncode}"
                    f" after {restarts} restart(s): {failed.last_error()}"
                )
            restarts += 1
            self.sink(f"[{name}] replica {failed.label} failed (exit {failed.process.returncode}); restarting the job ({restarts}/{backoff_limit})")

    def _attempt(self, job: KubeflowOrgV1TFJob, deadline: Optional[float]) -> tuple[Optional[_Replica], bool]:
        """Starts every replica once; returns (the first that failed, whether time ran out), else (None, False)."""
        configs = tf_configs(job)
        threads = str(thread_cap(len(configs), self.concurrent_jobs))
        replicas = []
        try:
            for (kind, index), tf_config in configs.items():
                container = job.spec.tf_replica_specs[kind].template.spec.containers[0]
                env = {
                    **allocator.with_tcmalloc(os.environ, self.tcmalloc),
                    **{var.name: var.value for var in container.env or [] if var.value is not None},
                    "TF_CONFIG": json.dumps(tf_config),
                    "TF_NUM_INTRAOP_THREADS": threads,
                    "TF_NUM_INTEROP_THREADS": threads,
                    "OMP_NUM_THREADS": threads,
                    "PYTHONUNBUFFERED": "1",
                }
                command = [sys.executable if part in ("python", "python3") else part for part in container.command]
                label = f"{job.metadata.name}-{kind.lower()}-{index}"
                replicas.append(_Replica(label, command + list(container.args or []), env, self.sink))
            while True:
                for replica in replicas:
                    code = replica.process.poll()
                    if code not in (None, 0):
                        return replica, False
                if all(replica.process.poll() == 0 for replica in replicas):
                    return None, False
                if deadline is not None and time.monotonic() > deadline:
                    return next(replica for replica in replicas if replica.process.poll() is None), True
                time.sleep(0.2)
        finally:
            for replica in replicas:
                replica.stop()
