"""Benchmark entry: a run sized for its data (issue 58).

- ``plan_error_rgb``: `bakeoff run` without --config on an RGB folder the bench draws (20,000 PNG files of 96x96,
  tests/images.py's classes): the built-in search that fits it, search_large.yaml, ÷ the upper bound of the plan
  `bakeoff plan` made of that folder, from a fresh calibration (a cache folder of its own): the plan prices the
  folder's own count, shape and classes.
- ``train_rss_2x_ratio``: a 2-worker job's peak RSS per replica on a 96x96 RGB artifact twice the size ÷ on the
  one: the streaming input holds a few chunks and a bounded shuffle buffer, not its part, so the same within 10 %.

``python -m benchmarks.sized [--folder-images N ...]`` runs it alone at any size (a smoke run at a tiny one);
``python -m benchmarks.run --only sized`` runs it at ``FULL``. Fashion-MNIST's examples/s is mwms's figures, and
the default's plan_error pipeline's.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bakeoff.components import logs
from bakeoff.components.environment import CACHE_ENV
from benchmarks.harness import Context, Figure, add_size_flags, median, run_alone

BAKEOFF = str(Path(sys.executable).parent / "bakeoff")
# A small network: the job's memory is its input's, not its activations'.
TINY = {"name": "tiny", "model": {"type": "cnn", "filters": [4], "dense_units": 8}, "workers": 2}


@dataclasses.dataclass(frozen=True)
class Size:
    """How big the entry runs."""

    folder_images: int = 20000  # the RGB folder's images, all of them trained on (0: no bake-off)
    side: int = 96
    rss_train: int = 16000  # the 1x artifact's training examples of side x side RGB (2x: twice); 0: none
    rss_repetitions: int = 2  # jobs per size, interleaved


FULL = Size()


def rgb_plan(where: Path, size: Size, samples: dict) -> list[Figure]:
    """`bakeoff plan` then `bakeoff run` on the drawn folder, in a fresh cache: the run's wall ÷ the plan's bound."""
    from benchmarks.ingest_memory import write_tree

    folder = write_tree(where / f"rgb-{size.folder_images}-{size.side}", size.folder_images, size.side)
    env = os.environ | {CACHE_ENV: str(where / "cache")}
    plan = subprocess.run(
        [BAKEOFF, "plan", "--source", str(folder), "--json"], env=env, capture_output=True, text=True, check=True
    )
    planned = json.loads(plan.stdout)
    began = time.perf_counter()
    run = subprocess.run(
        [BAKEOFF, "run", "--source", str(folder), "--store", str(where / "store"), "--work-dir", str(where / "work")],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - began
    (where / "run.log").write_text(run.stderr)
    if run.returncode != 0:
        raise RuntimeError(f"bakeoff run --source {folder} failed: {run.stderr[-2000:]}")
    samples["rgb_plan"] = {"plan": planned | {"calibration": None}, "wall_seconds": wall, "stdout": run.stdout}
    dataset = planned["dataset"]
    return [
        Figure(
            "plan_error_rgb",
            wall / planned["estimated_seconds"],
            "×",
            detail=f"`bakeoff run` {wall / 60:.1f} min ÷ its plan's upper bound {planned['estimated_seconds'] / 60:.1f}"
            f" min on {dataset['examples']:,} training examples of {'x'.join(map(str, dataset['shape']))}"
            f" ({folder.name}, a fresh calibration)",
        )
    ]


def _job_rss(data: Path, store: Path) -> tuple[float, float]:
    """One 2-worker job of TINY, one epoch over every example of ``data``: (each replica's peak RSS in MB, the
    median of the two; examples/s)."""
    from bakeoff.components import defaults
    from bakeoff.components.training.launch import JobSettings, train_variant

    settings = JobSettings(defaults.IMAGE, 0, 1, defaults.TIMEOUT_SECONDS, "local", defaults.TRAINER)
    spec = TINY | {"training": {"epochs": 1, "batch_size": 64}}
    with contextlib.redirect_stdout(io.StringIO()):
        metrics = train_variant(spec, data.as_uri(), store.as_uri(), f"rss-{time.time_ns()}", settings).metrics
    return metrics.peak_rss_mb, metrics.examples_per_second


def train_memory(where: Path, size: Size, samples: dict) -> list[Figure]:
    """Each size's job ``rss_repetitions`` times, the sizes interleaved: the peak RSS at 2x ÷ at 1x."""
    from bakeoff.components import defaults
    from bakeoff.components.data import artifact
    from bakeoff.components.data.fashion_mnist import Split

    rng = np.random.default_rng(0)
    datas = []
    for factor in (1, 2):
        counts = {"train": factor * size.rss_train, "validation": 512, "test": 512}
        splits = {
            split: Split(rng.integers(0, 256, (n, size.side, size.side, 3), dtype=np.uint8), np.arange(n) % 4)
            for split, n in counts.items()
        }
        datas.append(where / f"rss-{factor}x")
        artifact.write(splits, datas[-1], defaults.SHARDS, list("abcd"), "random pixels")
        del splits
    peaks: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(size.rss_repetitions):
        for factor, data in zip((1, 2), datas, strict=True):
            peaks[factor].append(_job_rss(data, where / "store")[0])
    samples["train_memory"] = {"peak_rss_mb": peaks, "train": size.rss_train, "side": size.side}
    once, twice = median(peaks[1]), median(peaks[2])
    part_mb = size.rss_train / 2 * size.side**2 * 3 / 2**20
    return [
        Figure(
            "train_rss_2x_ratio",
            twice / once,
            "×",
            detail=f"a 2-worker job's peak RSS per replica, {twice:.0f} MB on {2 * size.rss_train:,} {size.side}x"
            f"{size.side} RGB training examples ÷ {once:.0f} MB on {size.rss_train:,} (each worker's part:"
            f" {2 * part_mb:.0f} and {part_mb:.0f} MB of pixels)",
        )
    ]


def sized(context: Context, size: Size = FULL) -> list[Figure]:
    work = context.scratch / "sized"
    work.mkdir(parents=True)
    samples: dict = {"size": dataclasses.asdict(size)}
    context.samples["sized"] = samples
    figures = train_memory(work, size, samples) if size.rss_train else []
    return figures + (rgb_plan(work, size, samples) if size.folder_images else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_flags(parser, FULL)
    parser.add_argument("--scratch", type=Path, help="a new folder to keep every dataset, store and run log in")
    args = vars(parser.parse_args(argv))
    logs.configure()
    scratch = args.pop("scratch")
    run_alone("sized", lambda context: sized(context, Size(**args)), scratch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
