"""The plan's costs measured on this machine: each family's training step and a job's start, cached per machine.

``calibrated`` reads the record under the cache folder when it was measured on this machine key (CPU, its
AVX512, cores, TensorFlow, this cost model) and holds every network asked for; else it measures what is missing
with ``measure``, which runs a short real job of each network ``timed`` picks, on the local backend, and keeps it
unless other processes shared the cores meanwhile. After a local run, ``refresh`` folds the steps its jobs measured
into the record (each network at the median of its jobs that timed ``MIN_STEADY_STEPS`` steady steps or more, where
it is ``COST_BAND`` or more off the cached step): the host's pace drifts by more than the calibration's own spread
within hours, and the newest run that really timed a network prices it. Steps are keyed by their shape, its
``steps_per_execution`` included, so a run never prices another setting than its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from bakeoff.components import defaults
from bakeoff.components.backends import prefork
from bakeoff.components.backends.threads import thread_cap
from bakeoff.components.data import artifact
from bakeoff.components.data.fashion_mnist import Split
from bakeoff.components.errors import BakeoffError
from bakeoff.components.modeling.precision import FLOAT32, cpu_flags
from bakeoff.components.search import contention
from bakeoff.components.search.calibration_cache import FILE, cache_dir, machine_key, read, write
from bakeoff.components.search.costs import (
    CALIBRATED,
    FASHION_MNIST,
    VERSION,
    Calibration,
    Images,
    Shape,
    StepCost,
    folded,
    moves,
    shape_of,
    timed,
    timed_steps,
)
from bakeoff.components.spec import Variant
from bakeoff.components.storage import Store, runs
from bakeoff.components.storage.records import timestamp
from bakeoff.components.training import WORKER_PROGRAM

logger = logging.getLogger(__name__)

# What a step imports before its work: most only kfp's executor and the launcher of jobs; select (steps/select.py)
# TensorFlow, the selection and the report's figures as well (tests/test_search.py holds this to select's imports).
TASK_IMPORTS = "import kfp.dsl.executor_main, bakeoff.components.training.launch"
INGEST_SAMPLE = 2000  # images ingested to time ingest where the default source is not installed
SELECT_IMPORTS = (
    "import kfp.dsl.executor_main\n"
    "from bakeoff.components.tfenv import import_tensorflow\n"
    "import_tensorflow()\n"
    "import bakeoff.components.reporting.report, bakeoff.components.selection.winner"
)


@dataclasses.dataclass(frozen=True)
class Measured:
    """What a run's jobs measured of one network: the step they price it at (the median over its jobs that timed a
    steady rate over ``MIN_STEADY_STEPS``; None where none did), the fewest steady steps of those jobs (or, where none
    qualified, the most of any), and its variants' names."""

    cost: StepCost | None
    steady_steps: int
    jobs: int  # those the cost is the median of
    names: list[str]

    @property
    def name(self) -> str:
        return "/".join(self.names)


@dataclasses.dataclass(frozen=True)
class Refreshed:
    """What ``refresh`` did with a run's steps: the record written back (None: nothing changed) and one clause per
    network, or one reason for them all (neither: there was no record to fold them into)."""

    calibration: Calibration | None
    kept: list[str]
    left: list[str]


