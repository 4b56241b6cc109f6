"""Records for the tests to write into stores: the ones bakeoff's own writers wrote (tests/data/records), changed
where a test says."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bakeoff.components.search import calibration_cache, costs
from bakeoff.components.spec import Config
from bakeoff.components.storage import Store, runs
from bakeoff.components.storage.records import Candidate, Manifest, WorkerMetrics

RECORDS = Path(__file__).resolve().parent / "data" / "records"


def metrics(**changes: Any) -> WorkerMetrics:
    """A real job's metrics.json (mlp, 2 epochs of a halving run), with ``changes``."""
    sample = WorkerMetrics.from_json((RECORDS / "metrics.json").read_text(), "metrics.json")
    return dataclasses.replace(sample, **changes)


def store_job(store: Store, run_id: str, variant: str, rung: int, **changes: Any) -> None:
    """Writes ``metrics(variant=variant, rung=rung, **changes)`` as run ``run_id``'s job of ``variant`` at ``rung``
    (its ``rung-<k>.json``), as launch keeps it."""
    job = metrics(variant=variant, rung=rung, **changes)
    store.put_bytes(f"{runs.variant_prefix(run_id, variant)}/{runs.rung_name(rung)}", job.to_json().encode())


def candidate(variant: str, prefix: str, uri: str = "", **metric_changes: Any) -> Candidate:
    """A trained variant as selection reads it: its spec names it; its metrics are a real job's, with
    ``metric_changes``."""
    return Candidate(variant, {"name": variant}, uri, prefix, metrics(variant=variant, **metric_changes))


def manifest(**changes: Any) -> Manifest:
    """A real published version's manifest (a run that replaced a champion), with ``changes``; publish numbers it."""
    sample = Manifest.from_json((RECORDS / "manifest.json").read_text(), "manifest.json")
    return dataclasses.replace(sample, **({"version": 0} | changes))


def calibration(
    *configs: Config,
    step_seconds: float = 0.05,
    epoch_end_seconds: float = 1.0,
    start_seconds: float = 10.0,
    task_seconds: float = 1.0,
    select_task_seconds: float = 3.0,
    ingest_seconds: float = 5.0,
    images: costs.Images = costs.FASHION_MNIST,
) -> costs.Calibration:
    """This machine's costs as if measured on ``images``: every network ``timed`` picks for ``configs``, the cheapest
    of each shape stepping in ``step_seconds`` and ending an epoch in ``epoch_end_seconds``, the others in proportion
    to their MACs."""
    timed = costs.timed((v for config in configs for v in config.variants), images)
    # timed lists each shape's cheapest first
    cheapest = {costs.shape_of(v, images): costs.macs(v, images) for v in reversed(timed)}
    steps = []
    for variant in timed:
        shape, network = costs.shape_of(variant, images), costs.macs(variant, images)
        scale = network / cheapest[shape]
        steps.append(costs.StepCost.of(shape, 1, network, step_seconds * scale, epoch_end_seconds * scale))
    measured_at = "2026-01-01T00:00:00+00:00"
    return costs.Calibration(
        costs.VERSION,
        calibration_cache.machine_key(),
        measured_at,
        start_seconds,
        task_seconds,
        select_task_seconds,
        ingest_seconds,
        steps,
    )


def cache_calibration(cache: Path, *configs: Config, **numbers: Any) -> costs.Calibration:
    """Writes ``calibration(*configs)`` where plan reads it (``cache``: the tests' own cache folder): nothing is
    measured."""
    written = calibration(*configs, **numbers)
    (cache / calibration_cache.FILE).write_text(written.to_json())
    return written
