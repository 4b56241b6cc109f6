"""The worker program: one TFJob replica training a variant under MultiWorkerMirroredStrategy.

Started the same way by the Training Operator, the local backend and the
tests: ``python -m bakeoff.components.training.worker --variant JSON --data URI --store URI --prefix KEY
[--stop-epoch N --rung K]`` with ``TF_CONFIG`` in the environment.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import math
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# Keras 3's model.fit fails under MultiWorkerMirroredStrategy (TF 2.21:
# "Attempt to convert a value (PerReplica...)"); tf-keras trains correctly.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# TensorFlow turns its oneDNN kernels on by itself only on CPUs with AVX512-VNNI,
# AVX512-BF16 or AMX; on AVX2-only CPUs Eigen's kernels train markedly slower
# (benchmarks/results.md). A value the user set wins.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

from bakeoff.components.backends.heartbeat import EXITING, joining, mark, start_heartbeat
from bakeoff.components.tfenv import quiet_tensorflow

if __name__ == "__main__":
    quiet_tensorflow()  # a replica's TensorFlow: the log level, and no CUDA probe where it can only fail
    start_heartbeat()  # before TensorFlow loads: the local backend's watchdog times a replica from its start

import tf_keras as keras

from bakeoff.components import progress
from bakeoff.components.backends import allocator, cluster_spec
from bakeoff.components.data import artifact
from bakeoff.components.errors import BakeoffError, reported
from bakeoff.components.modeling.architectures import ARCHITECTURES
from bakeoff.components.modeling.optimizers import make_optimizer
from bakeoff.components.modeling.savedmodel import export, mirror_averaged, served
from bakeoff.components.spec import Variant, from_dict
from bakeoff.components.storage import Store, open_store, runs
from bakeoff.components.storage.records import VAL_EPOCHS, DatasetMetadata, WorkerMetrics
from bakeoff.components.storage.store import files_below
from bakeoff.components.training import backup, rungs

SHUFFLE_SEED = 1234
VALIDATION_BATCH = 500  # images per forward pass when scoring validation: inference needs no small batches


def _configure_threads() -> None:
    """Applies the thread caps the backend chose, before TensorFlow starts its pools."""
    import tensorflow as tf

    intra = os.environ.get("TF_NUM_INTRAOP_THREADS")
    inter = os.environ.get("TF_NUM_INTEROP_THREADS")
    if intra:
        tf.config.threading.set_intra_op_parallelism_threads(int(intra))
    if inter:
        tf.config.threading.set_inter_op_parallelism_threads(int(inter))


class Throughput(keras.callbacks.Callback):
    """Examples/s from the end of the first execution to the end of training (steady state).

    The first execution traces the graph and waits for every worker to join,
    which says nothing about how fast training runs. A run of one execution
    has no steady state: then the rate is over the whole of ``fit`` and
    ``steady`` is False. Only the epochs this ``fit`` runs count (a resumed
    one skips those done). Seconds spent scoring validation (``paused``)
    do not count: the rate is the training's. The benchmark's plain baseline
    uses the same callback.
    """

    def __init__(self, global_batch: int, paused: Callable[[], float] = lambda: 0.0) -> None:
        super().__init__()
        self.global_batch = global_batch
        self.paused = paused
        self.first_steps, self.epochs, self.begun, self.started, self.ended = 0, 0, 0.0, 0.0, 0.0

    def on_train_begin(self, logs: dict | None = None) -> None:
        self.begun = time.perf_counter()

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.epochs += 1

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        # With steps_per_execution > 1 this runs once per execution; ``batch`` is its last step.
        if not self.first_steps:
            self.first_steps, self.started = batch + 1, time.perf_counter()

    def on_train_end(self, logs: dict | None = None) -> None:
        self.ended = time.perf_counter()

    @property
    def steady(self) -> bool:
        return self.params["steps"] * self.epochs > self.first_steps

    @property
    def examples_per_second(self) -> float:
        steps = self.params["steps"] * self.epochs
        if self.steady:
            return (steps - self.first_steps) * self.global_batch / (self.ended - self.started - self.paused())
        return steps * self.global_batch / (self.ended - self.begun - self.paused())


class SyncOnceModel(keras.Model):
    """A model whose training steps all-reduce only the gradients.

    tf-keras computes every metric's cross-replica result after every step
    (two all-reduces per metric: total and count) and then sums the results
    across workers again: with loss and accuracy, six small all-reduces per
    step besides the gradients', each waiting for the other worker. Only the last
    step's logs of each execution reach the callbacks, and ``fit`` replaces
    them at every epoch's end with the metrics' cross-replica results, so
    steps report this replica's own running values and epochs stay global.

    It also keeps the last input iterator its training function was given,
    so ``fit`` does not delete it on its way out. Under MWMS each worker's
    batches pass through a per-device iterator with tf.data autotuning on
    (tf.distribute builds it with default options); deleting it waits for
    the autotuning thread, which sometimes sleeps through the cancellation
    to its next timed wake-up: up to a minute of a job with nothing running
    (gdb: ``~RootDataset::Iterator`` waiting on ``Model::OptimizeLoop``).
    Kept, it goes when the process does.
    """

    train_function: Callable | None  # tf-keras' own attribute, typed for the override below

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.distribute_reduction_method = "first"  # the logs are this replica's: nothing to sum

    def make_train_function(self, force: bool = False) -> Callable:
        if self.train_function is not None and not force:
            return self.train_function
        step = super().make_train_function(force)
        kept: list = []  # in a closure, not an attribute: Keras would track it, and backups would save it

        def train_function(iterator: Any) -> Any:
            kept[:] = [iterator]
            return step(iterator)

        self.train_function = train_function
        return train_function

    def compute_metrics(self, x: Any, y: Any, y_pred: Any, sample_weight: Any) -> dict:
        self.compiled_metrics.update_state(y, y_pred, sample_weight)
        results: dict = {}
        for metric in self.metrics:
            # A metric instance's ``result`` is wrapped to aggregate across
            # replicas; its class's own ``result`` reads this replica's state.
            result = type(metric).result(metric)
            results.update(result if isinstance(result, dict) else {metric.name: result})
        return results


@contextlib.contextmanager
def averaged_weights(model: Any) -> Iterator[None]:
    """Inside, ``model`` holds its optimizer's moving average of the weights (where it keeps one): what ``fit``
    leaves at its end, so what the export serves; after, the weights as trained again, for the next step and backup."""
    optimizer = model.optimizer
    if not getattr(optimizer, "use_ema", False):
        yield
        return
    variables = model.trainable_variables
    trained = [variable.numpy() for variable in variables]  # every replica holds the same: mirrored
    optimizer.finalize_variable_values(variables)  # tf-keras' own swap at the end of fit
    try:
        yield
    finally:
        for variable, value in zip(variables, trained, strict=True):
            variable.assign(value)


class Validation(keras.callbacks.Callback):
    """Validation loss and accuracy at an epoch's end: each replica scores its own shards, one all-reduce sums them.

    Not ``fit(validation_data=...)``: its evaluation makes a new distributed
    iterator every epoch (deleting one idled replicas for seconds), all-reduces
    every metric after every step, and under ``SyncOnceModel`` reports each
    replica's own numbers. Here every replica scores its part of the split
    with plain forward passes of what the export will serve (the mean over
    both mirrors for a flip-trained variant: rungs rank as selection judges),
    and one all-reduce of (loss sum, correct, count) gives every replica the
    same exact totals over the whole split, whatever the split's size. It runs every ``freq`` epochs and always at
    ``last_epoch``, so a job's record ends with its model's validation numbers;
    it adds ``val_loss``/``val_accuracy`` to the epoch's logs for the callbacks after it.
    """

    def __init__(
        self, strategy: Any, images: Any, labels: Any, freq: int, last_epoch: int, mirror_average: bool
    ) -> None:
        super().__init__()
        self.strategy, self.images, self.labels = strategy, images, labels.astype("int64")
        self.freq, self.last_epoch, self.mirror_average = freq, last_epoch, mirror_average
        self.seconds = 0.0  # spent scoring: what validation costs the training
        self._sums: Any = None  # tf.functions, made once the model is set
        self._all_reduce: Any = None

    def set_model(self, model: Any) -> None:
        import tensorflow as tf

        super().set_model(model)
        strategy = self.strategy

        @tf.function(
            input_signature=[
                tf.TensorSpec([None, *self.images.shape[1:]], tf.as_dtype(self.images.dtype)),
                tf.TensorSpec([None], tf.int64),
            ]
        )
        def sums(images: Any, labels: Any) -> Any:
            probabilities = served(model, tf.cast(images, tf.float32), self.mirror_average)
            losses = keras.losses.sparse_categorical_crossentropy(
                labels, probabilities
            )  # as compile's loss computes it
            correct = tf.equal(tf.argmax(probabilities, axis=-1), labels)
            return tf.stack([tf.reduce_sum(tf.cast(losses, tf.float64)), tf.reduce_sum(tf.cast(correct, tf.float64))])

        @tf.function
        def all_reduce(values: Any) -> Any:
            def replica(value: Any) -> Any:
                # A copy made on the replica's device: all_reduce sends its result where its input lives.
                return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(value))

            total = strategy.run(replica, args=(values,))
            return strategy.experimental_local_results(total)[0]

        self._sums, self._all_reduce = sums, all_reduce

    def due(self, epoch: int) -> bool:
        """Whether validation runs at the end of 0-based ``epoch``."""
        return (epoch + 1) % self.freq == 0 or epoch + 1 == self.last_epoch

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        import numpy as np
        import tensorflow as tf

        if not self.due(epoch):
            return
        started = time.perf_counter()
        local = np.zeros(3)
        with averaged_weights(self.model):
            for start in range(0, len(self.labels), VALIDATION_BATCH):
                batch = slice(start, start + VALIDATION_BATCH)
                local[:2] += self._sums(self.images[batch], self.labels[batch]).numpy()
        local[2] = len(self.labels)
        loss, correct, count = self._all_reduce(tf.constant(local)).numpy()
        if logs is not None:  # the progress bar's epoch line, printed at the end, shows them too
            logs.update(val_loss=float(loss / count), val_accuracy=float(correct / count))
        self.seconds += time.perf_counter() - started


class Progress(keras.callbacks.Callback):
    """The chief's progress events for a live display (``bakeoff.components.progress``), one per epoch end."""

    def __init__(self, variant: str, epochs: int, examples_per_epoch: int) -> None:
        super().__init__()
        self.variant, self.epochs, self.examples_per_epoch = variant, epochs, examples_per_epoch
        self.begun = self.trained = 0.0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.begun = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.trained = time.perf_counter()  # the epoch's last call ends its training, before validation and backups

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        logs = logs or {}

        def number(key: str) -> float | None:  # Keras' logs name its metrics; validation's only on validated epochs
            return float(logs[key]) if key in logs else None

        rate = self.examples_per_epoch / max(self.trained - self.begun, 1e-9)
        event = progress.Event(
            "training",
            epoch=epoch + 1,
            epochs=self.epochs,
            loss=number("loss"),
            accuracy=number("accuracy"),
            val_loss=number("val_loss"),
            val_accuracy=number("val_accuracy"),
            examples_per_second=rate,
        )
        progress.emit(self.variant, event)


