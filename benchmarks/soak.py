"""Serving under load while versions swap: concurrent clients against `bakeoff serve` while a new version is published.

The clients mix JSON arrays and PNG files to V1 `:predict` and binary FP32 tensors to V2 `infer`, of 1 and 64
images each. Each version answers one class for every image (its output bias outweighs the untrained network), so
an answer shows which version computed each of its images, and must name that same version.
"""

from __future__ import annotations

import base64
import dataclasses
import http.client
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.harness import Context, Figure, free_port, start_server

NAME = "soak"
KINDS = (("json", 1), ("json", 64), ("png", 1), ("png", 64), ("bin", 1), ("bin", 64))
DISTINCT = 8  # different image batches per kind, cycled through
POLL_SECONDS = 0.5  # how often the server looks for a newer version: the swap follows the publication within it
PHASES = ("before", "during", "after")
RSS_EVERY = 0.5  # seconds between two readings of the server's resident memory
LAST_SWAP_SECONDS = 60.0  # how long the load may go on past its seconds for the last new version's first answer


@dataclasses.dataclass(frozen=True)
class Size:
    clients: int = 32
    seconds: float = 60.0  # of load (and until the last new version answers); new versions at even intervals
    model: tuple[tuple[int, ...], int, bool] = ((32, 64, 64), 64, True)  # filters, dense units, batch norm
    swaps: int = 3  # new versions published during the load, at even intervals; 0: none, the load alone


SMALL_MODEL = ((8,), 16, False)  # the tests' model: a soak's shape without the bench's compute


@dataclasses.dataclass(frozen=True)
class Answer:
    """One request: when it started (seconds since the load began), its latency, and what came back."""

    client: int
    kind: str
    started: float
    seconds: float
    version: str | None  # the version the answer names; None: the request failed
    error: str  # why it failed, or why the answer is not wholly the named version's; empty when neither
    mixed: bool = False  # answered, but not every image by the version it names


@dataclasses.dataclass(frozen=True)
class Soak:
    """What a soak saw: every answer, when the first new version was published and first answered, the server's
    RSS."""

    answers: list[Answer]
    published: float  # seconds since the load began: the first new version's publication (no swap: the end)
    swapped: float | None  # the first answer from the first new version
    versions: dict[str, int]  # version → the class it answers
    # at the start of the load (after one request of each kind), just before the first new version's publication
    # (without one: at half time), and at the end of the load
    rss_mb: tuple[float, float, float]
    publications: list[float] = dataclasses.field(default_factory=list)  # every new version's, seconds
    rss_timeline: list[tuple[float, float]] = dataclasses.field(default_factory=list)  # (seconds, MB) each RSS_EVERY

    def failed(self) -> list[Answer]:
        return [a for a in self.answers if a.version is None]

    def mixed(self) -> list[Answer]:
        return [a for a in self.answers if a.mixed]

    def phase(self, answer: Answer) -> str:
        if answer.started < self.published:
            return "before"
        return "during" if self.swapped is None or answer.started < self.swapped else "after"


def export_version(path: Path, class_id: int, size: Size) -> Path:
    """The bench's CNN, untrained, whose every answer is ``class_id``: mirror-averaged as the default's winner."""
    from bakeoff.components.modeling.cnn import CnnConfig
    from bakeoff.components.modeling.cnn import build as build_cnn
    from bakeoff.components.modeling.savedmodel import export

    filters, dense, batch_norm = size.model
    model = build_cnn((28, 28), 10, CnnConfig(filters=filters, dense_units=dense, batch_norm=batch_norm))
    weights, bias = model.layers[-1].get_weights()
    bias[class_id] = 50.0  # far above any logit the untrained layers give
    model.layers[-1].set_weights([weights, bias])
    export(model, path, [f"class {i}" for i in range(10)], mirror_average=True)
    return path


