"""The halve step: after a rung of successive halving, the variants best on validation go on; the rest stop."""


def halve(
    variants: list[dict],
    store: str,
    s3_endpoint: str,
    run_id: str,
    rung: int,
    keep: int,
    metric: str,
) -> list:
    """Keeps the ``keep`` variants best by ``metric`` after rung ``rung`` and records who stopped there, and why.

    Each variant's score is the mean validation value over the last third of
    its epochs (``halving.rung_score``), from the metrics its rung's job left
    (``runs/<run>/<variant>/rung-<k>.json``). The
    record goes to ``runs/<run>/search/rung-<k>.json``, and the stopped
    variants' backups are deleted: no later job resumes them. Returns the kept
    variants' specs unchanged, best first: the next rung's loop runs over them.
    """
    import datetime

    from bakeoff.components import progress
    from bakeoff.components.errors import BakeoffError, reported
    from bakeoff.components.search.halving import rung_score, survivors
    from bakeoff.components.storage import open_store, runs, use_s3_endpoint
    from bakeoff.components.storage.records import RungRecord, RungStop, Score
    from bakeoff.components.training import backup

    with reported():
        use_s3_endpoint(s3_endpoint)
        target = open_store(store)
        by_name = {variant["name"]: variant for variant in variants}
        scores, epochs, since = [], [], {}
        for name in by_name:
            record = runs.rung_metrics(target, run_id, name, rung)
            if not record.history.get(metric):
                raise BakeoffError(
                    f"variant {name!r} has no {metric} in its record of rung {rung}: halving ranks on validation,"
                    " which the worker scores at every job's last epoch: run an image built from this bakeoff"
                )
            score, since[name] = rung_score(record.history, metric, record.epochs)
            scores.append(Score(name, metric, score))
            epochs.append(record.epochs)
        kept, stopped = survivors(scores, keep, metric)
        value = {entry.variant: entry.value for entry in scores}
        # Which epochs a score averages, when more than one (nothing outside this function ships to the step's
        # container).
        averaged = {
            name: f" (mean of epochs {first}-{max(epochs)})" if first < max(epochs) else ""
            for name, first in since.items()
        }
        places = {name: place for place, name in enumerate(kept + stopped, start=1)}
        target.put_bytes(
            runs.search_key(run_id, rung),
            RungRecord(
                rung=rung,
                epochs=max(epochs),
                metric=metric,
                entered=list(by_name),
                kept=[Score(name, metric, value[name]) for name in kept],
                stopped=[
                    RungStop(
                        name,
                        metric,
                        value[name],
                        reason=f"{metric} {value[name]:.4f}{averaged[name]} placed {places[name]} of {len(by_name)}"
                        f" after epoch {max(epochs)}; rung {rung} keeps {len(kept)}",
                    )
                    for name in stopped
                ],
                created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            )
            .to_json()
            .encode(),
        )
        for name in stopped:
            backup.remove(target, runs.variant_prefix(run_id, name))
            progress.emit(name, state="stopped")
        return [by_name[name] for name in kept]
