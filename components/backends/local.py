"""The local TFJob backend: each replica a process, with the TF_CONFIG the Training Operator would set."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from kubeflow.training import KubeflowOrgV1TFJob

from bakeoff.components import defaults, progress, tfenv
from bakeoff.components.backends import allocator, prefork
from bakeoff.components.backends.backend import VARIANT_ANNOTATION, JobFailed, Sink, job_restarts, print_line
from bakeoff.components.backends.threads import thread_cap
from bakeoff.components.defaults import LOG_TAIL
from bakeoff.components.environment import HEARTBEAT_ENV, THREAD_VARIABLES
from bakeoff.components.errors import ERROR_PREFIX, BakeoffError
from bakeoff.components.ports import free_ports

# Replica types in the order the Training Operator lists them in TF_CONFIG.
REPLICA_TYPES = ("Chief", "Master", "PS", "Worker", "Evaluator")
RESTARTING_POLICIES = ("OnFailure", "Always", "ExitCode")
# The watchdog reads the replicas' heartbeats (backends/heartbeat.py). A peer stopped mid-training makes
# TensorFlow's coordination service fail the others about 10 s later: a replica quiet for SUSPECT_SECONDS when
# another fails is the cause. STALL_SECONDS of quiet means stalled even when no peer notices (one replica, or
# before the coordination service runs). How both were chosen: docs/faults.md.
SUSPECT_SECONDS = defaults.SUSPECT_SECONDS
STALL_SECONDS = defaults.STALL_SECONDS
STALL_HINT = "check what stopped, froze or starved it (SIGSTOP, a debugger, swapping)"
KILLED_HINT = "something outside the replica ended it (the kernel's OOM killer sends SIGKILL: check free memory)"


def tf_configs(job: KubeflowOrgV1TFJob) -> dict[tuple[str, int], dict]:
    """TF_CONFIG per replica, as the operator builds it, with localhost ports for addresses."""
    specs = job.spec.tf_replica_specs
    kinds = [kind for kind in REPLICA_TYPES if kind in specs] + sorted(set(specs) - set(REPLICA_TYPES))
    ports = iter(free_ports(sum(specs[kind].replicas or 1 for kind in kinds)))
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


def exit_text(code: int) -> str:
    """How a replica ended, as a person says it: a signal by its name."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def thread_env(threads: int) -> dict[str, str]:
    """The variables that cap a replica's TensorFlow (and OpenMP) at ``threads`` threads per pool."""
    return dict.fromkeys(THREAD_VARIABLES, str(threads))


