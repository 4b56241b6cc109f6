"""The commands that work on this machine: run the bake-off, compile the pipeline, list published models."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from bakeoff.components import arguments, defaults
from bakeoff.components.errors import BakeoffError
from bakeoff.components.spec import MAX_EPOCHS, MAX_TIMEOUT_SECONDS, check_fits, load_config
from bakeoff.components.storage import runs
from bakeoff.components.storage.records import PublishedVersion, RungRecord, Summary
from bakeoff.pipelines.cli.flags import (
    MAX_PARALLELISM,
    budget_arg,
    compile_settings,
    data_args,
    debug_arg,
    export_s3_settings,
    halving_args,
    load_searched,
    open_cli_store,
    pipeline_args,
    store_args,
)

if TYPE_CHECKING:
    from bakeoff.components.search.budget import Plan
    from bakeoff.components.search.calibration import Refreshed
    from bakeoff.components.selection.settings import SelectionSettings
    from bakeoff.components.serving.startup import Settings
    from bakeoff.components.spec import Config, Data, Search, Variant
    from bakeoff.components.storage import Store
    from bakeoff.pipelines.local_run import LocalRun


def cmd_run(args: argparse.Namespace) -> int:
    from bakeoff.components.data.inspection import model_name
    from bakeoff.components.data.sources import digest
    from bakeoff.components.search.calibration import refresh
    from bakeoff.components.selection.promotion import Gate
    from bakeoff.components.selection.settings import SelectionSettings
    from bakeoff.pipelines.compiling import budget_plan, source_images

    started_monotonic, started_unix = time.monotonic(), time.time()  # the command's start, on both clocks
    # Every input is checked here, before ingest: a bad one costs seconds, not a trained bake-off.
    # --config's search, else the built-in one that fits the source (listed, one image read: a source ingest would
    # refuse is refused here, in one line, before the pipeline starts or the store is made). An s3:// source is read
    # with the store's S3 settings.
    export_s3_settings(args)
    config, images, said = load_searched(args, source_images)
    out = sys.stderr if args.json else sys.stdout
    for line in said:  # before a budget's calibration: the minutes it measures are for this search
        print(line, file=out, flush=True)
    check_run_flags(args, config)
    if args.model_name is None:
        args.model_name = model_name(config.data.source)
    selection = SelectionSettings(
        args.model_name, args.metric, Gate(args.min_improvement, args.force_publish, args.confidence)
    )
    check_fits(config.variants, list(images.shape), str(args.config))
    # After the other checks (a budget may first measure this machine's costs), before the store is made.
    listed = len(config.variants)
    plan = budget_plan(config, args.max_train_examples or 0, images, started=started_monotonic)
    config = plan.config if plan else config
    store = open_cli_store(args)
    # After the store's S3 settings are exported: an s3:// source is read with the same endpoint and keys.
    source_digest = digest(config.data.source)
    store.check_writable()
    variants = with_flags(config.variants, args)
    run = local_run(args, variants, store.uri, selection, config.data, source_digest, config.search, plan, started_unix)
    summary, others = run_measured(run, watched(args))
    shared = others > defaults.BUSY_SHARE  # its steps ran slower than this machine's: they would misprice a plan
    # Costs are kept per image shape: the run's steps price the next plan of data of this shape.
    refreshed = None if shared else refresh(store, summary.run_id, variants, args.parallelism, images)
    print(leaderboard(summary), file=out)
    if plan is not None:
        print(
            bought(plan, listed, time.monotonic() - started_monotonic, runs.search_records(store, summary.run_id)),
            file=out,
        )
    print_costs(refreshed, shared, others, out)
    print_next_steps(args, store, summary, out)
    if args.json:
        print(summary.to_json(), flush=True)
    if args.serve:
        return serve_winner(args, store, out)
    return 0


def check_run_flags(args: argparse.Namespace, config: Config) -> None:
    """Refuses --epochs and --workers where the config's halving or budget decides them, and more workers than the
    shards a local run ingests. (Whether the variants fit the images is checked once the source is listed.)"""
    if args.epochs and config.search and config.search.halving:
        raise BakeoffError(
            f"--epochs does not apply to {args.config}'s successive halving: set search.halving.max_epochs there"
        )
    if (args.epochs or args.workers) and config.budget_minutes:
        flag = "--epochs" if args.epochs else "--workers"
        raise BakeoffError(
            f"{flag} would change what {args.config}'s search.budget planned: set it in the file, "
            "where the budget counts it, or pass --budget none"
        )
    for variant in config.variants:
        workers = args.workers or variant.workers
        # Local ingest writes the default shard count; more workers would fail only after ingest, in training.
        if workers > defaults.SHARDS:
            raise BakeoffError(
                f"variant {variant.name!r}: workers={workers} exceeds the {defaults.SHARDS} shards a local run ingests:"
                f" use at most {defaults.SHARDS} workers"
            )


def with_flags(variants: Sequence[Variant], args: argparse.Namespace) -> list[Variant]:
    """``variants`` with --workers and --epochs in place of their own, where given."""
    return [
        dataclasses.replace(
            variant,
            workers=args.workers or variant.workers,
            training=dataclasses.replace(variant.training, epochs=args.epochs or variant.training.epochs),
        )
        for variant in variants
    ]


def local_run(
    args: argparse.Namespace,
    variants: list[Variant],
    store_uri: str,
    selection: SelectionSettings,
    data: Data,
    source_digest: str,
    search: Search | None,
    plan: Plan | None,
    started_unix: float,
) -> LocalRun:
    """What kfp.local runs for ``variants``: the run's flags, and the deadline of a budgeted halving search counted
    from ``started_unix``, the command's start."""
    from bakeoff.components.search.budget import deadline
    from bakeoff.pipelines.cli.display import new_progress_folder
    from bakeoff.pipelines.local_run import LocalRun

    return LocalRun(
        variants=variants,
        store_uri=store_uri,
        selection=selection,
        data=data,
        source_digest=source_digest,
        max_train_examples=args.max_train_examples or 0,
        parallelism=args.parallelism,
        work_dir=args.work_dir,
        timeout_seconds=args.timeout,
        search=search,
        progress_dir=None if args.debug else new_progress_folder(args.work_dir),
        deadline=deadline(plan, started_unix, time.time()) if plan is not None and plan.rungs is not None else None,
    )


