"""A colour dataset end to end: an RGB artifact of 3 classes at 32x40, a tiny CNN trained on it as a job, selected
and published, then served by `bakeoff serve`, which answers image files of any size as ingest's own preprocessing
plus the model answer them in this process, and `bakeoff predict` with the dataset's class names."""

from __future__ import annotations

import base64
import io
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bakeoff.components.data import artifact
from bakeoff.components.data.preprocess import decode, prepare
from bakeoff.components.modeling.savedmodel import ARRAYS_SIGNATURE, BYTES_SIGNATURE
from bakeoff.components.selection.settings import SelectionSettings
from bakeoff.components.selection.winner import select_run
from bakeoff.components.storage import open_store, registry, runs
from bakeoff.components.storage.records import DatasetMetadata, Preprocessing, SkippedFiles
from bakeoff.components.training.launch import JobSettings, train_variant
from tests.conftest import free_port
from tests.test_serving import BAKEOFF, Server, post

pytestmark = [pytest.mark.training, pytest.mark.serving]

HEIGHT, WIDTH = 32, 40  # not square: a swapped height and width would fail
NAMES = ["red square", "green bar", "blue ring"]  # spaces too: names are data, not identifiers
MODEL = "colours"
MISLABELLED = 3
RUN_ID = "rgb-run"
VARIANT = {
    "name": "tiny",
    "model": {"type": "cnn", "filters": [4, 8], "kernel_size": 3, "dense_units": 16},
    # the augmentations on [n, H, W, 3] batches, and an export that averages each image with its mirror
    "training": {"epochs": 3, "batch_size": 32, "learning_rate": 0.01, "random_flip": True, "random_shift": 2},
    "workers": 1,
}


def drawn(label: int, rng: np.random.Generator, height: int = HEIGHT, width: int = WIDTH) -> np.ndarray:
    """One uint8 [height, width, 3] image of class ``label``: its shape in its colour on noise; colour alone tells
    the classes apart, and the shape is there so that a channel mix-up costs more than the colour."""
    image = rng.integers(0, 60, (height, width, 3), dtype=np.uint8)
    rows, cols = np.mgrid[:height, :width]
    cy, cx = height / 2 + rng.integers(-3, 4), width / 2 + rng.integers(-3, 4)
    if label == 0:
        mask = (abs(rows - cy) < height / 4) & (abs(cols - cx) < height / 4)
    elif label == 1:
        mask = abs(cols - cx) < width / 10
    else:
        mask = abs(np.hypot(rows - cy, cols - cx) - height / 4) < 2.5
    image[mask, label] = 200 + rng.integers(0, 55)
    return image


def write_artifact(out: Path) -> DatasetMetadata:
    """The shard format ingest writes: per split, .npz shards of uint8 [n, H, W, 3] images and integer labels."""
    rng = np.random.default_rng(0)
    counts = {"train": 240, "validation": 60, "test": 60}
    shards = 2
    out.mkdir(parents=True)
    class_counts = {}
    for split, count in counts.items():
        labels = np.arange(count, dtype=np.int64) % len(NAMES)
        images = np.stack([drawn(int(label), rng) for label in labels])
        if split == "test":  # MISLABELLED images drawn as the next class: the winner's sure mistakes for the report
            labels[:MISLABELLED] = (labels[:MISLABELLED] + 1) % len(NAMES)
        class_counts[split] = np.bincount(labels, minlength=len(NAMES)).tolist()
        for index, part in enumerate(np.array_split(np.arange(count), shards)):
            with open(out / artifact.shard_name(split, index, shards), "wb") as file:
                np.savez(file, images=images[part], labels=labels[part])
    metadata = DatasetMetadata(
        counts=counts,
        shards=shards,
        image_shape=[HEIGHT, WIDTH, 3],
        class_names=NAMES,
        fingerprint="drawn-0",
        source="drawn",
        preprocessing=Preprocessing(HEIGHT, WIDTH, 3, "bilinear"),
        class_counts=class_counts,
        skipped=SkippedFiles(0, []),
        split_origins=dict.fromkeys(counts, "drawn"),
    )
    (out / artifact.METADATA_FILE).write_text(metadata.to_json())
    return metadata


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The RGB artifact, the tiny variant trained on it as a local job, selected and published, and `bakeoff serve`
    serving it."""
    tmp = tmp_path_factory.mktemp("rgb")
    metadata = write_artifact(tmp / "data")
    store = open_store(f"file://{tmp / 'store'}")
    settings = JobSettings(image="unused", timeout_seconds=600, backend="local")
    train_variant(VARIANT, (tmp / "data").as_uri(), store.uri, RUN_ID, settings)
    summary = select_run(["tiny"], str(tmp / "data"), store.uri, RUN_ID, SelectionSettings(MODEL, "val_accuracy"))
    assert summary.promotion.published, summary
    port = free_port()
    server = Server(
        [BAKEOFF, "serve", "--store", store.uri, "--model-name", MODEL, "--port", str(port)], port, tmp / "serve.log"
    )
    try:
        yield {
            "tmp": tmp,
            "store": store,
            "metadata": metadata,
            "version": tmp / "store" / registry.model_prefix(MODEL) / "1",
            "server": server.wait_ready(),
        }
    finally:
        server.process.terminate()
        server.stop()


def in_process(version: Path, images: np.ndarray) -> dict[str, np.ndarray]:
    """The published SavedModel's answers for uint8 [n, H, W, 3] images, in this process."""
    import tensorflow as tf

    signature = tf.saved_model.load(str(version)).signatures[ARRAYS_SIGNATURE]
    return {name: t.numpy() for name, t in signature(images=tf.constant(images, tf.float32)).items()}