class StoreBackup(keras.callbacks.BackupAndRestore):
    """tf-keras' BackupAndRestore into a local folder, whose chief copy goes to the store after every epoch.

    Every replica saves (MWMS reduces variables while saving; non-chiefs write
    to a temporary folder tf-keras removes) and every replica restores from
    ``backup_dir/chief``, which ``restore`` filled from the store before ``fit``.
    The checkpoint holds the model, the optimizer (its iterations drive the
    learning-rate schedule) and the epoch; ``fit`` resumes after that epoch.
    """

    def __init__(
        self, backup_dir: Path, store: Store, prefix: str, digest: str, chief: bool, resume: backup.Resume
    ) -> None:
        super().__init__(backup_dir=str(backup_dir), save_freq="epoch", delete_checkpoint=True)
        self.local = backup_dir
        self.store, self.prefix, self.digest, self.chief = store, prefix, digest, chief
        self.history = {key: list(values) for key, values in resume.history.items()}
        self.seconds = 0.0  # spent backing up: what fault tolerance costs the training

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        started = time.perf_counter()
        super().on_epoch_end(epoch, logs)
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(float(value))
        if logs and "val_loss" in logs:  # validated this epoch: the val_* lists are as long as val_epochs
            self.history.setdefault(VAL_EPOCHS, []).append(epoch + 1)
        if self.chief:
            backup.upload(self.store, self.prefix, self.digest, self.local / backup.READ_DIR, epoch + 1, self.history)
        self.seconds += time.perf_counter() - started


