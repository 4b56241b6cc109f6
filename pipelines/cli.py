"""The ``bakeoff`` command line: run the bake-off locally and inspect published models."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from components.errors import BakeoffError
from components.store import S3_ENDPOINT_ENV, S3_INSECURE_ENV, Store, open_store
from components.variants import DEFAULT_CONFIG, load_variants
from pipelines.pipeline import DEFAULT_MODEL_NAME, DEFAULT_SOURCE

DEFAULT_STORE = "./bakeoff-store"


def _positive(flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes a whole number, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be at least 1, got {value}")
        return value

    return parse


def _store_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default=DEFAULT_STORE, help=f"file:///DIR, a folder, or s3://BUCKET/PREFIX (default {DEFAULT_STORE})")
    parser.add_argument("--s3-endpoint", help=f"HOST:PORT of the S3 server (or ${S3_ENDPOINT_ENV}); keys from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")
    parser.add_argument("--s3-insecure", action="store_true", default=None, help=f"plain HTTP to the S3 server (or {S3_INSECURE_ENV}=1)")
    parser.add_argument("--model-name", default=DEFAULT_MODEL_NAME, help=f"name the winner is published under (default {DEFAULT_MODEL_NAME})")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout (human output goes to stderr)")


def _pipeline_args(parser: argparse.ArgumentParser) -> None:
    """What fixes the compiled pipeline: variants, image, parallelism and the cluster's store."""
    from components.image import BASE_IMAGE
    from pipelines.compiling import DEFAULT_PARALLELISM
    from pipelines.pipeline import Cluster

    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="variants YAML; they become the pipeline's default")
    parser.add_argument("--image", default=BASE_IMAGE, help=f"runtime image of every step and TFJob replica (default {BASE_IMAGE})")
    parser.add_argument("--parallelism", type=_positive("--parallelism"), default=DEFAULT_PARALLELISM,
                        help=f"variants trained at once (default {DEFAULT_PARALLELISM})")
    parser.add_argument("--store", default=Cluster.store, help=f"default store of the runs (default {Cluster.store})")
    parser.add_argument("--s3-endpoint", default=Cluster.s3_endpoint, help=f"in-cluster S3 endpoint (default {Cluster.s3_endpoint})")


def compile_settings(args: argparse.Namespace) -> dict:
    from pipelines.pipeline import Cluster

    load_variants(args.config)  # one clear line for a bad config, before kfp sees it
    return {
        "config": args.config,
        "image": args.image,
        "parallelism": args.parallelism,
        "cluster": Cluster(store=args.store, s3_endpoint=args.s3_endpoint),
    }


def cmd_compile(args: argparse.Namespace) -> int:
    from pipelines.compiling import compile_pipeline

    settings = compile_settings(args)
    try:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        compile_pipeline(args.output, **settings)
    except OSError as error:
        raise BakeoffError(f"cannot write {str(args.output)!r} ({error.strerror}): choose another -o") from None
    print(f"compiled the pipeline to {args.output}", file=sys.stderr)
    return 0


def _open_store(args: argparse.Namespace) -> Store:
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


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="bakeoff", description="A Kubeflow Pipelines bake-off of CNN variants trained as multi-worker TFJobs.")
    top.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = top.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the bake-off on this machine (kfp.local, TFJob replicas as processes)")
    run.add_argument("--local", action="store_true", default=True, help="run here (the default; `bakeoff submit` runs on a cluster)")
    run.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="variants YAML (default: pipelines/variants.yaml)")
    _store_args(run)
    run.add_argument("--workers", type=_positive("--workers"), help="override every variant's worker count")
    run.add_argument("--epochs", type=_positive("--epochs"), help="override every variant's epochs")
    run.add_argument("--max-train-examples", type=_positive("--max-train-examples"), help="train on at most N examples")
    run.add_argument("--parallelism", type=_positive("--parallelism"), default=1, help="variants trained at once (default 1)")
    run.add_argument("--source", default=DEFAULT_SOURCE, help=f"folder of Fashion-MNIST IDX files, or 'tfds' to download (default {DEFAULT_SOURCE})")
    run.add_argument("--work-dir", type=Path, default=Path(".bakeoff"), help="kfp.local's outputs and cache (default .bakeoff)")
    run.add_argument("--timeout", type=_positive("--timeout"), default=3600, help="seconds each TFJob may run (default 3600)")
    run.set_defaults(handler=cmd_run)

    compile_ = commands.add_parser("compile", help="compile the pipeline to KFP IR YAML for a cluster")
    compile_.add_argument("-o", "--output", type=Path, default=Path("bakeoff.yaml"), help="where to write (default bakeoff.yaml)")
    _pipeline_args(compile_)
    compile_.set_defaults(handler=cmd_compile)

    from pipelines.cluster_cli import add_cluster_commands

    add_cluster_commands(commands)

    models = commands.add_parser("models", help="published models")
    models_commands = models.add_subparsers(dest="models_command", required=True)
    listing = models_commands.add_parser("list", help="the published versions of a model, with metrics and lineage")
    _store_args(listing)
    listing.set_defaults(handler=cmd_models_list)
    return top


