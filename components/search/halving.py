"""Successive halving: the rungs a search trains through, and which variants survive each."""

from __future__ import annotations

import dataclasses
import logging
import math
import time

from bakeoff.components import progress
from bakeoff.components.defaults import HALVING_WINDOW
from bakeoff.components.errors import BakeoffError
from bakeoff.components.search.deadline import Deadline
from bakeoff.components.selection.ranking import check_metric, rank
from bakeoff.components.spec import Halving
from bakeoff.components.storage import Store, runs
from bakeoff.components.storage.records import VAL_EPOCHS, RungRecord, RungStop, Score, timestamp
from bakeoff.components.training import backup

logger = logging.getLogger(__name__)

# A stopped variant's reason where the deadline went on with cheaper ones ranked below it.
PASSED_OVER = (
    "; passed over for cheaper ones ranked below it: with it the search would not end by the budget's deadline"
)


@dataclasses.dataclass(frozen=True)
class Rung:
    """Rung ``index`` trains ``entering`` variants until epoch ``epochs`` (resuming each) and keeps the best
    ``keep``."""

    index: int
    epochs: int
    entering: int
    keep: int


def rung_epochs(index: int, entering: int, halving: Halving, last: int | None = None) -> int:
    """The epoch rung ``index`` trains to with ``entering`` variants: ``min(min_epochs * eta**index, max_epochs)``,
    or ``max_epochs`` for a lone variant and for rung ``last`` (the last a pipeline holds), which end the search."""
    if entering == 1 or (last is not None and index >= last):
        return halving.max_epochs
    return min(halving.min_epochs * halving.eta**index, halving.max_epochs)


def rung_keep(entering: int, halving: Halving) -> int:
    """How many of the ``entering`` variants a rung before the last keeps: ``ceil(entering / eta)``."""
    return math.ceil(entering / halving.eta)


def schedule(count: int, halving: Halving) -> list[Rung]:
    """The rungs for ``count`` variants.

    Rung k trains to ``rung_epochs`` and keeps ``rung_keep``; the rung that
    reaches ``max_epochs`` keeps 1 and is the last. Once a single variant is left it goes straight to ``max_epochs``:
    stopping it at rungs in between would only cost job starts. Rounded up, not down as Hyperband does: a cut to one
    hands the whole search to the earliest ranking, where small networks lead the ones that end best. The halve steps
    of a run apply the same two rules to the variants that entered each rung (``halve``).
    """
    rungs: list[Rung] = []
    entering = count
    while True:
        epochs = rung_epochs(len(rungs), entering, halving)
        if epochs >= halving.max_epochs:
            rungs.append(Rung(len(rungs), epochs, entering, 1))
            return rungs
        keep = rung_keep(entering, halving)
        rungs.append(Rung(len(rungs), epochs, entering, keep))
        entering = keep


def check_rungs(count: int, halving: Halving, rungs: int) -> None:
    """One line when a search of ``count`` variants takes more rungs than the pipeline's ``rungs``."""
    needed = len(schedule(count, halving))
    if needed > rungs:
        raise BakeoffError(
            f"{count} variants from {halving.min_epochs} to {halving.max_epochs} epochs at eta {halving.eta} take {needed} rungs;"  # noqa: E501 (one clause, found whole by a search)
            f" this pipeline holds {rungs}: raise min_epochs or eta, or list fewer variants"
        )


def next_rung(
    store: Store,
    run_id: str,
    names: list[str],
    rung: int,
    halving: Halving,
    last: int,
    metric: str,
    deadline: Deadline | None = None,
) -> tuple[list[str], int]:
    """Halves rung ``rung`` of ``names`` at run time: keeps ``rung_keep`` of them (``halve``, which a ``deadline``
    may move); returns the kept, best first, and the epoch the next rung trains them to.

    The next rung is the last (to ``max_epochs``) where one is kept, or where it is rung ``last``: the pipeline's last,
    or with a ``deadline`` its plan's, whose stops and keeps cost the rest of the search.
    """
    kept = halve(store, run_id, names, rung, rung_keep(len(names), halving), metric, deadline)
    if deadline is not None:
        last = min(last, len(deadline.stops) - 1)
    return kept, rung_epochs(rung + 1, len(kept), halving, last)


def finalists(store: Store, run_id: str, names: list[str]) -> list[str]:
    """The variants run ``run_id``'s last rung trained: those its last halve step kept (best first), or all of
    ``names`` where no rung was halved. Read back from the store, because which rung was last is decided at run time."""
    records = runs.search_records(store, run_id)
    return [score.variant for score in max(records, key=lambda r: r.rung).kept] if records else names