def _onednn_enabled() -> bool:
    """Whether TensorFlow runs its oneDNN kernels in this process (the setting and the CPU decide)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def _random_flip(images: Any, labels: Any) -> tuple[Any, Any]:
    """Mirrors a random half of a batch left-right: cheap augmentation against overfitting."""
    import tensorflow as tf

    flip = tf.random.uniform([tf.shape(images)[0]] + [1] * (images.shape.rank - 1)) < 0.5  # [n, 1, 1(, 1)]
    return tf.where(flip, tf.reverse(images, axis=[2]), images), labels


def _random_shift(pixels: int) -> Callable[[Any, Any], tuple[Any, Any]]:
    """Moves each image of a batch by its own draw of up to ``pixels`` each way, filling with background (0)."""
    import tensorflow as tf

    def shift(images: Any, labels: Any) -> tuple[Any, Any]:
        count, height, width = tf.shape(images)[0], tf.shape(images)[1], tf.shape(images)[2]
        channels = [[0, 0]] * (images.shape.rank - 3)  # none for [n, h, w], one for [n, h, w, c]
        padded = tf.pad(images, [[0, 0], [pixels, pixels], [pixels, pixels], *channels])
        offsets = tf.random.uniform([2, count, 1], 0, 2 * pixels + 1, tf.int32)
        rows = tf.gather(padded, offsets[0] + tf.range(height), axis=1, batch_dims=1)
        return tf.gather(rows, offsets[1] + tf.range(width), axis=2, batch_dims=1), labels

    return shift


def _is_chief(resolver: Any) -> bool:
    """MWMS's rule: the chief replica, or worker 0 when there is no chief."""
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief"):
        return True
    return task_type == "worker" and task_id == 0 and "chief" not in resolver.cluster_spec().as_dict()