def watched(args: argparse.Namespace) -> bool:
    """On a terminal a live table shows each variant. Else (a pipe, a CI log, --no-progress) bakeoff's own lines
    come as plain text. Either way kfp.local's output and the replicas' logs go to files, but with --debug, where
    every line of them comes on stderr as plain text."""
    return sys.stderr.isatty() and not args.no_progress and not args.debug


def run_measured(run: LocalRun, watch: bool) -> tuple[Summary, float]:
    """Runs ``run``, under the live table where ``watch``, else with its plain lines where it has a progress folder:
    its summary, and the share of the cores other processes used meanwhile."""
    from bakeoff.components.search import contention
    from bakeoff.pipelines.cli.display import run_quiet, run_watched
    from bakeoff.pipelines.local_run import run_local

    show = run_local if run.progress_dir is None else run_watched if watch else run_quiet
    before = contention.sample()
    summary = show(run)
    return summary, contention.others_share(before, contention.sample())


def print_costs(refreshed: Refreshed | None, shared: bool, others: float, out: TextIO) -> None:
    """In one line: which of the run's steps now price the next plan here, which do not, and why."""
    from bakeoff.components.search.calibration_cache import FILE, cache_dir

    if shared:
        print(
            f"costs: not kept: other processes used {others:.0%} of the cores while this run trained; the next plan"
            " here prices its steps as before",
            file=out,
        )
    elif refreshed is not None and (refreshed.kept or refreshed.left):
        kept = f"kept {', '.join(refreshed.kept)}" if refreshed.kept else ""
        left = f"not kept: {', '.join(refreshed.left)}" if refreshed.left else ""
        then = (
            f"the next plan here prices those steps as this run trained them ({cache_dir() / FILE})"
            if refreshed.calibration is not None
            else "the next plan here prices its steps as before"
        )
        print(f"costs: {'; '.join(part for part in (kept, left, then) if part)}", file=out)


def print_next_steps(args: argparse.Namespace, store: Store, summary: Summary, out: TextIO) -> None:
    """Writes the run's report page and says where it is, and how to serve the model."""
    from bakeoff.components.reporting.report import write_report

    report = write_report(store, summary.run_id, args.work_dir / defaults.REPORTS / f"{summary.run_id}.html")
    print(f"report: {report.resolve()}", file=out)
    serve = ["bakeoff", "serve", "--store", args.store, "--model-name", args.model_name]
    if args.s3_endpoint:
        serve += ["--s3-endpoint", args.s3_endpoint] + (["--s3-insecure"] if args.s3_insecure else [])
    print(f"serve it: {shlex.join(serve)}", file=out)