def run_steps(
    store: Store, run_id: str, variants: Iterable[Variant], concurrent_jobs: int, images: Images = FASHION_MNIST
) -> list[Measured]:
    """What each network of run ``run_id`` on ``images`` trained at, its jobs ``concurrent_jobs`` at a time: the median
    over those of its jobs that timed a steady rate over ``MIN_STEADY_STEPS`` steps or more (each from its
    ``rung-<k>.json``), so that one job in a fast or a slow spell of the host does not price it; a shorter job, or one
    that did not run, says nothing. The network whose newest job ran last comes last."""
    jobs = []
    for variant in variants:
        rung = 0
        while store.exists(f"{runs.variant_prefix(run_id, variant.name)}/{runs.rung_name(rung)}"):
            jobs.append((rung, variant, runs.rung_metrics(store, run_id, variant.name, rung)))
            rung += 1
    by_network: dict[tuple[Shape, int], tuple[list[str], list[tuple[StepCost, int]], int]] = {}
    for _, variant, metrics in sorted(jobs, key=lambda job: job[0]):
        if not metrics.epochs_trained:
            continue
        steady = timed_steps(metrics, variant.training.steps_per_execution)
        steady = steady if metrics.examples_per_second_steady else 0
        threads = thread_cap(variant.workers, concurrent_jobs)
        cost = StepCost.of_job(variant, metrics, threads, f"run {run_id}", images)
        names, timed, most = by_network.pop((cost.shape, cost.macs), ([], [], 0))  # put back: the newest job's last
        names = names if variant.name in names else [*names, variant.name]
        timed = [*timed, (cost, steady)] if steady >= defaults.MIN_STEADY_STEPS else timed
        by_network[(cost.shape, cost.macs)] = (names, timed, max(most, steady))
    return [
        Measured(
            dataclasses.replace(
                timed[-1][0],
                step_seconds=statistics.median(cost.step_seconds for cost, _ in timed),
                epoch_end_seconds=statistics.median(cost.epoch_end_seconds for cost, _ in timed),
            )
            if timed
            else None,
            min(steady for _, steady in timed) if timed else most,
            len(timed),
            names,
        )
        for names, timed, most in by_network.values()
    ]


def refresh(
    store: Store, run_id: str, variants: Iterable[Variant], concurrent_jobs: int, images: Images = FASHION_MNIST
) -> Refreshed:
    """After local run ``run_id`` on ``images`` (its steps are kept under their image shape): the cached calibration
    with the steps its jobs measured that ``moves`` it folded in, and written back, and why each other network's was
    not. Nothing is written where there is no record for this
    machine, or the jobs did not run one at a time on the cores as the plan counts them (``concurrent_jobs`` is not
    the default's)."""
    path = cache_dir() / FILE
    cached = read(path)
    if cached is None or cached.machine != machine_key():
        return Refreshed(None, [], [])  # nothing to keep them beside: the first plan here measures its own
    if concurrent_jobs != defaults.LOCAL_PARALLELISM:
        return Refreshed(None, [], [f"its jobs ran {concurrent_jobs} at a time, the plan counts one"])
    kept: list[str] = []
    left: list[str] = []
    refreshed = cached
    for network in run_steps(store, run_id, variants, concurrent_jobs, images):
        cost = network.cost
        if cost is None:
            left.append(f"{network.name} ({network.steady_steps} steady steps, under {defaults.MIN_STEADY_STEPS})")
            continue
        ms = cost.step_seconds * 1000
        if not moves(refreshed, cost):
            cached_ms = refreshed.step_seconds(cost.shape, cost.macs) * 1000
            band = f"within {defaults.COST_BAND:.0%} of the cached {cached_ms:.3g}"
            left.append(f"{network.name} ({ms:.3g} ms a step, {band})")
            continue
        was = (
            f"was {refreshed.step_seconds(cost.shape, cost.macs) * 1000:.3g}" if refreshed.costs(cost.shape) else "new"
        )
        over = (
            f"the median of {network.jobs} jobs of {network.steady_steps}+ steady steps"
            if network.jobs > 1
            else f"over {network.steady_steps} steady steps"
        )
        kept.append(f"{network.name} at {ms:.3g} ms a step ({was}; {over})")
        refreshed = folded(refreshed, [cost])
    if not kept:
        return Refreshed(None, kept, left)
    write(path, refreshed)
    return Refreshed(refreshed, kept, left)


