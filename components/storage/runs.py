"""A run's outputs in the store, one folder per variant: ``runs/<run>/<variant>/{model/, metrics.json,
variant.json}``."""

from __future__ import annotations

import json

from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage.records import Candidate, LatestRun, RungRecord, SelectionRecord, WorkerMetrics
from bakeoff.components.storage.store import Store

MODEL = "model"  # the SavedModel, as served
METRICS = "metrics.json"  # the chief's training metrics
SPEC = "variant.json"  # the resolved variant spec it was trained from
SELECTION = "selection.json"  # the run's selection record (select's summary, confusion matrix, mistakes), per run
LATEST = "runs/latest.json"  # which run's selection record is the newest (a LatestRun)


def variant_prefix(run_id: str, variant: str) -> str:
    if "{{" in run_id:
        # KFP before 2.5 (Kubeflow 1.10.0) passes {{$.pipeline_job_uuid}} through unsubstituted.
        raise BakeoffError(
            f"run id {run_id!r} is a placeholder the KFP backend did not fill in: bakeoff needs KFP 2.5 or newer"
            " (Kubeflow 1.10.1 or newer)"
        )
    return f"runs/{run_id}/{variant}"


def selection_key(run_id: str) -> str:
    return f"runs/{run_id}/{SELECTION}"


def metrics_at(store: Store, prefix: str) -> WorkerMetrics:
    """The ``metrics.json`` a job left below ``prefix``."""
    key = f"{prefix}/{METRICS}"
    return WorkerMetrics.from_json(store.get_bytes(key), store.uri_for(key))


def metrics(store: Store, run_id: str, variant: str) -> WorkerMetrics:
    """A variant's ``metrics.json``: its last job's."""
    return metrics_at(store, variant_prefix(run_id, variant))


def candidate(store: Store, run_id: str, variant: str) -> Candidate:
    """What selection needs of one trained variant, read back from the store.

    Selection reads candidates here rather than from the train tasks' outputs,
    so the pipeline fans in without ``dsl.Collected`` (which KFP resolves only from 2.14).
    """
    prefix = variant_prefix(run_id, variant)
    spec = json.loads(store.get_bytes(f"{prefix}/{SPEC}"))
    return Candidate(variant, spec, store.uri_for(f"{prefix}/{MODEL}"), prefix, metrics(store, run_id, variant))


def selection(store: Store, run_id: str) -> SelectionRecord:
    key = selection_key(run_id)
    return SelectionRecord.from_json(store.get_bytes(key), store.uri_for(key))


def write_selection(store: Store, record: SelectionRecord) -> None:
    """Writes the run's selection record, then points ``runs/latest.json`` at it unless a newer run's is there.

    Two selects finishing at once may both read the old pointer; the later write wins, so the pointer may name
    the older of the two until the next run: `report latest` then reports that one, never a run without a record.
    """
    store.put_bytes(selection_key(record.run_id), record.to_json().encode())
    current = latest(store)
    if current is None or (record.created, record.run_id) >= (current.created, current.run_id):
        store.put_bytes(LATEST, LatestRun(record.run_id, record.created).to_json().encode())


def latest(store: Store) -> LatestRun | None:
    """The newest run with a selection record, as ``runs/latest.json`` names it; None where no select wrote one."""
    if not store.exists(LATEST):
        return None
    return LatestRun.from_json(store.get_bytes(LATEST), store.uri_for(LATEST))


SEARCH = "search"  # runs/<run>/search/rung-<k>.json: whom each halving rung kept and stopped, and why


def rung_name(rung: int) -> str:
    """The file of rung ``rung``: a variant's metrics as that rung's job left them, or the run's search record."""
    return f"rung-{rung}.json"


def rung_metrics(store: Store, run_id: str, variant: str, rung: int) -> WorkerMetrics:
    """A variant's ``metrics.json`` as the job of rung ``rung`` wrote it (``runs/<run>/<variant>/rung-<k>.json``)."""
    key = f"{variant_prefix(run_id, variant)}/{rung_name(rung)}"
    return WorkerMetrics.from_json(store.get_bytes(key), store.uri_for(key))


def rung_seconds(store: Store, run_id: str, last: WorkerMetrics) -> list[float]:
    """A variant's training seconds, one number per rung's job, rung 0 first: a resumed variant trained in several.

    ``last`` is its last job's metrics; the earlier rungs' are read from their records.
    """
    earlier = [rung_metrics(store, run_id, last.variant, rung).train_seconds for rung in range(last.rung)]
    return [*earlier, last.train_seconds]


def search_key(run_id: str, rung: int) -> str:
    return f"runs/{run_id}/{SEARCH}/{rung_name(rung)}"


def search_records(store: Store, run_id: str) -> list[RungRecord]:
    """The run's halving records, rung 0 first; none for a run without successive halving."""
    prefix = f"runs/{run_id}/{SEARCH}/"
    records = [
        RungRecord.from_json(store.get_bytes(key), store.uri_for(key))
        for key in store.list(prefix)
        if key.endswith(".json")
    ]
    return sorted(records, key=lambda record: record.rung)