def cmd_run(args: argparse.Namespace) -> int:
    from components.dataset import read_idx_dir
    from pipelines.local_run import LocalRun, run_local

    variants = load_variants(args.config)
    variants = [
        dataclasses.replace(
            variant,
            workers=args.workers or variant.workers,
            training=dataclasses.replace(variant.training, epochs=args.epochs or variant.training.epochs),
        )
        for variant in variants
    ]
    if args.source != "tfds":
        read_idx_dir(Path(args.source))  # fail now, not inside the pipeline, when the data is missing
    store = _open_store(args)
    store.check_writable()
    out = sys.stderr if args.json else sys.stdout
    summary = run_local(LocalRun(
        variants=variants,
        store_uri=store.uri,
        model_name=args.model_name,
        source=args.source,
        max_train_examples=args.max_train_examples or 0,
        parallelism=args.parallelism,
        work_dir=args.work_dir,
        timeout_seconds=args.timeout,
    ))
    print(leaderboard(summary), file=out)
    if args.json:
        print(json.dumps(summary, indent=2))
    return 0


def leaderboard(summary: dict) -> str:
    rows = [f"{'':2}{'variant':<16}{'workers':>8}{'val_acc':>9}{'val_loss':>9}{'epochs':>7}{'train_s':>9}{'ex/s':>8}"]
    for place, c in enumerate(summary["candidates"]):
        mark = "* " if place == 0 else "  "
        rows.append(
            f"{mark}{c['variant']:<16}{c['workers']:>8}{c['val_accuracy']:>9.4f}{c['val_loss']:>9.4f}"
            f"{c['epochs']:>7}{c['train_seconds']:>9.1f}{c['examples_per_second']:>8.0f}"
        )
    winner = summary["winner"]
    rows.append(
        f"winner: {winner['variant']} (test accuracy {winner['test_accuracy']:.4f}),"
        f" published as version {winner['version']} at {winner['uri']}  [run {summary['run_id']}]"
    )
    return "\n".join(rows)


def cmd_models_list(args: argparse.Namespace) -> int:
    from components.registry import list_versions

    versions = [
        {
            "version": m["version"],
            "variant": m["variant"],
            "val_accuracy": m["metrics"]["val_accuracy"],
            "test_accuracy": m["metrics"]["test_accuracy"],
            "run_id": m["run_id"],
            "created": m["created"],
            "dataset_fingerprint": m["dataset"]["fingerprint"],
        }
        for m in list_versions(_open_store(args), args.model_name)
    ]
    if args.json:
        print(json.dumps(versions, indent=2))
    elif not versions:
        print(f"no published versions of {args.model_name!r} in {args.store}")
    else:
        print(f"{'version':>7}  {'variant':<16}{'val_acc':>9}{'test_acc':>9}  {'run':<12}created")
        for v in versions:
            print(f"{v['version']:>7}  {v['variant']:<16}{v['val_accuracy']:>9.4f}{v['test_accuracy']:>9.4f}  {v['run_id']:<12}{v['created']}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    if not args.debug:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # inherited by components and replicas
    try:
        return args.handler(args)
    except BakeoffError as error:
        if args.debug:
            raise
        print(f"bakeoff: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bakeoff: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
