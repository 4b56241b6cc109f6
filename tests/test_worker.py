"""A real 2-worker MultiWorkerMirroredStrategy job on a small subset, and the model it exports."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bakeoff.components import tfenv
from bakeoff.components.backends.local import LocalBackend
from bakeoff.components.data import artifact as dataset
from bakeoff.components.data import fashion_mnist
from bakeoff.components.environment import S3_ENDPOINT_ENV, S3_INSECURE_ENV
from bakeoff.components.modeling import evaluation, savedmodel
from bakeoff.components.spec import from_dict
from bakeoff.components.storage import open_store
from bakeoff.components.storage.records import Preprocessing, WorkerMetrics
from bakeoff.components.training.tfjob import build_tfjob, worker_args

SMALL_CNN = {
    "name": "small",
    "model": {"type": "cnn", "filters": [8, 16], "dense_units": 32},
    "training": {"epochs": 2, "batch_size": 32, "random_flip": True},
    "workers": 2,
}
# A bucket of its own with versioning on: every write of a key leaves a version behind.
VERSIONED_BUCKET = "bakeoff-versioned"
GRAY = Preprocessing(28, 28, 1, "none")  # Fashion-MNIST as ingest reads it
HALF = 2048  # training examples per shard of the halves dataset


@dataclasses.dataclass(frozen=True)
class Trained:
    out: Path  # the variant's outputs, downloaded from the store
    data: Path  # the halves dataset it trained and validated on
    lines: list[str]  # every replica's log, as the backend's sink got it
    versions: dict[str, int]  # key below the variant's prefix → how many times it was written


def halves_dataset(fashion_dir: Path, out: Path) -> Path:
    """An artifact of 2 train shards of real images: shard 0 holds only classes 0-4, shard 1 only classes 5-9."""
    original = fashion_mnist.read_idx_dir(fashion_dir)
    labels = original["train"].labels
    order = np.concatenate([np.flatnonzero(labels < 5)[:HALF], np.flatnonzero(labels >= 5)[:HALF]])
    rest = np.setdiff1d(np.arange(len(labels)), order)[:1000]
    splits = {
        "train": fashion_mnist.Split(original["train"].images[order], labels[order]),
        "validation": fashion_mnist.Split(original["train"].images[rest], labels[rest]),
        "test": original["test"],
    }
    dataset.write(splits, out, shards=2, names=fashion_mnist.class_names(), source=str(fashion_dir))
    halves = [dataset.read_shards(open_store(str(out)), "train", index, 2).labels for index in (0, 1)]
    assert halves[0].max() == 4 and halves[1].min() == 5  # the premise: each shard holds half of the classes
    return out


@pytest.fixture(scope="module")
def trained(
    fashion_dir: Path, s3_server: tuple[str, dict[str, str]], tmp_path_factory: pytest.TempPathFactory
) -> Trained:
    """The small CNN trained by a 2-worker job on the halves dataset, its outputs in a versioned S3 bucket."""
    import boto3

    endpoint, keys = s3_server
    data = halves_dataset(fashion_dir, tmp_path_factory.mktemp("halves"))
    s3 = boto3.client(
        "s3",
        endpoint_url=f"http://{endpoint}",
        region_name="us-east-1",
        aws_access_key_id=keys["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=keys["AWS_SECRET_ACCESS_KEY"],
    )
    s3.create_bucket(Bucket=VERSIONED_BUCKET)
    s3.put_bucket_versioning(Bucket=VERSIONED_BUCKET, VersioningConfiguration={"Status": "Enabled"})
    variant = from_dict(SMALL_CNN)
    lines: list[str] = []
    with pytest.MonkeyPatch.context() as env:  # the replicas inherit the store's settings from the environment
        for key, value in {**keys, S3_ENDPOINT_ENV: endpoint, S3_INSECURE_ENV: "1"}.items():
            env.setenv(key, value)
        env.delenv(tfenv.DEVICES_ENV, raising=False)  # what the worker sets, not this process
        store = open_store(f"s3://{VERSIONED_BUCKET}/runs")
        job = build_tfjob(
            variant,
            name="small-test",
            image="unused",
            args=worker_args(variant, str(data), store.uri, "t/small", 2 * HALF),
            env={},
        )
        LocalBackend(sink=lines.append).run(job)
        out = store.get_dir("t/small", tmp_path_factory.mktemp("out"))
    listed = s3.list_object_versions(Bucket=VERSIONED_BUCKET, Prefix="runs/t/small/")
    assert not listed["IsTruncated"]
    versions = collections.Counter(version["Key"][len("runs/t/small/") :] for version in listed["Versions"])
    return Trained(out, data, lines, dict(versions))


def written_metrics(trained: Trained) -> WorkerMetrics:
    return WorkerMetrics.from_json((trained.out / "metrics.json").read_text(), "metrics.json")


@pytest.mark.training
def test_both_replicas_train_in_sync(trained: Trained) -> None:
    metrics = written_metrics(trained)
    assert metrics.num_replicas_in_sync == 2 and metrics.workers == 2
    assert metrics.global_batch_size == 64 and metrics.steps_per_epoch == 4096 // 64
    assert len(metrics.history["loss"]) == 2
    for index in (0, 1):
        assert any(line.startswith(f"[small-test-worker-{index}] 64/64") for line in trained.lines), (
            f"worker {index} did not train"
        )


@pytest.mark.training
def test_the_replicas_read_disjoint_shards_that_together_cover_the_training_data(
    trained: Trained, small_dataset: Path
) -> None:
    """Each replica trains on its own shard: shards of classes 0-4 and of 5-9 give a model that knows all ten."""
    test = dataset.read_shards(open_store(str(small_dataset)), "test")
    accuracy = {
        name: evaluation.evaluate(trained.out / "model", test.images[half], test.labels[half])["accuracy"]
        for name, half in (("classes 0-4", test.labels < 5), ("classes 5-9", test.labels >= 5))
    }
    assert min(accuracy.values()) > 0.5, accuracy  # a half no replica read scores about 0


def _matched(pattern: str, line: str) -> re.Match[str]:
    match = re.search(pattern, line)
    assert match, f"{pattern!r} not in {line!r}"
    return match


@pytest.mark.training
def test_every_replica_reports_the_global_epoch_metrics(trained: Trained) -> None:
    """Steps log each replica's own metrics (no all-reduce); each epoch's line and History are cross-replica."""
    epochs = {
        index: [
            _matched(r"loss: (\S+) - accuracy: (\S+)", line).groups()
            for line in trained.lines
            if line.startswith(f"[small-test-worker-{index}] 64/64")
        ]
        for index in (0, 1)
    }
    history = written_metrics(trained).history
    assert (
        epochs[0]
        == epochs[1]
        == [
            (f"{loss:.4f}", f"{accuracy:.4f}")
            for loss, accuracy in zip(history["loss"], history["accuracy"], strict=True)
        ]
    )


@pytest.mark.training
def test_no_replica_logs_a_failed_cuda_probe_or_start_up_notices(trained: Trained) -> None:
    """On a machine without NVIDIA's driver TensorFlow's CUDA probe can only fail, and says so as an error: the
    worker skips it. The notices absl writes before its initialisation (no CUDA driver, oneDNN on) are INFO lines the
    log level hides."""
    noise = ("cuInit", "cuda", "absl::InitializeLog", "oneDNN custom operations")
    assert [line for line in trained.lines if any(word in line for word in noise)] == []
    assert any("epoch" in line.lower() for line in trained.lines), "the replicas' own lines still show"


@pytest.mark.training
def test_replicas_train_on_tcmalloc(trained: Trained) -> None:
    """The default malloc halves a 2-worker job's speed; `make test` installs tcmalloc, so it must be in use."""
    assert written_metrics(trained).allocator == "tcmalloc"
    assert not any("tcmalloc not found" in line for line in trained.lines)