def rung_score(history: dict, metric: str, epochs: int) -> tuple[float, int]:
    """A variant's score after a rung that ended at ``epochs``, and the first epoch it averages.

    The mean of ``metric`` over the validated epochs of the last ``1/HALVING_WINDOW`` of
    the training so far (at least the last one). A learning-rate schedule over
    ``max_epochs`` is still high in the early rungs, where one epoch's validation
    swings widely: a single dip must not decide who goes on (docs/search.md).
    """
    values = history.get(metric) or []
    validated = history.get(VAL_EPOCHS) or list(range(epochs - len(values) + 1, epochs + 1))
    first = epochs - max(1, epochs // HALVING_WINDOW) + 1
    recent = [value for value, epoch in zip(values, validated, strict=False) if epoch >= first] or values[-1:]
    return (math.fsum(recent) / len(recent) if recent else math.nan), first


def survivors(candidates: list[Score], keep: int, metric: str) -> tuple[list[str], list[str]]:
    """The names of the ``keep`` best candidates and of the rest, each best first by ``metric`` in its direction.

    Ties go to the name that sorts first (``rank``); a candidate whose metric is not a number (a diverged run's NaN)
    ranks below every other.
    """
    check_metric(metric)  # an unknown metric is one line, before any candidate is read
    scored = [c for c in candidates if math.isfinite(c.score(metric))]
    ranked = rank(scored, metric) + sorted(
        (c for c in candidates if not math.isfinite(c.score(metric))), key=lambda c: c.variant
    )
    names = [c.variant for c in ranked]
    return names[:keep], names[keep:]


def halve(
    store: Store, run_id: str, names: list[str], rung: int, keep: int, metric: str, deadline: Deadline | None = None
) -> list[str]:
    """Keeps the ``keep`` of ``names`` best by ``metric`` after rung ``rung`` and records who stopped there, and why.

    With a ``deadline`` as many go on as the rest of the search can train by it (``Deadline.survivors``).
    The record goes to ``runs/<run>/search/rung-<k>.json``, and the stopped variants' backups are deleted: no later
    job resumes them. Returns the kept names, best first.
    """
    scores, since, epochs = _rung_scores(store, run_id, names, rung, metric)
    kept, stopped = survivors(scores, keep, metric)
    ranking, why = kept + stopped, ""
    places = {name: place for place, name in enumerate(ranking, start=1)}
    passed: list[str] = []  # stopped by the deadline while cheaper ones ranked below them went on
    if deadline is not None:
        earlier = [record for record in runs.search_records(store, run_id) if record.rung < rung]  # rung 0 first
        finite = {entry.variant for entry in scores if math.isfinite(entry.value)}  # a diverged one never goes on
        ranked = [name for name in ranking if name in finite] or kept
        kept = deadline.survivors([*(record.entered for record in earlier), names], ranked, keep, time.time())
        stopped = [name for name in ranking if name not in kept]
        lowest = max(places[name] for name in kept)
        passed = [name for name in stopped if places[name] < lowest]
        if len(kept) != keep:
            why = f" (not {keep}: the budget's deadline)"  # said where it stopped one the rung would have kept
        if why or passed:
            over = f"; passed over for cheaper ones: {', '.join(passed)}" if passed else ""
            logger.info("bakeoff: rung %d keeps %d%s: %s%s", rung, len(kept), why, ", ".join(kept), over)
    value = {entry.variant: entry.value for entry in scores}
    last = max(epochs)
    # Which epochs a score averages, when more than one.
    averaged = {name: f" (mean of epochs {first}-{last})" if first < last else "" for name, first in since.items()}
    record = RungRecord(
        rung=rung,
        epochs=last,
        metric=metric,
        entered=names,
        kept=[Score(name, metric, value[name]) for name in kept],
        stopped=[
            RungStop(
                name,
                metric,
                value[name],
                reason=f"{metric} {value[name]:.4f}{averaged[name]} placed {places[name]} of {len(names)}"
                f" after epoch {last}; rung {rung} keeps {len(kept)}{why if places[name] <= keep else ''}"
                + (PASSED_OVER if name in passed else ""),
            )
            for name in stopped
        ],
        created=timestamp(),
    )
    store.put_bytes(runs.search_key(run_id, rung), record.to_json().encode())
    for name in stopped:
        backup.remove(store, runs.variant_prefix(run_id, name))
        progress.emit(name, progress.Event("stopped"))
    return kept


def _rung_scores(
    store: Store, run_id: str, names: list[str], rung: int, metric: str
) -> tuple[list[Score], dict[str, int], list[int]]:
    """Each variant's ``rung_score`` from the metrics its rung's job left (``runs/<run>/<variant>/rung-<k>.json``),
    the first epoch each averages, and the epoch each job ended at."""
    scores, since, epochs = [], {}, []
    for name in names:
        record = runs.rung_metrics(store, run_id, name, rung)
        if not record.history.get(metric):
            raise BakeoffError(
                f"variant {name!r} has no {metric} in its record of rung {rung}: halving ranks on validation,"
                " which the worker scores at every job's last epoch: run an image built from this bakeoff"
            )
        score, since[name] = rung_score(record.history, metric, record.epochs)
        scores.append(Score(name, metric, score))
        epochs.append(record.epochs)
    return scores, since, epochs
