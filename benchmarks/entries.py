"""The benchmark entries; each returns figures measured side by side in one run."""

from __future__ import annotations

import functools
import gzip
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from bakeoff.components.storage import runs
from bakeoff.components.storage.records import Summary
from benchmarks.datasets import datasets
from benchmarks.faults import faults
from benchmarks.harness import GLOBAL_BATCH, Context, Figure, local_job, median, timed
from benchmarks.peers import peers
from benchmarks.precision import precision
from benchmarks.search import search
from benchmarks.serving import serving
from benchmarks.sized import sized
from benchmarks.soak import soak_entry

SEED_CNN = {"name": "cnn", "model": {"type": "cnn", "filters": [32, 64, 64], "dense_units": 64}}
# The network the default file searched until `wide_top` (64-128-128, dropout at its range's middle): 3.9× the seed's
# MACs and 5.6× its parameters to all-reduce: how the strategy's cost scales with a larger network.
WIDE_CNN = {
    "name": "wide",
    "model": {"type": "cnn", "filters": [64, 128, 128], "dense_units": 256, "batch_norm": True, "dropout": 0.3},
}
# per measurement: 384 steps of the global batch (within the 55,000), 6 executions of 64, 5 steady
BENCH_EXAMPLES = 49152
DEBIAN_README = Path("/usr/share/doc/dataset-fashion-mnist/README.md.gz")


def _plain(context: Context, variant: dict, examples: int, tuned: bool = False) -> float:
    """One plain process: as a user's script runs it, or ``tuned`` as the replicas run (tcmalloc, oneDNN, steps per
    execution)."""
    from bakeoff.components.backends import allocator
    from bakeoff.components.spec import Training

    env = dict(os.environ)
    if tuned:
        env = allocator.with_tcmalloc(env, allocator.tcmalloc()) | {"TF_ENABLE_ONEDNN_OPTS": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.plain_train",
            "--variant",
            json.dumps(variant),
            "--data",
            str(context.dataset()),
            "--global-batch",
            str(GLOBAL_BATCH),
            "--examples",
            str(examples),
            "--threads",
            str(os.cpu_count()),
            "--steps-per-execution",
            str(Training.steps_per_execution if tuned else 1),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])["examples_per_second"]