def serve_winner(args: argparse.Namespace, store: Store, out: TextIO) -> int:
    """Serves the published model as `bakeoff serve` does. With --json, stdout holds the run's one document: the
    server's URL goes to ``out`` (stderr)."""
    from bakeoff.pipelines.cli.serving import serve_published

    with contextlib.redirect_stdout(out):
        return serve_published(store, winner_settings(args), json_document=False)


def winner_settings(args: argparse.Namespace) -> Settings:
    """`bakeoff serve`'s defaults for the run's model: its HTTP port, no gRPC, the newest version and newer ones as
    they come, requests merged as it merges them."""
    from bakeoff.components.serving.startup import Settings

    return Settings(args.model_name)


def leaderboard(summary: Summary) -> str:
    """The candidates best first (the winner starred), the variants halving stopped and where, the decision."""
    width = max(16, *(len(entry.variant) + 2 for entry in summary.contestants()))
    rows = [
        f"{'':2}{'variant':<{width}}{'workers':>8}{'val_acc':>9}{'val_loss':>9}{'epochs':>7}{'train_s':>9}{'ex/s':>8}"
        "  precision"
    ]
    for place, c in enumerate(summary.candidates):
        mark = "* " if place == 0 else "  "
        rows.append(
            f"{mark}{c.variant:<{width}}{c.workers:>8}{c.val_accuracy:>9.4f}{c.val_loss:>9.4f}"
            f"{c.epochs:>7}{c.train_seconds:>9.1f}{c.examples_per_second:>8.0f}  {c.precision or 'float32'}"
        )
    if summary.stopped:
        rows.append("stopped by successive halving (validation as served, during training):")
        rows += [f"  {entry.variant:<{width}}{entry.reason}" for entry in summary.stopped]
    winner = summary.winner
    rows.append(f"winner: {winner.variant} (test accuracy {winner.test_accuracy:.4f})  [run {summary.run_id}]")
    rows.append(summary.promotion.message + (f" at {winner.uri}" if winner.uri else ""))
    return "\n".join(rows)


def bought(plan: Plan, listed: int, seconds: float, rungs: Sequence[RungRecord] = ()) -> str:
    """What the budget bought: the variants and epochs it kept of the ``listed``, the plan's span, how many the run's
    halve steps (``rungs``) kept where its deadline changed their rung's keep, and the run's time."""
    config = plan.config
    assert config.budget_minutes is not None
    kept = "; ".join(line.split(":")[0] for line in plan.fitted) or "as written"
    planned = {rung.index: rung.keep for rung in plan.rungs or []}
    moved = [f"{len(r.kept)} at rung {r.rung} (not {planned[r.rung]})" for r in rungs if len(r.kept) != planned[r.rung]]
    filled = f"; for its deadline the halve steps kept {', '.join(moved)}" if moved else ""
    # the run's time counts from the command, so the plan's span counts the measuring before it too
    least, most = (plan.least_seconds + plan.spent) / 60, (plan.seconds + plan.spent) / 60
    measuring = f" ({plan.spent / 60:.1f} of them measuring)" if plan.spent else ""
    return (
        f"budget {config.budget_minutes:g} min: {len(config.variants)} of {listed} variants ({kept}),"
        f" planned {least:.1f} to {most:.1f} min here{measuring}{filled}; the run took {seconds / 60:.1f} min"
    )


def cmd_compile(args: argparse.Namespace) -> int:
    from bakeoff.pipelines.compiling import compile_pipeline

    settings = compile_settings(args)
    try:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        compile_pipeline(args.output, **settings)
    except OSError as error:
        raise BakeoffError(f"cannot write {str(args.output)!r} ({error.strerror}): choose another -o") from None
    print(f"compiled the pipeline to {args.output} (image {settings['image']})", file=sys.stderr)
    minutes = load_config(args.config).budget_minutes
    if args.budget is None and minutes is not None:
        print(
            f"bakeoff: {args.config}'s search.budget ({minutes:g} min) is for runs on this machine:"
            " the compiled pipeline trains the search as written (--budget plans it on this machine's costs)",
            file=sys.stderr,
        )
    if settings["image"] == defaults.IMAGE:
        print(
            f"bakeoff: nobody publishes {settings['image']}, the default image: compile with --image "
            "REGISTRY/bakeoff:TAG,"
            " your build of images/Dockerfile, before you upload this file",
            file=sys.stderr,
        )
    return 0


