"""Runs every benchmark entry side by side and writes benchmarks/results.{json,md}.

``python -m benchmarks.run [--only NAME ...] [--repetitions N]``. Each entry is a
function from the shared context to a list of figures; a later figure
(serving latency, GPU runs) is one more entry in ``ENTRIES``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from bakeoff.components.tfenv import quiet_tensorflow
from benchmarks.harness import Context, Figure

HERE = Path(__file__).resolve().parent


def machine() -> dict:
    import tensorflow as tf

    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    from importlib.metadata import version

    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "versions": {name: version(name) for name in ("tensorflow", "tf-keras", "kfp", "kubeflow-training", "minio")},
        "tensorflow_build": tf.sysconfig.get_build_info().get("cpu_compiler", ""),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def measured_apart(results_md: Path) -> str:
    """The sections of results.md from its first `## ` heading on: figures measured apart, which a bench run keeps."""
    text = results_md.read_text() if results_md.exists() else ""
    start = text.find("\n## ")
    return text[start + 1 :] if start >= 0 else ""


def write_results(figures: list[Figure], context: Context, info: dict, seconds: float, folder: Path = HERE) -> None:
    results = {figure.key: figure.value for figure in figures}
    document = {
        **results,
        "figures": [dataclasses.asdict(f) for f in figures],
        "machine": info,
        "bench_seconds": seconds,
        "samples": context.samples,
    }
    (folder / "results.json").write_text(json.dumps(document, indent=2) + "\n")
    rows = [
        "# bakeoff benchmarks",
        "",
        f"Machine: {info['cores']} cores, {info['cpu']}; Python {info['python']}; "
        + ", ".join(f"{k} {v}" for k, v in info["versions"].items())
        + f". Run {info['date']}, {seconds / 60:.1f} min.",
        "",
        "| figure | value | goal | met | how |",
        "|---|---|---|---|---|",
    ]
    for f in figures:
        met = "" if f.met is None else ("yes" if f.met else "**no**")
        rows.append(f"| `{f.key}` | {f.value:.4g} {f.unit} | {f.goal} | {met} | {f.detail} |")
    rows += [
        "",
        f"Medians of {context.repetitions} repetitions where a figure says so; raw samples are in results.json.",
        "",
    ]
    kept = measured_apart(folder / "results.md")
    (folder / "results.md").write_text("\n".join(rows) + ("\n" + kept if kept else ""))


def main(argv: list[str] | None = None) -> int:
    from benchmarks.entries import ENTRIES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(ENTRIES), help="run only these entries")
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    quiet_tensorflow()
    started = time.perf_counter()
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="bakeoff-bench-") as scratch:
        context = Context(Path(scratch), args.repetitions)
        for name, entry in ENTRIES.items():
            if args.only and name not in args.only:
                continue
            print(f"== {name}", file=sys.stderr, flush=True)
            for figure in entry(context):
                print(
                    f"   {figure.key} = {figure.value:.4g} {figure.unit} (goal {figure.goal or '-'})",
                    file=sys.stderr,
                    flush=True,
                )
                figures.append(figure)
        write_results(figures, context, machine(), time.perf_counter() - started)
    print((HERE / "results.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