@dataclasses.dataclass(frozen=True)
class EpochShape:
    """How a job divides its training: workers and replicas, the global batch, the examples and steps of an epoch."""

    workers: int
    replicas: int
    global_batch: int
    train_count: int
    steps_per_epoch: int


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
    model = compiled_model(variant, strategy, metadata, shape.steps_per_epoch)
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
    metrics = _metrics(variant, rung, model, shape, fitted, metadata.counts.get("validation", 0))
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


def epoch_shape(variant: Variant, strategy: Any, train_examples: int, max_train_examples: int) -> EpochShape:
    """The job's shape over ``train_examples`` (at most ``max_train_examples``, 0: all); one line if they make no
    full global batch."""
    replicas = strategy.num_replicas_in_sync
    global_batch = variant.training.batch_size * replicas
    train_count = min(train_examples, max_train_examples) if max_train_examples else train_examples
    steps_per_epoch = train_count // global_batch
    if steps_per_epoch < 1:
        raise BakeoffError(
            f"variant {variant.name!r}: {train_count} training examples make no full global batch of {global_batch}:"
            " raise --max-train-examples or lower training.batch_size"
        )
    workers = len(strategy.cluster_resolver.cluster_spec().as_dict().get("worker", [])) or 1
    return EpochShape(workers, replicas, global_batch, train_count, steps_per_epoch)


def compiled_model(variant: Variant, strategy: Any, metadata: DatasetMetadata, steps_per_epoch: int) -> Any:
    """The variant's model, built and compiled in ``strategy``'s scope, its learning rate scheduled over every
    epoch."""
    training = variant.training
    with strategy.scope():
        architecture = ARCHITECTURES[variant.architecture]
        built = architecture.build(tuple(metadata.image_shape), len(metadata.class_names), variant.model_config())
        model = SyncOnceModel(built.inputs, built.outputs, name=built.name)
        model.compile(
            optimizer=make_optimizer(
                training.optimizer,
                training.learning_rate,
                training.schedule,
                steps_per_epoch * training.epochs,
                training.epochs,
                training.ema_momentum,
            ),
            loss="sparse_categorical_crossentropy",
            metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
            # Many steps per call into the graph: per-step Python and
            # coordination overhead is otherwise a large part of a small step.
            steps_per_execution=training.steps_per_execution,
        )
        # Its slots and the metric's totals made here, not in the first step: tf.function traces a step that creates
        # variables twice (a second of every job's start).
        model.optimizer.build(model.trainable_variables)
    return model