def signal_group(pid: int, number: signal.Signals) -> None:
    """Sends ``number`` to the process group ``pid`` leads; none left (it ended since it was polled) is no error."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, number)


class _Replica:
    """One running replica: its process and the last lines of its log."""

    def __init__(self, label: str, command: list[str], env: dict[str, str], sink: Sink, heartbeat: Path) -> None:
        self.label = label
        self.heartbeat = heartbeat  # absent until the replica's first beat
        self.started = time.time()
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
        forked = prefork.spawn(command, env)
        self.process: subprocess.Popen | prefork.Forked
        if isinstance(forked, prefork.Forked):
            self.process, self.how = forked, " (forked from the warm process)"  # for the start line
        else:  # ``forked`` says why not, where a warm process was asked
            self.how = f" (fresh: {forked})" if forked else ""
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
        self.reader = threading.Thread(
            target=self._pump, args=(self.process.stdout, sink, tfenv.log_level(env)), daemon=True
        )
        self.reader.start()

    def _pump(self, stream: TextIO, sink: Sink, level: int) -> None:
        for line in stream:
            line = line.rstrip("\n")
            if tfenv.shown(line, level):
                self.tail.append(line)
                sink(f"[{self.label}] {line}")

    def quiet_seconds(self) -> float:
        """Seconds since the replica's last heartbeat, or since its start if it is stopped before the first.

        0 while it marks a span without heartbeats (unless it is stopped), and for a
        program that has not beaten yet: it is starting, or it is not bakeoff's worker.
        """
        try:
            stat = self.heartbeat.stat()
        except FileNotFoundError:
            return time.time() - self.started if self.stopped() else 0.0
        if stat.st_size and not self.stopped():
            return 0.0
        return time.time() - stat.st_mtime

    def suspect(self, quiet: float) -> bool:
        """Whether this running replica is the likely cause of a peer's failure."""
        return self.stopped() or quiet > SUSPECT_SECONDS

    def stopped(self) -> bool:
        """Whether the process is stopped by a signal (Linux's /proc says; elsewhere: unknown, False)."""
        try:
            state = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state in ("T", "t")

    def stop(self, grace: float = 5.0) -> None:
        if self.process.poll() is None:
            signal_group(self.process.pid, signal.SIGTERM)
            signal_group(self.process.pid, signal.SIGCONT)  # a stopped replica acts on the SIGTERM only once continued
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.reader.join(timeout=grace)

    def code(self) -> int:
        """How the ended replica exited (Popen's: -N for signal N)."""
        code = self.process.poll()
        assert code is not None, "asked of a running replica"
        return code

    def last_error(self) -> str:
        """The most telling line of the tail: our own error line, else the last line."""
        for line in reversed(self.tail):
            if line.startswith(ERROR_PREFIX):
                return line[len(ERROR_PREFIX) :].strip()
        return self.tail[-1] if self.tail else "(no output)"


@contextlib.contextmanager
def _job_log(variant: str, sink: Sink) -> Iterator[Sink]:
    """Where a job's log lines go: the variant's log file when someone watches the run, else ``sink``."""
    path = progress.log_path(variant)
    if path is None:
        yield sink
        return
    lock = threading.Lock()
    with open(path, "a", encoding="utf-8") as log:

        def write(line: str) -> None:
            with lock:  # one reader thread per replica: lines must not interleave
                log.write(line + "\n")
                log.flush()

        yield write


