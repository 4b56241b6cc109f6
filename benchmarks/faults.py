"""Benchmark entry: the time one SIGKILLed replica costs a default variant, resumed from its backup, against the same
job unharmed."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable

from bakeoff.components.storage.records import WorkerMetrics
from benchmarks.harness import GLOBAL_BATCH, Context, Figure, median

WORKERS = 2
EPOCHS = 5
EXAMPLES = 16384  # per epoch: 128 steps of the global batch 128
KILLED_IN_EPOCH = 3  # the chief's "Epoch 3/5" line: two epochs are backed up, the third is under way
JOB = "bench-faults"
STARTED = re.compile(r"\[[^]]+\] replica (\S+) started as pid (\d+)$")


def _variant() -> dict:
    """The default bake-off's first variant (the seed CNN and its training settings), shortened."""
    from bakeoff.components.defaults import CONFIG
    from bakeoff.components.spec import load_variants

    spec = load_variants(CONFIG)[0].to_dict()
    spec["training"] |= {"epochs": EPOCHS, "batch_size": GLOBAL_BATCH // WORKERS}
    return spec | {"workers": WORKERS}


def _killer(victim: str, trigger: str) -> Callable[[str], None]:
    """A sink that SIGKILLs replica ``victim`` the first time a line starts with ``trigger``."""
    pids: dict[str, int] = {}
    sent: list[bool] = []

    def sink(line: str) -> None:
        started = STARTED.match(line)
        if started:
            pids[started[1]] = int(started[2])
        if not sent and line.startswith(trigger):
            os.kill(pids[victim], signal.SIGKILL)
            sent.append(True)

    return sink


def _run(context: Context, spec: dict, sink: Callable[[str], None] | None) -> tuple[float, WorkerMetrics]:
    """(wall seconds of the whole job, restarts included; the chief's metrics)."""
    from bakeoff.components.backends.local import LocalBackend
    from bakeoff.components.spec import from_dict
    from bakeoff.components.storage import open_store, runs
    from bakeoff.components.training.tfjob import build_tfjob, worker_args

    variant = from_dict(spec)
    store = open_store(str(context.scratch / "faults-store"))
    prefix = f"faults/{time.monotonic_ns()}"
    job = build_tfjob(
        variant,
        name=JOB,
        image="local",
        env={},
        backoff_limit=1,
        args=worker_args(variant, str(context.dataset()), store.uri, prefix, EXAMPLES),
    )
    started = time.perf_counter()
    LocalBackend(sink=sink or (lambda line: None)).run(job)
    return time.perf_counter() - started, runs.metrics_at(store, prefix)


def faults(context: Context) -> list[Figure]:
    """Seconds lost to one SIGKILL mid-training, and what the per-epoch backups cost a job without faults."""
    spec = _variant()
    trigger = f"[{JOB}-worker-0] Epoch {KILLED_IN_EPOCH}/{EPOCHS}"
    samples: dict[str, list] = {
        "unharmed_seconds": [],
        "killed_seconds": [],
        "resumed_from_epoch": [],
        "backup_share": [],
        "epoch_seconds": [],
    }
    for _ in range(context.repetitions):  # interleaved, so a noisy minute hits both
        seconds, metrics = _run(context, spec, None)
        samples["unharmed_seconds"].append(seconds)
        samples["backup_share"].append(metrics.backup_seconds / metrics.train_seconds)
        samples["epoch_seconds"].append(metrics.train_seconds / metrics.epochs_trained)
        seconds, metrics = _run(context, spec, _killer(f"{JOB}-worker-1", trigger))
        assert metrics.attempt == 2, "the replica was not killed before the job ended"
        samples["killed_seconds"].append(seconds)
        samples["resumed_from_epoch"].append(metrics.resumed_from_epoch)
    context.samples["faults"] = samples
    lost = median([k - u for k, u in zip(samples["killed_seconds"], samples["unharmed_seconds"], strict=True)])
    unharmed, epoch = median(samples["unharmed_seconds"]), median(samples["epoch_seconds"])
    resumed = median(samples["resumed_from_epoch"])
    share = median(samples["backup_share"])
    setting = (
        f"`{spec['name']}` (the default bake-off's), {WORKERS} workers, {EPOCHS} epochs of {EXAMPLES} examples,"
        f" replica 1 SIGKILLed once the chief starts epoch {KILLED_IN_EPOCH}"
    )
    return [
        Figure(
            "fault_seconds_lost",
            lost,
            "s",
            detail=f"killed job − unharmed job ({unharmed:.0f} s), medians of {context.repetitions}; {setting};"
            f" resumed after epoch {resumed:.0f}: the restart (processes, TensorFlow, the join) plus the lost part of "
            "an epoch"
            f" ({epoch:.1f} s each); a restart from scratch would also redo the {resumed:.0f} backed-up epochs"
            f" (≈ {lost + resumed * epoch:.0f} s lost)",
        ),
        Figure(
            "backup_share_of_training",
            share,
            "×",
            detail="seconds saving and uploading the per-epoch backups ÷ seconds in fit, unharmed job, chief",
        ),
    ]
