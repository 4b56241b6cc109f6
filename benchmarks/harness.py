"""What benchmark entries share: a figure, the context they run in, and timing helpers."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from bakeoff.components.ports import free_ports
from bakeoff.components.storage import runs
from bakeoff.components.storage.records import WorkerMetrics

GLOBAL_BATCH = 128  # the training entries' global batch, on any number of workers


def add_size_flags(parser: argparse.ArgumentParser, full: Any) -> None:
    """One integer flag per field of an entry's size record (``--max-train-examples``), defaulting to ``full``'s."""
    for field in dataclasses.fields(full):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=int, default=getattr(full, field.name))


def machine_class(model: str, flags: Collection[str]) -> str:
    """The machine class a figure is stamped with, from `lscpu`'s model name and flags: the CPU's family (its first
    two words, trademarks dropped) and the widest matrix instructions it has, e.g. "AMD EPYC, AVX-512 + bf16" or
    "Intel Xeon, AMX". Speed figures compare only within one class: a host's exact model varies within it, its
    kernels do not.
    """
    family = " ".join(model.replace("(R)", " ").replace("(TM)", " ").replace("(tm)", " ").split()[:2]) or "unknown"
    if any(flag.startswith("amx") for flag in flags):
        isa = "AMX"
    elif "avx512f" in flags:
        isa = "AVX-512 + bf16" if "avx512_bf16" in flags else "AVX-512"
    elif "avx2" in flags:
        isa = "AVX2"
    else:
        isa = "no AVX2"
    return f"{family}, {isa}"


@dataclasses.dataclass
class Figure:
    """One measured number and how it was measured; a headline figure's goal is in benchmarks/headline.py."""

    key: str
    value: float
    unit: str
    detail: str = ""


@dataclasses.dataclass
class Context:
    """What entries share: scratch space, the ingested dataset, repetitions, and raw samples for the record."""

    scratch: Path
    repetitions: int
    samples: dict = dataclasses.field(default_factory=dict)
    _dataset: Path | None = None

    def dataset(self) -> Path:
        if self._dataset is None:
            from bakeoff.components import defaults
            from bakeoff.components.data import artifact as dataset

            self._dataset = self.scratch / "dataset"
            dataset.build(
                defaults.SOURCE,
                self._dataset,
                validation_size=defaults.VALIDATION_SIZE,
                shards=defaults.SHARDS,
                seed=defaults.SEED,
            )
        return self._dataset


def median(values: list[float]) -> float:
    return statistics.median(values)


def timed(func: Callable[[], object]) -> float:
    started = time.perf_counter()
    func()
    return time.perf_counter() - started


def free_port() -> int:
    return free_ports(1)[0]


def start_server(command: list[str], port: int, log: Path) -> subprocess.Popen:
    """A model server started by ``command``, its errors to ``log``; returned once it answers ready on ``port``."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the model server exited with code {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1):
                return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("the model server did not become ready in 180 s")


@dataclasses.dataclass(frozen=True)
class Job:
    """A benchmark job's metrics.json, and where its model is."""

    metrics: WorkerMetrics
    store: str
    prefix: str


def local_job(
    context: Context,
    variant: dict,
    workers: int,
    examples: int,
    epochs: int = 1,
    tag: str = "",
    data: Path | None = None,
) -> Job:
    """One local TFJob of the real worker program (on ``data``, else the context's dataset); its metrics.json."""
    from bakeoff.components.backends.local import LocalBackend
    from bakeoff.components.spec import from_dict
    from bakeoff.components.storage import open_store
    from bakeoff.components.training.tfjob import build_tfjob, worker_args

    spec = from_dict(
        {
            **variant,
            "workers": workers,
            "training": {**variant.get("training", {}), "batch_size": GLOBAL_BATCH // workers, "epochs": epochs},
        }
    )
    store = open_store(str(context.scratch / "store"))
    prefix = f"bench/{tag or spec.name}-{workers}w-{time.monotonic_ns()}"
    job = build_tfjob(
        spec,
        name=f"bench-{workers}w",
        image="local",
        env={},
        args=worker_args(spec, str(data or context.dataset()), store.uri, prefix, examples),
    )
    LocalBackend(sink=lambda line: None).run(job)
    return Job(runs.metrics_at(store, prefix), store.uri, prefix)


def run_alone(name: str, entry: Callable[[Context], list[Figure]], scratch: Path | None) -> None:
    """``python -m benchmarks.NAME``: ``entry`` run once in ``scratch`` (else a temporary folder, removed after), its
    figures a line each, then its samples as JSON."""
    with contextlib.ExitStack() as temporary:
        if scratch is None:
            scratch = Path(temporary.enter_context(tempfile.TemporaryDirectory(prefix=f"bakeoff-bench-{name}-")))
        context = Context(scratch, repetitions=1)
        for figure in entry(context):
            print(f"{figure.key} = {figure.value:.4g} {figure.unit}  ({figure.detail})")
        print(json.dumps(context.samples[name], indent=2, default=str))
