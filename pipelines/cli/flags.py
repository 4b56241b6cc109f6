"""Flags shared by several `bakeoff` commands, and the checks that run on them before any work."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from bakeoff.components import arguments, defaults
from bakeoff.components.errors import BakeoffError
from bakeoff.components.spec import MAX_BUDGET_MINUTES, Config, load_config
from bakeoff.components.storage import S3_ENDPOINT_ENV, S3_INSECURE_ENV, Store, check_shared, open_store

MAX_PARALLELISM = 64  # KFP's parallelismLimit is an int32; more than a few variants at once is a slip
IMAGE_ENV = "BAKEOFF_IMAGE"  # --image's variable, as KF_PIPELINES_ENDPOINT is --host's


def store_args(parser: argparse.ArgumentParser) -> None:
    """Where published models live and how to reach it, plus --json."""
    store_location_args(parser)
    parser.add_argument(
        "--model-name",
        default=defaults.MODEL_NAME,
        help=f"name the winner is published under (default {defaults.MODEL_NAME})",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document on stdout (human output goes to stderr)"
    )


def store_location_args(parser: argparse.ArgumentParser) -> None:
    """The store and how to reach it."""
    parser.add_argument(
        "--store",
        default=defaults.LOCAL_STORE,
        help=f"file:///DIR, a folder, or s3://BUCKET/PREFIX (default {defaults.LOCAL_STORE})",
    )
    parser.add_argument(
        "--s3-endpoint",
        help=f"HOST:PORT of the S3 server (or ${S3_ENDPOINT_ENV}); keys from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
    )
    parser.add_argument(
        "--s3-insecure", action="store_true", default=None, help=f"plain HTTP to the S3 server (or {S3_INSECURE_ENV}=1)"
    )


def budget_arg(parser: argparse.ArgumentParser, default: str) -> None:
    """--budget: a time the search is planned to fit on this machine's measured costs, or none."""
    parser.add_argument(
        "--budget",
        type=arguments.duration("--budget", MAX_BUDGET_MINUTES),
        metavar="TIME",
        help=f"plan the search to fit TIME (15m, 90s, 1h) on this machine's costs, or none (default: {default})",
    )


def load_budgeted(args: argparse.Namespace) -> Config:
    """The config of ``--config`` with ``--budget`` in place of its own, when given."""
    config = load_config(args.config)
    return config if args.budget is None else config.with_budget(args.budget)


def pipeline_args(parser: argparse.ArgumentParser, sends: bool = False) -> None:
    """What fixes the compiled pipeline: variants, image, parallelism and the cluster's store.

    ``sends``: the command sends the pipeline to a cluster, so it needs an image someone publishes (see
    ``compile_settings``).
    """
    parser.add_argument(
        "--config", type=Path, default=defaults.CONFIG, help="variants YAML; they become the pipeline's default"
    )
    fallback = "required" if sends else f"default {defaults.IMAGE}, which is not published: build and push your own"
    parser.add_argument(
        "--image",
        default=os.environ.get(IMAGE_ENV) or None,
        help=f"runtime image of every step and TFJob replica, your build of images/Dockerfile (or ${IMAGE_ENV}; "
        f"{fallback})",
    )
    parser.add_argument(
        "--parallelism",
        type=arguments.whole("--parallelism", MAX_PARALLELISM),
        default=defaults.CLUSTER_PARALLELISM,
        help=f"variants trained at once (default {defaults.CLUSTER_PARALLELISM})",
    )
    budget_arg(parser, "the search as written; the config's search.budget is for runs on this machine")
    parser.add_argument(
        "--store", default=defaults.CLUSTER_STORE, help=f"default store of the runs (default {defaults.CLUSTER_STORE})"
    )
    parser.add_argument(
        "--s3-endpoint",
        default=defaults.CLUSTER_S3_ENDPOINT,
        help=f"in-cluster S3 endpoint (default {defaults.CLUSTER_S3_ENDPOINT})",
    )


def compile_settings(args: argparse.Namespace, sends: bool = False) -> dict:
    """The keyword arguments of ``compile_pipeline`` from the flags of ``pipeline_args``; the config is checked first.

    ``sends`` refuses a pipeline without an image of the user's (flag or variable): the project's default is
    not published, so every pod of a pipeline sent with it would end in ImagePullBackOff.
    """
    from bakeoff.pipelines.pipeline import Cluster

    load_config(args.config)  # one clear line for a bad config, before kfp sees it
    # Both are baked into the package: a bad one would fail only on the cluster, at run time.
    if args.image is not None and not re.fullmatch(r"[A-Za-z0-9][-A-Za-z0-9._/:@+]*", args.image):
        raise BakeoffError(
            f"--image {args.image!r} is not an image reference: write e.g. registry.example.com/you/bakeoff:0.1.0"
        )
    check_shared(args.store, "--store")
    if sends and args.image is None:
        raise BakeoffError(
            f"--image is missing, and nobody publishes the default {defaults.IMAGE}, "
            "so every pod would fail to pull it:"
            f" build and push yours (make image IMAGE=REGISTRY/bakeoff:TAG; docker push REGISTRY/bakeoff:TAG),"
            f" then pass --image REGISTRY/bakeoff:TAG or set {IMAGE_ENV}"
        )
    return {
        "config": args.config,
        "image": args.image or defaults.IMAGE,
        "parallelism": args.parallelism,
        "cluster": Cluster(store=args.store, s3_endpoint=args.s3_endpoint),
        "budget": args.budget,
    }


def open_cli_store(args: argparse.Namespace) -> Store:
    """Opens the store and exports its S3 settings, so components and replicas reach the same one."""
    store_uri = args.store
    if not store_uri.strip():  # an empty path would be the current folder
        raise BakeoffError("--store is empty: pass file:///DIR, a folder, or s3://BUCKET/PREFIX")
    if "://" not in store_uri:
        store_uri = f"file://{Path(store_uri).resolve()}"
    store = open_store(store_uri, args.s3_endpoint, args.s3_insecure)
    if args.s3_endpoint:
        os.environ[S3_ENDPOINT_ENV] = args.s3_endpoint
    if args.s3_insecure:
        os.environ[S3_INSECURE_ENV] = "1"
    return store
