"""The plan's costs measured on this machine: each family's training step and a job's start, cached per machine.

``calibrated`` reads the record under the cache folder when it was measured on this machine key (CPU, its
AVX512, cores, TensorFlow, this cost model) and holds every network asked for; else it measures what is missing
with ``measure``, which runs a short real job of each network ``timed`` picks, on the local backend, and keeps it
unless other processes shared the cores meanwhile. After a local run, ``refresh`` folds the steps its jobs measured
into the record (each network at the median of its jobs): the host's pace drifts by more than the calibration's own
spread within hours, and the newest run prices the networks it trained.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import io
import itertools
import json
import os
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
from bakeoff.components.backends.local import thread_cap
from bakeoff.components.data import artifact
from bakeoff.components.data.fashion_mnist import CLASSES, IMAGE_SHAPE, TRAIN_IMAGES
from bakeoff.components.errors import BakeoffError
from bakeoff.components.modeling.architectures import CnnConfig, MlpConfig
from bakeoff.components.search import contention
from bakeoff.components.spec import Variant
from bakeoff.components.storage import Store, runs
from bakeoff.components.storage.records import (
    DatasetMetadata,
    Preprocessing,
    Record,
    RecordError,
    SkippedFiles,
    WorkerMetrics,
    timestamp,
)
from bakeoff.components.training.tfjob import WORKER_PROGRAM

VERSION = 10  # of the cost model, of this record and of what a job costs: a new one measures again
# What a step imports before its work: most only kfp's executor and the launcher of jobs; select (steps/select.py)
# TensorFlow, the selection and the report's figures as well (tests/test_search.py holds this to select's imports).
TASK_IMPORTS = "import kfp.dsl.executor_main, bakeoff.components.training.launch"
SELECT_IMPORTS = (
    "import kfp.dsl.executor_main\n"
    "from bakeoff.components.tfenv import import_tensorflow\n"
    "import_tensorflow()\n"
    "import bakeoff.components.reporting.report, bakeoff.components.selection.winner"
)
FILE = "calibration.json"
MACS_TOLERANCE = 1.15  # networks within this factor of a measured one cost as it does, in proportion
CALIBRATED = "calibration"  # a step's measured_by when a calibration job timed it; else "run <id>"
CPUINFO = Path("/proc/cpuinfo")


@dataclasses.dataclass(frozen=True)
class Images:
    """What a plan prices of a dataset: its training examples, one image's [height, width, channels], its classes."""

    examples: int
    shape: tuple[int, int, int]
    classes: int

    @classmethod
    def of(cls, metadata: DatasetMetadata) -> Images:
        """An ingested artifact's (its metadata.json)."""
        height, width, channels = metadata.image_shape
        return cls(metadata.counts["train"], (height, width, channels), len(metadata.class_names))

    @property
    def values(self) -> int:
        """Numbers in the training split: what ingest reads and writes."""
        height, width, channels = self.shape
        return self.examples * height * width * channels


# The default source: its training split less the validation carved from it.
FASHION_MNIST = Images(TRAIN_IMAGES - defaults.VALIDATION_SIZE, (*IMAGE_SHAPE, 1), CLASSES)


@dataclasses.dataclass(frozen=True)
class Shape:
    """What a family's step costs depend on: its architecture, whether it normalizes batches, the batch per replica,
    the workers sharing the cores, and the images' [height, width, channels] (its input, activations and memory)."""

    architecture: str
    batch_norm: bool  # its work grows with activations, not MACs: the line of a plain network misprices it
    batch_size: int
    workers: int
    image: tuple[int, int, int] = FASHION_MNIST.shape


