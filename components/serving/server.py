"""Serves the newest complete version of a model with KServe and follows newer ones
(`python -m bakeoff.components.serving.server`).

``--model-dir DIR`` reads TF Serving's layout ``DIR/<version>/`` (where KServe's
storage initializer puts a storageUri, /mnt/models); ``--store URI --model-name
NAME`` downloads from bakeoff's registry into a local cache. With ``--version
latest`` (the default) a watcher polls every ``POLL_SECONDS`` for a newer complete
version, loads it beside the one serving, then swaps it in.
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import dataclasses
import gc
import hashlib
import logging
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.components import arguments, defaults
from bakeoff.components.errors import BakeoffError, reported
from bakeoff.components.modeling.savedmodel import mirror_averaged
from bakeoff.components.spec import from_dict
from bakeoff.components.storage import Store, open_store, registry
from bakeoff.components.storage.records import Manifest
from bakeoff.components.tfenv import import_tensorflow, quiet_tensorflow

if TYPE_CHECKING:
    from bakeoff.components.serving.model import ServedModel, Version

HTTP_PORT = defaults.SERVING_PORT
POLL_SECONDS = defaults.SERVING_POLL_SECONDS  # each poll is one listing of the model's folder or prefix
MAX_REQUEST_BYTES = 16 * 1024 * 1024  # a larger body answers 413: about 3,000 images as JSON arrays
_MANIFEST_KEY = re.compile(rf"/(\d+)/{re.escape(registry.MANIFEST)}$")


def say(line: str) -> None:
    print(f"bakeoff serve: {line}", file=sys.stderr, flush=True)


def read_manifest(folder: Path) -> Manifest | None:
    """The manifest beside the SavedModel in ``folder``; None where there is none this bakeoff can read."""
    manifest = folder / registry.MANIFEST
    try:
        return Manifest.from_json(manifest.read_text(), str(manifest))
    except (OSError, ValueError, BakeoffError):  # ValueError: not text
        return None


class Source(abc.ABC):
    """Where versions come from: their numbers, and a local folder for each."""

    description: str

    @abc.abstractmethod
    def versions(self) -> list[int]:
        """The complete versions (those whose manifest exists), oldest first."""

    @abc.abstractmethod
    def fetch(self, number: int) -> Path:
        """A local folder holding version ``number``'s SavedModel."""

    def release(self, number: int) -> None:  # noqa: B027 (a no-op unless the source keeps copies)
        """Forgets the local copy of a version no longer served."""


class FolderSource(Source):
    """TF Serving's layout on disk, ``DIR/<version>/``; or DIR itself holding one SavedModel."""

    def __init__(self, model_dir: Path) -> None:
        if not model_dir.is_dir():
            raise BakeoffError(
                f"model folder {str(model_dir)!r} does not exist: pass the folder that holds <version>/ folders"
            )
        self.root = model_dir
        self.description = str(model_dir)

    def _single(self) -> bool:
        return (self.root / "saved_model.pb").is_file()

    def versions(self) -> list[int]:
        if self._single():
            manifest = read_manifest(self.root)
            # a bare SavedModel (or one beside a manifest this bakeoff cannot read): one version, whatever its number
            return [0 if manifest is None else manifest.version]
        return sorted(
            int(entry.name)
            for entry in self.root.iterdir()
            if entry.name.isdigit() and (entry / registry.MANIFEST).is_file()
        )

    def fetch(self, number: int) -> Path:
        return self.root if self._single() else self.root / str(number)


