"""Starting KServe's model server on a source's first version: ports checked, the model loaded, the metadata route
added, the watcher started."""

from __future__ import annotations

import dataclasses
import logging
import socket
import warnings
from typing import Any

from bakeoff.components import defaults
from bakeoff.components.errors import BakeoffError
from bakeoff.components.serving.client_errors import ClientErrorsInOneLine
from bakeoff.components.serving.tuning import fast_event_loop, intra_op_threads, settle_heap
from bakeoff.components.serving.versions import Source, choose
from bakeoff.components.serving.watcher import Watcher
from bakeoff.components.storage import registry
from bakeoff.components.tfenv import import_tensorflow, quiet_tensorflow

logger = logging.getLogger(__name__)
HTTP_PORT = defaults.SERVING_PORT
POLL_SECONDS = defaults.SERVING_POLL_SECONDS  # each poll is one listing of the model's folder or prefix
MAX_REQUEST_BYTES = 16 * 1024 * 1024  # a larger body answers 413: about 3,000 images as JSON arrays


def check_port(port: int, flag: str) -> None:
    with socket.socket() as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as error:
            raise BakeoffError(f"cannot listen on port {port} ({error.strerror}): pass another {flag}") from None


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


def model_server(**options: Any) -> Any:
    """KServe's ModelServer made with ``options``, whose loop settings apply to the loop it serves on.

    KServe 0.21's ``ModelServer.start`` calls ``setup_event_loop`` (the exception handler, as set through
    ``register_exception_handler``, and a default executor of ``max_asyncio_workers`` threads) on
    ``asyncio.get_event_loop()``, then serves in ``asyncio.run``, which makes a new loop: the settings went to a loop
    that never ran. Here ``setup_event_loop`` runs inside ``asyncio.run`` instead, where the current loop is the
    serving one.
    """
    import kserve

    class ServingLoopModelServer(kserve.ModelServer):
        def setup_event_loop(self) -> None:
            """Nothing yet: ``start`` calls this before ``asyncio.run`` makes the serving loop."""

        async def _serve(self) -> None:
            kserve.ModelServer.setup_event_loop(self)
            await super()._serve()

    return ServingLoopModelServer(**options)


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
    from kserve.errors import ModelNotFound
    from kserve.model_server import app

    server = model_server(
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
    logger.info(
        "bakeoff serve: serving %r version %s from %s at http://127.0.0.1:%s/v1/models/%s:predict%s%s",
        settings.model_name,
        first,
        source.description,
        settings.http_port,
        settings.model_name,
        grpc,
        f"; looking for newer versions every {settings.poll_seconds:g} s" if watcher else "",
    )
    settle_heap()
    fast_event_loop()
    server.start([model])
    if watcher:
        watcher.stopped.set()
    return 0