@dataclasses.dataclass(frozen=True)
class StepCost(Record):
    """One step of a short real job of one network (``timed``'s): every replica's, all-reduce included."""

    architecture: str
    batch_norm: bool
    batch_size: int  # per replica
    workers: int  # the job's replicas, each on ``threads`` threads (the local backend's cap)
    threads: int
    macs: int  # of the network timed, one image's forward pass
    step_seconds: float
    epoch_end_seconds: float  # an epoch's end: scoring the validation images and saving the backup
    measured_by: str = CALIBRATED  # or the run whose job of about this network measured it last
    image: list[int] = dataclasses.field(default_factory=lambda: list(FASHION_MNIST.shape))  # [height, width, channels]

    @property
    def shape(self) -> Shape:
        height, width, channels = self.image
        return Shape(self.architecture, self.batch_norm, self.batch_size, self.workers, (height, width, channels))

    @classmethod
    def of(
        cls,
        shape: Shape,
        threads: int,
        macs: int,
        step_seconds: float,
        epoch_end_seconds: float,
        measured_by: str = CALIBRATED,
    ) -> StepCost:
        """The step of a network of ``macs`` in ``shape``, its replicas on ``threads`` threads each, and its epoch's
        end."""
        return cls(
            shape.architecture,
            shape.batch_norm,
            shape.batch_size,
            shape.workers,
            threads,
            macs,
            step_seconds,
            epoch_end_seconds,
            measured_by,
            list(shape.image),
        )

    @classmethod
    def of_job(
        cls, variant: Variant, metrics: WorkerMetrics, threads: int, measured_by: str, images: Images = FASHION_MNIST
    ) -> StepCost:
        """The step one job of ``variant`` trained at (its steady rate, all-reduce included) and its epochs' end."""
        step = metrics.global_batch_size / metrics.examples_per_second
        epoch_end = (metrics.validation_seconds + metrics.backup_seconds) / metrics.epochs_trained
        return cls.of(shape_of(variant, images), threads, macs(variant, images), step, epoch_end, measured_by)


@dataclasses.dataclass(frozen=True)
class Calibration(Record):
    """This machine's costs: written as ``calibration.json`` under the cache folder, read back strictly."""

    version: int
    machine: str  # machine_key() when measured: another key measures again
    measured_at: str  # ISO 8601, UTC
    start_seconds: float  # a job's fixed cost (``start_cost`` of the jobs'): processes, TensorFlow, data, trace, save
    task_seconds: float  # a pipeline step's process start, paid by every step (kfp.local starts each as a process)
    select_task_seconds: float  # the select step's: it imports TensorFlow and the report's libraries itself
    ingest_seconds: float  # the data built as ingest builds it
    steps: list[StepCost]

    def costs(self, shape: Shape) -> list[StepCost]:
        """The steps measured for ``shape``, the cheapest network first."""
        return sorted((cost for cost in self.steps if cost.shape == shape), key=lambda cost: cost.macs)

    def step_seconds(self, shape: Shape, network_macs: int) -> float:
        """A step of a network of ``network_macs`` in ``shape``: on the line through the two measured networks
        nearest it by MACs (a step has a part that does not grow with the network: input, all-reduce, optimizer),
        or in proportion to the one measured; never below the cheapest one's step for a larger network."""
        return _on_line([(cost.macs, cost.step_seconds) for cost in self.costs(shape)], network_macs)

    def epoch_end_seconds(self, shape: Shape, network_macs: int) -> float:
        """An epoch's end (validation, backup) of a network of ``network_macs`` in ``shape``, priced as its step."""
        return _on_line([(cost.macs, cost.epoch_end_seconds) for cost in self.costs(shape)], network_macs)

    def missing(self, wanted: Iterable[Variant], images: Images = FASHION_MNIST) -> list[Variant]:
        """Those of ``wanted`` (``timed``'s) with no measured network of their shape within ``MACS_TOLERANCE``."""
        return [
            variant
            for variant in wanted
            if not any(
                within(cost.macs, macs(variant, images), MACS_TOLERANCE)
                for cost in self.costs(shape_of(variant, images))
            )
        ]


def _on_line(measured: list[tuple[int, float]], network_macs: int) -> float:
    """The seconds of a network of ``network_macs`` from ``measured`` (MACs, seconds), the cheapest first: on the
    line through the two it lies between (beyond the ends, the two nearest), or in proportion to the one; never
    below the first for a larger network."""
    points = sorted(dict(measured).items())  # one point per network size: the last of equal MACs
    low_macs, low = points[0]
    proportional = low * network_macs / low_macs
    if len(points) == 1:
        return proportional
    right = next((index for index, (at, _) in enumerate(points) if at >= network_macs), len(points) - 1)
    (left_macs, left), (right_macs, right_seconds) = points[max(right, 1) - 1], points[max(right, 1)]
    line = left + (right_seconds - left) / (right_macs - left_macs) * (network_macs - left_macs)
    return max(line, low if network_macs >= low_macs else proportional)


