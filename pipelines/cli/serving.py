"""The serving commands: `bakeoff serve` runs the model server here, `bakeoff predict` asks one to classify image
files."""

from __future__ import annotations

import argparse
import base64
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.components import arguments, defaults
from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage.registry import check_model_name
from bakeoff.pipelines.cli.flags import open_cli_store, store_args

if TYPE_CHECKING:
    from bakeoff.components.serving.startup import Settings
    from bakeoff.components.storage import Store

PREDICT_TOP = 3  # classes printed per image
PREDICT_TIMEOUT_SECONDS = 60.0  # a cold server's first batch included
IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff")  # as serving/model.py checks (not imported here: it loads KServe)


def cmd_serve(args: argparse.Namespace) -> int:
    store = open_cli_store(args)
    return serve_published(store, serve_settings(args), args.json)


def serve_settings(args: argparse.Namespace) -> Settings:
    """The server's settings from `bakeoff serve`'s flags."""
    from bakeoff.components.serving.startup import HTTP_PORT, Settings

    return Settings(
        args.model_name,
        args.version,
        args.port if args.port is not None else HTTP_PORT,
        args.grpc_port or 0,
        args.poll_seconds,
        max_batch=args.max_batch,
        batch_window_ms=args.batch_window_ms,
    )


def serve_published(store: Store, settings: Settings, json_document: bool) -> int:
    """Serves ``settings.model_name`` from the registry in ``store`` here until interrupted, after printing where: its
    URL, or with ``json_document`` one JSON document on stdout."""
    from bakeoff.components.serving.startup import check_port, serve
    from bakeoff.components.serving.versions import StoreSource, choose

    source = StoreSource(store, settings.model_name, None)
    try:
        # no published version: one line, before TensorFlow or a port is touched
        first = choose(source, settings.version)
        check_port(settings.http_port, "--port")
        if settings.grpc_port:
            check_port(settings.grpc_port, "--grpc-port")
        url = f"http://127.0.0.1:{settings.http_port}"
        if json_document:
            print(
                json.dumps(
                    {
                        "url": url,
                        "predict_url": f"{url}/v1/models/{settings.model_name}:predict",
                        "model_name": settings.model_name,
                        "version": first,
                        "follows_newer": settings.version is None,
                    }
                ),
                flush=True,
            )
        else:
            print(url, flush=True)
        return serve(source, settings)
    finally:
        source.close()


def _read_image(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise BakeoffError(f"cannot read {str(path)!r} ({error.strerror}): pass PNG or JPEG files") from None
    if not data.startswith(IMAGE_MAGIC):
        raise BakeoffError(f"{str(path)!r} is not a PNG or JPEG file: pass PNG or JPEG files")
    return data


def _call(url: str, body: bytes = b"", timeout: float = PREDICT_TIMEOUT_SECONDS) -> dict:
    """One JSON request (POST when there is a body); server errors and a server that is not there become one line."""
    request = urllib.request.Request(url, data=body or None, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        try:
            message = json.loads(error.read()).get("error", "")
        except ValueError:
            message = ""
        raise BakeoffError(
            f"the server at {url} answered {error.code} {error.reason}{': ' + message if message else ''}"
        ) from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise BakeoffError(
            f"no model server answers at {url} ({reason}): start one with `bakeoff serve` or pass --url"
        ) from None


def cmd_predict(args: argparse.Namespace) -> int:
    base = f"{args.url.rstrip('/')}/v1/models/{check_model_name(args.model_name)}"  # a path segment: no '../'
    images = [_read_image(path) for path in args.images]
    body = json.dumps(
        {"signature_name": "serving_bytes", "instances": [{"b64": base64.b64encode(data).decode()} for data in images]}
    ).encode()
    predictions = _call(f"{base}:predict", body)["predictions"]
    try:
        names = _call(f"{base}/metadata").get("class_names")
    except BakeoffError:
        names = None  # another TF-Serving-style server: only the top class has a name
    results = []
    for path, prediction in zip(args.images, predictions, strict=False):
        probabilities = prediction["probabilities"]
        ranked = sorted(range(len(probabilities)), key=lambda index: -probabilities[index])[: args.top]
        top = [
            {
                "class_id": index,
                "probability": probabilities[index],
                "class_name": names[index]
                if names
                else (prediction["class_name"] if index == prediction["class_id"] else f"class {index}"),
            }
            for index in ranked
        ]
        results.append(
            {"image": str(path), "class_id": prediction["class_id"], "class_name": prediction["class_name"], "top": top}
        )
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for result in results:
            print(
                f"{result['image']}: "
                + ", ".join(f"{entry['class_name']} {entry['probability']:.3f}" for entry in result["top"])
            )
    return 0


def add_serving_commands(commands: argparse._SubParsersAction) -> None:
    """Registers serve and predict."""
    from bakeoff.components.serving.server import batching_args, following_args
    from bakeoff.components.serving.startup import HTTP_PORT

    serve = commands.add_parser(
        "serve", help="serve a published model here with KServe (V1 TF Serving REST and V2), following newer versions"
    )
    store_args(serve)  # --json: the URL, model and first version as one JSON line
    following_args(serve)
    serve.add_argument("--port", type=arguments.port, help=f"HTTP port (default {HTTP_PORT})")
    serve.add_argument("--grpc-port", type=arguments.port, help="V2 gRPC port (default: no gRPC)")
    batching_args(serve)
    serve.set_defaults(handler=cmd_serve)

    predict = commands.add_parser("predict", help="classify PNG/JPEG files with a running model server")
    predict.add_argument("images", nargs="+", type=Path, metavar="IMAGE", help="PNG or JPEG files")
    url = f"http://127.0.0.1:{HTTP_PORT}"  # where `bakeoff serve` listens by default
    predict.add_argument("--url", default=url, help=f"the server (default {url})")
    predict.add_argument(
        "--model-name", default=defaults.MODEL_NAME, help=f"the served model's name (default {defaults.MODEL_NAME})"
    )
    predict.add_argument(
        "--top",
        type=arguments.whole("--top"),
        default=PREDICT_TOP,
        help=f"classes printed per image (default {PREDICT_TOP})",
    )
    predict.add_argument("--json", action="store_true", help="print one JSON document")
    predict.set_defaults(handler=cmd_predict)
