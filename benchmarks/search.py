"""Benchmark entry: successive halving against training every sampled variant to max_epochs, the same variants on the
same machine.

``python -m benchmarks.search [--samples N --max-epochs N ...]`` runs it alone at any size (a smoke run at a tiny one);
``python -m benchmarks.run --only search`` runs it at ``FULL``, as it runs alone without flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import yaml

from bakeoff.components import logs
from bakeoff.components.storage.records import Summary
from benchmarks.harness import Context, Figure, add_size_flags

BAKEOFF = str(Path(sys.executable).parent / "bakeoff")


@dataclasses.dataclass(frozen=True)
class Size:
    """How big a search the entry runs."""

    samples: int = 8
    min_epochs: int = 1
    max_epochs: int = 8
    eta: int = 2
    workers: int = 1
    max_train_examples: int = 0  # 0: all 55,000
    repetitions: int = 3  # pairs of runs, each on its own draws (seed, seed + 1, ...), the two orders alternating
    seed: int = 0


# All 55,000 examples: at 20,000 a job's fixed cost (~8 s here) outweighs half an epoch, so halving's 15 jobs against
# 8 cannot take under half the time (benchmarks/results.md, "Search").
FULL = Size()


def _configs(size: Size, seed: int, scratch: Path) -> tuple[Path, Path]:
    """(the search config with halving, the same sampled variants written out plainly, each trained to max_epochs)."""
    from bakeoff.components.defaults import CONFIG
    from bakeoff.components.spec import load_config, load_variants

    base = load_variants(CONFIG)[0].to_dict()  # the seed CNN and the default training settings
    base["training"].pop("epochs")
    base["training"]["learning_rate"] = {"log_uniform": [0.0005, 0.005]}
    base["model"] |= {"dropout": {"uniform": [0.0, 0.5]}, "batch_norm": {"choice": [False, True]}}
    halving = {"min_epochs": size.min_epochs, "max_epochs": size.max_epochs, "eta": size.eta}
    searched = scratch / "halving.yaml"
    searched.write_text(
        yaml.safe_dump(
            {
                "search": {"samples": size.samples, "seed": seed, "halving": halving},
                "variants": [base | {"workers": size.workers}],
            }
        )
    )
    every = scratch / "every.yaml"
    every.write_text(yaml.safe_dump({"variants": [variant.to_dict() for variant in load_config(searched).variants]}))
    return searched, every


def run_bakeoff(
    config: Path, max_train_examples: int, where: Path, env: Mapping[str, str] | None = None
) -> tuple[float, Summary]:
    """One `bakeoff run` in a fresh work dir and store (so each pays its own ingest), its log beside them: (wall
    seconds, its --json). ``env``: its environment (default: this process's)."""
    where.mkdir()
    extra = ["--max-train-examples", str(max_train_examples)] if max_train_examples else []
    started = time.perf_counter()
    run = subprocess.run(
        [
            BAKEOFF,
            "run",
            "--config",
            str(config),
            "--store",
            str(where / "store"),
            "--work-dir",
            str(where / "work"),
            "--json",
            "--debug",  # kfp.local's log on stderr, for run.log below
            *extra,
        ],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    (where / "run.log").write_text(run.stderr)  # its task spans, for a look at where the time went
    (where / "run.json").write_text(run.stdout)  # --json's document, as the run wrote it
    if run.returncode != 0:
        raise RuntimeError(f"bakeoff run --config {config.name} failed: {run.stderr[-2000:]}")
    return seconds, Summary.from_json(run.stdout, f"bakeoff run --config {config.name} --json")


def _epochs(where: Path, summary: Summary) -> dict:
    """Epochs the run trained (every job's epochs_trained), and what retraining each rung from scratch would have
    cost."""
    from bakeoff.components.storage import open_store, runs

    store, run_id = open_store(str(where / "store")), summary.run_id
    records = runs.search_records(store, run_id)
    if records:  # rung k's jobs: the variants its record says entered; the last rung's: whom the last halving kept
        rungs = [record.entered for record in records] + [[kept.variant for kept in records[-1].kept]]
        metrics = [runs.rung_metrics(store, run_id, name, k) for k, names in enumerate(rungs) for name in names]
    else:  # each variant's one job
        metrics = [runs.metrics(store, run_id, c.variant) for c in summary.candidates]
    return {
        "trained": sum(m.epochs_trained for m in metrics),
        "from_scratch": sum(m.epochs for m in metrics),
        "jobs": len(metrics),
    }


def search(context: Context, size: Size = FULL) -> list[Figure]:
    """Winner test accuracy against wall time: (a) successive halving, (b) every sampled variant to max_epochs, on
    ``size.repetitions`` seeds' draws; the figures are means over the seeds."""
    work = context.scratch / "search"
    work.mkdir()
    samples: dict[str, list] = {"halving": [], "every": []}
    for repetition in range(size.repetitions):
        seed = size.seed + repetition
        drawn = work / f"seed-{seed}"
        drawn.mkdir()
        searched, every = _configs(size, seed, drawn)
        order = [("halving", searched), ("every", every)]
        for side, config in order if repetition % 2 == 0 else order[::-1]:
            where = work / f"{side}-{seed}"
            seconds, summary = run_bakeoff(config, size.max_train_examples, where)
            samples[side].append(
                {
                    "seed": seed,
                    "seconds": seconds,
                    "winner": summary.winner.variant,
                    "test_accuracy": summary.winner.test_accuracy,
                    "epochs": _epochs(where, summary),
                }
            )
    context.samples["search"] = {"size": dataclasses.asdict(size), **samples}
    pairs = list(zip(samples["halving"], samples["every"], strict=True))

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    accuracy = {side: mean([s["test_accuracy"] for s in runs]) for side, runs in samples.items()}
    minutes = {side: mean([s["seconds"] for s in runs]) / 60 for side, runs in samples.items()}
    gap = mean([halving["test_accuracy"] - every["test_accuracy"] for halving, every in pairs])
    ratio = mean([halving["seconds"] / every["seconds"] for halving, every in pairs])
    trained = {side: mean([s["epochs"]["trained"] for s in runs]) for side, runs in samples.items()}
    from_scratch = mean([s["epochs"]["from_scratch"] for s in samples["halving"]])
    per_seed = ", ".join(f"{h['test_accuracy']:.4f} vs {e['test_accuracy']:.4f}" for h, e in pairs)
    seeds = f"mean of {size.repetitions} seed(s) from {size.seed}"
    setting = (
        f"{size.samples} sampled seed-CNN variants (learning rate, dropout, batch norm), {size.workers} worker(s),"
        f" {size.max_train_examples or 55000} training examples; halving {size.min_epochs}→{size.max_epochs} "
        f"epochs, eta {size.eta}; {seeds}"
    )
    return [
        Figure(
            "search_halving_test_accuracy",
            accuracy["halving"],
            "",
            detail=f"successive halving's winner, {minutes['halving']:.1f} min a run; {setting}",
        ),
        Figure(
            "search_every_test_accuracy",
            accuracy["every"],
            "",
            detail=f"every variant to {size.max_epochs} epochs, {minutes['every']:.1f} min a run",
        ),
        Figure(
            "search_halving_gap",
            gap,
            "",
            detail=f"halving's winner − every variant's winner, test accuracy, {seeds} (each seed: {per_seed})",
        ),
        Figure(
            "search_halving_time_ratio",
            ratio,
            "×",
            detail=f"wall time of the halving run ÷ the every-variant run on the same draws, {seeds}, orders "
            "alternating",
        ),
        Figure(
            "search_seeds", size.repetitions, "", detail=f"seeds whose draws the means above are over, from {size.seed}"
        ),
        Figure(
            "search_halving_epochs",
            trained["halving"],
            "epochs",
            detail=f"epochs trained by halving's rung jobs, against {trained['every']:.0f} training every variant",
        ),
        Figure(
            "search_epochs_saved_by_resuming",
            from_scratch - trained["halving"],
            "epochs",
            detail=f"each rung resumed from the last one's backup: retraining each rung's jobs from scratch would train"
            f" {from_scratch:.0f}",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_flags(parser, FULL)
    parser.add_argument("--scratch", type=Path, help="a new folder to keep every run's store and log in")
    args = vars(parser.parse_args(argv))
    logs.configure()  # the components' lines, as `bakeoff` shows them
    scratch, size = args.pop("scratch"), Size(**args)
    if scratch is not None:  # to take the runs apart afterwards
        scratch.mkdir(parents=True)
        _report(scratch, size)
    else:
        with tempfile.TemporaryDirectory(prefix="bakeoff-bench-search-") as temporary:
            _report(Path(temporary), size)
    return 0


def _report(scratch: Path, size: Size) -> None:
    """Runs the entry at ``size`` in ``scratch`` and prints its figures and samples."""
    context = Context(scratch, size.repetitions)
    for figure in search(context, size):
        print(f"{figure.key} = {figure.value:.4g} {figure.unit}  ({figure.detail})")
    print(json.dumps(context.samples["search"], indent=2))


if __name__ == "__main__":
    sys.exit(main())