@pytest.mark.training
def test_replicas_run_onednn_kernels(trained: Trained) -> None:
    """TensorFlow leaves oneDNN off on AVX2-only CPUs, where it trains ~25 % faster; the worker turns it on."""
    assert written_metrics(trained).onednn is True


@pytest.mark.training
def test_only_the_chief_keeps_a_model(trained: Trained) -> None:
    """Only the chief writes the variant's outputs: each key is written once, not once per replica."""
    assert sorted(p.name for p in trained.out.iterdir()) == ["metrics.json", "model", "variant.json"]
    assert json.loads((trained.out / "variant.json").read_text())["name"] == "small"
    assert {"metrics.json", "variant.json", "model/saved_model.pb"} <= set(trained.versions)
    assert {key: count for key, count in trained.versions.items() if count != 1} == {}


@pytest.mark.training
def test_exported_model_predicts_real_test_images(trained: Trained, small_dataset: Path) -> None:
    test = dataset.read_shards(open_store(str(small_dataset)), "test")
    result = evaluation.evaluate(trained.out / "model", test.images[:2000], test.labels[:2000])
    assert result["accuracy"] > 0.6  # ten classes: chance is 0.1


@pytest.mark.training
def test_a_model_trained_on_flips_serves_the_same_prediction_for_an_image_and_its_mirror(
    trained: Trained, small_dataset: Path
) -> None:
    import tensorflow as tf

    out = trained.out
    images = dataset.read_shards(open_store(str(small_dataset)), "test").images[:256].astype(np.float32)
    serve = tf.saved_model.load(str(out / "model")).signatures[savedmodel.ARRAYS_SIGNATURE]
    probabilities = serve(images=tf.constant(images))["probabilities"].numpy()
    mirrored = serve(images=tf.constant(images[:, :, ::-1].copy()))["probabilities"].numpy()
    np.testing.assert_allclose(mirrored, probabilities, atol=1e-6)