def _requests(images: np.ndarray) -> dict[str, list[tuple[str, dict[str, str], bytes, int]]]:
    """Per kind ("json 64", ...), DISTINCT requests: (path, headers, body, images in it)."""
    import tensorflow as tf

    predict, infer = f"/v1/models/{NAME}:predict", f"/v2/models/{NAME}/infer"
    json_headers = {"Content-Type": "application/json"}
    made: dict[str, list[tuple[str, dict[str, str], bytes, int]]] = {}
    for kind, n in KINDS:
        batches = [images[(i * n) % len(images) :][:n] for i in range(DISTINCT)]
        if kind == "json":
            bodies = [(predict, json_headers, json.dumps({"instances": b.tolist()}).encode()) for b in batches]
        elif kind == "png":
            bodies = [
                (
                    predict,
                    json_headers,
                    json.dumps(
                        {
                            "instances": [
                                {"b64": base64.b64encode(tf.io.encode_png(image[:, :, None]).numpy()).decode()}
                                for image in b
                            ]
                        }
                    ).encode(),
                )
                for b in batches
            ]
        else:
            bodies = [(infer, *_binary(b)) for b in batches]
        made[f"{kind} {n}"] = [(path, headers, body, n) for path, headers, body in bodies]
    return made


def _binary(images: np.ndarray) -> tuple[dict[str, str], bytes]:
    """V2's binary extension: the JSON head, then the images as FP32 bytes; class ids asked back as bytes too."""
    data = images.astype("<f4").tobytes()
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "images",
                    "shape": list(images.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": len(data)},
                }
            ],
            "outputs": [{"name": "class_id", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(head))}, head + data


def classes_in(response: http.client.HTTPResponse, data: bytes) -> tuple[str, list[int]]:
    """The version an answer names and the class it gives each image, from a V1 JSON or a V2 binary answer."""
    head_length = response.getheader("Inference-Header-Content-Length")
    if head_length is None:
        body = json.loads(data)
        if "predictions" in body:
            return body.get("model_version", ""), [p["class_id"] for p in body["predictions"]]
        output = next(o for o in body["outputs"] if o["name"] == "class_id")
        return body.get("model_version", ""), list(output["data"])
    head = json.loads(data[: int(head_length)])
    offset, classes = int(head_length), []
    for output in head["outputs"]:
        size = output.get("parameters", {}).get("binary_data_size", 0)
        if output["name"] == "class_id":
            classes = np.frombuffer(data[offset : offset + size], "<i8").tolist()
        offset += size
    return head.get("model_version", ""), classes


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants, from /proc."""
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue  # ended meanwhile
    return total


def serve(store_uri: str, port: int, log: Path) -> subprocess.Popen:
    """`bakeoff serve` of the store's latest version, following newer ones; returns once it answers ready."""
    bakeoff = str(Path(sys.executable).parent / "bakeoff")
    following = ["--model-name", NAME, "--poll-seconds", str(POLL_SECONDS)]
    return start_server([bakeoff, "serve", "--store", store_uri, *following, "--port", str(port)], port, log)


def _ask(connection: http.client.HTTPConnection, request: tuple[str, dict[str, str], bytes, int]) -> tuple[str, list]:
    path, headers, body, _ = request
    connection.request("POST", path, body, headers)
    response = connection.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {data[:200]!r}")
    return classes_in(response, data)