def mwms(context: Context) -> list[Figure]:
    """Multi-worker efficiency: examples/s of N local workers ÷ one plain process on the same cores."""
    from bakeoff.components.spec import Training

    samples: dict[str, list[float]] = {
        "plain": [],
        "plain_tuned": [],
        "1w": [],
        "2w": [],
        "4w": [],
        "plain_tuned_wide": [],
        "1w_wide": [],
        "2w_wide": [],
    }
    rss: list[float] = []
    allocators, kernels = set(), set()
    for _ in range(context.repetitions):  # interleaved, so a noisy minute hits every configuration
        samples["plain"].append(_plain(context, SEED_CNN, BENCH_EXAMPLES))
        samples["plain_tuned"].append(_plain(context, SEED_CNN, BENCH_EXAMPLES, tuned=True))
        for workers in (1, 2, 4):
            metrics = local_job(context, SEED_CNN, workers, BENCH_EXAMPLES).metrics
            samples[f"{workers}w"].append(metrics.examples_per_second)
            allocators.add(metrics.allocator)
            kernels.add("oneDNN" if metrics.onednn else "Eigen")
            if workers == 2:
                rss.append(metrics.peak_rss_mb)
        samples["plain_tuned_wide"].append(_plain(context, WIDE_CNN, BENCH_EXAMPLES, tuned=True))
        for workers in (1, 2):
            samples[f"{workers}w_wide"].append(
                local_job(context, WIDE_CNN, workers, BENCH_EXAMPLES).metrics.examples_per_second
            )
    context.samples["mwms_examples_per_second"] = samples
    plain = median(samples["plain"])
    replicas = f"replicas on {'/'.join(sorted(allocators))} malloc and {'/'.join(sorted(kernels))} kernels"
    figures = [
        Figure(
            "plain_examples_per_second",
            plain,
            "ex/s",
            detail=f"one tf-keras process as a script runs it: {os.cpu_count()} threads, global batch {GLOBAL_BATCH}, "
            "default malloc and kernels",
        ),
        Figure(
            "plain_tuned_examples_per_second",
            median(samples["plain_tuned"]),
            "ex/s",
            detail=f"the same process with tcmalloc, oneDNN and {Training.steps_per_execution} steps per execution, "
            "as the replicas run",
        ),
    ]
    for workers in (1, 2, 4):
        ratio = median(samples[f"{workers}w"]) / plain
        figures.append(
            Figure(
                f"mwms_efficiency_{workers}w",
                ratio,
                "×",
                detail=f"{workers}-worker local TFJob ÷ plain; median {median(samples[f'{workers}w']):.0f} ex/s; seed "
                f"CNN, steady state after the first step; {replicas}",
            )
        )
    strict = median(samples["2w"]) / median(samples["plain_tuned"])
    figures.append(
        Figure(
            "mwms_efficiency_2w_vs_tuned_plain",
            strict,
            "×",
            detail="2 workers ÷ the tuned plain process: what the strategy itself costs",
        )
    )
    plain_wide = median(samples["plain_tuned_wide"])
    for workers in (1, 2):
        wide = median(samples[f"{workers}w_wide"])
        figures.append(
            Figure(
                f"mwms_efficiency_{workers}w_vs_tuned_plain_wide",
                wide / plain_wide,
                "×",
                detail=f"the same for the 64-128-128 `wide` network: a {workers}-worker job (median"
                f" {wide:.0f} ex/s) ÷ the tuned plain process ({plain_wide:.0f} ex/s)",
            )
        )
    peak = median(rss)
    figures.append(
        Figure(
            "peak_rss_mb_2w",
            2 * peak,
            "MB",
            detail=f"sum over both replicas of a 2-worker job (each {peak:.0f} MB peak RSS)",
        )
    )
    return figures


def ingest(context: Context) -> list[Figure]:
    """The artifact's cost over plain IDX decoding, both in one warm process."""
    from bakeoff.components import defaults
    from bakeoff.components.data import artifact as dataset
    from bakeoff.components.data import fashion_mnist

    fashion_mnist.class_names()  # imports TFDS once, outside both timings
    decode, build = [], []
    for index in range(context.repetitions):
        decode.append(timed(lambda: fashion_mnist.read_idx_dir(Path(defaults.SOURCE))))
        build.append(
            timed(
                functools.partial(
                    dataset.build,
                    defaults.SOURCE,
                    context.scratch / f"ingest-{index}",
                    defaults.VALIDATION_SIZE,
                    defaults.SHARDS,
                    defaults.SEED,
                )
            )
        )
    context.samples["ingest_seconds"] = {"decode": decode, "build": build}
    ratio = median(build) / median(decode)
    return [
        Figure(
            "ingest_ratio",
            ratio,
            "×",
            detail=f"70,000 images → sharded artifact {median(build):.2f} s ÷ decode IDX {median(decode):.2f} s",
        )
    ]


_KFP_LINE = re.compile(r"^(\d\d:\d\d:\d\d\.\d+) - INFO - (?:Executing task '(\w+)'|Task '(\w+)' finished)")


