"""The plan's costs measured on this machine: each family's training step and a job's start, cached per machine.

``calibrated`` reads the record under the cache folder when it was measured on this machine key (CPU, its
AVX512, cores, TensorFlow, this cost model) and holds every shape asked for; else it measures what is missing
with ``measure``, which runs a short real job of each shape on the local backend.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import io
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from bakeoff.components import defaults
from bakeoff.components.backends.local import thread_cap
from bakeoff.components.data import artifact
from bakeoff.components.errors import BakeoffError
from bakeoff.components.spec import Variant, from_dict
from bakeoff.components.storage.records import Record, RecordError, timestamp

VERSION = 2  # of the cost model and of this record: a new one measures again
FILE = "calibration.json"
CPUINFO = Path("/proc/cpuinfo")


@dataclasses.dataclass(frozen=True)
class Shape:
    """What a family's step costs depend on: its architecture, the batch per replica and the workers sharing the
    cores."""

    architecture: str
    batch_size: int
    workers: int


@dataclasses.dataclass(frozen=True)
class StepCost(Record):
    """One step of a job of a family's probe model (``probe_variant``): every replica's, all-reduce included."""

    architecture: str
    batch_size: int  # per replica
    workers: int  # the job's replicas, each on ``threads`` threads (the local backend's cap)
    threads: int
    step_seconds: float

    @property
    def shape(self) -> Shape:
        return Shape(self.architecture, self.batch_size, self.workers)


@dataclasses.dataclass(frozen=True)
class Calibration(Record):
    """This machine's costs: written as ``calibration.json`` under the cache folder, read back strictly."""

    version: int
    machine: str  # machine_key() when measured: another key measures again
    measured_at: str  # ISO 8601, UTC
    start_seconds: float  # a job's fixed cost: its replicas' processes, TensorFlow, data, first trace, saving
    task_seconds: float  # a pipeline step's process start, paid by every step (kfp.local starts each as a process)
    ingest_seconds: float  # the data built as ingest builds it
    steps: list[StepCost]

    def step(self, shape: Shape) -> StepCost:
        (cost,) = [cost for cost in self.steps if cost.shape == shape]
        return cost

    def missing(self, shapes: Iterable[Shape]) -> list[Shape]:
        measured = {cost.shape for cost in self.steps}
        return sorted({shape for shape in shapes if shape not in measured}, key=dataclasses.astuple)


def probe_variant(architecture: str, batch_size: int) -> Variant:
    """The model a family is timed with: its architecture's defaults, trained as the worker trains any variant."""
    training = {"batch_size": batch_size, "steps_per_execution": defaults.CALIBRATION_STEPS_PER_EXECUTION, "epochs": 1}
    return from_dict({"name": f"probe-{architecture}", "model": {"type": architecture}, "training": training})


def shapes(variants: Iterable[Variant]) -> set[Shape]:
    return {Shape(v.architecture, v.training.batch_size, v.workers) for v in variants}


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
        calibration = Calibration.from_json(path.read_text(), str(path))
    except FileNotFoundError:
        return None
    except RecordError as error:
        print(f"bakeoff: measuring this machine's costs again: {error}", file=sys.stderr)
        return None
    return calibration if calibration.version == VERSION else None


def calibrated(
    wanted: Iterable[Shape], source: str = defaults.SOURCE, steps: int = defaults.CALIBRATION_STEPS
) -> Calibration:
    """This machine's costs for every shape in ``wanted``: the cached record, measuring (and caching) what it lacks
    (``steps`` timed steps of each)."""
    path, key, wanted = cache_dir() / FILE, machine_key(), set(wanted)
    cached = read(path)
    if cached is not None and cached.machine != key:
        cached = None  # another CPU, TensorFlow or cost model: nothing of it holds here
    missing = cached.missing(wanted) if cached else sorted(wanted, key=dataclasses.astuple)
    if not missing:
        assert cached is not None
        return cached
    print(f"bakeoff: measuring this machine's training costs once ({path})", file=sys.stderr)
    measured = measure(missing, source, steps)
    calibration = dataclasses.replace(measured, steps=[*(cached.steps if cached else []), *measured.steps])
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(calibration.to_json())
    os.replace(partial, path)  # a plan running beside this one reads the old record or the new, never half
    return calibration


def measure(wanted: list[Shape], source: str = defaults.SOURCE, steps: int = defaults.CALIBRATION_STEPS) -> Calibration:
    """Times ``wanted`` here with what a run does: the data built as ingest builds it, a pipeline step's process
    start, and for each shape one real job of its family's probe model (``probe_variant``) on the local backend,
    ``steps`` steps after a first execution; its step is the job's steady rate, its start the rest of its wall time."""
    with tempfile.TemporaryDirectory(prefix="bakeoff-calibration-") as scratch:
        began = time.perf_counter()
        data = Path(scratch) / "data"
        artifact.build(source, data, defaults.VALIDATION_SIZE, defaults.SHARDS, defaults.SEED)
        ingest = time.perf_counter() - began
        costs, starts = [], []
        for index, shape in enumerate(wanted):
            cost, start = _job(shape, data.as_uri(), (Path(scratch) / "store").as_uri(), f"calibration-{index}", steps)
            costs.append(cost)
            starts.append(start)
    return Calibration(VERSION, machine_key(), timestamp(), max(starts), _task_seconds(), ingest, costs)


def _job(shape: Shape, data_uri: str, store_uri: str, run_id: str, steps: int) -> tuple[StepCost, float]:
    """One real job of ``shape``'s probe model: its step (the worker's steady rate) and its start (the rest)."""
    from bakeoff.components.training.launch import JobSettings, train_variant

    variant = dataclasses.replace(probe_variant(shape.architecture, shape.batch_size), workers=shape.workers)
    examples = shape.batch_size * shape.workers * (defaults.CALIBRATION_STEPS_PER_EXECUTION + steps)
    settings = JobSettings(
        defaults.IMAGE, examples, defaults.LOCAL_PARALLELISM, defaults.TIMEOUT_SECONDS, "local", defaults.TRAINER
    )
    began = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # the replicas' log lines; a failure's tail is in its error
        try:
            metrics = train_variant(variant.to_dict(), data_uri, store_uri, run_id, settings).metrics
        except BakeoffError as error:
            raise BakeoffError(f"measuring this machine's training costs failed: {error}") from None
    wall = time.perf_counter() - began
    step = metrics.global_batch_size / metrics.examples_per_second
    threads = thread_cap(shape.workers, defaults.LOCAL_PARALLELISM)
    cost = StepCost(shape.architecture, shape.batch_size, shape.workers, threads, step)
    return cost, wall - metrics.steps_per_epoch * metrics.epochs_trained * step


def _task_seconds() -> float:
    """A pipeline step's own start: a Python process importing kfp's executor and the steps' launcher."""
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import kfp.dsl.executor_main, bakeoff.components.training.launch"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - began
