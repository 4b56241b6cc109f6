"""`bakeoff plan`: what a config would train (its variants expanded, the rungs, the estimated time), running nothing."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from bakeoff.components import arguments, defaults
from bakeoff.components.errors import BakeoffError
from bakeoff.components.modeling.precision import FLOAT32
from bakeoff.components.search.budget import Plan, plan_config
from bakeoff.components.search.builtin import builtin_search
from bakeoff.components.search.costs import CALIBRATED, Calibration, Images
from bakeoff.components.spaces import describe
from bakeoff.components.spec import Config
from bakeoff.pipelines.cli.flags import budget_arg, data_args, halving_args, load_budgeted, load_searched


def plan_document(plan: Plan) -> dict:
    """The plan as one JSON document: variants with their searched values, the rungs, the estimate, what the budget
    changed."""
    config = plan.config
    return {
        "config": config.source,
        "source": config.data.source,
        "image_size": list(config.data.image_size),
        "variants": [
            {
                "name": v.name,
                "base": config.expansions[v.name].base,
                "values": dict(config.expansions[v.name].values),
                "epochs": v.training.epochs,
                "spec": v.to_dict(),
            }
            for v in config.variants
        ],
        "search": dataclasses.asdict(config.search) if config.search else None,
        "rungs": [dataclasses.asdict(rung) for rung in plan.rungs] if plan.rungs is not None else None,
        "estimated_seconds": round(plan.seconds, 1),
        "least_seconds": round(plan.least_seconds, 1),
        "fitted": plan.fitted,
        "precisions": plan.precisions,
        "calibration": plan.calibration.to_dict(),
        "dataset": dataclasses.asdict(plan.images),
    }


def render(plan: Plan, train_examples: int) -> str:
    config = plan.config
    width = max(len(v.name) for v in config.variants)
    lines = [f"{len(config.variants)} variants from {config.source}:"]
    for variant in config.variants:
        values = config.expansions[variant.name].values
        lines.append(f"  {variant.name:<{width}}  {describe(values) if values else '(as written)'}")
    halving = config.search.halving if config.search else None
    if plan.rungs is None:
        lines.append("no halving: every variant trains its training.epochs in one job")
    else:
        assert halving is not None
        lines.append(f"successive halving (eta {halving.eta}, epochs {halving.min_epochs} to {halving.max_epochs}):")
        lines.append(f"  {'rung':>4}  {'epochs':>6}  {'entering':>8}  {'kept':>4}")
        lines += [f"  {r.index:>4}  {r.epochs:>6}  {r.entering:>8}  {r.keep:>4}" for r in plan.rungs]
    span = (
        f"{plan.least_seconds / 60:.1f} to {plan.seconds / 60:.1f} min (the cheapest to the costliest variants"
        " surviving each rung)"
        if plan.rungs is not None
        else f"{plan.seconds / 60:.1f} min"
    )
    images = plan.images
    lines.append(
        f"priced on {images.source}: {images.examples:,} training examples of {'x'.join(map(str, images.shape))}"
        f" pixels, {images.classes} classes"
    )
    lines.append(
        f"estimated time: {span}; the jobs one at a time on {train_examples:,} examples, with ingest, the jobs'"
        " starts and select"
    )
    lines.append(costs(plan.calibration))
    lines += plan.precisions
    if config.budget_minutes is not None:
        lines.append(
            f"budget: {config.budget_minutes:g} min"
            + ("; fitted to it:" if plan.fitted else ", which it fits as written")
        )
        lines += [f"  {line}" for line in plan.fitted]
    return "\n".join(lines)


def costs(calibration: Calibration) -> str:
    """The calibration an estimate used, in one line."""
    steps = ", ".join(
        f"{c.architecture}{' with batch norm' if c.batch_norm else ''} of {c.macs / 1e6:.3g}M MACs"
        f"{'' if c.precision == FLOAT32 else f' at {c.precision}'}"
        f" {c.step_seconds * 1000:.3g} ms/step, {c.epoch_end_seconds:.2g} s an epoch's end (batch {c.batch_size},"
        f" {c.workers}×{c.threads} threads{'' if c.measured_by == CALIBRATED else f', as {c.measured_by} trained'}"
        f"{f', {c.start_seconds:.2g} s to start' if c.start_seconds else ''})"
        for c in calibration.steps
    )
    return (
        f"costs measured here at {calibration.measured_at} ({calibration.machine}): {steps};"
        f" {calibration.start_seconds:.1f} s to start a job of a network not timed,"
        f" {calibration.task_seconds:.1f} s a pipeline step"
        f" ({calibration.select_task_seconds:.1f} s select's),"
        f" {calibration.ingest_seconds:.1f} s to ingest"
    )


def dataset_images(data: str) -> Images:
    """What ``--data`` names: an ingested artifact's size (its metadata.json)."""
    from bakeoff.components.data.artifact import METADATA_FILE, read_metadata
    from bakeoff.components.storage import open_store

    uri = data if "://" in data else Path(data).resolve().as_uri()
    store = open_store(uri)
    if not store.exists(METADATA_FILE):
        raise BakeoffError(
            f"--data {data!r} holds no {METADATA_FILE}: pass a Dataset artifact's folder or URI (what ingest wrote)"
        )
    return Images.of(read_metadata(store), data)


