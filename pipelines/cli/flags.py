"""Flags shared by several `bakeoff` commands, and the checks that run on them before any work."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.components import arguments, defaults
from bakeoff.components.environment import IMAGE_ENV, S3_ENDPOINT_ENV, S3_INSECURE_ENV
from bakeoff.components.errors import BakeoffError
from bakeoff.components.spec import (
    IMAGE_SIDES,
    MAX_BUDGET_MINUTES,
    MAX_EPOCHS,
    MAX_ETA,
    Config,
    check_image_size,
    load_config,
)
from bakeoff.components.storage import Store, check_shared, open_store

if TYPE_CHECKING:
    from bakeoff.components.search.costs import Images
    from bakeoff.pipelines.pipeline import Resources

MAX_PARALLELISM = 64  # KFP's parallelismLimit is an int32; more than a few variants at once is a slip


def debug_arg(parser: argparse.ArgumentParser, shows: str) -> None:
    """--debug after the command, the same switch as `bakeoff --debug` before it (tracebacks, TensorFlow's log):
    left out, it leaves the other's value as it is; ``shows`` says what more it shows for this command."""
    parser.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help=f"as `bakeoff --debug`: tracebacks instead of one-line errors, TensorFlow's log; and {shows}",
    )


def store_args(parser: argparse.ArgumentParser, named_by_source: bool = False) -> None:
    """Where published models live and how to reach it, plus --json. ``named_by_source``: the model's name defaults
    to one taken from the source (``inspection.model_name``), resolved once the config is read."""
    store_location_args(parser)
    parser.add_argument(
        "--model-name",
        default=None if named_by_source else defaults.MODEL_NAME,
        help="name the winner is published under (default: the source's last name, e.g. pets for --source"
        f" ~/data/pets, {defaults.MODEL_NAME} for the default source)"
        if named_by_source
        else f"the model's name (default {defaults.MODEL_NAME})",
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
    """The config of ``--config`` with the flags of ``data_args`` and ``halving_args`` in place of its keys, and
    ``--budget`` in place of its budget, when given."""
    config = load_config(args.config, config_changes(args))
    return config if args.budget is None else config.with_budget(args.budget)


def load_searched(args: argparse.Namespace, data: Callable[[Config], Images]) -> tuple[Config, Images, list[str]]:
    """What `plan` prices and `run` trains: ``--config``'s search, else the built-in one that fits the images
    ``data`` reads of the source (Fashion-MNIST's is variants.yaml); its pretrained weights fetched; and the lines
    that say how it was chosen. ``args.config`` names the file chosen."""
    from bakeoff.components.search.builtin import builtin_search, fetched

    named = args.config is not None
    if not named:
        args.config = defaults.CONFIG
    config = load_budgeted(args)
    images = data(config)  # the source listed, one image read: a bad one is refused here, before any measuring
    said = []
    fits = builtin_search(images)
    if not named and fits.path != args.config:
        args.config = fits.path
        config = load_budgeted(args)
        said.append(
            f"search: {fits.path.name}, built in for {fits.reason} (`bakeoff plan --write-search FILE` copies it to"
            " edit; --config FILE trains another)"
        )
    config, left_out = fetched(config, images.shape, built_in=not named)
    return config, images, [*said, left_out] if left_out else said


def image_size(text: str) -> tuple[int, ...]:
    """``--image-size``: HEIGHTxWIDTH (``64x64``), or ``none`` for the source's own size."""
    if text.strip().lower() == "none":
        return ()
    height, _, width = text.strip().lower().partition("x")
    try:
        return check_image_size([int(height), int(width)])
    except (ValueError, BakeoffError):
        raise argparse.ArgumentTypeError(
            f"--image-size takes HEIGHTxWIDTH (e.g. 64x64, each side {IMAGE_SIDES[0]} to {IMAGE_SIDES[1]}) or none,"
            f" got {text!r}"
        ) from None


def eta(text: str) -> int:
    """``--eta``: a whole number of at least 2."""
    value = arguments.whole("--eta", MAX_ETA)(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"--eta must be at least 2 (each rung keeps 1/eta), got {value}")
    return value


def data_args(parser: argparse.ArgumentParser) -> None:
    """--source and --image-size: the data a run ingests, in place of the config's ``source`` and ``image_size``."""
    parser.add_argument(
        "--source",
        help="the data to ingest: a folder of class folders (~/data/pets/<class>/*.jpg, or train/<class>/..., with"
        " validation/ and test/ where it has them), s3://BUCKET/PREFIX/ of the same, tfds:NAME[:VERSION][@DATA_DIR]"
        " (tfds:cifar10), or a folder of Fashion-MNIST's four IDX files (tfds alone: tfds:fashion_mnist); listed"
        f" before anything starts (default: the config's source, else {defaults.SOURCE})",
    )
    parser.add_argument(
        "--image-size",
        type=image_size,
        metavar="HxW",
        help="resize every image to HEIGHTxWIDTH as ingest reads it, e.g. 64x64; none: the source's own size"
        " (default: the config's image_size, else none)",
    )


def halving_args(parser: argparse.ArgumentParser) -> None:
    """--min-epochs, --max-epochs and --eta: the successive halving, in place of the config's ``search.halving``."""
    for flag, what in (("--min-epochs", "the first rung trains to"), ("--max-epochs", "the last rung trains to")):
        parser.add_argument(
            flag,
            type=arguments.whole(flag, MAX_EPOCHS),
            metavar="N",
            help=f"epochs {what}, in place of search.halving's (with both, a config without halving gets it)",
        )
    parser.add_argument(
        "--eta", type=eta, metavar="N", help="each rung keeps the best 1/N, in place of search.halving's eta"
    )


def config_changes(args: argparse.Namespace) -> dict:
    """The flags of ``data_args`` and ``halving_args`` as keys of a config document (``load_config``'s changes);
    one line for halving flags the config cannot take."""
    changes: dict = {}
    if getattr(args, "source", None) is not None:
        changes["source"] = args.source
    if getattr(args, "image_size", None) is not None:
        changes["image_size"] = list(args.image_size)
    given = {
        field: getattr(args, field, None)
        for field in ("min_epochs", "max_epochs", "eta")
        if getattr(args, field, None) is not None
    }
    if given:
        written = load_config(args.config).search
        halving = written.halving if written else None
        if halving is None and not {"min_epochs", "max_epochs"} <= set(given):
            flags = " and ".join(f"--{field.replace('_', '-')}" for field in given)
            raise BakeoffError(
                f"{flags} change successive halving, which {args.config} does not use:"
                " pass --min-epochs and --max-epochs to halve, or add search.halving to the file"
            )
        low = given.get("min_epochs") or (halving.min_epochs if halving else 0)
        high = given.get("max_epochs") or (halving.max_epochs if halving else 0)
        if low > high:
            if "max_epochs" not in given:
                problem = (
                    f"--min-epochs {low} is above {args.config}'s search.halving.max_epochs {high}: pass --max-epochs"
                )
            elif "min_epochs" not in given:
                problem = (
                    f"--max-epochs {high} is below {args.config}'s search.halving.min_epochs {low}: pass --min-epochs"
                )
            else:
                problem = f"--min-epochs {low} is above --max-epochs {high}: swap them"
            raise BakeoffError(problem + " (min_epochs is the first rung's, at most max_epochs)")
        changes["search"] = {"halving": given}
    return changes


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
    sizes = ", ".join(f"{step} {cpu}-{cpu_limit}" for step, (cpu, cpu_limit, _, _) in defaults.STEP_RESOURCES.items())
    memory = ", ".join(f"{step} {low}-{high}" for step, (_, _, low, high) in defaults.STEP_RESOURCES.items())
    parser.add_argument(
        "--cpu",
        action="append",
        default=[],
        metavar="STEP=REQUEST[,LIMIT]",
        help=f"a step's CPU request and limit (REQUEST alone: both), repeatable, e.g. ingest=2,4 (defaults: {sizes})",
    )
    parser.add_argument(
        "--memory",
        action="append",
        default=[],
        metavar="STEP=REQUEST[,LIMIT]",
        help=f"a step's memory request and limit (REQUEST alone: both), repeatable, e.g. select=4Gi,8Gi"
        f" (defaults: {memory}); a TFJob's replicas are sized by the variants' own settings",
    )


def step_resources(cpu: list[str], memory: list[str]) -> Resources:
    """``--cpu`` and ``--memory`` over the steps' default sizes; one line for a bad one, before anything compiles."""
    import dataclasses

    from bakeoff.pipelines.pipeline import STEPS, Resources

    resources = Resources()
    given: set[tuple[str, str]] = set()
    for kind, values in (("cpu", cpu), ("memory", memory)):
        example = "ingest=2,4" if kind == "cpu" else "select=4Gi,8Gi"
        for value in values:
            step, equals, sizes = value.partition("=")
            step = step.strip()
            parts = [part.strip() for part in sizes.split(",")]
            if not equals or len(parts) > 2 or not all(parts):
                raise BakeoffError(f"--{kind} {value!r} is not STEP=REQUEST[,LIMIT]: write e.g. --{kind} {example}")
            if step not in STEPS:
                raise BakeoffError(f"--{kind} {value!r}: no step {step!r}: use one of {', '.join(STEPS)}")
            if (kind, step) in given:
                raise BakeoffError(f"--{kind} {step}= is given twice: give each step once")
            given.add((kind, step))
            request, limit = parts[0], parts[-1]
            changed = dataclasses.replace(resources.of(step), **{f"{kind}_request": request, f"{kind}_limit": limit})
            resources = dataclasses.replace(resources, **{step: changed})
    for step in STEPS:
        resources.of(step).check(step)
    return resources


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
        "resources": step_resources(args.cpu, args.memory),
    }


def open_cli_store(args: argparse.Namespace) -> Store:
    """Opens the store and exports its S3 settings, so components and replicas reach the same one."""
    store_uri = args.store
    if not store_uri.strip():  # an empty path would be the current folder
        raise BakeoffError("--store is empty: pass file:///DIR, a folder, or s3://BUCKET/PREFIX")
    if "://" not in store_uri:
        store_uri = f"file://{Path(store_uri).resolve()}"
    store = open_store(store_uri, args.s3_endpoint, args.s3_insecure)
    export_s3_settings(args)
    return store


def export_s3_settings(args: argparse.Namespace) -> None:
    """--s3-endpoint and --s3-insecure exported, so that components, replicas and an s3:// source reach the same
    server as the store."""
    if args.s3_endpoint:
        os.environ[S3_ENDPOINT_ENV] = args.s3_endpoint
    if args.s3_insecure:
        os.environ[S3_INSECURE_ENV] = "1"
