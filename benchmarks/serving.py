"""Serving overhead: the model server over HTTP against the same SavedModel called in process, on the same images.

Requests are JSON arrays and PNG files to V1 `:predict`, and FP32 bytes in V2's binary tensor data extension.
"""

from __future__ import annotations

import base64
import functools
import gc
import http.client
import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.components.storage.records import (
    DatasetInfo,
    Decision,
    Manifest,
    Preprocessing,
    PublishedMetrics,
    Score,
    SelectionBasis,
    WorkerMetrics,
)
from benchmarks.harness import Context, Figure, free_port, start_server

# The default bake-off's winner as published (results.md): the batch_norm CNN, averaging each image and its mirror.
MODEL: dict[str, Any] = {"filters": [32, 64, 64], "dense_units": 64, "batch_norm": True}
MIRROR_AVERAGE = True
BATCHES = (1, 64)
# (input kind, images per request): JSON arrays and PNG files to V1, FP32 bytes to V2's binary extension ("bin").
CASES = (("img", 1), ("img", 64), ("png", 64), ("bin", 1), ("bin", 64))
KINDS = {"img": "JSON array", "png": "PNG file", "bin": "binary FP32 image"}
CONCURRENCY = (1, 8)
REQUESTS = {1: 400, 64: 60}  # per client thread and repetition: a few seconds each
DISTINCT = 16  # different image batches cycled through, so no layer sees one input over and over
NAME = "bench"


def manifest() -> Manifest:
    """The untrained model's manifest: the server needs one to serve a version; none of its numbers is read."""
    metrics = WorkerMetrics(
        variant=NAME,
        history={},
        epochs=0,
        schedule_epochs=0,
        rung=0,
        attempt=1,
        resumed_from_epoch=0,
        epochs_trained=0,
        optimizer_iterations=0,
        learning_rate=0.0,
        workers=1,
        num_replicas_in_sync=1,
        global_batch_size=1,
        steps_per_epoch=0,
        train_examples=0,
        train_seconds=0.0,
        backup_seconds=0.0,
        validation_seconds=0.0,
        validation_examples=0,
        examples_per_second=0.0,
        examples_per_second_steady=False,
        peak_rss_mb=0.0,
        allocator="default",
        onednn=False,
    )
    return Manifest(
        model=NAME,
        run_id=NAME,
        variant=NAME,
        spec={"name": NAME, "model": {"type": "cnn", **MODEL}, "training": {"random_flip": MIRROR_AVERAGE}},
        metrics=PublishedMetrics(0.0, 0.0, 0.0, 0.0, metrics),
        selection=SelectionBasis("val_accuracy", "max", [NAME]),
        dataset=DatasetInfo("", {}, Preprocessing(28, 28, 1, "bilinear")),
        promotion=Decision(True, True, 0.0, None, Score(NAME, "val_accuracy", 0.0)),
        source_uri="",
        created="1970-01-01T00:00:00+00:00",
    )


