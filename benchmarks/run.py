"""Runs every benchmark entry side by side and writes benchmarks/results.{json,md} from that run alone.

``python -m benchmarks.run [--only NAME ...] [--repetitions N]``. Each entry is a
function from the shared context to a list of figures; a later figure
(serving latency, GPU runs) is one more entry in ``ENTRIES``, its goal one more
line of ``headline.GOALS``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bakeoff.components import logs
from bakeoff.components.tfenv import quiet_tensorflow
from benchmarks import headline
from benchmarks.harness import Context, Figure

HERE = Path(__file__).resolve().parent


def cpu() -> dict:
    """The CPU as `lscpu` names it: its model, whether it has AVX-512 (avx512f) and AMX (any amx_* flag)."""
    fields: dict[str, str] = {}
    try:
        listing = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        listing = ""
    for line in listing.splitlines():
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    flags = fields.get("Flags", "").split()
    return {
        "cpu": fields.get("Model name") or platform.processor() or "unknown",
        "avx512f": "avx512f" in flags,
        "amx": any(flag.startswith("amx") for flag in flags),
    }


def machine() -> dict:
    from importlib.metadata import version

    import tensorflow as tf

    return {
        "cores": os.cpu_count(),
        **cpu(),
        "python": platform.python_version(),
        "versions": {name: version(name) for name in ("tensorflow", "tf-keras", "kfp", "kubeflow-training", "minio")},
        "tensorflow_build": tf.sysconfig.get_build_info().get("cpu_compiler", ""),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def write_results(
    figures: list[Figure], context: Context, info: dict, ran: list[str], seconds: float, folder: Path = HERE
) -> None:
    """results.json: this run's figures, whether each met its goal, and raw samples; results.md: its headline only."""
    document = {
        "figures": [{**dataclasses.asdict(f), "met": headline.met(f)} for f in figures],
        "entries": ran,
        "machine": info,
        "bench_seconds": seconds,
        "samples": context.samples,
    }
    (folder / "results.json").write_text(json.dumps(document, indent=2) + "\n")
    (folder / "results.md").write_text(headline.table(figures, info, ran, seconds / 60))


def main(argv: list[str] | None = None) -> int:
    from benchmarks.entries import ENTRIES, ON_REQUEST

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        nargs="*",
        choices=list(ENTRIES),
        help=f"run only these entries (default: all but {', '.join(ON_REQUEST)})",
    )
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    logs.configure()  # the components' lines, as `bakeoff` shows them
    quiet_tensorflow()
    started = time.perf_counter()
    figures: list[Figure] = []
    ran = [name for name in ENTRIES if name in args.only] if args.only else [n for n in ENTRIES if n not in ON_REQUEST]
    with tempfile.TemporaryDirectory(prefix="bakeoff-bench-") as scratch:
        context = Context(Path(scratch), args.repetitions)
        for name in ran:
            entry = ENTRIES[name]
            print(f"== {name}", file=sys.stderr, flush=True)
            for figure in entry(context):
                print(
                    f"   {figure.key} = {figure.value:.4g} {figure.unit} (met: {headline.met(figure)})",
                    file=sys.stderr,
                    flush=True,
                )
                figures.append(figure)
        write_results(figures, context, machine(), ran, time.perf_counter() - started)
    print((HERE / "results.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
