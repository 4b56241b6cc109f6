"""What every TFJob backend is: something that runs a TFJob to success or raises one clear error."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from bakeoff.components.errors import BakeoffError

if TYPE_CHECKING:  # a replica loads this module for PORT: kubeflow-training's Kubernetes client costs it ~0.6 s
    from kubeflow.training import KubeflowOrgV1TFJob

Sink = Callable[[str], None]  # where a backend sends each log line

# The TFJob's shape that the Training Operator, the backends and the job's builder share.
CONTAINER = "tensorflow"  # the container name the Training Operator looks for
PORT = 2222  # the Training Operator's default TFJob port
WORKER = "Worker"  # the replica type bakeoff's jobs consist of
# The variant a job trains, whole: a label value is cut at 63 characters; the local backend names its log by it.
VARIANT_ANNOTATION = "bakeoff/variant"


class JobFailed(BakeoffError):
    """The job ran and ended Failed, its restarts used up: an answer about the training, not about reaching a cluster
    (an API or transport error stays a plain BakeoffError, after which a retry may resume the job)."""


class Backend(Protocol):
    """Executes a TFJob built by ``bakeoff.components.training.tfjob``; it never changes what the job asks for."""

    def run(self, job: KubeflowOrgV1TFJob) -> None:
        """Runs ``job`` until it succeeds; raises JobFailed saying which replica failed and why, BakeoffError for what
        kept it from knowing."""


_print_lock = threading.Lock()


def print_line(line: str) -> None:
    """Prints one log line whole: replicas' reader threads must not interleave within a line."""
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def operator_backoff_limit(restarts: int, replicas: int) -> int:
    """The runPolicy.backoffLimit that lets a job restart ``restarts`` times and fail at the next fault.

    The Training Operator fails a job once the restart counts of its running pods' containers add up to the
    limit (PastBackoffLimit, pkg/core/job.go, v1.9.3). Under MultiWorkerMirroredStrategy one lost replica
    aborts every peer's collectives, so each fault restarts all ``replicas``: k faults count k * replicas.
    """
    return restarts * replicas + 1


def job_restarts(backoff_limit: int, replicas: int) -> int:
    """How many whole-job restarts ``backoff_limit`` allows (the inverse of operator_backoff_limit)."""
    return max(0, backoff_limit - 1) // replicas
