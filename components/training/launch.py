"""Launching one variant: its TFJob built, executed by a backend, its results read back from the store."""

import dataclasses
import os

from bakeoff.components import defaults, tfenv
from bakeoff.components.backends.backend import Backend, JobFailed
from bakeoff.components.data import artifact
from bakeoff.components.environment import KUBERNETES_HOST_ENV, S3_ENDPOINT_ENV, S3_INSECURE_ENV, S3_REGION_ENV
from bakeoff.components.errors import BakeoffError
from bakeoff.components.spec import MAX_TIMEOUT_SECONDS, Variant, check_fits, from_dict
from bakeoff.components.storage import open_store, runs
from bakeoff.components.storage.records import Candidate, WorkerMetrics
from bakeoff.components.training import backup, rungs
from bakeoff.components.training.tfjob import build_tfjob, job_name, worker_args

# What a replica needs from the environment it was started in. Never credentials:
# on a cluster those come from the store secret, locally from the user's shell.
PASSED_ENV = (S3_ENDPOINT_ENV, S3_INSECURE_ENV, S3_REGION_ENV, tfenv.LOG_LEVEL_ENV)
BACKENDS = ("auto", "local", "kubernetes")
TRAINERS = ("tfjob", "trainjob")  # what runs the TFJob on a cluster: the Training Operator v1, or Kubeflow Trainer v2


def in_kubernetes() -> bool:
    """Whether this process runs in a pod (the variable every pod gets)."""
    return KUBERNETES_HOST_ENV in os.environ


def check_trainer(trainer: str) -> str:
    """``trainer`` if it is one of TRAINERS; one clear line for any other."""
    if trainer not in TRAINERS:
        raise BakeoffError(f"unknown trainer {trainer!r}: use one of {', '.join(TRAINERS)} (--param trainer=...)")
    return trainer


def check_backend(name: str) -> str:
    """``name`` if it is one of BACKENDS; one clear line for any other."""
    if name not in BACKENDS:
        raise BakeoffError(f"unknown training backend {name!r}: use one of {', '.join(BACKENDS)}")
    return name


def check_timeout(seconds: int) -> int:
    """``seconds`` if it can be a TFJob's activeDeadlineSeconds within MAX_TIMEOUT_SECONDS; one line if not."""
    if not 1 <= seconds <= MAX_TIMEOUT_SECONDS:
        raise BakeoffError(f"{seconds} seconds is no deadline for a TFJob: give 1 to {MAX_TIMEOUT_SECONDS} (a week)")
    return seconds


def check_max_train_examples(count: int) -> int:
    """``count`` if it is 0 (the whole training split) or a positive cap; one line if not."""
    if count < 0:
        raise BakeoffError(
            f"{count} examples is below 0: give 0 to train on the whole training split, or a positive cap"
        )
    return count


def check_workers(variant: Variant, shards: int) -> None:
    """One line when ``variant`` has more workers than the dataset has shards: each worker reads whole shards of its
    own."""
    if variant.workers > shards:
        raise BakeoffError(
            f"variant {variant.name!r}: workers={variant.workers} exceeds the dataset's {shards} shards:"
            " lower workers or ingest with more shards"
        )


def make_backend(name: str, concurrent_jobs: int, trainer: str = defaults.TRAINER) -> Backend:
    """The backend that executes TFJobs here: ``auto`` picks Kubernetes inside a pod, else local; ``trainer`` picks the
    cluster's controller (the local backend runs the TFJob itself either way)."""
    check_backend(name)
    check_trainer(trainer)
    if name == "kubernetes" or (name == "auto" and in_kubernetes()):
        if trainer == "trainjob":
            from bakeoff.components.backends.trainjob import TrainJobBackend

            return TrainJobBackend()
        from bakeoff.components.backends.kubernetes import KubernetesBackend

        return KubernetesBackend()
    from bakeoff.components.backends.local import LocalBackend

    return LocalBackend(concurrent_jobs=concurrent_jobs)


@dataclasses.dataclass(frozen=True)
class JobSettings:
    """How each of a run's TFJobs runs, whichever variant it trains; checked when made, before any job starts."""

    image: str  # the replicas' container image (a cluster's; the local backend runs this venv)
    max_train_examples: int = 0  # 0: the whole training split
    concurrent_jobs: int = (
        defaults.LOCAL_PARALLELISM
    )  # jobs the local backend runs at once: its replicas share the cores
    timeout_seconds: int = defaults.TIMEOUT_SECONDS  # the TFJob's activeDeadlineSeconds
    backend: str = "auto"  # one of BACKENDS
    trainer: str = defaults.TRAINER  # on Kubernetes, which operator runs the job: one of TRAINERS

    def __post_init__(self) -> None:
        check_max_train_examples(self.max_train_examples)
        check_timeout(self.timeout_seconds)
        check_backend(self.backend)
        check_trainer(self.trainer)


def train_variant(
    variant_spec: dict,
    data_uri: str,
    store_uri: str,
    run_id: str,
    settings: JobSettings,
    stop_epoch: int = 0,
    rung: int = 0,
) -> Candidate:
    """Trains one variant as a TFJob until epoch ``stop_epoch`` (0: all) and returns its candidate record for selection.

    A job that stops before ``training.epochs`` keeps the variant's backup, so
    the next rung's job resumes there; each job's metrics are also kept as ``rung-<rung>.json``.
    A job that fails for good (JobFailed) takes the backup with it.
    """
    variant = from_dict(variant_spec)
    rungs.stop_epoch(variant, stop_epoch)  # checked before anything runs
    if rung < 0:
        raise BakeoffError(f"variant {variant.name!r}: rung={rung} must be 0 or more")
    metadata = artifact.read_metadata(open_store(data_uri))
    check_workers(variant, metadata.shards)
    check_fits([variant], metadata.image_shape)
    store = open_store(store_uri)
    prefix = runs.variant_prefix(run_id, variant.name)
    job = build_tfjob(
        variant,
        name=job_name(run_id, variant.name, rung),
        image=settings.image,
        args=worker_args(variant, data_uri, store.uri, prefix, settings.max_train_examples, stop_epoch, rung),
        env={key: os.environ[key] for key in PASSED_ENV if key in os.environ},
        active_deadline_seconds=settings.timeout_seconds,
    )
    try:
        make_backend(settings.backend, settings.concurrent_jobs, settings.trainer).run(job)
    except JobFailed:
        # Past its restarts nothing resumes it; after an API or transport error (not JobFailed) a retry may.
        backup.remove(store, prefix)
        raise
    store.put_bytes(
        f"{prefix}/{runs.rung_name(rung)}", store.get_bytes(f"{prefix}/{runs.METRICS}")
    )  # this rung's record, kept past the next
    return runs.candidate(store, run_id, variant.name)


def final_metrics(metrics: WorkerMetrics) -> dict[str, float]:
    """The numbers of a job's ``metrics.json`` that the train step shows in the KFP UI, by the names it shows them."""
    history = metrics.history
    final = {key: history[key][-1] for key in ("val_accuracy", "val_loss") if history.get(key)}
    return final | {
        "train_seconds": metrics.train_seconds,
        "examples_per_second": metrics.examples_per_second,
        "replicas": metrics.num_replicas_in_sync,
        "epochs": metrics.epochs,
    }