class StoreSource(Source):
    """bakeoff's registry in a store, each version downloaded whole into ``cache`` before it is loaded."""

    def __init__(self, store: Store, name: str, cache: Path | None) -> None:
        self.store, self.prefix = store, registry.model_prefix(name)
        self.description = store.uri_for(self.prefix)
        self.owned = cache is None  # a temporary cache is emptied as versions are replaced, and removed at exit
        base = Path(tempfile.mkdtemp(prefix="bakeoff-serving-")) if cache is None else cache
        # Keyed by store and name: one cache folder may serve several stores without mixing their version numbers.
        self.cache = base / hashlib.sha256(self.description.encode()).hexdigest()[:16]

    def versions(self) -> list[int]:
        # One listing per poll (not a GET per manifest): the manifest, written last, marks a complete version.
        return sorted(
            {int(match.group(1)) for key in self.store.list(self.prefix) if (match := _MANIFEST_KEY.search(key))}
        )

    def fetch(self, number: int) -> Path:
        target = self.cache / str(number)
        if not target.is_dir():
            staging = self.cache / f".download-{uuid.uuid4().hex}"
            try:
                self.store.get_dir(f"{self.prefix}/{number}", staging)
                os.rename(staging, target)  # a folder that exists is a whole copy
            except OSError:
                if not target.is_dir():
                    raise
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        return target

    def release(self, number: int) -> None:
        if self.owned:
            shutil.rmtree(self.cache / str(number), ignore_errors=True)

    def close(self) -> None:
        if self.owned:
            shutil.rmtree(self.cache.parent, ignore_errors=True)


def check_port(port: int, flag: str) -> None:
    with socket.socket() as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as error:
            raise BakeoffError(f"cannot listen on port {port} ({error.strerror}): pass another {flag}") from None


def settle_heap() -> None:
    """Takes what lives now (TensorFlow, KServe, the loaded versions) out of the garbage collector's walks.

    Full collections otherwise walk all of it while requests wait: pauses of
    0.2-0.7 s every few seconds under 8 clients sending 64-image batches.
    """
    gc.unfreeze()  # an earlier freeze's objects are looked at again, so a replaced version's cycles are freed
    gc.collect()
    gc.freeze()


def intra_op_threads(path: Path, max_batch: int) -> int | None:
    """The threads each operation of the model in ``path`` may use: half the cores where its signatures run two views
    of every image (a bakeoff export that averages mirrors) and requests merge, else None (TensorFlow's own choice:
    all of them).

    The two views are independent halves of the graph, which TensorFlow runs side by side: held to their half of the
    cores, its operations stop splitting small batches across threads, and a call of a few images takes about half
    the time while one of 64 takes no longer. Unmerged (``max_batch`` 1), calls overlap, and TensorFlow's threads
    served more (benchmarks/results.md, "Threads for the served model"). Set once per process: a newer version
    swapped in keeps them.
    """
    if max_batch == 1:
        return None
    manifest = read_manifest(path)
    try:
        return threads_for(mirror_averaged(from_dict(manifest.spec).training)) if manifest else None
    except BakeoffError:  # a spec this bakeoff cannot read
        return None


def threads_for(mirrored: bool) -> int | None:
    """``intra_op_threads``'s rule for a model that does or does not average mirrors."""
    return max(1, (os.cpu_count() or 1) // 2) if mirrored else None


def choose(source: Source, version: int | None) -> int:
    """The version to serve first: ``version``, or the newest complete one."""
    complete = source.versions()
    if not complete:
        raise BakeoffError(
            f"no published version in {source.description} (a version is complete once its {registry.MANIFEST} exists):"
            " publish one with `bakeoff run`"
        )
    if version is None:
        return complete[-1]
    if version not in complete:
        raise BakeoffError(
            f"version {version} is not published in {source.description}: choose one of {', '.join(map(str, complete))}"
        )
    return version


class Watcher(threading.Thread):
    """Polls the source and swaps in each newer complete version once it is loaded (in this thread, beside the
    serving one)."""

    def __init__(
        self, source: Source, model: ServedModel, poll_seconds: float, load: Callable[[Path, int], Version]
    ) -> None:
        super().__init__(name="version-watcher", daemon=True)
        self.source, self.model, self.poll_seconds, self.load = source, model, poll_seconds, load
        self.stopped = threading.Event()
        self.failed: set[int] = set()  # versions that would not load: tried once, not on every poll
        self.settle = False  # after a swap, the heap is settled a poll later, once no request holds the old version

    def run(self) -> None:
        while not self.stopped.wait(self.poll_seconds):
            self.poll()

    def poll(self) -> None:
        if self.settle:
            self.settle = False
            settle_heap()
        try:
            newest = max(self.source.versions(), default=0)
        except Exception as error:  # a store that is down for a while must not end the serving of what is loaded
            say(f"cannot list {self.source.description} ({error}); still serving version {self.model.current.number}")
            return
        serving = self.model.current.number
        if newest <= serving or newest in self.failed:
            return
        try:
            version = self.load(self.source.fetch(newest), newest)
        except Exception as error:
            self.failed.add(newest)
            say(f"version {newest} does not load ({error}); still serving version {serving}")
            return
        self.model.swap(version)
        self.source.release(serving)
        self.settle = True
        say(f"now serving version {newest} (was {serving})")


class ClientErrorsInOneLine(logging.Filter):
    """KServe logs every 4xx with a traceback at ERROR; a client's bad request is one WARNING line, not a server
    fault."""

    def filter(self, record: logging.LogRecord) -> bool:
        from kserve.errors import InvalidInput, ModelNotFound

        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, (InvalidInput, ModelNotFound)):
            record.msg, record.args, record.exc_info = f"refused a request: {error}", (), None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


