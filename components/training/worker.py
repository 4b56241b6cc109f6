"""The worker program: one TFJob replica training a variant under MultiWorkerMirroredStrategy.

Started the same way by the Training Operator, the local backend and the
tests: ``python -m bakeoff.components.training.worker --variant JSON --data URI --store URI --prefix KEY
[--stop-epoch N --rung K]`` with ``TF_CONFIG`` in the environment.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bakeoff.components.environment import INTER_OP_THREADS_ENV, INTRA_OP_THREADS_ENV, LEGACY_KERAS_ENV, ONEDNN_ENV

# Keras 3's model.fit fails under MultiWorkerMirroredStrategy (TF 2.21:
# "Attempt to convert a value (PerReplica...)"); tf-keras trains correctly.
os.environ.setdefault(LEGACY_KERAS_ENV, "1")
# TensorFlow turns its oneDNN kernels on by itself only on CPUs with AVX512-VNNI,
# AVX512-BF16 or AMX; on AVX2-only CPUs Eigen's kernels train markedly slower
# (benchmarks/results.md). A value the user set wins.
os.environ.setdefault(ONEDNN_ENV, "1")

from bakeoff.components.backends import cluster_spec
from bakeoff.components.backends.heartbeat import EXITING, joining, mark, start_heartbeat
from bakeoff.components.errors import reported
from bakeoff.components.tfenv import quiet_tensorflow

if __name__ == "__main__":
    quiet_tensorflow()  # a replica's TensorFlow: the log level, and no CUDA probe where it can only fail
    start_heartbeat()  # before TensorFlow loads: the local backend's watchdog times a replica from its start
    with reported():  # a pod without its identity fails in one line before TensorFlow's seconds of loading
        cluster_spec.ensure_tf_config()  # under Trainer v2's PlainML nobody else sets TF_CONFIG

from bakeoff.components import progress
from bakeoff.components.backends import allocator
from bakeoff.components.data import artifact
from bakeoff.components.modeling import precision
from bakeoff.components.modeling.savedmodel import export, mirror_averaged
from bakeoff.components.spec import Variant, from_dict
from bakeoff.components.storage import Store, open_store, runs
from bakeoff.components.storage.records import DatasetMetadata, WorkerMetrics
from bakeoff.components.storage.store import files_below
from bakeoff.components.training import backup, rungs
from bakeoff.components.training.callbacks import EpochProgress, StoreBackup, Throughput, Validation
from bakeoff.components.training.inputs import EpochShape, distributed_inputs, epoch_shape
from bakeoff.components.training.model import compiled_model, family_hooks

logger = logging.getLogger(__name__)


def _configure_threads() -> None:
    """Applies the thread caps the backend chose, before TensorFlow starts its pools."""
    import tensorflow as tf

    intra = os.environ.get(INTRA_OP_THREADS_ENV)
    inter = os.environ.get(INTER_OP_THREADS_ENV)
    if intra:
        tf.config.threading.set_intra_op_parallelism_threads(int(intra))
    if inter:
        tf.config.threading.set_inter_op_parallelism_threads(int(inter))


def _onednn_enabled() -> bool:
    """Whether TensorFlow runs its oneDNN kernels in this process (the setting and the CPU decide)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def _is_chief(resolver: Any) -> bool:
    """MWMS's rule: the chief replica, or worker 0 when there is no chief."""
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief"):
        return True
    return task_type == "worker" and task_id == 0 and "chief" not in resolver.cluster_spec().as_dict()


@dataclasses.dataclass(frozen=True)
class _BackupPlace:
    """Where a job's per-epoch backups go (``digest`` names the job) and whether this replica uploads them."""

    store: Store
    prefix: str
    digest: str
    chief: bool


@dataclasses.dataclass(frozen=True)
class _Fitted:
    """What ``fit`` leaves for a job's metrics: where it resumed, the attempt, and what its callbacks measured."""

    resume: backup.Resume
    attempt: int
    backing_up: StoreBackup
    throughput: Throughput
    train_seconds: float
    validation_seconds: float


