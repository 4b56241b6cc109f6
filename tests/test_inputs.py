"""A replica's training input streams its shard files: every example of its part, in a fixed order, a chunk at a
time, shuffled within a bounded buffer; the limit on an epoch's examples and the per-pipeline split kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bakeoff.components.data import artifact
from bakeoff.components.data.fashion_mnist import Split
from bakeoff.components.storage import Store
from bakeoff.components.training import inputs

pytestmark = pytest.mark.unit

SHAPE = (6, 5, 3)


def numbered(count: int) -> Split:
    """``count`` images whose first two pixels spell their index: the examples can be told apart after a shuffle."""
    images = np.zeros((count, *SHAPE), dtype=np.uint8)
    images[:, 0, 0, 0], images[:, 0, 1, 0] = np.arange(count) % 256, np.arange(count) // 256
    return Split(images, np.arange(count) % 3)


def index_of(images: np.ndarray) -> np.ndarray:
    return images[:, 0, 0, 0].astype(int) + 256 * images[:, 0, 1, 0].astype(int)


def artifact_in(store: Store, tmp_path: Path, train: int, shards: int) -> Store:
    """An artifact of ``numbered(train)`` training examples in ``shards`` shards, written into ``store``."""
    local = tmp_path / "local"
    splits = {"train": numbered(train), "validation": numbered(8), "test": numbered(8)}
    artifact.write(splits, local, shards, ["a", "b", "c"], "numbered")
    for path in sorted(local.iterdir()):
        store.put_bytes(path.name, path.read_bytes())
    return store


def test_a_shard_is_read_a_chunk_at_a_time_as_it_was_written(store: Store, tmp_path: Path) -> None:
    """From a folder store, the file read in chunks; from S3, the object fetched whole: the same examples either way."""
    artifact_in(store, tmp_path, train=1000, shards=3)
    keys = artifact.shard_keys(store, "train", 1, 2)
    assert keys == ["train-00001-of-00003.npz"]
    whole = artifact.read_shards(store, "train", 1, 2)
    for chunk in (1, 7, 333, 334, 5000):
        parts = list(artifact.shard_chunks(store, keys[0], chunk))
        assert all(len(images) == len(labels) <= chunk for images, labels in parts)
        assert np.array_equal(np.concatenate([images for images, _ in parts]), whole.images)
        assert np.array_equal(np.concatenate([labels for _, labels in parts]), whole.labels)


def test_a_small_part_is_shuffled_whole_and_a_large_one_within_a_bounded_buffer() -> None:
    """Fashion-MNIST's part of 27,500 images of 784 bytes is shuffled whole, as before; 96x96 RGB images are shuffled
    among as many as fit SHUFFLE_BYTES, the same at any dataset size; never among fewer than a global batch."""
    assert inputs.shuffle_buffer(27500, 28 * 28, 128) == 27500
    bounded = inputs.SHUFFLE_BYTES // (96 * 96 * 3)
    assert inputs.shuffle_buffer(10000, 96 * 96 * 3, 128) == inputs.shuffle_buffer(20000, 96 * 96 * 3, 128) == bounded
    assert inputs.shuffle_buffer(10**6, 1024 * 1024 * 3, 128) == 128


@pytest.mark.long_running
def test_each_pipeline_streams_its_own_shards_and_trains_on_its_first_limit_examples_reshuffled(
    tmp_path: Path,
) -> None:
    """Two input pipelines read disjoint shard files, together every example, each in a fixed order. One pipeline
    limited to 700 examples draws whole batches of those 700 only, each of them once before any again, and in
    another order the next time round."""
    from bakeoff.components.spec import from_dict
    from bakeoff.components.storage import open_store
    from bakeoff.components.tfenv import import_tensorflow

    import_tensorflow()
    import tensorflow as tf

    store = artifact_in(open_store(f"file://{tmp_path / 'data'}"), tmp_path, train=2000, shards=4)
    labels_type = tf.as_dtype(artifact.label_dtype(3))

    def indexes(keys: list[str], count: int = 2000) -> list[int]:
        examples = inputs.streamed(store, keys, SHAPE, labels_type).take(count).batch(256)
        return [int(index) for images, _ in examples for index in index_of(images.numpy())]

    parts = [indexes(artifact.shard_keys(store, "train", pipeline, 2)) for pipeline in range(2)]
    assert parts[0] == indexes(artifact.shard_keys(store, "train", 0, 2))  # the same order each time
    assert sorted(parts[0] + parts[1]) == list(range(2000)) and not set(parts[0]) & set(parts[1])

    variant = from_dict({"name": "v", "model": {"type": "mlp"}, "training": {"batch_size": 50}, "workers": 1})
    shape = inputs.EpochShape(1, 1, 50, 700, 700 // 50)
    batches = iter(inputs.distributed_inputs(variant, tf.distribute.get_strategy(), store, shape))
    drawn = [index_of(next(batches)[0].numpy()) for _ in range(28)]  # two rounds of the 700
    assert all(len(batch) == 50 for batch in drawn)
    first, second = np.concatenate(drawn[:14]), np.concatenate(drawn[14:])
    head = set(indexes(artifact.shard_keys(store, "train"), 700))
    assert set(first) == set(second) == head and len(first) == 700
    assert not np.array_equal(first, second)