def distributed_inputs(variant: Variant, strategy: Any, data: Store, shape: EpochShape) -> Any:
    """The training batches, distributed: each input pipeline shuffles and batches shards of its own, endlessly."""
    import tensorflow as tf

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        # Each input pipeline reads whole shard files of its own: no worker
        # reads (and throws away) the others' data.
        part = artifact.read_shards(data, "train", context.input_pipeline_id, context.num_input_pipelines)
        limit = math.ceil(shape.train_count / context.num_input_pipelines)
        images, labels = part.images[:limit], part.labels[:limit]
        batches = (
            tf.data.Dataset.from_tensor_slices((images, labels))
            .shuffle(len(labels), seed=SHUFFLE_SEED + context.input_pipeline_id, reshuffle_each_iteration=True)
            .repeat()
            .batch(context.get_per_replica_batch_size(shape.global_batch), drop_remainder=True)
        )
        if variant.training.random_flip:
            batches = batches.map(_random_flip, num_parallel_calls=tf.data.AUTOTUNE)
        if variant.training.random_shift:
            batches = batches.map(_random_shift(variant.training.random_shift), num_parallel_calls=tf.data.AUTOTUNE)
        # No tf.data autotuning: at the end of fit, deleting an autotuned
        # iterator waits for one of its background threads, idling both replicas
        # for seconds (py-spy: ~RootDataset::Iterator in ~LogicalThreadWrapper).
        # Fixed buffers train as fast.
        options = tf.data.Options()
        options.autotune.enabled = False
        return batches.prefetch(2).with_options(options)

    # No per-replica prefetch on top of the pipeline's own: on a CPU replica it
    # only adds a thread, and deleting it at the end of fit can keep a replica waiting.
    no_device_prefetch = tf.distribute.InputOptions(experimental_per_replica_buffer_size=0)
    return strategy.distribute_datasets_from_function(dataset_fn, no_device_prefetch)


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
            print(
                f"resuming after epoch {resume.epochs_done} of {variant.training.epochs} from the backup",
                file=sys.stderr,
                flush=True,
            )
        backing_up = StoreBackup(backup_dir, place.store, place.prefix, place.digest, place.chief, resume)
        throughput = Throughput(shape.global_batch, paused=lambda: validation.seconds if validation else 0.0)
        # Validation first: the callbacks after it find its numbers in the epoch's logs.
        callbacks = [
            callback
            for callback in (
                validation,
                Progress(variant.name, stop_epoch, shape.steps_per_epoch * shape.global_batch) if place.chief else None,
            )
            if callback is not None
        ] + [backing_up, throughput]
        started = time.perf_counter()
        model.fit(inputs, epochs=stop_epoch, steps_per_epoch=shape.steps_per_epoch, verbose=2, callbacks=callbacks)
        train_seconds = time.perf_counter() - started
    finally:
        shutil.rmtree(backup_dir, ignore_errors=True)
    validation_seconds = validation.seconds if validation else 0.0
    return _Fitted(resume, attempt, backing_up, throughput, train_seconds, validation_seconds)


def _metrics(
    variant: Variant, rung: int, model: Any, shape: EpochShape, fitted: _Fitted, validation_examples: int
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
    with reported():
        cluster_spec.ensure_tf_config()  # under Trainer v2's PlainML nobody else sets it
        metrics = train(
            from_dict(json.loads(args.variant)),
            args.data,
            args.store,
            args.prefix,
            args.max_train_examples,
            args.stop_epoch,
            args.rung,
        )
        print(f"trained {metrics.variant}: {metrics.examples_per_second:.0f} examples/s", file=sys.stderr)
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
