"""The plan's costs measured on this machine: each family's training step and a job's start, cached per machine.

``calibrated`` reads the record under the cache folder when it was measured on this machine key (CPU, its
AVX512, cores, TensorFlow, this cost model) and holds every shape asked for; else it measures what is missing
with ``measure``, which runs a job's worth of replica processes of ``python -m bakeoff.components.search.probe``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from bakeoff.components import defaults, tfenv
from bakeoff.components.backends import allocator
from bakeoff.components.backends.local import thread_cap, thread_env
from bakeoff.components.data import artifact
from bakeoff.components.errors import BakeoffError
from bakeoff.components.spec import Variant, from_dict
from bakeoff.components.storage.records import Record, RecordError, timestamp

VERSION = 1  # of the cost model and of this record: a new one measures again
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
    """One replica's training step of a family's probe model (``probe_variant``), with its peers training beside it."""

    architecture: str
    batch_size: int  # per replica
    workers: int  # replicas training at once, each on ``threads`` threads (the local backend's cap)
    threads: int
    step_seconds: float

    @property
    def shape(self) -> Shape:
        return Shape(self.architecture, self.batch_size, self.workers)


@dataclasses.dataclass(frozen=True)
class ProbeReport(Record):
    """What one probe replica prints, as one JSON line: its job's start and its step per shape asked, in order."""

    start_seconds: float
    step_seconds: list[float]


@dataclasses.dataclass(frozen=True)
class Calibration(Record):
    """This machine's costs: written as ``calibration.json`` under the cache folder, read back strictly."""

    version: int
    machine: str  # machine_key() when measured: another key measures again
    measured_at: str  # ISO 8601, UTC
    start_seconds: float  # a job's fixed cost: its replicas' processes, TensorFlow, data, first trace, saving
    steps: list[StepCost]

    def step(self, shape: Shape) -> StepCost:
        (cost,) = [cost for cost in self.steps if cost.shape == shape]
        return cost

    def missing(self, shapes: Iterable[Shape]) -> list[Shape]:
        measured = {cost.shape for cost in self.steps}
        return sorted({shape for shape in shapes if shape not in measured}, key=dataclasses.astuple)


def probe_variant(architecture: str, batch_size: int) -> Variant:
    """The model a family is timed with: its architecture's defaults, trained as the worker trains any variant."""
    training = {"batch_size": batch_size, "steps_per_execution": defaults.CALIBRATION_STEPS_PER_EXECUTION}
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
    """Times ``wanted`` here: for each worker count, that many probe replicas at once, each on the local backend's
    thread cap, timing ``steps`` steps of each of its shapes after a first execution; the start is the slowest
    replica's launch to its first step, plus saving a model."""
    with tempfile.TemporaryDirectory(prefix="bakeoff-calibration-") as scratch:
        data = Path(scratch) / "data"
        artifact.build(source, data, defaults.VALIDATION_SIZE, defaults.SHARDS, defaults.SEED)
        costs, starts = [], []
        for workers in sorted({shape.workers for shape in wanted}):
            group = [shape for shape in wanted if shape.workers == workers]
            threads = thread_cap(workers, defaults.LOCAL_PARALLELISM)
            reports = _probe(group, data.as_uri(), threads, steps)
            starts.append(max(report.start_seconds for report in reports))
            for index, shape in enumerate(group):
                # The step of the slowest replica: a synchronous step waits for every one.
                seconds = max(report.step_seconds[index] for report in reports)
                costs.append(StepCost(shape.architecture, shape.batch_size, workers, threads, seconds))
    return Calibration(VERSION, machine_key(), timestamp(), max(starts), costs)


def _probe(group: list[Shape], data_uri: str, threads: int, steps: int) -> list[ProbeReport]:
    """Runs one probe replica per worker at once, with the allocator and thread caps the local backend gives a
    replica; their reports."""
    env = {tfenv.LOG_LEVEL_ENV: defaults.TF_LOG_LEVEL} | allocator.with_tcmalloc(os.environ, allocator.tcmalloc())
    env |= thread_env(threads)
    env.pop("TF_CONFIG", None)  # each probe is a single-worker strategy: its peers share the cores, not its steps
    argv = [sys.executable, "-m", "bakeoff.components.search.probe", data_uri, str(steps)]
    argv += [f"{shape.architecture}:{shape.batch_size}" for shape in group]
    launched = time.time()
    # Logs to files, not pipes: a replica blocked on a full pipe would stall the steps it is timing.
    with contextlib.ExitStack() as files:
        logs = [files.enter_context(tempfile.TemporaryFile("w+")) for _ in range(group[0].workers)]
        processes = [
            subprocess.Popen([*argv, str(launched)], env=env, stdout=subprocess.PIPE, stderr=log, text=True)
            for log in logs
        ]
        outputs = [process.communicate()[0] for process in processes]
        for process, log in zip(processes, logs, strict=True):
            if process.returncode:
                log.seek(0)
                tail = log.read().strip().splitlines()[-1:] or ["no output"]
                raise BakeoffError(f"measuring this machine's training costs failed: {tail[0]}")
    return [ProbeReport.from_json(out.strip().splitlines()[-1], "a calibration probe's report") for out in outputs]