def folded(calibration: Calibration, measured: Iterable[StepCost]) -> Calibration:
    """``calibration`` with each of ``measured``, in order, in place of the steps of its shape within
    ``MACS_TOLERANCE`` of its network (the newest measure of a network prices it), or beside them."""
    steps = list(calibration.steps)
    for cost in measured:
        kept = [s for s in steps if s.shape != cost.shape or not within(s.macs, cost.macs, MACS_TOLERANCE)]
        steps = [*kept, cost]
    return dataclasses.replace(calibration, steps=steps)


def run_steps(store: Store, run_id: str, variants: Iterable[Variant], concurrent_jobs: int) -> list[StepCost]:
    """The step each network of run ``run_id`` trained at, its jobs ``concurrent_jobs`` at a time: the median over
    its jobs' steady rates and epochs' ends (each from its ``rung-<k>.json``), so that one job in a fast or a slow
    spell of the host does not price it; the network whose newest job ran last comes last. A job too short to time
    a steady rate, or one that did not run, says nothing."""
    jobs = []
    for variant in variants:
        rung = 0
        while store.exists(f"{runs.variant_prefix(run_id, variant.name)}/{runs.rung_name(rung)}"):
            jobs.append((rung, variant, runs.rung_metrics(store, run_id, variant.name, rung)))
            rung += 1
    by_network: dict[tuple[Shape, int], list[StepCost]] = {}
    for _, variant, metrics in sorted(jobs, key=lambda job: job[0]):
        if metrics.examples_per_second_steady and metrics.epochs_trained:
            cost = StepCost.of_job(variant, metrics, thread_cap(variant.workers, concurrent_jobs), f"run {run_id}")
            group = by_network.pop((cost.shape, cost.macs), [])  # popped and put back: the newest job's network last
            by_network[(cost.shape, cost.macs)] = [*group, cost]
    return [
        dataclasses.replace(
            group[-1],
            step_seconds=statistics.median(cost.step_seconds for cost in group),
            epoch_end_seconds=statistics.median(cost.epoch_end_seconds for cost in group),
        )
        for group in by_network.values()
    ]


def refresh(store: Store, run_id: str, variants: Iterable[Variant], concurrent_jobs: int) -> Calibration | None:
    """After local run ``run_id``: the cached calibration with the steps its jobs measured folded in, and written
    back; None (nothing written) where there is no record for this machine, or the jobs did not run one at a time
    on the cores as the plan counts them (``concurrent_jobs`` is not the default's)."""
    path = cache_dir() / FILE
    cached = read(path)
    if cached is None or cached.machine != machine_key() or concurrent_jobs != defaults.LOCAL_PARALLELISM:
        return None
    measured = run_steps(store, run_id, variants, concurrent_jobs)
    if not measured:
        return None
    refreshed = folded(cached, measured)
    _write(path, refreshed)
    return refreshed


def within(a: int, b: int, factor: float) -> bool:
    return max(a, b) <= min(a, b) * factor


def macs(variant: Variant, images: Images = FASHION_MNIST) -> int:
    """Multiply-accumulates of one image through the network's forward pass: how a family's variants differ in cost."""
    config, (height, width, channels), classes = variant.model_config(), images.shape, images.classes
    if isinstance(config, MlpConfig):
        widths = [height * width * channels, *config.hidden_units, classes]
        return sum(a * b for a, b in itertools.pairwise(widths))
    assert isinstance(config, CnnConfig)
    total = 0
    for index, filters in enumerate(config.filters):
        height, width = height - (config.kernel_size - 1), width - (config.kernel_size - 1)  # valid convolutions
        total += height * width * config.kernel_size**2 * channels * filters
        channels = filters
        if index < len(config.filters) - 1:
            height, width = height // 2, width // 2  # each pooling but the last
    flat = height * width * channels
    return total + flat * config.dense_units + config.dense_units * classes


def shape_of(variant: Variant, images: Images = FASHION_MNIST) -> Shape:
    config = variant.model_config()
    normalized = isinstance(config, CnnConfig) and config.batch_norm
    return Shape(variant.architecture, normalized, variant.training.batch_size, variant.workers, images.shape)