def calibrated(
    variants: Iterable[Variant],
    source: str = defaults.SOURCE,
    steps: int = defaults.CALIBRATION_STEPS,
    images: Images = FASHION_MNIST,
    flags: frozenset[str] | None = None,
    until: float | None = None,
) -> Calibration:
    """This machine's costs for ``variants`` on ``images``: the cached record, measuring (and caching) the networks
    ``timed`` picks that it lacks for that image shape (``steps`` timed steps of each), on a CPU of ``flags`` (None:
    this one's). The networks of the variants listed first are timed first, each at float32 before bfloat16; past
    ``until`` (``time.monotonic()``; None: never) no other is started, and what is left stays unmeasured."""
    flags, variants = cpu_flags() if flags is None else flags, list(variants)
    path, key, wanted = cache_dir() / FILE, machine_key(), timed(variants, images, flags)
    cached = read(path)
    if cached is not None and cached.machine != key:
        cached = None  # another CPU, TensorFlow or cost model: nothing of it holds here
    missing = cached.missing(wanted, images) if cached else wanted
    if not missing:
        assert cached is not None
        return cached
    # Past ``until``, a search the record already prices in part runs that part: no job is forced on it.
    priced = cached is not None and any(cached.costs(shape_of(variant, images)) for variant in variants)
    if priced and until is not None and time.monotonic() >= until:
        assert cached is not None
        return cached
    listed = {variant.name: index for index, variant in enumerate(variants)}
    missing.sort(key=lambda variant: (listed.get(variant.name, len(listed)), variant.training.precision != FLOAT32))
    logger.info("bakeoff: measuring this machine's training costs once (%s)", path)
    before = contention.sample()
    measured = measure(missing, source, steps, images, until, force_first=not priced)
    merged = [*(cached.steps if cached else []), *measured.steps]
    # a job's start where a network has none measured: the median of all measured here, not of this batch alone
    starts = [cost.start_seconds for cost in merged if cost.start_seconds]
    calibration = dataclasses.replace(measured, start_seconds=start_cost(starts) if starts else 0.0, steps=merged)
    others = contention.others_share(before, contention.sample())
    if others > defaults.BUSY_SHARE:  # slower than this machine alone: every later plan would be priced from it
        logger.warning(
            "bakeoff: other processes used %s of the cores while this machine's costs were measured:"
            " this plan uses them, the next one measures again",
            f"{others:.0%}",
        )
    else:
        write(path, calibration)
    return calibration


def measure(
    wanted: list[Variant],
    source: str = defaults.SOURCE,
    steps: int = defaults.CALIBRATION_STEPS,
    images: Images = FASHION_MNIST,
    until: float | None = None,
    force_first: bool = True,
) -> Calibration:
    """Times ``wanted`` here, in order, with what a run does: the data built as ingest builds it, a pipeline step's
    process start, and one short real job of each network on the local backend, ``steps`` steps after a first
    execution; its step is the job's steady rate, its epoch's end its validation and backup, its start the rest of
    its wall time. Images of another shape than Fashion-MNIST's are timed on random pixels of that shape: a step's
    cost does not depend on what the pixels show. Past ``until`` (``time.monotonic()``) no job starts, but the first
    where ``force_first`` (a search with nothing priced yet)."""
    with tempfile.TemporaryDirectory(prefix="bakeoff-calibration-") as scratch, prefork.warm(WORKER_PROGRAM):
        data = Path(scratch) / "data"
        ingest = timed_ingest(source, data, images)
        if not (data / artifact.METADATA_FILE).exists() or (
            images.shape != FASHION_MNIST.shape or images.classes != FASHION_MNIST.classes
        ):
            most = max(_examples(variant, steps) for variant in wanted)
            data = _random_artifact(Path(scratch) / "random", images, most)
        costs, starts = [], []
        for index, variant in enumerate(wanted):
            if (index or not force_first) and until is not None and time.monotonic() >= until:
                logger.info(
                    "bakeoff: %d of %d networks left untimed: the budget's share for measuring is spent",
                    len(wanted) - index,
                    len(wanted),
                )
                break
            cost, start = _job(
                variant, data.as_uri(), (Path(scratch) / "store").as_uri(), f"calibration-{index}", steps, images
            )
            # a minute or more on 2 cores in all: a line per job shows it goes on
            logger.info(
                "bakeoff: timed %s (%d of %d): %.3g ms a step, %.1f s to start",
                variant.name if cost.precision == FLOAT32 else f"{variant.name} at {cost.precision}",
                index + 1,
                len(wanted),
                cost.step_seconds * 1000,
                start,
            )
            costs.append(dataclasses.replace(cost, start_seconds=start))
            starts.append(start)
    return Calibration(
        VERSION,
        machine_key(),
        timestamp(),
        start_cost(starts) if starts else 0.0,  # none: the share was spent before a job
        _step_start(TASK_IMPORTS),
        _step_start(SELECT_IMPORTS),
        ingest,
        costs,
    )


