"""The Keras callbacks a replica's ``fit`` runs: throughput, validation, progress events and per-epoch backups.

tf-keras is imported here as the worker imports it: ``worker.py`` sets its environment (legacy Keras, oneDNN)
before any of these modules load.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import tf_keras as keras

from bakeoff.components import progress
from bakeoff.components.modeling.savedmodel import served
from bakeoff.components.storage import Store
from bakeoff.components.storage.records import VAL_EPOCHS
from bakeoff.components.training import backup

VALIDATION_BATCH = 500  # images per forward pass when scoring validation: inference needs no small batches


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


class EpochProgress(keras.callbacks.Callback):
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