@pytest.mark.training
def test_validation_scores_a_flip_trained_model_as_it_is_served(trained: Trained) -> None:
    """Rungs rank by the worker's validation: it must be the served (mirror-averaged) model's score, as select's."""
    validation = dataset.read_shards(open_store(str(trained.data)), "validation")
    served = evaluation.evaluate(trained.out / "model", validation.images, validation.labels)
    history = written_metrics(trained).history
    assert history["val_loss"][-1] == pytest.approx(served["loss"], abs=1e-4)
    assert history["val_accuracy"][-1] == pytest.approx(served["accuracy"], abs=1e-4)


@pytest.mark.training
def test_a_batch_norm_network_validates_with_the_statistics_it_trained_on(fashion_dir: Path) -> None:
    """Validation, what a rung ranks, runs on the moving statistics: after a short first rung they must already be
    the training batches', or every batch-norm draw ranks low at rung 0 whatever it learnt."""
    import tf_keras as keras

    from bakeoff.components.modeling.architectures import ARCHITECTURES

    variant = from_dict({"name": "bn", "model": {"type": "cnn", "batch_norm": True}})
    model = ARCHITECTURES["cnn"].build((28, 28), 10, variant.model_config())
    train = fashion_mnist.read_idx_dir(fashion_dir)["train"]
    images, labels = train.images[: 64 * 40].astype(np.float32), train.labels[: 64 * 40]
    model.compile(optimizer=keras.optimizers.Adam(0.003), loss="sparse_categorical_crossentropy")
    model.fit(images, labels, batch_size=64, epochs=1, verbose=0)  # 40 steps
    normalization = next(layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization))
    batch_mean = keras.Model(model.inputs, normalization.input)(images[-640:]).numpy().mean(axis=(0, 1, 2))
    error = np.abs(normalization.moving_mean.numpy() - batch_mean).max()
    assert error < 0.25 * np.abs(batch_mean).max()


@pytest.mark.training
def test_validation_scores_the_moving_average_and_training_goes_on_from_the_trained_weights(fashion_dir: Path) -> None:
    """With ``ema_momentum`` a rung ranks the averaged weights, which the export carries (``fit`` swaps them in at its
    end); the steps after validation, and the backup, must go on from the weights as trained."""
    import tf_keras as keras

    from bakeoff.components.modeling.architectures import ARCHITECTURES
    from bakeoff.components.modeling.optimizers import make_optimizer
    from bakeoff.components.training.callbacks import averaged_weights

    variant = from_dict({"name": "ema", "model": {"type": "cnn", "filters": [8], "dense_units": 16}})
    model = ARCHITECTURES["cnn"].build((28, 28), 10, variant.model_config())
    model.compile(
        optimizer=make_optimizer("adam", 0.003, "constant", 20, 1, 0.9), loss="sparse_categorical_crossentropy"
    )
    train = fashion_mnist.read_idx_dir(fashion_dir)["train"]
    seen: dict[str, list] = {}

    class Probe(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            seen["trained"] = model.get_weights()
            with averaged_weights(model):
                seen["scored"] = model.get_weights()
            seen["after"] = model.get_weights()

    model.fit(
        train.images[:640].astype(np.float32),
        train.labels[:640],
        batch_size=32,
        epochs=1,
        verbose=0,
        callbacks=[Probe()],
    )  # 20 steps
    exported = model.get_weights()  # fit's end swapped the average in for good
    assert all(np.array_equal(a, b) for a, b in zip(seen["scored"], exported, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(seen["after"], seen["trained"], strict=True))
    assert not all(np.allclose(a, b) for a, b in zip(seen["scored"], seen["trained"], strict=True))


@pytest.mark.training
def test_fit_leaves_its_distributed_input_iterator_alive(fashion_dir: Path) -> None:
    """Deleting a distributed input iterator can wait up to a minute for tf.data's autotuning thread (the per-device
    iterator tf.distribute builds has it on), and ``fit`` deletes its own on the way out: the worker's model keeps
    it, so a job's last epoch is not followed by a minute of nothing."""
    import gc

    import tensorflow as tf
    from tensorflow.python.distribute import input_lib

    from bakeoff.components.storage.records import DatasetMetadata, SkippedFiles
    from bakeoff.components.training.model import compiled_model

    variant = from_dict({"name": "kept", "model": {"type": "cnn", "filters": [8], "dense_units": 16}})
    train = fashion_mnist.read_idx_dir(fashion_dir)["train"]
    metadata = DatasetMetadata(
        {"train": 640}, 1, [28, 28, 1], [str(label) for label in range(10)], "-", "-", GRAY, {}, SkippedFiles(0, []), {}
    )
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])  # one replica, batches through a per-device iterator
    model = compiled_model(variant, strategy, metadata, steps_per_epoch=4)
    inputs = strategy.distribute_datasets_from_function(
        lambda _: tf.data.Dataset.from_tensor_slices((train.images[:640], train.labels[:640])).repeat().batch(32)
    )

    def live() -> set[int]:
        gc.collect()
        return {id(item) for item in gc.get_objects() if isinstance(item, input_lib.DistributedIterator)}

    before = live()
    model.fit(inputs, epochs=1, steps_per_epoch=4, verbose=0)
    assert live() - before