def _task_seconds(log: str) -> dict[str, float]:
    """Wall seconds per kfp.local task, from its own log timestamps."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", log)
    started: dict[str, datetime] = {}
    spent: dict[str, float] = {}
    for line in plain.splitlines():
        match = _KFP_LINE.match(line)
        if match:
            moment = datetime.strptime(match.group(1), "%H:%M:%S.%f")
            if match.group(2):
                started[match.group(2)] = moment
            else:
                name = match.group(3)
                spent[name] = spent.get(name, 0.0) + (moment - started.pop(name)).total_seconds()
    return spent


def pipeline(context: Context) -> list[Figure]:
    """`bakeoff run` (the default bake-off) ÷ the same trainings as plain jobs back to back; and its quality.

    With successive halving the same trainings are each variant trained, from scratch in one job, to the
    epoch it reached: the pipeline trains those epochs too, spread over rungs that resume.
    """
    from bakeoff.components.defaults import CONFIG as DEFAULT_CONFIG
    from bakeoff.components.modeling import evaluation
    from bakeoff.components.spec import load_config
    from bakeoff.components.storage import open_store
    from bakeoff.pipelines.compiling import budget_plan, planned

    work = context.scratch / "pipeline"
    work.mkdir()
    plan = budget_plan(load_config(DEFAULT_CONFIG))  # as the run plans it, before its jobs fold their steps in
    started = time.perf_counter()
    run = subprocess.run(
        [str(Path(sys.executable).parent / "bakeoff"), "run", "--json", "--debug"],  # kfp.local's log: task spans
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    )
    pipeline_seconds = time.perf_counter() - started
    summary = Summary.from_json(run.stdout, "bakeoff run --json")
    tasks = _task_seconds(run.stderr)
    training = sum(c.train_seconds for c in summary.candidates)

    reached = {entry.variant: entry.epochs for entry in summary.contestants()}
    baseline = 0.0
    for variant in planned(load_config(DEFAULT_CONFIG)).variants:  # as its budget shrank it, on this machine's costs
        spec = variant.to_dict()
        baseline += timed(functools.partial(local_job, context, spec, variant.workers, 0, reached[variant.name]))
    ratio = pipeline_seconds / baseline
    breakdown = {
        "total": pipeline_seconds,
        "ingest": tasks.get("ingest", 0.0),
        "train_tasks": tasks.get("train", 0.0),
        "training_in_fit": training,
        "select_evaluate_publish": tasks.get("select", 0.0),
    }
    breakdown["train_task_overhead"] = breakdown["train_tasks"] - training
    breakdown["orchestration_and_cli"] = pipeline_seconds - sum(tasks.values())
    context.samples["pipeline_breakdown_seconds"] = breakdown
    context.samples["baseline_seconds"] = baseline
    winner = summary.winner

    seed = local_job(context, SEED_CNN, 2, 70 * GLOBAL_BATCH, epochs=1, tag="seed")
    from bakeoff.components.data import artifact as dataset

    test = dataset.read_shards(open_store(str(context.dataset())), "test")
    model_dir = open_store(seed.store).get_dir(f"{seed.prefix}/{runs.MODEL}", context.scratch / "seed-model")
    seed_accuracy = evaluation.evaluate(model_dir, test.images, test.labels)["accuracy"]
    table = ", ".join(f"{name} {accuracy:.3f}" for name, accuracy in _published_table()[:4])
    plan_figures = (
        [
            Figure(
                "plan_error",
                pipeline_seconds / plan.seconds,
                "×",
                detail=f"`bakeoff run` {pipeline_seconds / 60:.1f} min ÷ its plan's upper bound "
                f"{plan.seconds / 60:.1f} min (lower bound {plan.least_seconds / 60:.1f} min)",
            )
        ]
        if plan
        else []
    )
    return [
        *plan_figures,
        Figure(
            "pipeline_overhead",
            ratio,
            "×",
            detail=f"`bakeoff run` {pipeline_seconds:.0f} s ÷ the same {len(reached)} trainings as plain local jobs "
            f"{baseline:.0f} s; " + ", ".join(f"{k} {v:.0f} s" for k, v in breakdown.items() if k != "total"),
        ),
        Figure(
            "pipeline_minutes",
            pipeline_seconds / 60,
            "min",
            detail="`bakeoff run` of the default bake-off, from the command to its summary",
        ),
        Figure(
            "winner_test_accuracy",
            winner.test_accuracy,
            "",
            detail=f"default bake-off winner `{winner.variant}` in {pipeline_seconds / 60:.1f} min, scored as served"
            " (variants trained with random_flip average each image and its mirror)",
        ),
        Figure(
            "seed_setting_test_accuracy",
            seed_accuracy,
            "",
            detail="the seed project's setting: one epoch of 70 steps (global batch 128)",
        ),
        Figure(
            "published_benchmark_best_cnn",
            _published_table()[0][1],
            "",
            detail=f"Fashion-MNIST README table (Debian's copy): {table}",
        ),
    ]


def _published_table() -> list[tuple[str, float]]:
    """(classifier, test accuracy) rows of the benchmark table Debian's dataset-fashion-mnist ships, best first."""
    rows = []
    for line in gzip.decompress(DEBIAN_README.read_bytes()).decode().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"0\.\d+", cells[2]) and "conv" in cells[0].lower():
            rows.append((f"{cells[0]} ({cells[1]})", float(cells[2])))
    return sorted(rows, key=lambda row: -row[1])


