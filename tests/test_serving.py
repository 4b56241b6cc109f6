"""Serving: real Fashion-MNIST images through `bakeoff predict`, V1, V2 and gRPC; bad requests; a version swapped in
under load."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest

from bakeoff.components.data.fashion_mnist import read_idx_dir
from bakeoff.components.modeling.savedmodel import ARRAYS_SIGNATURE, export
from bakeoff.components.serving.tuning import intra_op_threads
from bakeoff.components.storage import open_store, registry
from tests.conftest import free_port
from tests.samples import manifest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

BAKEOFF = str(Path(sys.executable).parent / "bakeoff")
CLASS_NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
NAME = "fashion"  # served from a folder in TF Serving's layout, as KServe mounts it
WATCHED = "watched"  # served by `bakeoff serve` from the store, following newer versions
MAX_REQUEST_BYTES = 400_000  # small, so that an oversized body is cheap to send
IMAGES = 12  # real test images per check


def _export(tmp: Path, name: str, model) -> Path:
    path = tmp / name
    export(model, path, CLASS_NAMES)
    return path


def _trained(fashion_dir: Path, tmp: Path) -> Path:
    """A small classifier fitted for a few steps on real images: its predictions differ from image to image."""
    import tf_keras as keras

    train = read_idx_dir(fashion_dir)["train"]
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.layers.Input((28, 28)),
            keras.layers.Rescaling(1 / 255),
            keras.layers.Flatten(),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(train.images[:2048].astype("float32"), train.labels[:2048], batch_size=128, epochs=1, verbose=0)
    return _export(tmp, "trained", model)


def _constant(tmp: Path, class_id: int) -> Path:
    """A model that answers ``class_id`` for every image, so that versions are told apart by their answers."""
    import tf_keras as keras

    bias = np.zeros(10, np.float32)
    bias[class_id] = 5.0
    model = keras.Sequential(
        [
            keras.layers.Input((28, 28)),
            keras.layers.Flatten(),
            keras.layers.Dense(
                10, activation="softmax", kernel_initializer="zeros", bias_initializer=keras.initializers.Constant(bias)
            ),
        ]
    )
    return _export(tmp, f"constant-{class_id}-{time.monotonic_ns()}", model)


class Server:
    """A model server subprocess on loopback; its output goes to a file, so that no pipe ever fills and blocks it."""

    def __init__(self, command: list[str], port: int, log: Path) -> None:
        self.port, self.log = port, log
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 180) -> Server:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/v2/health/ready", timeout=2):
                    return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"the server was not ready in {timeout} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        """Waits for the process, which must have been sent SIGTERM; the graceful shutdown ends in time or the
        process is killed."""
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def test_images(fashion_dir: Path) -> np.ndarray:
    return read_idx_dir(fashion_dir)["test"].images[:IMAGES]


@pytest.fixture(scope="module")
def setup(fashion_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Both servers, started together so their start-ups overlap: one on a model folder, one by `bakeoff serve` on a
    store."""
    tmp = tmp_path_factory.mktemp("serving")
    store = open_store(f"file://{tmp / 'store'}")
    trained = _trained(fashion_dir, tmp)
    registry.publish(store, NAME, trained, manifest(variant="trained"))
    registry.publish(store, WATCHED, _constant(tmp, 3), manifest(variant="always-3"))
    http_port, grpc_port, watched_port = free_port(), free_port(), free_port()
    folder = Server(
        [
            sys.executable,
            "-m",
            "bakeoff.components.serving.server",
            "--model-dir",
            str(tmp / "store" / "models" / NAME),
            "--model-name",
            NAME,
            "--http-port",
            str(http_port),
            "--grpc-port",
            str(grpc_port),
            "--max-request-bytes",
            str(MAX_REQUEST_BYTES),
        ],
        http_port,
        tmp / "folder-server.log",
    )
    watched = Server(
        [
            BAKEOFF,
            "serve",
            "--store",
            store.uri,
            "--model-name",
            WATCHED,
            "--port",
            str(watched_port),
            "--poll-seconds",
            "0.2",
        ],
        watched_port,
        tmp / "watched-server.log",
    )
    try:
        yield {
            "tmp": tmp,
            "store": store,
            "trained": trained,
            "folder": folder.wait_ready(),
            "grpc_port": grpc_port,
            "watched": watched.wait_ready(),
        }
    finally:
        for server in (folder, watched):  # both at once: each takes seconds to tear TensorFlow down
            server.process.terminate()
        for server in (folder, watched):
            server.stop()