def cmd_plan(args: argparse.Namespace) -> int:
    from bakeoff.pipelines.compiling import source_images

    def priced(config: Config) -> Images:  # --data's artifact, else the source's listing and one image
        return dataset_images(args.data) if args.data else source_images(config)

    if args.write_search is not None:
        named = args.config
        args.config = named or defaults.CONFIG
        return write_search(named or builtin_search(priced(load_budgeted(args))).path, args.write_search)
    # What `bakeoff run` would train on this data: --config's, else the built-in search that fits it.
    config, images, said = load_searched(args, priced)
    # `auto` is picked from the costs a budget measures: a run without one leaves it to its replicas (float32).
    flags = None if config.budget_minutes is not None else frozenset[str]()
    plan, train_examples = plan_config(config, args.max_train_examples or 0, images, flags)
    if args.json:
        print(*said, sep="\n", file=sys.stderr)
        print(json.dumps(plan_document(plan), indent=2))
    else:
        print("\n".join([*said, render(plan, train_examples)]))
    return 0


def write_search(config: Path, out: Path) -> int:
    """Writes the search of ``config`` (the built-in one that fits the data, unless --config names another) to
    ``out`` to edit; never over an existing file."""
    try:
        with out.open("x") as handle:
            handle.write(config.read_text())
    except FileExistsError:
        raise BakeoffError(f"--write-search {str(out)!r} exists: name a new file, or remove it first") from None
    except OSError as error:
        raise BakeoffError(
            f"cannot write --write-search {str(out)!r} ({error.strerror}): name a writable file"
        ) from None
    print(f"wrote {config.name} to {out}: edit it, then pass it to --config")
    return 0


def add_plan_commands(commands: argparse._SubParsersAction) -> None:
    """Registers plan."""
    plan = commands.add_parser(
        "plan", help="show what a config would train: variants expanded, the rungs, the estimated time (runs nothing)"
    )
    plan.add_argument(
        "--config",
        type=Path,
        help="variants YAML (default: what `bakeoff run` trains without --config, the built-in search that fits the"
        " data: pipelines/variants.yaml for Fashion-MNIST, search_small.yaml for other small grayscale images,"
        " search_large.yaml for 64 px and up or RGB)",
    )
    plan.add_argument(
        "--write-search",
        type=Path,
        metavar="FILE",
        help="write the search (--config's, else the built-in one that fits the data) to FILE to edit, and stop",
    )
    plan.add_argument(
        "--max-train-examples",
        type=arguments.whole("--max-train-examples"),
        help="estimate for at most N training examples",
    )
    plan.add_argument(
        "--data",
        metavar="ARTIFACT",
        help="price this ingested Dataset artifact (a folder or URI holding metadata.json): its examples, image size"
        " and classes (default: the source's, listed with one image read)",
    )
    plan.add_argument("--json", action="store_true", help="print the plan as one JSON document")
    budget_arg(plan, "the config's search.budget")
    data_args(plan)
    halving_args(plan)
    plan.set_defaults(handler=cmd_plan)