VALIDATION_EPOCHS = 2  # whole epochs of the default dataset (55,000 training examples, 5,000 validation)


def _without_validation(context: Context) -> Path:
    """The context's dataset with its validation split emptied: the worker then scores nothing at epoch ends."""
    from bakeoff.components.data import artifact as dataset
    from bakeoff.components.data.fashion_mnist import Split
    from bakeoff.components.storage import open_store

    source = open_store(str(context.dataset()))
    metadata = dataset.read_metadata(source)
    splits = {name: dataset.read_shards(source, name) for name in ("train", "test")}
    splits["validation"] = Split(splits["test"].images[:0], splits["test"].labels[:0])
    out = context.scratch / "dataset-without-validation"
    dataset.write(splits, out, metadata.shards, metadata.class_names, metadata.source)
    return out


def validation(context: Context) -> list[Figure]:
    """What per-epoch validation costs a 2-worker job: the same fit with and without a validation split, interleaved."""
    without_data = _without_validation(context)
    samples: dict[str, list[float]] = {"with_seconds": [], "without_seconds": [], "validation_seconds": []}
    for _ in range(context.repetitions):  # interleaved, so a noisy minute hits both
        validated = local_job(context, SEED_CNN, 2, 0, VALIDATION_EPOCHS, tag="validated").metrics
        unvalidated = local_job(
            context, SEED_CNN, 2, 0, VALIDATION_EPOCHS, tag="unvalidated", data=without_data
        ).metrics
        assert "val_loss" not in unvalidated.history and len(validated.history["val_loss"]) == VALIDATION_EPOCHS
        samples["with_seconds"].append(validated.train_seconds)
        samples["without_seconds"].append(unvalidated.train_seconds)
        samples["validation_seconds"].append(validated.validation_seconds)
    context.samples["validation"] = samples
    overhead = median([w / wo - 1 for w, wo in zip(samples["with_seconds"], samples["without_seconds"], strict=True)])
    share = median([v / w for v, w in zip(samples["validation_seconds"], samples["with_seconds"], strict=True)])
    return [
        Figure(
            "validation_overhead",
            overhead,
            "×",
            detail="seconds in fit with the 5,000 validation images scored at every epoch's end ÷ without, − 1; seed "
            "CNN,"
            f" 2 workers, {VALIDATION_EPOCHS} epochs of 55,000; median of {context.repetitions} interleaved pairs"
            f" ({median(samples['with_seconds']):.1f} s vs {median(samples['without_seconds']):.1f} s)",
        ),
        Figure(
            "validation_share_of_training",
            share,
            "×",
            detail="seconds the chief spent scoring its validation shards and all-reducing the totals ÷ seconds in "
            "fit, same runs",
        ),
    ]


# serving first: its in-process side runs TensorFlow's threads as the server does, which only a process can set
# before its TensorFlow runs anything (pipeline's scoring does).
ENTRIES = {
    "serving": serving,
    "soak": soak_entry,
    "ingest": ingest,
    "mwms": mwms,
    "pipeline": pipeline,
    "faults": faults,
    "search": search,
    "peers": peers,
    "validation": validation,
    "datasets": datasets,
    "sized": sized,
    "precision": precision,
}
# Run only when named, each as long as the rest of make bench: peers' 3 contests of three 15-min budgets (~2 h 20 min);
# search's 3 seeds, each a halving and an every-draw run (~23 min a seed on 2 cores, ~70 min).
ON_REQUEST = ("peers", "search")
