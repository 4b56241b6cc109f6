"""The cost model: what a family's training step costs by its shape and network size, from measured steps.

A ``Calibration`` record holds this machine's measured costs (``calibration.py`` measures them, ``calibration_cache.py``
keeps them); its steps price a network on the line through the measured networks nearest it by MACs.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable

from bakeoff.components import defaults
from bakeoff.components.data.fashion_mnist import CLASSES, IMAGE_SHAPE, TRAIN_IMAGES
from bakeoff.components.data.inspection import Inspected
from bakeoff.components.modeling.architectures import ARCHITECTURES
from bakeoff.components.modeling.precision import AUTO, BFLOAT16, FLOAT32, computed_at, has_bf16_units, resolve
from bakeoff.components.spec import Variant
from bakeoff.components.storage.records import DatasetMetadata, Record, WorkerMetrics

VERSION = 13  # of the cost model, of this record and of what a job costs: a new one measures again
MACS_TOLERANCE = 1.15  # networks within this factor of a measured one cost as it does, in proportion
CALIBRATED = "calibration"  # a step's measured_by when a calibration job timed it; else "run <id>"


@dataclasses.dataclass(frozen=True)
class Images:
    """What a plan prices of a dataset: its training examples, one image's [height, width, channels], its classes,
    and where they come from (for the plan's words)."""

    examples: int
    shape: tuple[int, int, int]
    classes: int
    source: str = defaults.SOURCE
    validation: int = defaults.VALIDATION_SIZE  # examples scored at each epoch's end

    @classmethod
    def of(cls, metadata: DatasetMetadata, where: str = "") -> Images:
        """An ingested artifact's (its metadata.json), at ``where``."""
        height, width, channels = metadata.image_shape
        named = f"{where} (ingested from {metadata.source})" if where else metadata.source
        validation = metadata.counts.get("validation", defaults.VALIDATION_SIZE)
        return cls(metadata.counts["train"], (height, width, channels), len(metadata.class_names), named, validation)

    @classmethod
    def of_source(cls, inspected: Inspected) -> Images:
        """A source's as ingest would make it (``inspection.inspect``'s, before ingest)."""
        validation = inspected.counts.get("validation", defaults.VALIDATION_SIZE)
        return cls(inspected.counts["train"], inspected.shape, inspected.classes, inspected.source, validation)

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
    the workers sharing the cores, the steps per call into the graph, the images' [height, width, channels] (its
    input, activations and memory) and the precision it computes at."""

    architecture: str
    batch_norm: bool  # its work grows with activations, not MACs: the line of a plain network misprices it
    batch_size: int
    workers: int
    steps_per_execution: int  # each call's overhead is shared by this many steps: 16 and 64 step apart
    image: tuple[int, int, int] = FASHION_MNIST.shape
    precision: str = FLOAT32  # a resolved one (never auto)


@dataclasses.dataclass(frozen=True)
class StepCost(Record):
    """One step of a short real job of one network (``timed``'s): every replica's, all-reduce included."""

    architecture: str
    batch_norm: bool
    batch_size: int  # per replica
    workers: int  # the job's replicas, each on ``threads`` threads (the local backend's cap)
    steps_per_execution: int
    threads: int
    macs: int  # of the network timed, one image's forward pass
    step_seconds: float
    epoch_end_seconds: float  # an epoch's end: scoring the validation images and saving the backup
    measured_by: str = CALIBRATED  # or the run whose job of about this network measured it last
    image: list[int] = dataclasses.field(default_factory=lambda: list(FASHION_MNIST.shape))  # [height, width, channels]
    precision: str = FLOAT32  # what the job computed at
    # Its job's start (0: not measured: the calibration's own): a backbone's took 27-51 s here, a resnet's 6 (issue 59).
    start_seconds: float = 0.0
    validation_examples: int = defaults.VALIDATION_SIZE  # what its epoch's end scored: a calibration's, or a run's

    @property
    def shape(self) -> Shape:
        height, width, channels = self.image
        return Shape(
            self.architecture,
            self.batch_norm,
            self.batch_size,
            self.workers,
            self.steps_per_execution,
            (height, width, channels),
            self.precision,
        )

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
            shape.steps_per_execution,
            threads,
            macs,
            step_seconds,
            epoch_end_seconds,
            measured_by,
            list(shape.image),
            shape.precision,
        )

    @classmethod
    def of_job(
        cls, variant: Variant, metrics: WorkerMetrics, threads: int, measured_by: str, images: Images = FASHION_MNIST
    ) -> StepCost:
        """The step one job of ``variant`` trained at (its steady rate, all-reduce included) and its epochs' end.

        The worker's steady window holds the epochs' backups (only validation is paused), which an epoch's end costs
        already: they come out of the step, else a short job's few steps would carry them (7 steps and a 0.2 s backup:
        +29 ms a step)."""
        timed = timed_steps(metrics, variant.training.steps_per_execution)
        step = (timed * metrics.global_batch_size / metrics.examples_per_second - metrics.backup_seconds) / timed
        epoch_end = (metrics.validation_seconds + metrics.backup_seconds) / metrics.epochs_trained
        shape = dataclasses.replace(shape_of(variant, images), precision=metrics.precision or FLOAT32)  # as it ran
        cost = cls.of(shape, threads, macs(variant, images), step, epoch_end, measured_by)
        return dataclasses.replace(cost, validation_examples=metrics.validation_examples or images.validation)


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

    def job_start(self, variants: Iterable[Variant], images: Images = FASHION_MNIST) -> float:
        """A job's start for a search of ``variants``: the mean over them of the start measured for the network of
        their shape nearest theirs by MACs, or, where none was, the calibration's ``start_seconds``."""
        starts = []
        for variant in variants:
            network = macs(variant, images)
            measured = [cost for cost in self.costs(shape_of(variant, images)) if cost.start_seconds]
            nearest = min(measured, key=lambda cost: abs(cost.macs - network), default=None)
            starts.append(nearest.start_seconds if nearest else self.start_seconds)
        return statistics.fmean(starts) if starts else self.start_seconds

    def costs(self, shape: Shape) -> list[StepCost]:
        """The steps measured for ``shape``, the cheapest network first."""
        return sorted((cost for cost in self.steps if cost.shape == shape), key=lambda cost: cost.macs)

    def step_seconds(self, shape: Shape, network_macs: int) -> float:
        """A step of a network of ``network_macs`` in ``shape``: on the line through the two measured networks
        nearest it by MACs (a step has a part that does not grow with the network: input, all-reduce, optimizer),
        or in proportion to the one measured; never below the cheapest one's step for a larger network."""
        return _on_line([(cost.macs, cost.step_seconds) for cost in self.costs(shape)], network_macs)

    def epoch_end_seconds(self, shape: Shape, network_macs: int, validation: int = defaults.VALIDATION_SIZE) -> float:
        """An epoch's end (validation, backup) of a network of ``network_macs`` in ``shape`` scoring ``validation``
        examples, priced as its step, each measured one in proportion to the examples it scored: 960 of a small
        folder's cost a fifth of the calibration's 5,000 (issue 59)."""
        scaled = [(c.macs, c.epoch_end_seconds * validation / c.validation_examples) for c in self.costs(shape)]
        return _on_line(scaled, network_macs)

    def missing(self, wanted: Iterable[Variant], images: Images = FASHION_MNIST) -> list[Variant]:
        """Those of ``wanted`` (``timed``'s) with no measured network of their shape within ``MACS_TOLERANCE``."""
        return [
            variant
            for variant in wanted
            if not any(
                within_factor(cost.macs, macs(variant, images), MACS_TOLERANCE)
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
    """``calibration`` with each of ``measured`` that ``moves`` it, in order, in place of the steps of its shape within
    ``MACS_TOLERANCE`` of its network (the newest measure of a network prices it), or beside them."""
    steps = list(calibration.steps)
    for cost in measured:
        if moves(dataclasses.replace(calibration, steps=steps), cost):
            kept = [s for s in steps if s.shape != cost.shape or not within_factor(s.macs, cost.macs, MACS_TOLERANCE)]
            replaced = [s.start_seconds for s in steps if s not in kept and s.start_seconds]
            # a run's job times its steps, not its start: the calibration's start of the network stays
            steps = [*kept, dataclasses.replace(cost, start_seconds=cost.start_seconds or next(iter(replaced), 0.0))]
    return dataclasses.replace(calibration, steps=steps)


def moves(calibration: Calibration, cost: StepCost) -> bool:
    """Whether ``cost`` prices its network anew: no step of ``calibration`` within ``MACS_TOLERANCE`` of it measured
    it, or it steps more than ``COST_BAND`` off what ``calibration`` prices it at (within it, the host's own spread:
    the cached step stays, and so does every plan made from it)."""
    if not any(within_factor(s.macs, cost.macs, MACS_TOLERANCE) for s in calibration.costs(cost.shape)):
        return True
    return abs(cost.step_seconds / calibration.step_seconds(cost.shape, cost.macs) - 1) > defaults.COST_BAND


def timed_steps(metrics: WorkerMetrics, steps_per_execution: int) -> int:
    """The steps a job's rate is over: all it trained but the first execution (which traces), or, where that was all
    (no steady state), every one."""
    steps = metrics.steps_per_epoch * metrics.epochs_trained
    first = min(steps_per_execution, metrics.steps_per_epoch)  # tf-keras cuts an execution at its epoch's end
    return steps - first if metrics.examples_per_second_steady else steps


def within_factor(a: int, b: int, factor: float) -> bool:
    """Whether the larger of ``a`` and ``b`` is at most ``factor`` times the smaller."""
    return max(a, b) <= min(a, b) * factor


def macs(variant: Variant, images: Images = FASHION_MNIST) -> int:
    """Multiply-accumulates of one image through the network's forward pass, as its family counts them: how a
    family's variants differ in cost."""
    return ARCHITECTURES[variant.architecture].macs(variant.model_config(), images.shape, images.classes)


def shape_of(variant: Variant, images: Images = FASHION_MNIST) -> Shape:
    training = variant.training
    return Shape(
        variant.architecture,
        ARCHITECTURES[variant.architecture].normalizes(variant.model_config()),
        training.batch_size,
        variant.workers,
        training.steps_per_execution,
        images.shape,
        computed_at(training.precision),
    )


def at_precision(variant: Variant, precision: str) -> Variant:
    return dataclasses.replace(variant, training=dataclasses.replace(variant.training, precision=precision))


def timed(
    variants: Iterable[Variant], images: Images = FASHION_MNIST, flags: frozenset[str] = frozenset()
) -> list[Variant]:
    """The networks a calibration times for ``variants``: of each shape the cheapest, and the costliest when its
    forward pass is ``MACS_TOLERANCE`` times the cheapest's or more (two points of the step's line). On a CPU whose
    ``flags`` name bfloat16 units, each ``auto`` variant at bfloat16 too: ``auto`` takes it where it steps faster."""
    variants = list(variants)
    if has_bf16_units(flags):
        variants += [at_precision(v, BFLOAT16) for v in variants if v.training.precision == AUTO]
    by_shape: dict[Shape, list[Variant]] = {}
    for variant in variants:
        by_shape.setdefault(shape_of(variant, images), []).append(variant)
    chosen = []
    for shape in sorted(by_shape, key=dataclasses.astuple):
        ordered = sorted(by_shape[shape], key=lambda variant: (macs(variant, images), variant.name))
        cheapest, costliest = ordered[0], ordered[-1]
        chosen.append(_stand_in(cheapest))
        if not within_factor(macs(cheapest, images), macs(costliest, images), MACS_TOLERANCE):
            chosen.append(_stand_in(costliest))
    return chosen


def _stand_in(variant: Variant) -> Variant:
    """The variant a calibration job times for ``variant``, as its family says (a backbone without its weights)."""
    return dataclasses.replace(variant, model=ARCHITECTURES[variant.architecture].timing(variant.model))


def measured_precision(
    variant: Variant, calibration: Calibration, images: Images = FASHION_MNIST, flags: frozenset[str] = frozenset()
) -> str:
    """What ``variant`` trains at on this machine's CPU: its ``training.precision`` unless that is ``auto``; then
    bfloat16 where ``flags`` name its units and ``calibration`` prices its step at bfloat16 below float32's (both
    at its shape and network), else float32."""
    bf16 = shape_of(at_precision(variant, BFLOAT16), images)
    faster = None
    if variant.training.precision == AUTO and calibration.costs(bf16) and calibration.costs(shape_of(variant, images)):
        network = macs(variant, images)
        faster = calibration.step_seconds(bf16, network) < calibration.step_seconds(shape_of(variant, images), network)
    return resolve(variant.training.precision, 0, flags, faster)