@dataclasses.dataclass(frozen=True)
class Settings:
    model_name: str
    version: int | None = None  # None: the newest, and follow newer ones
    http_port: int = HTTP_PORT
    grpc_port: int = 0  # 0: no gRPC
    poll_seconds: float = POLL_SECONDS
    max_request_bytes: int = MAX_REQUEST_BYTES
    max_batch: int = defaults.SERVING_MAX_BATCH  # images per merged model call; 1: no merging
    batch_window_ms: float = defaults.SERVING_BATCH_WINDOW_MS


def serve(source: Source, settings: Settings) -> int:
    """Loads the first version, then serves until SIGTERM/SIGINT; must run on the main thread (KServe's own event
    loop)."""
    quiet_tensorflow()
    registry.check_model_name(settings.model_name)  # the name is a URL path segment too
    first = choose(source, settings.version)
    for port, flag in ((settings.http_port, "--http-port"), (settings.grpc_port, "--grpc-port")):
        if port:
            check_port(port, flag)  # before seconds of loading, not after
    path = source.fetch(first)
    import_tensorflow()
    threads = intra_op_threads(path, settings.max_batch)
    if threads:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
    from bakeoff.components.serving.model import ServedModel, load_version

    model = ServedModel(settings.model_name, load_version(path, first), settings.max_batch, settings.batch_window_ms)
    import kserve
    from kserve.errors import ModelNotFound
    from kserve.model_server import app

    server = kserve.ModelServer(
        http_port=settings.http_port,
        grpc_port=settings.grpc_port or 8081,
        enable_grpc=settings.grpc_port > 0,
        workers=1,
        enable_latency_logging=False,
        enable_docs_url=False,
    )
    for per_request in ("kserve.trace", "uvicorn.access"):  # a line per request costs more than a small prediction
        logging.getLogger(per_request).setLevel(logging.WARNING)
    logging.getLogger("kserve").addFilter(ClientErrorsInOneLine())
    warnings.filterwarnings("ignore", message="ORJSONResponse is deprecated")  # KServe 0.21's own use, once per process
    from bakeoff.components.serving.asgi import in_front  # after model: KServe reads no sys.argv

    in_front(app, model, settings.max_request_bytes)

    async def metadata(model_name: str) -> dict:
        """TF Serving's metadata endpoint, plus the label table clients need to name more than the top class."""
        if model_name != model.name:
            raise ModelNotFound(model_name)
        version = model.current
        return {
            "model_spec": {"name": model.name, "version": str(version.number)},
            "class_names": version.class_names,
            "inputs": {entry["name"]: entry for entry in model.get_input_types()},
        }

    app.add_api_route("/v1/models/{model_name}/metadata", metadata, methods=["GET"])
    watcher = Watcher(source, model, settings.poll_seconds, load_version) if settings.version is None else None
    if watcher:
        watcher.start()
    grpc = f", gRPC on port {settings.grpc_port}" if settings.grpc_port else ""
    say(
        f"serving {settings.model_name!r} version {first} from {source.description}"
        f" at http://127.0.0.1:{settings.http_port}/v1/models/{settings.model_name}:predict{grpc}"
        + (f"; looking for newer versions every {settings.poll_seconds:g} s" if watcher else "")
    )
    settle_heap()
    fast_event_loop()
    server.start([model])
    if watcher:
        watcher.stopped.set()
    return 0