def train(
    variant: Variant,
    data_uri: str,
    store_uri: str,
    prefix: str,
    max_train_examples: int,
    stop_epoch: int = 0,
    rung: int = 0,
) -> WorkerMetrics:
    """Trains ``variant`` on this replica's shards until epoch ``stop_epoch``; the chief stores model and metrics.

    ``training.epochs`` is the length of the learning-rate schedule; a job that
    stops before it (``stop_epoch``, 0: at the end) keeps its backup, and the
    next job of the variant resumes there on the same schedule (rung training).
    """
    stop_epoch = rungs.stop_epoch(variant, stop_epoch)
    strategy = make_strategy()
    data = open_store(data_uri)
    metadata = artifact.read_metadata(data)
    shape = epoch_shape(variant, strategy, metadata.counts["train"], max_train_examples)
    precision = resolved_precision(variant)
    model = compiled_model(variant, strategy, metadata, shape.steps_per_epoch, precision)
    inputs = distributed_inputs(variant, strategy, data, shape)
    store = open_store(store_uri)
    chief = _is_chief(strategy.cluster_resolver)
    validation = _validation(variant, strategy, data, metadata, shape.workers, stop_epoch)
    # Not the stop epoch: the next rung resumes this job's backup (a restart of this rung too).
    digest = backup.fingerprint(
        {
            "variant": variant.to_dict(),
            "data": data_uri,
            "train_examples": shape.train_count,
            "replicas": shape.replicas,
        }
    )
    place = _BackupPlace(store, prefix, digest, chief)
    fitted = _fit(model, inputs, variant, stop_epoch, shape, validation, place)
    metrics = _metrics(variant, rung, model, shape, fitted, metadata.counts.get("validation", 0), precision)
    # Else a rung ended before the schedule did: halving decides whether it goes on.
    finished = stop_epoch == variant.training.epochs
    _save(model, chief, metadata.class_names, store, prefix, metrics, variant, finished)
    if chief:
        progress.emit(variant.name, progress.Event("done" if finished else "paused"))
    return metrics


def make_strategy() -> Any:
    """This replica's MultiWorkerMirroredStrategy, once every peer has joined, under the backend's thread caps."""
    import tensorflow as tf

    _configure_threads()
    # No timeout on every collective (it costs a thread each): TensorFlow's coordination
    # service fails the others ~10 s after a peer goes quiet, and the local backend names it.
    with joining():
        return tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=tf.distribute.experimental.CommunicationImplementation.RING
            )
        )


def resolved_precision(variant: Variant) -> str:
    """What ``training.precision`` means on this replica's machine: its GPUs and its CPU's bfloat16 units."""
    import tensorflow as tf

    return precision.resolve(
        variant.training.precision, len(tf.config.list_physical_devices("GPU")), precision.cpu_flags()
    )


def _validation(
    variant: Variant, strategy: Any, data: Store, metadata: DatasetMetadata, workers: int, stop_epoch: int
) -> Validation | None:
    """The callback scoring this replica's part of the validation split; None for a dataset without one."""
    if not metadata.counts.get("validation"):
        return None
    # The validation shards index::count, as the training shards: every example scored once, by one replica.
    part = artifact.read_shards(data, "validation", strategy.cluster_resolver.task_id or 0, workers)
    training = variant.training
    return Validation(
        strategy, part.images, part.labels, training.validation_freq, stop_epoch, mirror_averaged(training)
    )


def _fit(
    model: Any,
    inputs: Any,
    variant: Variant,
    stop_epoch: int,
    shape: EpochShape,
    validation: Validation | None,
    place: _BackupPlace,
) -> _Fitted:
    """Fits ``model`` until ``stop_epoch``, resuming from the job's backup and backing up every epoch."""
    backup_dir = Path(tempfile.mkdtemp(prefix="bakeoff-backup-"))
    try:
        # Every replica restores the same epoch: the chief's next upload needs every replica's steps.
        resume = backup.restore(place.store, place.prefix, place.digest, backup_dir)
        attempt = backup.begin_attempt(place.store, place.prefix, place.digest, stop_epoch) if place.chief else 0
        if resume.epochs_done:
            logger.warning("resuming after epoch %d of %d from the backup", resume.epochs_done, variant.training.epochs)
        backing_up = StoreBackup(backup_dir, place.store, place.prefix, place.digest, place.chief, resume)
        throughput = Throughput(shape.global_batch, paused=lambda: validation.seconds if validation else 0.0)
        # Validation first: the callbacks after it find its numbers in the epoch's logs.
        callbacks = (
            family_hooks(variant, model)
            + [
                callback
                for callback in (
                    validation,
                    EpochProgress(variant.name, stop_epoch, shape.steps_per_epoch * shape.global_batch)
                    if place.chief
                    else None,
                )
                if callback is not None
            ]
            + [backing_up, throughput]
        )
        started = time.perf_counter()
        model.fit(inputs, epochs=stop_epoch, steps_per_epoch=shape.steps_per_epoch, verbose=2, callbacks=callbacks)
        train_seconds = time.perf_counter() - started
    finally:
        shutil.rmtree(backup_dir, ignore_errors=True)
    validation_seconds = validation.seconds if validation else 0.0
    return _Fitted(resume, attempt, backing_up, throughput, train_seconds, validation_seconds)


