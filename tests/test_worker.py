"""A real 2-worker MultiWorkerMirroredStrategy job on a small subset, and the model it exports."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from components.data import artifact as dataset
from components.modeling import evaluation, savedmodel
from components.backends.local import LocalBackend
from components.storage import open_store
from components.training.tfjob import build_tfjob, worker_args
from components.spec import from_dict

SMALL_CNN = {"name": "small", "model": {"type": "cnn", "filters": [8, 16], "dense_units": 32},
             "training": {"epochs": 2, "batch_size": 32, "random_flip": True}, "workers": 2}


@pytest.fixture(scope="module")
def trained(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    store_dir = tmp_path_factory.mktemp("store")
    variant = from_dict(SMALL_CNN)
    store = open_store(str(store_dir))
    job = build_tfjob(variant, name="small-test", image="unused",
                      args=worker_args(variant, str(small_dataset), store.uri, "runs/t/small", 4096), env={})
    lines: list[str] = []
    LocalBackend(sink=lines.append).run(job)
    return store_dir / "runs/t/small", lines


def test_both_replicas_train_in_sync(trained: tuple[Path, list[str]]) -> None:
    out, lines = trained
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["num_replicas_in_sync"] == 2 and metrics["workers"] == 2
    assert metrics["global_batch_size"] == 64 and metrics["steps_per_epoch"] == 4096 // 64
    assert len(metrics["history"]["loss"]) == 2
    for index in (0, 1):
        assert any(line.startswith(f"[small-test-worker-{index}] 64/64") for line in lines), f"worker {index} did not train"


def test_every_replica_reports_the_global_epoch_metrics(trained: tuple[Path, list[str]]) -> None:
    """Steps log each replica's own metrics (no all-reduce); each epoch's line and History are cross-replica."""
    out, lines = trained
    epochs = {index: [re.search(r"loss: (\S+) - accuracy: (\S+)", line).groups()
                      for line in lines if line.startswith(f"[small-test-worker-{index}] 64/64")]
              for index in (0, 1)}
    history = json.loads((out / "metrics.json").read_text())["history"]
    assert epochs[0] == epochs[1] == [(f"{loss:.4f}", f"{accuracy:.4f}")
                                      for loss, accuracy in zip(history["loss"], history["accuracy"])]


def test_replicas_train_on_tcmalloc(trained: tuple[Path, list[str]]) -> None:
    """The default malloc halves a 2-worker job's speed; `make test` installs tcmalloc, so it must be in use."""
    out, lines = trained
    assert json.loads((out / "metrics.json").read_text())["allocator"] == "tcmalloc"
    assert not any("tcmalloc not found" in line for line in lines)


def test_replicas_run_onednn_kernels(trained: tuple[Path, list[str]]) -> None:
    """TensorFlow leaves oneDNN off on AVX2-only CPUs, where it trains ~25 % faster; the worker turns it on."""
    out, _ = trained
    assert json.loads((out / "metrics.json").read_text())["onednn"] is True


def test_only_the_chief_keeps_a_model(trained: tuple[Path, list[str]]) -> None:
    out, _ = trained
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json", "model", "variant.json"]
    assert json.loads((out / "variant.json").read_text())["name"] == "small"


def test_exported_model_predicts_real_test_images(trained: tuple[Path, list[str]], small_dataset: Path) -> None:
    out, _ = trained
    test = dataset.read_shards(open_store(str(small_dataset)), "test")
    result = evaluation.evaluate(out / "model", test.images[:2000], test.labels[:2000])
    assert result["accuracy"] > 0.6  # ten classes: chance is 0.1


def test_a_model_trained_on_flips_serves_the_same_prediction_for_an_image_and_its_mirror(
        trained: tuple[Path, list[str]], small_dataset: Path) -> None:
    import tensorflow as tf

    out, _ = trained
    images = dataset.read_shards(open_store(str(small_dataset)), "test").images[:256].astype(np.float32)
    serve = tf.saved_model.load(str(out / "model")).signatures[savedmodel.ARRAYS_SIGNATURE]
    probabilities = serve(images=tf.constant(images))["probabilities"].numpy()
    mirrored = serve(images=tf.constant(images[:, :, ::-1].copy()))["probabilities"].numpy()
    np.testing.assert_allclose(mirrored, probabilities, atol=1e-6)


def test_serving_accepts_encoded_images(trained: tuple[Path, list[str]], small_dataset: Path) -> None:
    import tensorflow as tf

    out, _ = trained
    test = dataset.read_shards(open_store(str(small_dataset)), "test")
    images = test.images[:64]
    loaded = tf.saved_model.load(str(out / "model"))
    encoded = tf.stack([tf.io.encode_png(image[:, :, None]) for image in images])
    from_bytes = loaded.signatures[savedmodel.BYTES_SIGNATURE](image_bytes=encoded)
    from_arrays = loaded.signatures[savedmodel.ARRAYS_SIGNATURE](images=tf.constant(images, tf.float32))
    assert np.array_equal(from_bytes["class_id"].numpy(), from_arrays["class_id"].numpy())
    names = from_bytes["class_name"].numpy()
    assert names[0].decode() in json.loads((small_dataset / "metadata.json").read_text())["class_names"]


def test_random_flip_mirrors_some_images_and_keeps_labels(small_dataset: Path) -> None:
    import tensorflow as tf

    from components.training.worker import _random_flip

    images = dataset.read_shards(open_store(str(small_dataset)), "test").images[:256]
    labels = np.arange(256)
    flipped, same_labels = _random_flip(tf.constant(images), tf.constant(labels))
    flipped = flipped.numpy()
    mirrored = [np.array_equal(out, image[:, ::-1]) and not np.array_equal(out, image) for out, image in zip(flipped, images)]
    kept = [np.array_equal(out, image) for out, image in zip(flipped, images)]
    assert all(m or k for m, k in zip(mirrored, kept))
    assert 64 < sum(mirrored) < 192  # about half, for 256 images
    assert np.array_equal(same_labels.numpy(), labels)