def fast_event_loop() -> None:
    """uvloop under KServe's servers where it is installed (uvicorn[standard], KServe's own requirement: all but
    Windows). KServe starts them with a plain asyncio.run, and since 0.36 uvicorn applies its loop setting (KServe's
    --event_loop, "auto": uvloop) only in its own run: KServe's servers ran on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    # KServe's start asks for the current loop before its asyncio.run makes the one it serves on; uvloop's policy,
    # unlike asyncio's, does not make one on demand.
    asyncio.set_event_loop(asyncio.new_event_loop())


def version_arg(text: str) -> int | None:
    """--version: a whole number of at least 1, or 'latest' (None)."""
    if text == "latest":
        return None
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--version takes a version number or 'latest', got {text!r}")
    return int(text)


def following_args(parser: argparse.ArgumentParser) -> None:
    """--version and --poll-seconds, for this module's parser and `bakeoff serve`'s."""
    parser.add_argument(
        "--version",
        type=version_arg,
        default=None,
        help="a version number, or 'latest' to serve the newest and follow newer ones (default)",
    )
    parser.add_argument(
        "--poll-seconds",
        type=arguments.number("--poll-seconds", "a positive number of seconds"),
        default=POLL_SECONDS,
        help=f"how often 'latest' looks for a newer complete version (default {POLL_SECONDS:g})",
    )


def batching_args(parser: argparse.ArgumentParser) -> None:
    """--max-batch and --batch-window-ms, for this module's parser and `bakeoff serve`'s."""
    parser.add_argument(
        "--max-batch",
        type=arguments.whole("--max-batch"),
        default=defaults.SERVING_MAX_BATCH,
        help="images per model call when concurrent requests are merged; 1 runs each request alone"
        f" (default {defaults.SERVING_MAX_BATCH})",
    )
    parser.add_argument(
        "--batch-window-ms",
        type=arguments.number("--batch-window-ms", "milliseconds, 0 or more", zero=True),
        default=defaults.SERVING_BATCH_WINDOW_MS,
        help="the longest a request waits, while the model is busy, for others to run with"
        f" (default {defaults.SERVING_BATCH_WINDOW_MS:g})",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m bakeoff.components.serving.server", description=__doc__.splitlines()[0]
    )
    where = top.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--model-dir", type=Path, help="folder in TF Serving's layout, DIR/<version>/ (KServe: /mnt/models)"
    )
    where.add_argument("--store", help="file:///DIR, a folder, or s3://BUCKET/PREFIX holding bakeoff's registry")
    top.add_argument(
        "--model-name",
        default=defaults.MODEL_NAME,
        help=f"the model's name, in the store and in URLs (default {defaults.MODEL_NAME})",
    )
    following_args(top)
    top.add_argument(
        "--http-port", type=arguments.port, default=HTTP_PORT, help=f"V1 and V2 REST port (default {HTTP_PORT})"
    )
    top.add_argument("--grpc-port", type=arguments.port, default=0, help="V2 gRPC port (default 0: no gRPC)")
    top.add_argument(
        "--max-request-bytes",
        type=int,
        default=MAX_REQUEST_BYTES,
        help=f"larger bodies answer 413 (default {MAX_REQUEST_BYTES})",
    )
    batching_args(top)
    top.add_argument(
        "--cache-dir",
        type=Path,
        help="where store versions are downloaded (default: a temporary folder, removed at exit)",
    )
    top.add_argument("--s3-endpoint", help="HOST:PORT of the S3 server (or $BAKEOFF_S3_ENDPOINT)")
    top.add_argument(
        "--s3-insecure",
        action="store_true",
        default=None,
        help="plain HTTP to the S3 server (or BAKEOFF_S3_INSECURE=1)",
    )
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    settings = Settings(
        args.model_name,
        args.version,
        args.http_port,
        args.grpc_port,
        args.poll_seconds,
        args.max_request_bytes,
        args.max_batch,
        args.batch_window_ms,
    )
    with reported():
        if args.model_dir:
            return serve(FolderSource(args.model_dir), settings)
        source = StoreSource(
            open_store(args.store, args.s3_endpoint, args.s3_insecure), args.model_name, args.cache_dir
        )
        try:
            return serve(source, settings)
        finally:
            source.close()


if __name__ == "__main__":
    sys.exit(main())
