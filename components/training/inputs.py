"""A replica's training input: the job's epoch shape and its distributed, shuffled, augmented batches."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from bakeoff.components.data import artifact
from bakeoff.components.errors import BakeoffError
from bakeoff.components.spec import Variant
from bakeoff.components.storage import Store
from bakeoff.components.training import augment

SHUFFLE_SEED = 1234
SHUFFLE_BYTES = 64 * 2**20  # the most pixels a pipeline shuffles among: the whole part of a small dataset
SHARDS_OPEN = 2  # shard files a pipeline reads at once, interleaved
CHUNK_EXAMPLES = 512  # examples read from a shard file at a time


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
    """The training batches, distributed: each input pipeline streams shards of its own, shuffles and batches them,
    endlessly."""
    import tensorflow as tf

    metadata = artifact.read_metadata(data)
    image_shape = tuple(metadata.image_shape)
    labels_type = tf.as_dtype(artifact.label_dtype(len(metadata.class_names)))

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        # Each input pipeline reads whole shard files of its own: no worker
        # reads (and throws away) the others' data.
        keys = artifact.shard_keys(data, "train", context.input_pipeline_id, context.num_input_pipelines)
        limit = math.ceil(shape.train_count / context.num_input_pipelines)
        examples = streamed(data, keys, image_shape, labels_type).take(limit)
        buffer = shuffle_buffer(limit, int(np.prod(image_shape)), shape.global_batch)
        batches = (
            examples.shuffle(buffer, seed=SHUFFLE_SEED + context.input_pipeline_id, reshuffle_each_iteration=True)
            .repeat()
            .batch(context.get_per_replica_batch_size(shape.global_batch), drop_remainder=True)
        )
        batches = augment.augmented(batches, variant.training)
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


def shuffle_buffer(examples: int, values: int, global_batch: int) -> int:
    """The examples a pipeline shuffles among: all of its ``examples`` where they fit ``SHUFFLE_BYTES`` (of
    ``values`` bytes each: Fashion-MNIST's part does, and is shuffled whole as before), else as many as do, and never
    fewer than a global batch. Ingest shuffled the examples across the shards already."""
    return max(1, min(examples, max(global_batch, SHUFFLE_BYTES // max(values, 1))))


def streamed(data: Store, keys: list[str], image_shape: tuple[int, ...], labels_type: Any) -> Any:
    """The examples of the shard files ``keys``, in a fixed order: ``SHARDS_OPEN`` shards read at once, interleaved
    ``CHUNK_EXAMPLES`` at a time, each read a chunk at a time (``artifact.shard_chunks``), so a pipeline holds a few
    chunks, not its part; read again each epoch."""
    import tensorflow as tf

    signature = (
        tf.TensorSpec([None, *image_shape], tf.uint8),
        tf.TensorSpec([None], labels_type),
    )

    def shard(key: Any) -> tf.data.Dataset:
        return tf.data.Dataset.from_generator(
            lambda name: artifact.shard_chunks(data, name.decode(), CHUNK_EXAMPLES),
            output_signature=signature,
            args=(key,),
        )

    return (
        tf.data.Dataset.from_tensor_slices(keys)
        .interleave(shard, cycle_length=min(SHARDS_OPEN, len(keys)), block_length=1)
        .unbatch()
    )