def timed_ingest(source: str, out: Path, images: Images) -> float:
    """Ingest's seconds for Fashion-MNIST's pixel values (what ``ingest_seconds`` scales from): ``source`` built into
    ``out`` as ingest builds it; where ``source`` is the default and this machine has none (a user of their own
    folder), a folder of ``INGEST_SAMPLE`` random PNG files of ``images``' shape, its time scaled to Fashion-MNIST's
    values."""
    from bakeoff.components.data.sources import idx

    # Silent: its progress is ingest's, not this command's, and stdout may be a --json document.
    def quiet(_line: str) -> None:
        pass

    if source != defaults.SOURCE or idx.holds_idx_files(Path(source)):
        began = time.perf_counter()
        artifact.build(source, out, defaults.VALIDATION_SIZE, defaults.SHARDS, defaults.SEED, log=quiet)
        return time.perf_counter() - began
    from PIL import Image

    rng = np.random.default_rng(defaults.SEED)
    folder = out.with_name(f"{out.name}-images")
    height, width, channels = images.shape
    for index in range(INGEST_SAMPLE):
        pixels = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
        (folder / f"{index % 2}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels[..., 0] if channels == 1 else pixels).save(folder / f"{index % 2}" / f"{index}.png")
    began = time.perf_counter()
    artifact.build(str(folder), out.with_name(f"{out.name}-sample"), 1, defaults.SHARDS, defaults.SEED, log=quiet)
    sample = dataclasses.replace(images, examples=INGEST_SAMPLE)
    return (time.perf_counter() - began) * FASHION_MNIST.values / sample.values


def start_cost(starts: list[float]) -> float:
    """A job's start from the calibration's jobs' starts: their median, so that one job slowed by something else on
    the machine does not set the cost of every job the plan counts (as their max would)."""
    return statistics.median(starts)


def _random_artifact(out: Path, images: Images, train: int) -> Path:
    """An artifact of random pixels of ``images``' shape and classes in ``out``: ``train`` training examples (what
    the calibration's jobs read), the default validation split, whose scoring is an epoch's end."""
    rng = np.random.default_rng(defaults.SEED)
    counts = {"train": train, "validation": defaults.VALIDATION_SIZE, "test": defaults.SHARDS}
    splits = {
        split: Split(rng.integers(0, 256, (count, *images.shape), dtype=np.uint8), np.arange(count) % images.classes)
        for split, count in counts.items()
    }
    artifact.write(splits, out, defaults.SHARDS, [str(label) for label in range(images.classes)], "random pixels")
    return out


def _job(
    variant: Variant, data_uri: str, store_uri: str, run_id: str, steps: int, images: Images = FASHION_MNIST
) -> tuple[StepCost, float]:
    """One short real job of ``variant``'s network: its step (the worker's steady rate) and its start (the rest)."""
    from bakeoff.components.training.launch import JobSettings, train_variant

    timed_variant = dataclasses.replace(variant, training=dataclasses.replace(variant.training, epochs=1))
    shape = shape_of(variant, images)
    settings = JobSettings(
        defaults.IMAGE,
        _examples(variant, steps),
        defaults.LOCAL_PARALLELISM,
        defaults.TIMEOUT_SECONDS,
        "local",
        defaults.TRAINER,
    )
    began = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # the replicas' log lines; a failure's tail is in its error
        try:
            metrics = train_variant(timed_variant.to_dict(), data_uri, store_uri, run_id, settings).metrics
        except BakeoffError as error:
            raise BakeoffError(f"measuring this machine's training costs failed: {error}") from None
    wall = time.perf_counter() - began
    cost = StepCost.of_job(variant, metrics, thread_cap(shape.workers, defaults.LOCAL_PARALLELISM), CALIBRATED, images)
    trained = metrics.epochs_trained * (metrics.steps_per_epoch * cost.step_seconds + cost.epoch_end_seconds)
    return cost, wall - trained


def _examples(variant: Variant, steps: int) -> int:
    """A calibration job's training examples: one execution of its own ``steps_per_execution`` (the trace; a step's
    cost depends on it), then ``steps`` timed steps."""
    return variant.training.batch_size * variant.workers * (variant.training.steps_per_execution + steps)


def _step_start(imports: str) -> float:
    """A pipeline step's own start: a Python process running ``imports`` (TASK_IMPORTS, SELECT_IMPORTS)."""
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", imports],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - began
