"""Runs every benchmark entry side by side: results.json holds that run, figures.json every figure's last value.

``python -m benchmarks.run [--only NAME ...] [--repetitions N]``. Each entry is a
function from the shared context to a list of figures; a later figure
(serving latency, GPU runs) is one more entry in ``ENTRIES``, its goal one more
line of ``headline.GOALS``. results.md, the headline, shows every figure's last
value on this run's machine class, stamped (benchmarks/headline.py).
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
from bakeoff.components.errors import BakeoffError
from bakeoff.components.tfenv import quiet_tensorflow
from benchmarks import headline
from benchmarks.harness import Context, Figure, machine_class

HERE = Path(__file__).resolve().parent
FIGURES = "figures.json"  # every figure's last measurement on each machine class, beside results.json
OUTPUTS = ("results.md", "results.json", FIGURES)


def commit() -> str:
    """The commit measured, "+changes" where tracked files other than the bench's outputs differ from it (a run before
    the last one's results were committed is still that commit's); "not recorded" outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True, cwd=HERE)
        changes = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=HERE
        )
    except OSError:
        return "not recorded"
    if head.returncode != 0:
        return "not recorded"
    changed = [line for line in changes.stdout.splitlines() if Path(line[3:]).name not in OUTPUTS]
    return head.stdout.strip() + ("+changes" if changed else "")


def cpu() -> dict:
    """The CPU as `lscpu` names it: its model, whether it has AVX-512 (avx512f) and AMX (any amx_* flag), and its
    machine class (``harness.machine_class``), which every figure of the run is stamped with."""
    fields: dict[str, str] = {}
    try:
        listing = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        listing = ""
    for line in listing.splitlines():
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    flags = fields.get("Flags", "").split()
    model = fields.get("Model name") or platform.processor() or "unknown"
    return {
        "cpu": model,
        "avx512f": "avx512f" in flags,
        "amx": any(flag.startswith("amx") for flag in flags),
        "class": machine_class(model, flags),
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
        "commit": commit(),
    }


def the_run(document: dict) -> headline.Run:
    """The run results.json describes, as the headline names it."""
    info = document["machine"]
    flags = ", ".join(f"{flag} {'yes' if info[flag] else 'no'}" for flag in ("avx512f", "amx"))
    versions = ", ".join(f"{name} {version}" for name, version in info["versions"].items())
    return headline.Run(
        info["date"],
        info["class"],
        info["commit"],
        document["bench_seconds"] / 60,
        document["entries"],
        f"{info['cpu']}, {info['cores']} cores, {flags}; Python {info['python']}; {versions}",
        frozenset(figure["key"] for figure in document["figures"]),
    )


def write_results(
    figures: list[Figure], context: Context, info: dict, ran: list[str], seconds: float, folder: Path = HERE
) -> None:
    """results.json: this run's figures, whether each met its goal, and raw samples; figures.json: every figure's
    last measurement on each class, this run's merged in; results.md: the headline of both."""
    kept = headline.load(folder / FIGURES)
    document = {
        "figures": [{**dataclasses.asdict(f), "met": headline.met(f)} for f in figures],
        "entries": ran,
        "machine": info,
        "bench_seconds": seconds,
        "samples": context.samples,
    }
    run = the_run(document)
    merged = headline.merge(kept, headline.stamped(figures, run))
    _write(folder / "results.json", json.dumps(document, indent=2) + "\n")
    _write(folder / FIGURES, headline.dump(merged))
    _write(folder / "results.md", headline.table(merged, run))


def rewrite_headline(folder: Path = HERE) -> None:
    """results.md again from figures.json and results.json, measuring nothing (after figures.json is edited)."""
    document = json.loads((folder / "results.json").read_text())
    _write(folder / "results.md", headline.table(headline.load(folder / FIGURES), the_run(document)))


def _write(path: Path, text: str) -> None:
    """``text`` into ``path`` whole or not at all."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.replace(path)


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
    parser.add_argument(
        "--results",
        type=Path,
        default=HERE,
        help="the folder of results.{md,json} and figures.json (default: %(default)s)",
    )
    parser.add_argument(
        "--rewrite-headline",
        action="store_true",
        help="write results.md from figures.json and results.json, run nothing",
    )
    args = parser.parse_args(argv)
    try:
        headline.load(args.results / FIGURES)  # before an hour of entries, not after
    except BakeoffError as error:
        print(f"benchmarks: {error}", file=sys.stderr)
        return 2
    if args.rewrite_headline:
        rewrite_headline(args.results)
        return 0
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
        write_results(figures, context, machine(), ran, time.perf_counter() - started, args.results)
    print((args.results / "results.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