def _metrics(
    variant: Variant,
    rung: int,
    model: Any,
    shape: EpochShape,
    fitted: _Fitted,
    validation_examples: int,
    trained_at: str,
) -> WorkerMetrics:
    """This replica's record of the job: what it trained, how fast, on what, and what it cost."""
    return WorkerMetrics(
        variant=variant.name,
        history=fitted.backing_up.history,
        epochs=fitted.resume.epochs_done + fitted.throughput.epochs,
        schedule_epochs=variant.training.epochs,
        rung=rung,
        attempt=fitted.attempt,
        resumed_from_epoch=fitted.resume.epochs_done,
        epochs_trained=fitted.throughput.epochs,
        optimizer_iterations=int(model.optimizer.iterations.numpy()),
        learning_rate=float(model.optimizer.learning_rate.numpy()),
        workers=shape.workers,
        num_replicas_in_sync=shape.replicas,
        global_batch_size=shape.global_batch,
        steps_per_epoch=shape.steps_per_epoch,
        train_examples=shape.train_count,
        train_seconds=fitted.train_seconds,
        backup_seconds=fitted.backing_up.seconds,
        validation_seconds=fitted.validation_seconds,
        validation_examples=validation_examples,
        examples_per_second=fitted.throughput.examples_per_second,
        examples_per_second_steady=fitted.throughput.steady,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        allocator=allocator.in_use(),
        onednn=_onednn_enabled(),
        precision=trained_at,
    )


def _save(
    model: Any,
    chief: bool,
    class_names: list[str],
    store: Store,
    prefix: str,
    metrics: WorkerMetrics,
    variant: Variant,
    finished: bool,
) -> None:
    """Every replica saves (MWMS aggregates variables while saving); only the chief keeps it.

    A later rung replaces an earlier one's model: its metrics go first (the
    variant is incomplete until they are back), the files the new model does
    not have are deleted, and the metrics are written last.
    """
    scratch = Path(tempfile.mkdtemp(prefix="bakeoff-model-"))
    try:
        export(model, scratch / "model", class_names, mirror_average=mirror_averaged(variant.training))
        if chief:
            if store.exists(f"{prefix}/{runs.METRICS}"):
                store.delete(f"{prefix}/{runs.METRICS}")
            model_prefix = f"{prefix}/{runs.MODEL}"
            earlier = set(store.list(model_prefix))
            store.put_dir(scratch / "model", model_prefix)
            written = {
                f"{model_prefix}/{path.relative_to(scratch / 'model').as_posix()}"
                for path in files_below(scratch / "model")
            }
            for key in sorted(earlier - written):
                store.delete(key)
            store.put_bytes(f"{prefix}/{runs.SPEC}", json.dumps(variant.to_dict(), indent=2).encode())
            store.put_bytes(f"{prefix}/{runs.METRICS}", metrics.to_json().encode())  # last: the variant is complete
            if finished:
                backup.remove(store, prefix)  # nothing left to resume; an earlier stop keeps it for the next rung
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bakeoff.components.training.worker", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--variant", required=True, help="the variant spec as JSON")
    parser.add_argument("--data", required=True, help="URI of the ingested dataset")
    parser.add_argument("--store", required=True, help="URI of the object store")
    parser.add_argument("--prefix", required=True, help="key below the store for this variant's outputs")
    parser.add_argument(
        "--max-train-examples", type=int, default=0, help="train on at most this many examples (0: all)"
    )
    parser.add_argument(
        "--stop-epoch",
        type=int,
        default=0,
        help="train until this epoch of the schedule, resuming a backup (0: all epochs)",
    )
    parser.add_argument(
        "--rung", type=int, default=0, help="which rung of a successive-halving search this job is (recorded)"
    )
    args = parser.parse_args(argv)
    with reported():  # TF_CONFIG is set: the program's first lines derived it before TensorFlow loaded
        metrics = train(
            from_dict(json.loads(args.variant)),
            args.data,
            args.store,
            args.prefix,
            args.max_train_examples,
            args.stop_epoch,
            args.rung,
        )
        logger.info("trained %s: %.0f examples/s", metrics.variant, metrics.examples_per_second)
    mark(EXITING)
    return 0


if __name__ == "__main__":
    code = main()
    # The model and metrics are stored: skip the interpreter's teardown, where destroying TensorFlow's objects and
    # thread pools holds each replica of every job a second or more (benchmarks/results.md, "Search").
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
