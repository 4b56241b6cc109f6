"""The model a replica trains: ``SyncOnceModel`` (only the gradients all-reduced), built and compiled for a variant.

tf-keras is imported here as the worker imports it: ``worker.py`` sets its environment first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tf_keras as keras

from bakeoff.components.modeling.architectures import ARCHITECTURES
from bakeoff.components.modeling.optimizers import make_optimizer
from bakeoff.components.modeling.precision import FLOAT32, policy
from bakeoff.components.spec import Variant
from bakeoff.components.storage.records import DatasetMetadata


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


def compiled_model(
    variant: Variant, strategy: Any, metadata: DatasetMetadata, steps_per_epoch: int, precision: str = FLOAT32
) -> Any:
    """The variant's model, built and compiled in ``strategy``'s scope at ``precision`` (a resolved one), its learning
    rate scheduled over every epoch and its family's rate factors applied."""
    training = variant.training
    architecture, config = ARCHITECTURES[variant.architecture], variant.model_config()
    with strategy.scope(), policy(precision):
        built = architecture.build(tuple(metadata.image_shape), len(metadata.class_names), config)
        model = SyncOnceModel(built.inputs, built.outputs, name=built.name)
        model.compile(
            optimizer=make_optimizer(
                training.optimizer,
                training.learning_rate,
                training.schedule,
                steps_per_epoch * training.epochs,
                training.epochs,
                training.ema_momentum,
                architecture.rate_factors(model, config),
            ),
            loss="sparse_categorical_crossentropy",
            metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
            # Many steps per call into the graph: per-step Python and
            # coordination overhead is otherwise a large part of a small step.
            steps_per_execution=training.steps_per_execution,
        )
        # Its slots and the metric's totals made here, not in the first step: tf.function traces a step that creates
        # variables twice (a second of every job's start). Every variable's, a frozen one's too: it trains later.
        model.optimizer.build(model.trainable_variables)
    return model


def family_hooks(variant: Variant, model: Any) -> list:
    """The Keras callbacks the variant's family trains with (a backbone's freeze schedule); none for most."""
    return ARCHITECTURES[variant.architecture].hooks(model, variant.model_config())
