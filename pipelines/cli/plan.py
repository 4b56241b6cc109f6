"""`bakeoff plan`: what a config would train (its variants expanded, the rungs, the estimated time), running nothing."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from bakeoff.components import arguments, defaults
from bakeoff.components.errors import BakeoffError
from bakeoff.components.search.budget import Plan, plan_config
from bakeoff.components.search.costs import CALIBRATED, FASHION_MNIST, Calibration, Images
from bakeoff.components.spaces import describe
from bakeoff.pipelines.cli.flags import budget_arg, data_args, halving_args, load_budgeted


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
    lines.append(
        f"estimated time: {span}; the jobs one at a time on {train_examples:,} examples of"
        f" {'x'.join(map(str, plan.images.shape))} pixels ({plan.images.classes} classes), with ingest, the jobs'"
        " starts and select"
    )
    lines.append(costs(plan.calibration))
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
        f" {c.step_seconds * 1000:.3g} ms/step, {c.epoch_end_seconds:.2g} s an epoch's end (batch {c.batch_size},"
        f" {c.workers}×{c.threads} threads{'' if c.measured_by == CALIBRATED else f', as {c.measured_by} trained'})"
        for c in calibration.steps
    )
    return (
        f"costs measured here at {calibration.measured_at} ({calibration.machine}): {steps};"
        f" {calibration.start_seconds:.1f} s to start a job, {calibration.task_seconds:.1f} s a pipeline step"
        f" ({calibration.select_task_seconds:.1f} s select's),"
        f" {calibration.ingest_seconds:.1f} s to ingest"
    )


def dataset_images(data: str | None) -> Images:
    """What ``--data`` names: an ingested artifact's size (its metadata.json), or Fashion-MNIST's, the default."""
    if data is None:
        return FASHION_MNIST
    from bakeoff.components.data.artifact import METADATA_FILE, read_metadata
    from bakeoff.components.storage import open_store

    uri = data if "://" in data else Path(data).resolve().as_uri()
    store = open_store(uri)
    if not store.exists(METADATA_FILE):
        raise BakeoffError(
            f"--data {data!r} holds no {METADATA_FILE}: pass a Dataset artifact's folder or URI (what ingest wrote)"
        )
    return Images.of(read_metadata(store))


def cmd_plan(args: argparse.Namespace) -> int:
    config, images = load_budgeted(args), dataset_images(args.data)  # both checked before any measuring
    plan, train_examples = plan_config(config, args.max_train_examples or 0, images)
    if args.json:
        print(json.dumps(plan_document(plan), indent=2))
    else:
        print(render(plan, train_examples))
    return 0


def add_plan_commands(commands: argparse._SubParsersAction) -> None:
    """Registers plan."""
    plan = commands.add_parser(
        "plan", help="show what a config would train: variants expanded, the rungs, the estimated time (runs nothing)"
    )
    plan.add_argument(
        "--config", type=Path, default=defaults.CONFIG, help="variants YAML (default: pipelines/variants.yaml)"
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
        " and classes (default: Fashion-MNIST's)",
    )
    plan.add_argument("--json", action="store_true", help="print the plan as one JSON document")
    budget_arg(plan, "the config's search.budget")
    data_args(plan)
    halving_args(plan)
    plan.set_defaults(handler=cmd_plan)