@pytest.mark.training
def test_a_job_traces_its_training_step_once(fashion_dir: Path) -> None:
    """tf.function traces a function a second time when its first call creates variables (optimizer slots, metric
    totals): the compiled model holds them all before ``fit``, so a job pays one trace (a second of its start)."""
    import tensorflow as tf

    from bakeoff.components.storage.records import DatasetMetadata, SkippedFiles
    from bakeoff.components.training.model import compiled_model

    variant = from_dict({"name": "once", "model": {"type": "cnn", "filters": [8], "dense_units": 16}})
    train = fashion_mnist.read_idx_dir(fashion_dir)["train"]
    metadata = DatasetMetadata(
        {"train": 128}, 1, [28, 28, 1], [str(label) for label in range(10)], "-", "-", GRAY, {}, SkippedFiles(0, []), {}
    )
    model = compiled_model(variant, tf.distribute.get_strategy(), metadata, steps_per_epoch=4)
    created: list[str] = []

    def noted(next_creator: Any, **kwargs: Any) -> Any:
        created.append(kwargs.get("name") or "?")
        return next_creator(**kwargs)

    with tf.variable_creator_scope(noted):
        model.fit(train.images[:128], train.labels[:128], batch_size=32, epochs=1, verbose=0)
    assert created == []


@pytest.mark.training
def test_the_exported_model_holds_the_weights_it_serves_and_no_optimizer_state(trained: Trained) -> None:
    """The served model is its signatures and the weights they read: the optimizer's moments and average stay in
    the job's backup, not in every published model (3× the weights here)."""
    import tensorflow as tf

    names = [name for name, _ in tf.train.list_variables(str(trained.out / "model" / "variables" / "variables"))]
    assert any("kernel" in name for name in names)
    assert [name for name in names if name.startswith("optimizer/")] == []


@pytest.mark.training
def test_serving_accepts_encoded_images(trained: Trained, small_dataset: Path) -> None:
    import tensorflow as tf

    out = trained.out
    test = dataset.read_shards(open_store(str(small_dataset)), "test")
    images = test.images[:64]
    loaded = tf.saved_model.load(str(out / "model"))
    encoded = tf.stack([tf.io.encode_png(image) for image in images])  # the shards' [28, 28, 1]
    from_bytes = loaded.signatures[savedmodel.BYTES_SIGNATURE](image_bytes=encoded)
    from_arrays = loaded.signatures[savedmodel.ARRAYS_SIGNATURE](images=tf.constant(images, tf.float32))
    assert np.array_equal(from_bytes["class_id"].numpy(), from_arrays["class_id"].numpy())
    names = from_bytes["class_name"].numpy()
    assert names[0].decode() in json.loads((small_dataset / "metadata.json").read_text())["class_names"]


@pytest.mark.long_running
@pytest.mark.unit
def test_the_replica_program_does_not_load_its_launcher() -> None:
    """The heartbeat's contract is backends/heartbeat.py: a replica loads neither the local backend nor its imports."""
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, bakeoff.components.training.worker; print(*sorted(sys.modules), sep=chr(10))",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    ).stdout.split()
    assert "bakeoff.components.backends.heartbeat" in loaded
    assert "bakeoff.components.backends.local" not in loaded