def timed(variants: Iterable[Variant], images: Images = FASHION_MNIST) -> list[Variant]:
    """The networks a calibration times for ``variants``: of each shape the cheapest, and the costliest when its
    forward pass is ``MACS_TOLERANCE`` times the cheapest's or more (two points of the step's line)."""
    by_shape: dict[Shape, list[Variant]] = {}
    for variant in variants:
        by_shape.setdefault(shape_of(variant, images), []).append(variant)
    chosen = []
    for shape in sorted(by_shape, key=dataclasses.astuple):
        ordered = sorted(by_shape[shape], key=lambda variant: (macs(variant, images), variant.name))
        cheapest, costliest = ordered[0], ordered[-1]
        chosen.append(cheapest)
        if not within(macs(cheapest, images), macs(costliest, images), MACS_TOLERANCE):
            chosen.append(costliest)
    return chosen


def machine_key(cpuinfo: Path = CPUINFO) -> str:
    """What the costs depend on, in one line: the CPU model, whether it has AVX512, cores, TensorFlow, this model."""
    fields: dict[str, str] = {}
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            name, _, value = line.partition(":")
            fields.setdefault(name.strip(), value.strip())
    avx = "avx512f" if "avx512f" in fields.get("flags", "").split() else "no avx512f"
    tensorflow = importlib.metadata.version("tensorflow")
    return (
        f"{fields.get('model name', 'unknown CPU')}, {avx}, {os.cpu_count()} cores, tensorflow {tensorflow},"
        f" cost model {VERSION}"
    )


def cache_dir() -> Path:
    return Path(os.environ.get(defaults.CACHE_ENV) or defaults.CACHE_DIR).expanduser()


def read(path: Path) -> Calibration | None:
    """The record at ``path``; None when there is none, or it is unreadable or of another version (measured again)."""
    try:
        text = path.read_text()
        with contextlib.suppress(ValueError, AttributeError):  # not JSON, or not an object: the strict read says so
            if json.loads(text).get("version") != VERSION:
                return None  # another cost model's record, of its own fields: measured again without a word
        calibration = Calibration.from_json(text, str(path))
    except FileNotFoundError:
        return None
    except RecordError as error:
        print(f"bakeoff: measuring this machine's costs again: {error}", file=sys.stderr)
        return None
    return calibration if calibration.version == VERSION else None


def calibrated(
    variants: Iterable[Variant],
    source: str = defaults.SOURCE,
    steps: int = defaults.CALIBRATION_STEPS,
    images: Images = FASHION_MNIST,
) -> Calibration:
    """This machine's costs for ``variants`` on ``images``: the cached record, measuring (and caching) the networks
    ``timed`` picks that it lacks for that image shape (``steps`` timed steps of each)."""
    path, key, wanted = cache_dir() / FILE, machine_key(), timed(variants, images)
    cached = read(path)
    if cached is not None and cached.machine != key:
        cached = None  # another CPU, TensorFlow or cost model: nothing of it holds here
    missing = cached.missing(wanted, images) if cached else wanted
    if not missing:
        assert cached is not None
        return cached
    print(f"bakeoff: measuring this machine's training costs once ({path})", file=sys.stderr)
    before = contention.sample()
    measured = measure(missing, source, steps, images)
    calibration = dataclasses.replace(measured, steps=[*(cached.steps if cached else []), *measured.steps])
    others = contention.others_share(before, contention.sample())
    if others > defaults.BUSY_SHARE:  # slower than this machine alone: every later plan would be priced from it
        print(
            f"bakeoff: other processes used {others:.0%} of the cores while this machine's costs were measured: this"
            " plan uses them, the next one measures again",
            file=sys.stderr,
        )
    else:
        _write(path, calibration)
    return calibration


def _write(path: Path, calibration: Calibration) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(calibration.to_json())
    os.replace(partial, path)  # a plan running beside this one reads the old record or the new, never half