def _binary_request(images: np.ndarray) -> tuple[dict[str, str], bytes]:
    """V2's binary extension: the JSON, then the images as FP32 bytes; the outputs asked back as bytes too."""
    data = images.astype("<f4").tobytes()
    tensor = {"name": "images", "shape": list(images.shape), "datatype": "FP32"}
    head = json.dumps(
        {
            "inputs": [{**tensor, "parameters": {"binary_data_size": len(data)}}],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    return {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(head))}, head + data


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def _load(clients: int, requests: int, call: Callable[[int, int], None]) -> tuple[list[float], float]:
    """Runs ``call(client, i)`` ``requests`` times on each of ``clients`` threads: (every latency, wall seconds)."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    start = threading.Barrier(clients + 1)

    def client(index: int) -> None:
        start.wait()
        for i in range(requests):
            began = time.perf_counter()
            call(index, i)
            latencies[index].append(time.perf_counter() - began)

    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return [value for per in latencies for value in per], time.perf_counter() - began


def _start_server(store_uri: str, port: int, log: Path, *flags: str) -> subprocess.Popen:
    server = [sys.executable, "-m", "bakeoff.components.serving.server", "--store", store_uri, "--model-name", NAME]
    return start_server([*server, "--version", "1", "--http-port", str(port), *flags], port, log)


def _rate_figure(key: str, rates: list[float], base: list[float], detail: str) -> Figure:
    """The median over repetitions of ``rates`` ÷ ``base``.

    Each repetition's sides ran back to back: their ratio holds while other load on the machine comes and goes.
    """
    ratio = statistics.median(s / h for s, h in zip(rates, base, strict=True))
    return Figure(
        key,
        ratio,
        "×",
        detail=f"{detail}; medians {statistics.median(rates):.0f} and {statistics.median(base):.0f} images/s",
    )


def serving(context: Context) -> list[Figure]:
    """p50/p99 latency and throughput of `:predict` ÷ the same SavedModel in process, 1 and 64 images, 1 and 8
    clients."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf

    from bakeoff.components.serving.tuning import threads_for

    try:  # in process as the server runs it (tuning.intra_op_threads), where no entry before set TensorFlow going
        tf.config.threading.set_intra_op_parallelism_threads(threads_for(MIRROR_AVERAGE) or 0)
    except RuntimeError:
        pass  # TensorFlow's default: the figures' details say which
    inside = f"{tf.config.threading.get_intra_op_parallelism_threads() or 'TensorFlow’s default'} intra-op threads"
    from bakeoff.components import defaults
    from bakeoff.components.data.fashion_mnist import read_idx_dir
    from bakeoff.components.modeling.cnn import CnnConfig
    from bakeoff.components.modeling.cnn import build as build_cnn
    from bakeoff.components.modeling.savedmodel import ARRAYS_SIGNATURE, BYTES_SIGNATURE, export
    from bakeoff.components.storage import open_store, registry

    images = read_idx_dir(Path(defaults.SOURCE))["test"].images
    model_dir = context.scratch / "serving-model"
    # Untrained weights: latency does not depend on them.
    export(
        build_cnn((28, 28), 10, CnnConfig(**MODEL)),
        model_dir,
        [f"class {i}" for i in range(10)],
        mirror_average=MIRROR_AVERAGE,
    )
    store_uri = f"file://{context.scratch / 'serving-store'}"
    registry.publish(open_store(store_uri), NAME, model_dir, manifest())
    loaded = tf.saved_model.load(str(model_dir))

    # Arrays: clients send uint8 pixels as JSON integers, or as FP32 bytes (binary); in process gets the float32
    # array (serving_default). PNG: both sides get the same PNG files (serving_bytes), as `bakeoff predict` sends them.
    batches = {n: [images[i * n : (i + 1) * n] for i in range(DISTINCT)] for n in BATCHES}
    pngs = [[tf.io.encode_png(image[:, :, None]).numpy() for image in batch] for batch in batches[64]]
    inputs = {(kind, n): [{"images": tf.constant(b, tf.float32)} for b in batches[n]] for kind, n in CASES}
    inputs[("png", 64)] = [{"image_bytes": tf.constant(batch)} for batch in pngs]
    json_headers = {"Content-Type": "application/json"}
    predict, infer = f"/v1/models/{NAME}:predict", f"/v2/models/{NAME}/infer"
    requests = {
        ("img", n): [(predict, json_headers, json.dumps({"instances": b.tolist()}).encode()) for b in batches[n]]
        for n in BATCHES
    }
    requests[("png", 64)] = [
        (predict, json_headers, json.dumps({"instances": [{"b64": base64.b64encode(p).decode()} for p in b]}).encode())
        for b in pngs
    ]
    for n in BATCHES:
        requests[("bin", n)] = [(infer, *_binary_request(b)) for b in batches[n]]
    signatures = {
        "img": loaded.signatures[ARRAYS_SIGNATURE],
        "bin": loaded.signatures[ARRAYS_SIGNATURE],
        "png": loaded.signatures[BYTES_SIGNATURE],
    }
    # The server as it ships, and one that runs each request alone: what merging concurrent requests gains.
    ports = {"served": free_port(), "unbatched": free_port()}
    servers = [
        _start_server(store_uri, ports["served"], context.scratch / "serving-server.log"),
        _start_server(store_uri, ports["unbatched"], context.scratch / "unbatched-server.log", "--max-batch", "1"),
    ]
    samples: dict[str, dict] = {}
    gc.collect()
    gc.freeze()  # as the server does: no full collection of TensorFlow's objects in the middle of either side's timings
    try:
        for _ in range(context.repetitions):  # interleaved, so a noisy minute hits both sides
            for kind, n in CASES:
                for clients in CONCURRENCY:
                    connections = {
                        side: [http.client.HTTPConnection("127.0.0.1", port) for _ in range(clients)]
                        for side, port in ports.items()
                        if side == "served" or (n == 1 and clients > 1)  # unbatched: only where merging can happen
                    }

                    def in_process(client: int, i: int, case: tuple = (kind, n)) -> None:
                        signatures[case[0]](**inputs[case][(client + i) % DISTINCT])["probabilities"].numpy()

                    def served(client: int, i: int, connections: list, case: tuple = (kind, n)) -> None:
                        connection = connections[client]
                        path, headers, body = requests[case][(client + i) % DISTINCT]
                        connection.request("POST", path, body, headers)
                        response = connection.getresponse()
                        data = response.read()
                        if response.status != 200:
                            raise RuntimeError(f"{response.status}: {data[:300]!r}")

                    sides = [("in_process", in_process)]
                    sides += [(side, functools.partial(served, connections=c)) for side, c in connections.items()]
                    for side, call in sides:
                        call(0, 0)  # warm: the connection, and the first call of a shape
                        latencies, seconds = _load(clients, REQUESTS[n], call)
                        entry = samples.setdefault(
                            f"{n}{kind}_c{clients}_{side}", {"latency_ms": [], "images_per_second": []}
                        )
                        entry["latency_ms"].extend(1000 * value for value in latencies)
                        entry["images_per_second"].append(n * len(latencies) / seconds)
                    for connection in itertools.chain(*connections.values()):
                        connection.close()
    finally:
        gc.unfreeze()
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(30)
    context.samples["serving"] = {
        key: {
            "p50_ms": _percentile(v["latency_ms"], 50),
            "p99_ms": _percentile(v["latency_ms"], 99),
            "images_per_second": v["images_per_second"],
        }
        for key, v in samples.items()
    }
    figures = []
    for kind, n in CASES:
        for clients in CONCURRENCY:
            here, there = samples[f"{n}{kind}_c{clients}_in_process"], samples[f"{n}{kind}_c{clients}_served"]
            label = f"{n} {KINDS[kind]}{'s' if n > 1 else ''}, {clients} client{'s' if clients > 1 else ''}"
            for q in (50, 99):
                served_ms, local_ms = _percentile(there["latency_ms"], q), _percentile(here["latency_ms"], q)
                figures.append(
                    Figure(
                        f"serving_{n}{kind}_c{clients}_p{q}_ratio",
                        served_ms / local_ms,
                        "×",
                        detail=f"{label}: p{q} {served_ms:.2f} ms served ÷ {local_ms:.2f} ms in process ({inside})",
                    )
                )
            figures.append(
                _rate_figure(
                    f"serving_{n}{kind}_c{clients}_throughput_ratio",
                    there["images_per_second"],
                    here["images_per_second"],
                    f"{label}: median of each repetition's images/s served ÷ in process ({inside}), run back to back",
                )
            )
    for kind in ("img", "bin"):
        alone = samples[f"1{kind}_c1_in_process"]["images_per_second"]
        for side in ("served", "unbatched"):
            merged = side == "served"
            figures.append(
                _rate_figure(
                    f"serving_1{kind}_c8_{'batched' if merged else 'unbatched'}_vs_one_at_a_time",
                    samples[f"1{kind}_c8_{side}"]["images_per_second"],
                    alone,
                    f"8 clients sending one {KINDS[kind]} each, "
                    + ("merged into model calls (the default)" if merged else "each its own model call (--max-batch 1)")
                    + f": images/s ÷ one caller of the model in process ({inside}), one image at a time; median of each"
                    " repetition's ratio",
                )
            )
        overhead = _percentile(samples[f"1{kind}_c1_served"]["latency_ms"], 50) - _percentile(
            samples[f"1{kind}_c1_in_process"]["latency_ms"], 50
        )
        request = "`:predict` (JSON in, JSON out)" if kind == "img" else "V2 `infer` (binary FP32 in and out)"
        figures.append(
            Figure(
                f"serving_1{kind}_p50_overhead_ms",
                overhead,
                "ms",
                detail=f"one image, one client: p50 of {request} over loopback HTTP minus p50 of the serving_default"
                f" signature called in process ({inside}); the default winner's shape (batch_norm CNN,"
                " mirror-averaged), KServe ModelServer, one uvicorn worker",
            )
        )
    return figures