def files(tmp: Path) -> list[Path]:
    """Image files of other sizes than the dataset's: a PNG twice as large, a JPEG, and a grayscale PNG."""
    rng = np.random.default_rng(7)
    made = []
    for index, (label, height, width, kind) in enumerate(((0, 64, 80, "PNG"), (1, 48, 50, "JPEG"), (2, 20, 25, "L"))):
        image = Image.fromarray(drawn(label, rng, height, width))
        path = tmp / f"image-{index}.{'jpg' if kind == 'JPEG' else 'png'}"
        (image.convert("L") if kind == "L" else image).save(path, "JPEG" if kind == "JPEG" else "PNG")
        made.append(path)
    return made


def test_the_model_is_built_for_the_datasets_shape_and_learnt_the_colours(published: dict) -> None:
    import tensorflow as tf

    loaded = tf.saved_model.load(str(published["version"]))
    signature = loaded.signatures[ARRAYS_SIGNATURE]
    assert signature.structured_input_signature[1]["images"].shape.as_list() == [None, HEIGHT, WIDTH, 3]
    # TF Serving's own route for files: colour PNGs of the dataset's size answer as their pixels do
    images = np.stack([drawn(label, np.random.default_rng(label)) for label in range(3)])
    encoded = tf.stack([tf.io.encode_png(image) for image in images])
    from_bytes = loaded.signatures[BYTES_SIGNATURE](image_bytes=encoded)["probabilities"].numpy()
    np.testing.assert_allclose(from_bytes, in_process(published["version"], images)["probabilities"], atol=1e-6)
    manifest = registry.list_versions(published["store"], MODEL)[0]
    assert manifest.dataset.preprocessing == Preprocessing(HEIGHT, WIDTH, 3, "bilinear")
    # 3 classes told apart by colour: a tiny CNN learns them; the mislabelled test images are wrong by design
    assert manifest.metrics.test_accuracy > 0.85


def test_bakeoff_predict_answers_as_ingests_preprocessing_plus_the_model_with_class_names(published: dict) -> None:
    paths = files(published["tmp"])
    prepared = np.stack(
        [prepare(decode(path.read_bytes(), path.name), published["metadata"].preprocessing) for path in paths]
    )
    expected = in_process(published["version"], prepared)
    result = subprocess.run(
        [BAKEOFF, "predict", *map(str, paths), "--url", published["server"].url, "--model-name", MODEL, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    answers = json.loads(result.stdout)
    assert [answer["class_name"] for answer in answers] == [NAMES[i] for i in expected["class_id"]]
    for answer, probabilities in zip(answers, expected["probabilities"], strict=True):
        assert [entry["class_name"] for entry in answer["top"]] == [NAMES[i] for i in np.argsort(-probabilities)]
        np.testing.assert_allclose(
            [entry["probability"] for entry in answer["top"]], np.sort(probabilities)[::-1], rtol=0, atol=1e-6
        )
    assert [answer["class_name"] for answer in answers][:2] == NAMES[:2], "the colour images are told apart"


def test_v1_and_v2_take_arrays_of_the_datasets_shape_and_refuse_grayscale_ones(published: dict) -> None:
    url = f"{published['server'].url}"
    rng = np.random.default_rng(3)
    images = np.stack([drawn(label, rng) for label in (2, 0, 1)])
    expected = in_process(published["version"], images)
    status, v1 = post(f"{url}/v1/models/{MODEL}:predict", {"instances": images.tolist()})
    assert status == 200, v1
    assert [p["class_name"] for p in v1["predictions"]] == [NAMES[i] for i in expected["class_id"]]
    np.testing.assert_allclose([p["probabilities"] for p in v1["predictions"]], expected["probabilities"], atol=1e-6)
    tensor = {"name": "images", "shape": list(images.shape), "datatype": "UINT8", "data": images.ravel().tolist()}
    status, v2 = post(f"{url}/v2/models/{MODEL}/infer", {"inputs": [tensor]})
    assert status == 200, v2
    (probabilities,) = [o for o in v2["outputs"] if o["name"] == "probabilities"]
    np.testing.assert_allclose(np.reshape(probabilities["data"], (3, 3)), expected["probabilities"], atol=1e-6)
    status, refused = post(f"{url}/v1/models/{MODEL}:predict", {"instances": images[..., 0].tolist()})
    assert status == 400 and f"3×{HEIGHT}×{WIDTH}×3 numbers" in refused["error"], refused
    encoded = io.BytesIO()
    Image.fromarray(images[1]).save(encoded, "PNG")
    b64 = {"b64": base64.b64encode(encoded.getvalue()).decode()}
    status, answer = post(f"{url}/v1/models/{MODEL}:predict", {"instances": [b64]})
    assert status == 200 and answer["predictions"][0]["class_id"] == int(expected["class_id"][1]), answer


def test_the_report_s_mistakes_are_in_colour_and_named(published: dict) -> None:
    record = runs.selection(published["store"], RUN_ID)
    assert record.class_names == NAMES
    test = artifact.read_shards(open_store(str(published["tmp"] / "data")), "test")
    assert len(record.misclassified) >= MISLABELLED
    for mistake in record.misclassified:
        with Image.open(io.BytesIO(base64.b64decode(mistake.png))) as shown:
            assert shown.mode == "RGB"
            assert np.array_equal(np.asarray(shown), test.images[mistake.index])
