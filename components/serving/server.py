"""Serves the newest complete version of a model with KServe and follows newer ones
(`python -m bakeoff.components.serving.server`).

``--model-dir DIR`` reads TF Serving's layout ``DIR/<version>/`` (where KServe's
storage initializer puts a storageUri, /mnt/models); ``--store URI --model-name
NAME`` downloads from bakeoff's registry into a local cache. With ``--version
latest`` (the default) a watcher polls every ``POLL_SECONDS`` for a newer complete
version, loads it beside the one serving, then swaps it in.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from bakeoff.components import arguments, defaults
from bakeoff.components.errors import reported
from bakeoff.components.serving.startup import HTTP_PORT, MAX_REQUEST_BYTES, POLL_SECONDS, Settings, serve
from bakeoff.components.serving.versions import FolderSource, StoreSource
from bakeoff.components.storage import open_store


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
