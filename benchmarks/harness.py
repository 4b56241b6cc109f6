"""What benchmark entries share: a figure, the context they run in, and timing helpers."""

from __future__ import annotations

import argparse
import dataclasses
import socket
import statistics
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

GLOBAL_BATCH = 128  # the training entries' global batch, on any number of workers


def add_size_flags(parser: argparse.ArgumentParser, full: Any) -> None:
    """One integer flag per field of an entry's size record (``--max-train-examples``), defaulting to ``full``'s."""
    for field in dataclasses.fields(full):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=int, default=getattr(full, field.name))


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
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
