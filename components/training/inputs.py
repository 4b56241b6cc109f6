"""A replica's training input: the job's epoch shape and its distributed, shuffled, augmented batches."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from bakeoff.components.data import artifact
from bakeoff.components.errors import BakeoffError
from bakeoff.components.spec import Variant
from bakeoff.components.storage import Store

SHUFFLE_SEED = 1234


@dataclasses.dataclass(frozen=True)
class EpochShape:
    """How a job divides its training: workers and replicas, the global batch, the examples and steps of an epoch."""

    workers: int
    replicas: int
    global_batch: int
    train_count: int
    steps_per_epoch: int


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


def _random_flip(images: Any, labels: Any) -> tuple[Any, Any]:
    """Mirrors a random half of a batch left-right: cheap augmentation against overfitting."""
    import tensorflow as tf

    # [n, 1, 1] or [n, 1, 1, 1]: one draw per image, whether the batch carries a channel axis or not
    flip = tf.random.uniform([tf.shape(images)[0], *[1] * (images.shape.rank - 1)]) < 0.5
    return tf.where(flip, tf.reverse(images, axis=[2]), images), labels


def _random_shift(pixels: int) -> Callable[[Any, Any], tuple[Any, Any]]:
    """Moves each image of a batch by its own draw of up to ``pixels`` each way, filling with background (0)."""
    import tensorflow as tf

    def shift(images: Any, labels: Any) -> tuple[Any, Any]:
        count, height, width = tf.shape(images)[0], tf.shape(images)[1], tf.shape(images)[2]
        channels = [[0, 0]] * (images.shape.rank - 3)  # an artifact's images carry a channel axis: not padded
        padded = tf.pad(images, [[0, 0], [pixels, pixels], [pixels, pixels], *channels])
        offsets = tf.random.uniform([2, count, 1], 0, 2 * pixels + 1, tf.int32)
        rows = tf.gather(padded, offsets[0] + tf.range(height), axis=1, batch_dims=1)
        return tf.gather(rows, offsets[1] + tf.range(width), axis=2, batch_dims=1), labels

    return shift