def cmd_models_list(args: argparse.Namespace) -> int:
    from bakeoff.components.storage.registry import list_versions

    versions = [PublishedVersion.of(manifest) for manifest in list_versions(open_cli_store(args), args.model_name)]
    if args.json:
        print(json.dumps([version.to_dict() for version in versions], indent=2))
    if not versions:
        # stderr, so that --json's stdout stays the (empty) document
        print(f"no published versions of {args.model_name!r} in {args.store}", file=sys.stderr)
    elif not args.json:
        print(f"{'version':>7}  {'variant':<16}{'val_acc':>9}{'test_acc':>9}  {'run':<12}created")
        for v in versions:
            print(
                f"{v.version:>7}  {v.variant:<16}{v.val_accuracy:>9.4f}{v.test_accuracy:>9.4f}  "
                f"{v.run_id:<12}{v.created}"
            )
    return 0


def add_local_commands(commands: argparse._SubParsersAction) -> None:
    """Registers run, compile and models."""
    from bakeoff.components.selection.ranking import METRICS

    run = commands.add_parser("run", help="run the bake-off on this machine (kfp.local, TFJob replicas as processes)")
    run.add_argument(
        "--config",
        type=Path,
        help="variants YAML (default: the built-in search that fits the source, as `bakeoff plan` names it:"
        " pipelines/variants.yaml for Fashion-MNIST)",
    )
    store_args(run, named_by_source=True)
    run.add_argument(
        "--metric",
        default=defaults.METRIC,
        choices=list(METRICS),
        help=f"selection metric; it carries its direction ({', '.join(f'{m}: {d}' for m, d in METRICS.items())})",
    )
    run.add_argument(
        "--min-improvement",
        type=float,
        default=defaults.MIN_IMPROVEMENT,
        metavar="M",
        help="publish only if the winner beats the published champion by at least M in the metric"
        f" (default {defaults.MIN_IMPROVEMENT:g}: any gain; a tie keeps the champion)",
    )
    run.add_argument(
        "--confidence",
        type=float,
        default=defaults.PROMOTION_CONFIDENCE,
        metavar="C",
        help="publish only if a paired test on the validation split puts the winner's gain over the champion above 0"
        f" at this confidence (default {defaults.PROMOTION_CONFIDENCE:g}; 0: any gain)",
    )
    run.add_argument("--force-publish", action="store_true", help="publish the winner even if the champion is better")
    run.add_argument(
        "--workers",
        type=arguments.whole("--workers", defaults.SHARDS, " (the shards a local run ingests)"),
        help="override every variant's worker count",
    )
    run.add_argument("--epochs", type=arguments.whole("--epochs", MAX_EPOCHS), help="override every variant's epochs")
    budget_arg(run, "the config's search.budget")
    run.add_argument(
        "--max-train-examples", type=arguments.whole("--max-train-examples"), help="train on at most N examples"
    )
    run.add_argument(
        "--parallelism",
        type=arguments.whole("--parallelism", MAX_PARALLELISM),
        default=defaults.LOCAL_PARALLELISM,
        help=f"variants trained at once (default {defaults.LOCAL_PARALLELISM})",
    )
    data_args(run)
    halving_args(run)
    run.add_argument(
        "--work-dir",
        type=Path,
        default=defaults.WORK_DIR,
        help=f"kfp.local's outputs and cache (default {defaults.WORK_DIR})",
    )
    run.add_argument(
        "--timeout",
        type=arguments.whole("--timeout", MAX_TIMEOUT_SECONDS),
        default=defaults.TIMEOUT_SECONDS,
        help=f"seconds each TFJob may run (default {defaults.TIMEOUT_SECONDS})",
    )
    run.add_argument(
        "--no-progress",
        action="store_true",
        help="bakeoff's own lines as plain text instead of the live display (the default when stderr is no terminal)",
    )
    debug_arg(run, "every line on stderr as plain text: kfp.local's log, every task's and replica's output")
    run.add_argument(
        "--serve",
        action="store_true",
        help="then serve the published model here (as `bakeoff serve`) until interrupted",
    )
    run.set_defaults(handler=cmd_run)

    compile_ = commands.add_parser("compile", help="compile the pipeline to KFP IR YAML for a cluster")
    compile_.add_argument(
        "-o", "--output", type=Path, default=Path("bakeoff.yaml"), help="where to write (default bakeoff.yaml)"
    )
    pipeline_args(compile_)
    compile_.set_defaults(handler=cmd_compile)

    models = commands.add_parser("models", help="published models")
    models_commands = models.add_subparsers(dest="models_command", required=True)
    listing = models_commands.add_parser("list", help="the published versions of a model, with metrics and lineage")
    store_args(listing)
    listing.set_defaults(handler=cmd_models_list)