def soak(
    port: int,
    pid: int,
    images: np.ndarray,
    size: Size,
    versions: dict[str, int],
    publish: Callable[[], tuple[str, int]],
) -> Soak:
    """``size.clients`` clients for ``size.seconds`` against the server on ``port`` (process ``pid``); ``size.swaps``
    times, at even intervals, ``publish()`` publishes a new version and returns (its number, its class)."""
    requests = _requests(images)
    kinds = list(requests)
    warm = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    for kind in kinds:  # every shape once, so the start's RSS holds what any request needs
        _ask(warm, requests[kind][0])
    warm.close()
    answers: list[Answer] = []
    expected = dict(versions)
    stop = threading.Event()
    began = time.monotonic()

    def client(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        i = 0
        while not stop.is_set():
            kind = kinds[(index + i) % len(kinds)]
            request = requests[kind][(index + i) % DISTINCT]
            started = time.monotonic()
            try:
                version, classes = _ask(connection, request)
            except (OSError, http.client.HTTPException, RuntimeError, ValueError, KeyError) as failure:
                answers.append(Answer(index, kind, started - began, time.monotonic() - started, None, repr(failure)))
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            else:
                wanted = expected.get(version)
                whole = len(classes) == request[3] and wanted is not None and set(classes) == {wanted}
                why = "" if whole else f"version {version!r} answered classes {sorted(set(classes))}"
                answers.append(
                    Answer(index, kind, started - began, time.monotonic() - started, version, why, not whole)
                )
            i += 1
        connection.close()

    timeline: list[tuple[float, float]] = []

    def watch_memory() -> None:
        while not stop.wait(RSS_EVERY):
            timeline.append((time.monotonic() - began, rss_mb(pid)))

    threads = [threading.Thread(target=client, args=(index,)) for index in range(size.clients)]
    memory = threading.Thread(target=watch_memory)
    start = rss_mb(pid)
    timeline.append((time.monotonic() - began, start))
    for thread in [*threads, memory]:
        thread.start()
    publications, numbers = [], []
    time.sleep(size.seconds / (size.swaps + 1) if size.swaps else size.seconds / 2)
    warmed = rss_mb(pid)  # the load's own growth is behind it: what follows is the swaps'
    for swap in range(size.swaps):
        time.sleep(max(0.0, size.seconds * (swap + 1) / (size.swaps + 1) - (time.monotonic() - began)))
        publications.append(time.monotonic() - began)
        number, class_id = publish()
        expected[number] = class_id
        numbers.append(number)
    time.sleep(max(0.0, size.seconds - (time.monotonic() - began)))
    last_swap = time.monotonic() + LAST_SWAP_SECONDS  # the load ends once the last version answers, so the end's
    while numbers and time.monotonic() < last_swap:  # RSS is after every swap, not in the middle of one
        if any(answer.version == numbers[-1] for answer in answers[-4 * size.clients :]):
            break
        time.sleep(0.1)
    stop.set()
    for thread in [*threads, memory]:
        thread.join(180)
    if numbers:  # the server settles its heap at its next poll once no request holds the version it replaced
        time.sleep(2 * POLL_SECONDS)
    end = rss_mb(pid)
    timeline.append((time.monotonic() - began, end))
    swapped = min((a.started + a.seconds for a in answers if numbers and a.version == numbers[0]), default=None)
    return Soak(
        sorted(answers, key=lambda a: a.started),
        publications[0] if publications else size.seconds,
        swapped,
        expected,
        (start, warmed, end),
        publications,
        timeline,
    )


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def run(scratch: Path, size: Size, images: np.ndarray) -> Soak:
    """A store with version 1, `bakeoff serve` on it, and the soak on ``images``, publishing ``size.swaps`` newer
    versions during the load, each answering another class than the one before."""
    from bakeoff.components.storage import open_store, registry
    from benchmarks.serving import manifest

    store = open_store(f"file://{scratch / 'soak-store'}")
    exported = [(export_version(scratch / "soak-v1", 3, size), 3)]
    first = registry.publish(store, NAME, exported[0][0], manifest())
    exported.insert(0, (export_version(scratch / "soak-v2", 7, size), 7))  # before the load: publishing only copies
    swaps = iter(range(size.swaps))

    def publish() -> tuple[str, int]:
        """The next version, answering 7, 3, 7, ... in turn: each another class than the one before it."""
        path, class_id = exported[next(swaps) % 2]
        return str(registry.publish(store, NAME, path, manifest())), class_id

    port = free_port()
    server = serve(store.uri, port, scratch / "soak-server.log")
    try:
        return soak(
            port,
            server.pid,
            images,
            size,
            {str(first): 3},
            publish,
        )
    finally:
        server.terminate()
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()


def test_images() -> np.ndarray:
    from bakeoff.components import defaults
    from bakeoff.components.data.fashion_mnist import read_idx_dir

    return read_idx_dir(Path(defaults.SOURCE))["test"].images[:512]


def figures(result: Soak, size: Size) -> list[Figure]:
    """The soak's figures: requests, failures, answers not wholly one version, latency by phase, RSS growth."""
    served = [a for a in result.answers if a.version is not None]
    setting = f"{size.clients} clients for {size.seconds:g} s, {', '.join(f'{k} {n}' for k, n in KINDS)} in turn"
    swap = "never" if result.swapped is None else f"{result.swapped - result.published:.1f} s after its publication"
    start, warmed, end = result.rss_mb
    swaps = len(result.publications)
    rows = [
        Figure("soak_requests", len(served), "", detail=f"answered with 200; {setting}"),
        Figure(
            "soak_failed_requests",
            len(result.failed()),
            "",
            detail="errors and non-200 answers: "
            + ("; ".join(sorted({a.error for a in result.failed()})[:3]) or "none"),
        ),
        Figure(
            "soak_mixed_answers",
            len(result.mixed()),
            "",
            detail=f"answers not wholly from the version they name; versions {sorted(result.versions)}, the new"
            f" one first answered {swap}",
        ),
    ]
    for phase in PHASES:
        latencies = [1000 * a.seconds for a in served if result.phase(a) == phase]
        for q in (50, 99):
            rows.append(
                Figure(
                    f"soak_p{q}_ms_{phase}",
                    _percentile(latencies, q),
                    "ms",
                    detail=f"{len(latencies)} requests started {phase} the swap, every kind together",
                )
            )
    rows += [
        Figure(
            "soak_rss_growth",
            end / warmed - 1,
            "×",
            detail=f"`bakeoff serve`'s resident memory {warmed:.0f} MB just before the first new version's publication,"
            f" the clients running since the start, {end:.0f} MB at the end, {swaps} swap(s) later",
        ),
        Figure(
            "soak_rss_warmup_growth",
            warmed / start - 1,
            "×",
            detail=f"the load's own: {start:.0f} MB after one request of each kind, {warmed:.0f} MB with"
            f" {size.clients} clients before any swap",
        ),
    ]
    return rows


def soak_entry(context: Context, size: Size = Size()) -> list[Figure]:
    """The bench entry: the full-size soak."""
    result = run(context.scratch, size, test_images())
    context.samples["soak"] = {
        "size": dataclasses.asdict(size),
        "published": result.published,
        "swapped": result.swapped,
        "rss_mb": list(result.rss_mb),
        "publications": result.publications,
        "rss_timeline": [[round(t, 2), round(mb, 1)] for t, mb in result.rss_timeline],
        "answers": [[a.kind, round(a.started, 3), round(a.seconds * 1000, 2), a.version] for a in result.answers],
    }
    return figures(result, size)


def main(argv: list[str] | None = None) -> int:
    """A soak of any size, printed: `python -m benchmarks.soak --clients 8 --seconds 10`."""
    import argparse
    import tempfile

    from bakeoff.components import logs
    from bakeoff.components.tfenv import quiet_tensorflow

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=Size.clients)
    parser.add_argument("--seconds", type=float, default=Size.seconds)
    parser.add_argument("--swaps", type=int, default=Size.swaps, help="new versions published during the load")
    parser.add_argument("--small", action="store_true", help="the tests' small model, not the bench's")
    args = parser.parse_args(argv)
    wrong = [
        f"{flag} {value:g}: pass {bound}"
        for flag, value, bound, ok in (
            ("--clients", args.clients, "1 or more", args.clients >= 1),
            ("--seconds", args.seconds, "more than 0", args.seconds > 0),
            ("--swaps", args.swaps, "0 or more", args.swaps >= 0),
        )
        if not ok
    ]
    if wrong:
        parser.error("; ".join(wrong))
    logs.configure()  # the components' lines, as `bakeoff` shows them
    quiet_tensorflow()
    size = Size(args.clients, args.seconds, SMALL_MODEL if args.small else Size.model, args.swaps)
    with tempfile.TemporaryDirectory(prefix="bakeoff-soak-") as scratch:
        result = run(Path(scratch), size, test_images())
        for figure in figures(result, size):
            print(f"{figure.key} = {figure.value:.4g} {figure.unit}  ({figure.detail})")
        print(
            "rss_mb:", ", ".join(f"{t:.0f} s {mb:.0f}" for t, mb in result.rss_timeline[:: max(1, int(2 / RSS_EVERY))])
        )
        print("published at:", ", ".join(f"{t:.1f} s" for t in result.publications) or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
