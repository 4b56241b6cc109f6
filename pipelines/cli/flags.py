"""Flags shared by several `bakeoff` commands, and the checks that run on them before any work."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Callable

from components import defaults
from components.spec import load_variants
from components.storage import S3_ENDPOINT_ENV, S3_INSECURE_ENV, Store, open_store


def positive(flag: str) -> Callable[[str], int]:
    """An argparse type for a whole number of at least 1, naming ``flag`` when it is not."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes a whole number, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be at least 1, got {value}")
        return value

    return parse


def store_args(parser: argparse.ArgumentParser) -> None:
    """Where published models live and how to reach it, plus --json."""
    parser.add_argument("--store", default=defaults.LOCAL_STORE,
                        help=f"file:///DIR, a folder, or s3://BUCKET/PREFIX (default {defaults.LOCAL_STORE})")
    parser.add_argument("--s3-endpoint", help=f"HOST:PORT of the S3 server (or ${S3_ENDPOINT_ENV}); keys from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")
    parser.add_argument("--s3-insecure", action="store_true", default=None, help=f"plain HTTP to the S3 server (or {S3_INSECURE_ENV}=1)")
    parser.add_argument("--model-name", default=defaults.MODEL_NAME, help=f"name the winner is published under (default {defaults.MODEL_NAME})")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout (human output goes to stderr)")


def pipeline_args(parser: argparse.ArgumentParser) -> None:
    """What fixes the compiled pipeline: variants, image, parallelism and the cluster's store."""
    parser.add_argument("--config", type=Path, default=defaults.CONFIG, help="variants YAML; they become the pipeline's default")
    parser.add_argument("--image", default=defaults.IMAGE, help=f"runtime image of every step and TFJob replica (default {defaults.IMAGE})")
    parser.add_argument("--parallelism", type=positive("--parallelism"), default=defaults.CLUSTER_PARALLELISM,
                        help=f"variants trained at once (default {defaults.CLUSTER_PARALLELISM})")
    parser.add_argument("--store", default=defaults.CLUSTER_STORE, help=f"default store of the runs (default {defaults.CLUSTER_STORE})")
    parser.add_argument("--s3-endpoint", default=defaults.CLUSTER_S3_ENDPOINT,
                        help=f"in-cluster S3 endpoint (default {defaults.CLUSTER_S3_ENDPOINT})")


def compile_settings(args: argparse.Namespace) -> dict:
    """The keyword arguments of ``compile_pipeline`` from the flags of ``pipeline_args``; the config is checked first."""
    from pipelines.pipeline import Cluster

    load_variants(args.config)  # one clear line for a bad config, before kfp sees it
    return {
        "config": args.config,
        "image": args.image,
        "parallelism": args.parallelism,
        "cluster": Cluster(store=args.store, s3_endpoint=args.s3_endpoint),
    }


def open_cli_store(args: argparse.Namespace) -> Store:
    """Opens the store and exports its S3 settings, so components and replicas reach the same one."""
    store_uri = args.store
    if "://" not in store_uri:
        store_uri = f"file://{Path(store_uri).resolve()}"
    store = open_store(store_uri, args.s3_endpoint, args.s3_insecure)
    if args.s3_endpoint:
        os.environ[S3_ENDPOINT_ENV] = args.s3_endpoint
    if args.s3_insecure:
        os.environ[S3_INSECURE_ENV] = "1"
    return store