class LocalBackend:
    """Runs a TFJob's replicas as processes of this machine, honouring its run policy."""

    def __init__(self, concurrent_jobs: int = 1, sink: Sink = print_line, stall_seconds: float = STALL_SECONDS) -> None:
        self.concurrent_jobs = concurrent_jobs
        self.sink = sink
        self.stall_seconds = stall_seconds
        self.tcmalloc = allocator.tcmalloc()

    def run(self, job: KubeflowOrgV1TFJob) -> None:
        """Runs ``job`` to success, or raises BakeoffError saying which replica failed and why.

        When someone watches (``progress.PROGRESS_DIR_ENV``), the log lines go to the
        variant's log file instead of the sink, and a failure for good is an event.
        """
        variant = (job.metadata.annotations or {}).get(VARIANT_ANNOTATION) or job.metadata.name
        with _job_log(variant, self.sink) as sink:
            try:
                self._run(job, variant, sink)
            except BakeoffError as error:
                progress.emit(variant, progress.Event("failed", error=str(error)))
                raise

    def _run(self, job: KubeflowOrgV1TFJob, variant: str, sink: Sink) -> None:
        name = job.metadata.name
        if not self.tcmalloc:
            sink(
                f"[{name}] tcmalloc not found: replicas use the default malloc and train about half as fast"
                f" ({allocator.INSTALL_HINT}; `make run` installs it)"
            )
        policy = job.spec.run_policy
        deadline = (
            time.monotonic() + policy.active_deadline_seconds if policy and policy.active_deadline_seconds else None
        )
        replicas = sum(spec.replicas or 1 for spec in job.spec.tf_replica_specs.values())
        # The operator's limit counts every restarted replica; each restart here restarts all of them.
        backoff_limit = (
            job_restarts(policy.backoff_limit, replicas) if policy and policy.backoff_limit is not None else 0
        )
        restartable = all(spec.restart_policy in RESTARTING_POLICIES for spec in job.spec.tf_replica_specs.values())
        restarts = 0
        while True:
            progress.emit(variant, progress.Event("training", restarts=restarts))  # the job's replicas are starting
            failed, outcome, quiet = self._attempt(job, deadline, sink)
            if failed is None:
                return
            if outcome == "deadline":
                raise BakeoffError(
                    f"TFJob {name!r} ran past activeDeadlineSeconds={policy.active_deadline_seconds} and was stopped:"
                    " raise the timeout or train less"
                )
            if outcome == "stalled":
                what, hint = f"stopped responding (no heartbeat for {quiet:.0f} s)", STALL_HINT
            else:
                what = exit_text(failed.code())
                hint = failed.last_error() if failed.code() > 0 else KILLED_HINT
            if not restartable or restarts >= backoff_limit:
                raise JobFailed(
                    f"TFJob {name!r} failed: replica {failed.label} {what} after {restarts} restart(s): {hint}"
                )
            restarts += 1
            sink(f"[{name}] replica {failed.label} {what}; restarting the job ({restarts}/{backoff_limit})")

    def _attempt(
        self, job: KubeflowOrgV1TFJob, deadline: float | None, sink: Sink
    ) -> tuple[_Replica | None, str, float]:
        """Starts every replica once; returns (None, "", 0) on success, else the replica to blame,
        "failed", "stalled" or "deadline", and how long it has been quiet."""
        configs = tf_configs(job)
        threads = thread_env(thread_cap(len(configs), self.concurrent_jobs))
        replicas = []
        # Each replica's heartbeat and temporary files (TensorFlow's AutoGraph leaves its generated modules to exit
        # handlers that a replica skips; a killed one leaves its backup): the attempt's end removes them all.
        scratch = Path(tempfile.mkdtemp(prefix="bakeoff-replicas-"))
        try:
            for (kind, index), tf_config in configs.items():
                container = job.spec.tf_replica_specs[kind].template.spec.containers[0]
                label = f"{job.metadata.name}-{kind.lower()}-{index}"
                (scratch / label).mkdir()
                heartbeat = scratch / f"{label}.heartbeat"  # the replica creates it
                env = {
                    **prefork.replica_environment(self.tcmalloc),
                    "TMPDIR": str(scratch / label),  # unless the job names its own, as a pod's would be kept
                    **{var.name: var.value for var in container.env or [] if var.value is not None},
                    "TF_CONFIG": json.dumps(tf_config),
                    **threads,
                    HEARTBEAT_ENV: str(heartbeat),
                }
                command = [sys.executable if part in ("python", "python3") else part for part in container.command]
                replica = _Replica(label, command + list(container.args or []), env, sink, heartbeat)
                replicas.append(replica)
                sink(f"[{job.metadata.name}] replica {label} started as pid {replica.process.pid}{replica.how}")
            while True:
                running = [replica for replica in replicas if replica.process.poll() is None]
                quiet = {replica: replica.quiet_seconds() for replica in running}
                # A replica killed by a signal is a cause; one exiting with an error after it, a consequence.
                failed = sorted((r for r in replicas if r.process.poll() not in (None, 0)), key=lambda r: r.code() > 0)
                suspects = sorted(
                    (r for r in running if (r.suspect(quiet[r]) if failed else quiet[r] > self.stall_seconds)),
                    key=lambda r: -quiet[r],
                )
                if suspects:
                    return suspects[0], "stalled", quiet[suspects[0]]
                if failed:
                    return failed[0], "failed", 0.0
                if not running:
                    return None, "", 0.0
                if deadline is not None and time.monotonic() > deadline:
                    return running[0], "deadline", 0.0
                time.sleep(0.2)
        finally:
            for replica in replicas:
                replica.stop()
            shutil.rmtree(scratch, ignore_errors=True)
