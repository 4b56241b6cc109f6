"""The resnet and backbone families as the cnn trains and serves: a real 2-worker job each, its record, its export
served through V1, V2 and binary V2 by the model server."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bakeoff.components.backends.local import LocalBackend
from bakeoff.components.data import artifact as dataset
from bakeoff.components.modeling.savedmodel import ARRAYS_SIGNATURE, BYTES_SIGNATURE
from bakeoff.components.spec import from_dict
from bakeoff.components.storage import open_store, registry, runs
from bakeoff.components.storage.records import WorkerMetrics
from bakeoff.components.training.tfjob import build_tfjob, worker_args
from tests.conftest import free_port
from tests.samples import manifest
from tests.test_serving import Server, b64, binary_request, png, post, post_binary, read_outputs

EXAMPLES = 1024  # 16 steps of the global batch 64 per epoch
IMAGES = 8
FAMILIES: dict[str, dict[str, Any]] = {
    # bfloat16 end to end: its export must still take and give float32
    "resnet": {
        "model": {"type": "resnet", "stem_filters": 8, "filters": [8, 16], "dropout": 0.1},
        "training": {"precision": "mixed_bfloat16", "random_crop": 0.6},
    },
    # one frozen epoch, then fine-tuning at half the head's rate
    "backbone": {
        "model": {
            "type": "backbone",
            "network": "MobileNetV3Small",
            "weights": "none",
            "image_size": 32,
            "freeze_epochs": 1,
            "backbone_learning_rate": 0.5,
        },
        "training": {"precision": "float32"},
    },
}


@dataclasses.dataclass(frozen=True)
class Job:
    metrics: WorkerMetrics
    model: Path  # the exported SavedModel, downloaded
    lines: list[str]


@pytest.fixture(scope="module")
def jobs(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Job]:
    """Each family's variant trained by a 2-worker job of the local backend, as `bakeoff run` trains it."""
    store = open_store(f"file://{tmp_path_factory.mktemp('store')}")
    trained = {}
    for name, fields in FAMILIES.items():
        variant = from_dict(
            {
                "name": name,
                "model": fields["model"],
                "training": {"epochs": 2, "batch_size": 32, "random_flip": True, **fields["training"]},
                "workers": 2,
            }
        )
        lines: list[str] = []
        args = worker_args(variant, str(small_dataset), store.uri, f"runs/r/{name}", EXAMPLES)
        LocalBackend(sink=lines.append).run(build_tfjob(variant, name=f"{name}-job", image="unused", args=args, env={}))
        model = store.get_dir(f"runs/r/{name}/{runs.MODEL}", tmp_path_factory.mktemp(name) / "model")
        trained[name] = Job(runs.metrics_at(store, f"runs/r/{name}"), model, lines)
    return trained


@pytest.fixture(scope="module")
def test_images(small_dataset: Path) -> np.ndarray:
    return dataset.read_shards(open_store(str(small_dataset)), "test").images[:IMAGES].astype(np.float32)


@pytest.mark.training
@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_trains_on_both_replicas_and_records_its_precision(jobs: dict[str, Job], family: str) -> None:
    job = jobs[family]
    assert job.metrics.workers == 2 and job.metrics.num_replicas_in_sync == 2
    assert job.metrics.epochs == 2 and job.metrics.steps_per_epoch == EXAMPLES // 64
    assert job.metrics.precision == FAMILIES[family]["training"]["precision"]
    for index in (0, 1):
        assert any(line.startswith(f"[{family}-job-worker-{index}] 16/16") for line in job.lines), index


@pytest.mark.training
@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_s_export_takes_float32_pixels_and_bytes_and_answers_alike(
    jobs: dict[str, Job], family: str, test_images: np.ndarray
) -> None:
    import tensorflow as tf

    loaded = tf.saved_model.load(str(jobs[family].model))
    arrays = loaded.signatures[ARRAYS_SIGNATURE]
    assert arrays.structured_input_signature[1]["images"].dtype == tf.float32
    answers = arrays(images=tf.constant(test_images))
    assert answers["probabilities"].dtype == tf.float32
    np.testing.assert_allclose(answers["probabilities"].numpy().sum(axis=1), 1, atol=1e-5)
    encoded = tf.constant([png(image[:, :, 0]) for image in test_images.astype(np.uint8)])
    from_bytes = loaded.signatures[BYTES_SIGNATURE](image_bytes=encoded)
    np.testing.assert_allclose(from_bytes["probabilities"].numpy(), answers["probabilities"].numpy(), atol=1e-5)


@pytest.mark.serving
@pytest.mark.training
@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_s_published_model_serves_v1_v2_and_binary_as_it_answers_in_process(
    jobs: dict[str, Job], family: str, test_images: np.ndarray, tmp_path: Path
) -> None:
    import tensorflow as tf

    expected = tf.saved_model.load(str(jobs[family].model)).signatures[ARRAYS_SIGNATURE](
        images=tf.constant(test_images)
    )
    probabilities = expected["probabilities"].numpy()
    store = open_store(f"file://{tmp_path / 'store'}")
    registry.publish(store, family, jobs[family].model, manifest(variant=family))
    port = free_port()
    server = Server(
        [
            sys.executable,
            "-m",
            "bakeoff.components.serving.server",
            "--model-dir",
            str(tmp_path / "store" / "models" / family),
            "--model-name",
            family,
            "--http-port",
            str(port),
            "--grpc-port",
            str(free_port()),
        ],
        port,
        tmp_path / "server.log",
    )
    try:
        url = server.wait_ready().url
        status, v1 = post(f"{url}/v1/models/{family}:predict", {"instances": test_images.tolist()})
        assert status == 200, v1
        np.testing.assert_allclose([p["probabilities"] for p in v1["predictions"]], probabilities, atol=1e-5)
        images = {"name": "images", "shape": list(test_images.shape), "datatype": "FP32"}
        status, v2 = post(
            f"{url}/v2/models/{family}/infer", {"inputs": [images | {"data": test_images.ravel().tolist()}]}
        )
        assert status == 200, v2
        outputs = {output["name"]: output["data"] for output in v2["outputs"]}
        np.testing.assert_allclose(np.reshape(outputs["probabilities"], probabilities.shape), probabilities, atol=1e-5)
        status, headers, body = post_binary(
            f"{url}/v2/models/{family}/infer", *binary_request(test_images, {"binary_data_output": True})
        )
        assert status == 200, body[:300]
        np.testing.assert_allclose(read_outputs(headers, body)["probabilities"], probabilities, atol=1e-5)
        png_bytes = [{"b64": b64(png(image[:, :, 0]))} for image in test_images.astype(np.uint8)]
        status, answer = post(f"{url}/v1/models/{family}:predict", {"instances": png_bytes})
        assert status == 200, answer
        assert [p["class_id"] for p in answer["predictions"]] == expected["class_id"].numpy().tolist()
    finally:
        server.process.terminate()
        server.stop()