@pytest.fixture(scope="module")
def in_process(setup: dict, test_images: np.ndarray) -> dict[str, np.ndarray]:
    """The published SavedModel's own answers on the test images, called in this process."""
    import tensorflow as tf

    outputs = tf.saved_model.load(str(setup["trained"])).signatures[ARRAYS_SIGNATURE](
        images=tf.constant(test_images, tf.float32)
    )
    return {name: tensor.numpy() for name, tensor in outputs.items()}


def post(url: str, body: object, content_type: str = "application/json") -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def png(image: np.ndarray) -> bytes:
    import tensorflow as tf

    return tf.io.encode_png(image[:, :, None]).numpy()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def assert_same(probabilities: object, class_ids: Iterable[int], expected: dict[str, np.ndarray]) -> None:
    # Only float32 rounding may differ: the served path runs the same signature on the same pixels.
    np.testing.assert_allclose(np.asarray(probabilities, np.float32), expected["probabilities"], rtol=0, atol=1e-6)
    assert list(class_ids) == expected["class_id"].tolist()


@pytest.mark.serving
def test_predict_cli_answers_as_the_savedmodel_in_process_on_real_images(
    setup: dict, test_images: np.ndarray, in_process: dict, tmp_path: Path
) -> None:
    paths = []
    for index, image in enumerate(test_images):
        paths.append(tmp_path / f"test-{index}.png")
        paths[-1].write_bytes(png(image))
    result = subprocess.run(
        [BAKEOFF, "predict", *map(str, paths), "--url", setup["folder"].url, "--model-name", NAME, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    answers = json.loads(result.stdout)
    assert [answer["image"] for answer in answers] == list(map(str, paths))
    assert [answer["class_id"] for answer in answers] == in_process["class_id"].tolist()
    for answer, probabilities in zip(answers, in_process["probabilities"], strict=True):
        best = np.argsort(-probabilities)[:3]
        assert [entry["class_id"] for entry in answer["top"]] == best.tolist()
        assert [entry["class_name"] for entry in answer["top"]] == [CLASS_NAMES[i] for i in best]
        np.testing.assert_allclose(
            [entry["probability"] for entry in answer["top"]], probabilities[best], rtol=0, atol=1e-6
        )
    human = subprocess.run(
        [BAKEOFF, "predict", str(paths[0]), "--url", setup["folder"].url, "--model-name", NAME, "--top", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert human.returncode == 0, human.stderr
    first = np.argsort(-in_process["probabilities"][0])[:2]
    assert (
        human.stdout == f"{paths[0]}: {CLASS_NAMES[first[0]]} {in_process['probabilities'][0][first[0]]:.3f}, "
        f"{CLASS_NAMES[first[1]]} {in_process['probabilities'][0][first[1]]:.3f}\n"
    )


@pytest.mark.serving
def test_v1_and_v2_answer_as_the_savedmodel_in_process_on_real_images(
    setup: dict, test_images: np.ndarray, in_process: dict
) -> None:
    url = setup["folder"].url
    pixels = test_images.tolist()
    for body in (
        {"instances": pixels},
        {"signature_name": "serving_default", "instances": [{"images": image} for image in pixels]},
        {"instances": [{"b64": b64(png(image))} for image in test_images]},
        {
            "signature_name": "serving_bytes",
            "instances": [{"image_bytes": {"b64": b64(png(image))}} for image in test_images],
        },
    ):
        status, answer = post(f"{url}/v1/models/{NAME}:predict", body)
        assert status == 200, answer
        assert answer["model_version"] == "1", "a V1 answer names the version that computed it, as V2's does"
        predictions = answer["predictions"]
        assert_same([p["probabilities"] for p in predictions], [p["class_id"] for p in predictions], in_process)
        assert [p["class_name"] for p in predictions] == [CLASS_NAMES[i] for i in in_process["class_id"]]

    for tensor in (
        {"name": "images", "shape": [IMAGES, 28, 28], "datatype": "FP32", "data": test_images.ravel().tolist()},
        {
            "name": "image_bytes",
            "shape": [IMAGES],
            "datatype": "BYTES",
            "data": [b64(png(image)) for image in test_images],
        },
    ):
        status, answer = post(f"{url}/v2/models/{NAME}/infer", {"inputs": [tensor]})
        assert status == 200, answer
        outputs = {output["name"]: output for output in answer["outputs"]}
        assert answer["model_version"] == "1"
        assert outputs["probabilities"]["shape"] == [IMAGES, 10]
        assert_same(np.reshape(outputs["probabilities"]["data"], (IMAGES, 10)), outputs["class_id"]["data"], in_process)
        assert outputs["class_name"]["data"] == [CLASS_NAMES[i] for i in in_process["class_id"]]
    with (
        urllib.request.urlopen(f"{url}/v2/health/ready") as ready,
        urllib.request.urlopen(f"{url}/v1/models/{NAME}") as model,
    ):
        assert json.loads(ready.read()) == {"ready": True} and json.loads(model.read())["ready"] is True


@pytest.mark.serving
def test_grpc_v2_answers_as_the_savedmodel_in_process(setup: dict, test_images: np.ndarray, in_process: dict) -> None:
    import grpc
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb
    from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc as pb_grpc

    request = pb.ModelInferRequest(
        model_name=NAME,
        inputs=[
            pb.ModelInferRequest.InferInputTensor(
                name="images",
                datatype="FP32",
                shape=[IMAGES, 28, 28],
                contents=pb.InferTensorContents(fp32_contents=test_images.ravel().tolist()),
            )
        ],
    )
    with grpc.insecure_channel(f"127.0.0.1:{setup['grpc_port']}") as channel:
        response = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=60)
    outputs = {
        output.name: (output, raw) for output, raw in zip(response.outputs, response.raw_output_contents, strict=True)
    }
    probabilities = np.frombuffer(outputs["probabilities"][1], np.float32).reshape(IMAGES, 10)
    assert_same(probabilities, np.frombuffer(outputs["class_id"][1], np.int64).tolist(), in_process)


def binary_request(
    images: np.ndarray, parameters: dict | None = None, outputs: list | None = None
) -> tuple[bytes, dict]:
    """A V2 request in the binary tensor data extension: its JSON, then the images' FP32 little-endian bytes."""
    data = images.astype("<f4").tobytes()
    tensor = {"name": "images", "shape": list(images.shape), "datatype": "FP32"}
    request: dict = {"inputs": [{**tensor, "parameters": {"binary_data_size": len(data)}}]}
    if parameters is not None:
        request["parameters"] = parameters
    if outputs is not None:
        request["outputs"] = outputs
    head = json.dumps(request).encode()
    return head + data, {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(head))}


def post_binary(url: str, body: bytes, headers: dict) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def read_outputs(headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """A V2 answer's outputs: binary ones read from the bytes after the JSON, in order; JSON ones as sent."""
    length = int(headers.get("inference-header-content-length", len(body)))
    offset = length
    outputs: dict[str, Any] = {}
    for output in json.loads(body[:length])["outputs"]:
        size = (output.get("parameters") or {}).get("binary_data_size")
        if size is None:
            outputs[output["name"]] = output["data"]
            continue
        raw, offset = body[offset : offset + size], offset + size
        if output["datatype"] == "BYTES":  # each element: a 4-byte little-endian length, then its bytes
            names, at = [], 0
            while at < len(raw):
                (n,) = struct.unpack_from("<I", raw, at)
                names.append(raw[at + 4 : at + 4 + n].decode())
                at += 4 + n
            outputs[output["name"]] = names
        else:
            dtype = {"FP32": "<f4", "INT64": "<i8"}[output["datatype"]]
            outputs[output["name"]] = np.frombuffer(raw, dtype).reshape(output["shape"])
    assert offset == len(body), "bytes beyond the outputs' binary_data_size"
    return outputs


@pytest.mark.serving
def test_v2_binary_tensors_answer_as_the_savedmodel_in_process_in_binary_or_json_as_asked(
    setup: dict, test_images: np.ndarray, in_process: dict
) -> None:
    url = f"{setup['folder'].url}/v2/models/{NAME}/infer"
    names = [CLASS_NAMES[i] for i in in_process["class_id"]]
    status, headers, body = post_binary(url, *binary_request(test_images, {"binary_data_output": True}))
    assert status == 200 and headers["content-type"] == "application/octet-stream", body[:300]
    outputs = read_outputs(headers, body)
    assert isinstance(outputs["probabilities"], np.ndarray) and isinstance(outputs["class_id"], np.ndarray)
    assert_same(outputs["probabilities"], outputs["class_id"].tolist(), in_process)
    assert outputs["class_name"] == names

    # Each output's own binary_data overrides the request's binary_data_output; outputs not named are not sent.
    asked = [{"name": "probabilities", "parameters": {"binary_data": False}}, {"name": "class_id"}]
    status, headers, body = post_binary(url, *binary_request(test_images, {"binary_data_output": True}, asked))
    assert status == 200, body[:300]
    outputs = read_outputs(headers, body)
    assert list(outputs) == ["probabilities", "class_id"] and isinstance(outputs["probabilities"], list)
    assert isinstance(outputs["class_id"], np.ndarray)
    assert_same(np.reshape(outputs["probabilities"], (IMAGES, 10)), outputs["class_id"].tolist(), in_process)

    # Binary in, nothing asked in binary: a plain JSON answer.
    status, headers, body = post_binary(url, *binary_request(test_images))
    assert status == 200 and headers["content-type"] == "application/json", body[:300]
    assert "inference-header-content-length" not in {key.lower() for key in headers}
    outputs = read_outputs(headers, body)
    assert_same(np.reshape(outputs["probabilities"], (IMAGES, 10)), outputs["class_id"], in_process)
    assert outputs["class_name"] == names


def _bad_binary(case: str, image: np.ndarray) -> tuple[bytes, dict]:
    """A one-image binary request spoilt as ``case`` says."""
    body, headers = binary_request(image[None])
    length = int(headers["Inference-Header-Content-Length"])
    if case == "no Inference-Header-Content-Length":
        del headers["Inference-Header-Content-Length"]
    elif case == "header not a number":
        headers["Inference-Header-Content-Length"] = "a lot"
    elif case == "header past the body":
        headers["Inference-Header-Content-Length"] = str(len(body) + 1)
    elif case == "header cuts the JSON short":
        headers["Inference-Header-Content-Length"] = str(length - 1)
    elif case == "binary data short of binary_data_size":
        body = body[:-4]
    elif case == "bytes after the binary data":
        body += b"\0\0\0\0"
    elif case == "binary data short of the shape":
        body = body.replace(b"[1, 28, 28]", b"[2, 28, 28]")
    elif case == "a BYTES length past its data":
        tensor = {"name": "image_bytes", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 8}}
        head = json.dumps({"inputs": [tensor]}).encode()
        body, headers["Inference-Header-Content-Length"] = head + struct.pack("<I", 1000) + b"\x89PNG", str(len(head))
    return body, headers


BAD_BINARY = {
    "no Inference-Header-Content-Length": "needs the Inference-Header-Content-Length header",
    "header not a number": "Inference-Header-Content-Length is 'a lot'",
    "header past the body": "not a length within the body's",
    "header cuts the JSON short": "are not JSON",
    "binary data short of binary_data_size": "has binary_data_size 3136, but only 3132 bytes of the body are left",
    "bytes after the binary data": "the body has 4 bytes beyond",
    "binary data short of the shape": "does not fill its shape [2, 28, 28]",
    "a BYTES length past its data": "input 'image_bytes': its data does not fill its shape [1]",
}


@pytest.mark.serving
@pytest.mark.parametrize("case", list(BAD_BINARY))
def test_a_bad_binary_request_answers_400_with_a_message_and_the_next_good_one_succeeds(
    setup: dict, test_images: np.ndarray, case: str
) -> None:
    url = f"{setup['folder'].url}/v2/models/{NAME}/infer"
    status, _, body = post_binary(url, *_bad_binary(case, test_images[0]))
    assert (status, BAD_BINARY[case] in json.loads(body).get("error", "")) == (400, True), body
    status, headers, body = post_binary(url, *binary_request(test_images[:2]))
    assert status == 200 and len(read_outputs(headers, body)["class_id"]) == 2


class _Failing:
    """A served model whose call fails as no request's fault would: a bug, or TensorFlow out of memory."""

    name = NAME

    async def __call__(self, request: object) -> object:
        raise RuntimeError("out of memory")


@pytest.mark.unit
def test_the_binary_route_in_front_answers_a_server_fault_500_and_refuses_oversized_bodies(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import httpx
    from fastapi import FastAPI

    from bakeoff.components.serving.asgi import in_front

    app = FastAPI()
    app.add_api_route(f"/v2/models/{NAME}/infer", lambda: {"served": "by the application"}, methods=["POST"])
    in_front(app, cast(Any, _Failing()), limit=10_000)
    image = np.zeros((1, 28, 28), np.float32)

    async def ask() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://server") as client:
            url = f"/v2/models/{NAME}/infer"
            return [
                await client.post(url, content=body, headers=headers)
                for body, headers in (binary_request(image), binary_request(np.zeros((4, 28, 28), np.float32)))
            ] + [await client.post(url, json={})]

    fault, oversized, json_request = asyncio.run(ask())
    assert (fault.status_code, fault.json()) == (500, {"error": "RuntimeError : out of memory"})
    assert any(record.exc_info and record.levelname == "ERROR" for record in caplog.records)  # the traceback, logged
    assert oversized.status_code == 413 and "over the limit of 10000" in oversized.json()["error"]
    assert (json_request.status_code, json_request.json()) == (200, {"served": "by the application"})


# Each bad request, and the fragment its 4xx message must hold.
BAD_REQUESTS = {
    "v1 wrong shape": ("v1", {"instances": [[[0] * 27] * 28]}, 400, "28×28"),
    "v1 ragged": ("v1", {"instances": [[[0] * 28] * 27 + [[0] * 3]]}, 400, "ragged"),
    "v1 non-image bytes": ("v1", {"instances": [{"b64": b64(b"just some text")}]}, 400, "not a PNG or JPEG"),
    "v1 truncated png": (
        "v1",
        {"instances": [{"b64": b64(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)}]},
        400,
        "image 0 could not be decoded",
    ),
    "v1 not base64": ("v1", {"instances": [{"b64": "%%%"}]}, 400, "not valid base64"),
    "v1 empty instances": ("v1", {"instances": []}, 400, "at least one image"),
    "v1 no instances": ("v1", {"inputs": {"images": []}}, 400, "instances"),
    "v1 wrong signature name": (
        "v1",
        {"signature_name": "predict", "instances": [[[0] * 28] * 28]},
        400,
        "unknown signature_name 'predict'",
    ),
    "v1 arrays to serving_bytes": (
        "v1",
        {"signature_name": "serving_bytes", "instances": [[[0] * 28] * 28]},
        400,
        "encoded images only",
    ),
    "v1 not json": ("v1", b"{not json", 400, "Unrecognized request format"),
    "v1 oversized body": ("v1", {"instances": [[[255] * 28] * 28] * 120}, 413, "over the limit"),
    "unknown model": ("other", {"instances": [[[0] * 28] * 28]}, 404, "does not exist"),
    "v2 wrong shape": (
        "v2",
        {"inputs": [{"name": "images", "shape": [1, 28, 27], "datatype": "FP32", "data": [0] * 756}]},
        400,
        "28×28",
    ),
    "v2 data short of its shape": (
        "v2",
        {"inputs": [{"name": "images", "shape": [2, 28, 28], "datatype": "FP32", "data": [0] * 784}]},
        400,
        "does not fill",
    ),
    "v2 non-image bytes": (
        "v2",
        {"inputs": [{"name": "image_bytes", "shape": [1], "datatype": "BYTES", "data": [b64(b"text")]}]},
        400,
        "not a PNG or JPEG",
    ),
    "v2 no images": (
        "v2",
        {"inputs": [{"name": "images", "shape": [0, 28, 28], "datatype": "FP32", "data": []}]},
        400,
        "at least one image",
    ),
    "v2 unknown output": (
        "v2",
        {
            "inputs": [{"name": "images", "shape": [1, 28, 28], "datatype": "FP32", "data": [0] * 784}],
            "outputs": [{"name": "logits"}],
        },
        400,
        "unknown output 'logits'",
    ),
}


@pytest.mark.serving
@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_a_bad_request_answers_4xx_with_a_message_and_the_next_good_one_succeeds(
    setup: dict, test_images: np.ndarray, case: str
) -> None:
    protocol, body, status, message = BAD_REQUESTS[case]
    url = setup["folder"].url
    path = {
        "v1": f"/v1/models/{NAME}:predict",
        "v2": f"/v2/models/{NAME}/infer",
        "other": "/v1/models/no-such-model:predict",
    }[protocol]
    got, answer = post(url + path, body)
    assert (got, message in answer.get("error", "")) == (status, True), answer
    good, answer = post(f"{url}/v1/models/{NAME}:predict", {"instances": test_images[:2].tolist()})
    assert good == 200 and len(answer["predictions"]) == 2


def _asking_client(url: str, image: np.ndarray, rounds: int, answers: list) -> None:
    """Sends one image, alternately as a binary V2 and a JSON V1 request, ``rounds`` times over one connection."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    v1 = json.dumps({"instances": [image.tolist()]}).encode()
    v2, headers = binary_request(image[None], {"binary_data_output": True})
    try:
        for round_ in range(rounds):
            if round_ % 2:
                connection.request("POST", f"/v1/models/{NAME}:predict", v1, {"Content-Type": "application/json"})
                response = connection.getresponse()
                answers.append(json.loads(response.read())["predictions"][0]["probabilities"])
            else:
                connection.request("POST", f"/v2/models/{NAME}/infer", v2, headers)
                response = connection.getresponse()
                answers.append(read_outputs(dict(response.headers), response.read())["probabilities"][0])
    finally:
        connection.close()


@pytest.mark.serving
def test_concurrent_requests_each_get_their_own_images_answer(
    setup: dict, test_images: np.ndarray, in_process: dict
) -> None:
    """The folder server merges concurrent requests (the default --max-batch): no answer may go to another
    request."""
    answers: list[list] = [[] for _ in test_images]
    clients = [
        threading.Thread(target=_asking_client, args=(setup["folder"].url, image, 20, answers[index]))
        for index, image in enumerate(test_images)
    ]
    for client in clients:
        client.start()
    for client in clients:
        client.join(120)
    for index, per_client in enumerate(answers):
        assert len(per_client) == 20
        np.testing.assert_allclose(
            np.asarray(per_client, np.float32),
            np.broadcast_to(in_process["probabilities"][index], (20, 10)),
            rtol=0,
            atol=1e-6,
        )


def _batched(max_batch: int, window_ms: float, values: list[float], release_after: int) -> tuple[list, list[int]]:
    """``values`` (one image each) through a Batcher whose model calls hold until ``release_after`` of them have
    started: each batch's outputs or error, and the images of each model call in the order they ran."""
    from bakeoff.components.serving.batching import Batcher
    from bakeoff.components.serving.loaded import Batch, Version

    calls: list[int] = []
    started, release = threading.Semaphore(0), threading.Event()

    def run(batch: Batch) -> dict[str, np.ndarray]:
        calls.append(len(batch.tensor))
        started.release()
        assert release.wait(60), "the model calls were never released"
        if (np.asarray(batch.tensor) < 0).any():
            raise ValueError("a negative pixel")
        return {"doubled": np.asarray(batch.tensor) * 2}

    async def main() -> list:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(2 * len(values)))  # calls and waits
        batcher = Batcher(run, max_batch, window_ms)
        version = cast(Version, SimpleNamespace(number=1))
        batches = [Batch(ARRAYS_SIGNATURE, np.full((1, 2, 2), value, np.float32), version) for value in values]
        first = asyncio.ensure_future(batcher(batches[0]))
        await asyncio.to_thread(started.acquire)  # the model is busy with the first batch
        rest = [asyncio.ensure_future(batcher(batch)) for batch in batches[1:]]
        for _ in range(release_after - 1):
            assert await asyncio.to_thread(started.acquire, timeout=20), f"calls so far: {calls}"
        await asyncio.sleep(0)  # the batches submitted last have reached the batcher
        release.set()
        return await asyncio.gather(first, *rest, return_exceptions=True)

    return asyncio.run(main()), calls


def _rows(result: object) -> object:
    return result["doubled"][:, 0, 0].tolist() if isinstance(result, dict) else repr(result)


@pytest.mark.unit
def test_a_model_that_averages_mirrors_runs_each_operation_on_half_the_cores(tmp_path: Path) -> None:
    """Its two views run side by side (tuning.intra_op_threads) when requests merge; other models, unmerged requests
    and SavedModels without a manifest bakeoff can read keep TensorFlow's own threads."""
    sample = manifest()
    for random_flip, threads in ((True, max(1, (os.cpu_count() or 1) // 2)), (False, None)):
        version = tmp_path / str(random_flip)
        version.mkdir()
        spec = {**sample.spec, "training": {**sample.spec["training"], "random_flip": random_flip}}
        (version / registry.MANIFEST).write_text(dataclasses.replace(sample, spec=spec).to_json())
        assert intra_op_threads(version, max_batch=64) == threads
        assert intra_op_threads(version, max_batch=1) is None
    assert intra_op_threads(tmp_path, max_batch=64) is None
    (tmp_path / registry.MANIFEST).write_text(dataclasses.replace(sample, spec={}).to_json())
    assert intra_op_threads(tmp_path, max_batch=64) is None
    (tmp_path / registry.MANIFEST).write_text("{}")
    assert intra_op_threads(tmp_path, max_batch=64) is None


@pytest.mark.unit
def test_batches_that_arrive_while_the_model_is_busy_run_as_one_call_and_each_gets_its_own_rows() -> None:
    # A long window: only the first call's end lets the others go, together.
    results, calls = _batched(64, 60_000, [float(i) for i in range(8)], release_after=1)
    assert [_rows(result) for result in results] == [[2.0 * i] for i in range(8)]
    assert calls == [1, 7]


@pytest.mark.unit
def test_waiting_batches_go_after_the_window_even_while_the_model_is_busy() -> None:
    results, calls = _batched(64, 1, [float(i) for i in range(8)], release_after=2)
    assert calls == [1, 7] and [_rows(result) for result in results] == [[2.0 * i] for i in range(8)]


@pytest.mark.unit
def test_max_batch_1_runs_each_batch_alone_as_it_arrives() -> None:
    results, calls = _batched(1, 60_000, [float(i) for i in range(8)], release_after=8)
    assert calls == [1] * 8 and [_rows(result) for result in results] == [[2.0 * i] for i in range(8)]


@pytest.mark.unit
def test_a_failing_merged_call_runs_each_batch_again_alone_so_only_the_bad_one_fails() -> None:
    results, calls = _batched(64, 60_000, [0.0, 1.0, -1.0, 3.0], release_after=1)
    assert [_rows(result) for result in results] == [[0.0], [2.0], "ValueError('a negative pixel')", [6.0]]
    assert calls == [1, 3, 1, 1, 1]


def _looping_client(index: int, url: str, image: list, answers: list, stop: threading.Event) -> None:
    """Asks for one image's class over one kept-alive connection until ``stop``; records (index, status, class_id or
    error)."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    body = json.dumps({"instances": [image]}).encode()
    try:
        while not stop.is_set():
            try:
                connection.request("POST", f"/v1/models/{WATCHED}:predict", body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                answer = json.loads(response.read())
                answers.append(
                    (index, response.status, answer["predictions"][0]["class_id"] if response.status == 200 else answer)
                )
            except (OSError, http.client.HTTPException, ValueError) as error:
                answers.append((index, None, repr(error)))
                connection.close()
    finally:
        connection.close()


def _wait_for(condition, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.serving
def test_a_newer_version_is_swapped_in_under_load_never_a_partial_one_and_no_request_fails(
    setup: dict, test_images: np.ndarray
) -> None:
    store, tmp = setup["store"], setup["tmp"]
    (first,) = [m.version for m in registry.list_versions(store, WATCHED)]
    # A publisher caught mid-copy: a higher version folder whose manifest (the completeness mark) is not there yet.
    partial = tmp / "store" / "models" / WATCHED / str(first + 5)
    subprocess.run(["cp", "-r", str(_constant(tmp, 9)), str(partial)], check=True)
    answers: list = []
    stop = threading.Event()
    clients = [
        threading.Thread(target=_looping_client, args=(i, setup["watched"].url, test_images[i].tolist(), answers, stop))
        for i in range(2)
    ]
    for client in clients:
        client.start()
    try:
        _wait_for(lambda: len(answers) >= 20, "answers from the first version")
        newer = registry.publish(store, WATCHED, _constant(tmp, 7), manifest(variant="always-7"))
        assert newer > first + 5
        _wait_for(lambda: any(answer[1:] == (200, 7) for answer in answers[-5:]), "the newer version's answers")
        seen = len(answers)
        _wait_for(lambda: len(answers) >= seen + 20, "answers after the switch")
    finally:
        stop.set()
        for client in clients:
            client.join(60)
    failures = [answer for answer in answers if answer[1] != 200]
    assert not failures, failures[:5]
    for index in range(len(clients)):
        classes = [class_id for client, _, class_id in answers if client == index]
        assert 9 not in classes, "a partial version was served"
        # One client's requests follow each other: once one got the newer version, every later one does.
        switch = classes.index(7)
        assert switch > 0 and set(classes[:switch]) == {3} and set(classes[switch:]) == {7}, classes
    log = Path(setup["tmp"] / "watched-server.log").read_text()
    assert f"now serving version {newer} (was {first})" in log


@pytest.mark.unit
def test_a_model_folder_offers_its_complete_versions_or_is_one_savedmodel(tmp_path: Path) -> None:
    from bakeoff.components.serving.versions import FolderSource

    for name, complete in (("1", True), ("2", False), ("10", True), ("notes", True)):
        (tmp_path / "layout" / name).mkdir(parents=True)
        (tmp_path / "layout" / name / "saved_model.pb").write_bytes(b"")
        if complete:
            (tmp_path / "layout" / name / registry.MANIFEST).write_text('{"version": 0}')
    assert FolderSource(tmp_path / "layout").versions() == [1, 10], "numbered folders with a manifest, numerically"
    single = tmp_path / "layout" / "10"
    assert FolderSource(single).versions() == [0] and FolderSource(single).fetch(0) == single
    (single / registry.MANIFEST).write_text(manifest(version=10).to_json())
    assert FolderSource(single).versions() == [10]
    (single / registry.MANIFEST).write_text(
        '{"version": 10}'
    )  # no manifest of this bakeoff's: a bare SavedModel's number
    assert FolderSource(single).versions() == [0]


@pytest.mark.unit
def test_the_heap_settled_again_frees_what_was_frozen_then_dropped() -> None:
    """A replaced version's reference cycles must not stay frozen forever: each swap settles the heap again."""
    import gc
    import weakref

    from bakeoff.components.serving.tuning import settle_heap

    class Node:
        cycle: object = None

    node = Node()
    node.cycle = node  # only the collector frees a cycle
    alive = weakref.ref(node)
    try:
        settle_heap()
        del node
        gc.collect()
        assert alive() is not None, "frozen: out of the collector's walks"
        settle_heap()
        assert alive() is None, "settled again: collected"
    finally:
        gc.unfreeze()


@pytest.mark.unit
def test_the_heap_settled_gives_the_memory_freed_meanwhile_back_to_the_system() -> None:
    """What a replaced version freed must not stay with malloc: the server's memory would grow with each swap."""
    import ctypes
    import gc

    from bakeoff.components.serving.tuning import settle_heap

    def resident_mb() -> float:
        return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS")) / 1024

    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = (
        ctypes.c_void_p,
        [ctypes.c_size_t],
        [ctypes.c_void_p],
    )
    blocks = [libc.malloc(4096) for _ in range(25_000)]  # 100 MB in blocks malloc takes from its heap, not mmap
    for block in blocks:
        ctypes.memset(block, 1, 4096)  # written: resident
    for block in blocks[:-1]:
        libc.free(block)  # the last one kept, so the freed pages lie below it: malloc keeps them
    kept = resident_mb()
    try:
        settle_heap()
        assert resident_mb() < kept - 50, "the freed 100 MB went back"
    finally:
        gc.unfreeze()
        libc.free(blocks[-1])


@pytest.mark.unit
def test_a_swap_settles_the_heap_once_no_request_holds_the_replaced_version(tmp_path: Path) -> None:
    """The replaced version's memory can only go back once the last request answering from it is done: settling
    before that, as one poll after the swap did, kept it for good (benchmarks/journal.md, "The soak's memory")."""
    import gc

    from bakeoff.components.serving.versions import FolderSource
    from bakeoff.components.serving.watcher import Watcher

    @dataclasses.dataclass
    class Loaded:
        number: int

    for number in (1, 2):
        (tmp_path / str(number)).mkdir()
        (tmp_path / str(number) / registry.MANIFEST).write_text("{}")
    model = SimpleNamespace(current=Loaded(1))
    model.swap = lambda version: setattr(model, "current", version)
    answering = model.current  # a request still answering from version 1
    watcher = Watcher(FolderSource(tmp_path), cast(Any, model), 60, lambda _, number: cast(Any, Loaded(number)))
    gc.unfreeze()
    try:
        watcher.poll()
        assert model.current == Loaded(2), "swapped in"
        watcher.poll()
        assert gc.get_freeze_count() == 0, "not settled while a request holds version 1"
        del answering
        watcher.poll()
        assert gc.get_freeze_count() > 0, "settled once none does"
    finally:
        gc.unfreeze()


@pytest.mark.unit
@pytest.mark.parametrize("problem", ["no published version", "port in use"])
def test_serve_fails_in_one_line_before_loading_anything(problem: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    if problem == "port in use":
        (tmp_path / "model").mkdir()
        (tmp_path / "model" / "saved_model.pb").write_bytes(b"never loaded")
        registry.publish(open_store(str(store)), "fashion-mnist", tmp_path / "model", manifest())
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1] if problem == "port in use" else free_port()
        result = subprocess.run(
            [BAKEOFF, "serve", "--store", str(store), "--port", str(port)], capture_output=True, text=True, timeout=120
        )
    assert result.returncode == 1
    # One line and nothing else: TensorFlow and KServe, which log as they start, were never imported.
    assert result.stderr.splitlines() == [result.stderr.strip()] and result.stdout == ""
    expected = {"no published version": "no published version in ", "port in use": f"cannot listen on port {port}"}
    assert result.stderr.startswith(f"bakeoff: error: {expected[problem]}"), result.stderr


@pytest.mark.unit
@pytest.mark.parametrize("problem", ["unreadable file", "not an image", "server down"])
def test_predict_fails_in_one_line(problem: str, tmp_path: Path) -> None:
    image = tmp_path / "image.png"
    if problem == "not an image":
        image.write_text("hello")
    elif problem == "server down":
        image.write_bytes(b"\x89PNG\r\n\x1a\n")
    result = subprocess.run(
        [BAKEOFF, "predict", str(image), "--url", f"http://127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    expected = {
        "unreadable file": "cannot read",
        "not an image": "is not a PNG or JPEG file",
        "server down": "no model server answers",
    }
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [result.stderr.strip()] and expected[problem] in result.stderr, result.stderr


@pytest.mark.unit
def test_a_one_channel_model_takes_arrays_with_or_without_the_channel_axis_and_refuses_colour() -> None:
    """A model trained on the artifact's [n, 28, 28, 1] keeps answering clients written for [n, 28, 28]."""
    from kserve.errors import InvalidInput

    from bakeoff.components.serving.loaded import Version
    from bakeoff.components.serving.model import pixel_arrays
    from bakeoff.components.storage.records import Preprocessing

    version = Version(1, Path("."), None, None, (28, 28, 1), CLASS_NAMES, Preprocessing(28, 28, 1, "bilinear"))
    for sent in (np.zeros((2, 28, 28)), np.zeros((2, 28, 28, 1))):
        assert list(pixel_arrays(sent.tolist(), version, 2).shape) == [2, 28, 28, 1]
        assert list(pixel_arrays(sent.astype(np.uint8), version, 2).shape) == [2, 28, 28, 1]
    with pytest.raises(
        InvalidInput, match=r"images must be 2×28×28×1 \(or 2×28×28\) numbers .* got shape \[2, 28, 28, 3\]"
    ):
        pixel_arrays(np.zeros((2, 28, 28, 3)).tolist(), version, 2)