def measure(
    wanted: list[Variant],
    source: str = defaults.SOURCE,
    steps: int = defaults.CALIBRATION_STEPS,
    images: Images = FASHION_MNIST,
) -> Calibration:
    """Times ``wanted`` here with what a run does: the data built as ingest builds it, a pipeline step's process
    start, and one short real job of each network on the local backend, ``steps`` steps after a first execution;
    its step is the job's steady rate, its epoch's end its validation and backup, its start the rest of its wall
    time. Images of another shape than Fashion-MNIST's are timed on random pixels of that shape: a step's cost does
    not depend on what the pixels show."""
    with tempfile.TemporaryDirectory(prefix="bakeoff-calibration-") as scratch, prefork.warm(WORKER_PROGRAM):
        began = time.perf_counter()
        data = Path(scratch) / "data"
        artifact.build(source, data, defaults.VALIDATION_SIZE, defaults.SHARDS, defaults.SEED)
        ingest = time.perf_counter() - began
        if images.shape != FASHION_MNIST.shape or images.classes != FASHION_MNIST.classes:
            most = max(variant.training.batch_size * variant.workers for variant in wanted)
            data = _random_artifact(
                Path(scratch) / "random", images, most * (defaults.CALIBRATION_STEPS_PER_EXECUTION + steps)
            )
        costs, starts = [], []
        for index, variant in enumerate(wanted):
            cost, start = _job(
                variant, data.as_uri(), (Path(scratch) / "store").as_uri(), f"calibration-{index}", steps, images
            )
            # a minute or more on 2 cores in all: a line per job shows it goes on
            print(
                f"bakeoff: timed {variant.name} ({index + 1} of {len(wanted)}): {cost.step_seconds * 1000:.3g} ms a"
                f" step, {start:.1f} s to start",
                file=sys.stderr,
            )
            costs.append(cost)
            starts.append(start)
    return Calibration(
        VERSION,
        machine_key(),
        timestamp(),
        start_cost(starts),
        _step_start(TASK_IMPORTS),
        _step_start(SELECT_IMPORTS),
        ingest,
        costs,
    )


def start_cost(starts: list[float]) -> float:
    """A job's start from the calibration's jobs' starts: their median, so that one job slowed by something else on
    the machine does not set the cost of every job the plan counts (as their max would)."""
    return statistics.median(starts)


def _random_artifact(out: Path, images: Images, train: int) -> Path:
    """An artifact of random pixels of ``images``' shape and classes in ``out``: ``train`` training examples (what
    the calibration's jobs read), the default validation split, whose scoring is an epoch's end."""
    rng = np.random.default_rng(defaults.SEED)
    out.mkdir(parents=True)
    counts = {
        "train": train,
        "validation": defaults.VALIDATION_SIZE,
        "test": defaults.SHARDS,
    }
    for split, count in counts.items():
        for index, part in enumerate(np.array_split(np.arange(count), defaults.SHARDS)):
            with open(out / artifact.shard_name(split, index, defaults.SHARDS), "wb") as file:
                pixels = rng.integers(0, 256, (len(part), *images.shape), dtype=np.uint8)
                np.savez(file, images=pixels, labels=part % images.classes)
    height, width, channels = images.shape
    metadata = DatasetMetadata(
        counts=counts,
        shards=defaults.SHARDS,
        image_shape=list(images.shape),
        class_names=[str(label) for label in range(images.classes)],
        fingerprint="random",
        source="random pixels (calibration)",
        preprocessing=Preprocessing(height, width, channels, defaults.RESIZE),
        class_counts={},
        skipped=SkippedFiles(0, []),
        split_origins={},
    )
    (out / artifact.METADATA_FILE).write_text(metadata.to_json())
    return out


def _job(
    variant: Variant, data_uri: str, store_uri: str, run_id: str, steps: int, images: Images = FASHION_MNIST
) -> tuple[StepCost, float]:
    """One short real job of ``variant``'s network: its step (the worker's steady rate) and its start (the rest)."""
    from bakeoff.components.training.launch import JobSettings, train_variant

    training = dataclasses.replace(
        variant.training, epochs=1, steps_per_execution=defaults.CALIBRATION_STEPS_PER_EXECUTION
    )
    timed_variant = dataclasses.replace(variant, training=training)
    shape = shape_of(variant, images)
    examples = shape.batch_size * shape.workers * (defaults.CALIBRATION_STEPS_PER_EXECUTION + steps)
    settings = JobSettings(
        defaults.IMAGE, examples, defaults.LOCAL_PARALLELISM, defaults.TIMEOUT_SECONDS, "local", defaults.TRAINER
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
