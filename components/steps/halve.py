"""The halve step: after a rung of successive halving, the variants best on validation go on; the rest stop."""

from typing import NamedTuple


def halve(
    variants: list[dict],
    store: str,
    s3_endpoint: str,
    run_id: str,
    rung: int,
    min_epochs: int,
    max_epochs: int,
    eta: int,
    rungs: int,
    metric: str,
    deadline: str,
) -> NamedTuple("Halved", [("variants", list), ("Output", int)]):  # type: ignore[valid-type]
    """Keeps the best ``ceil(len(variants) / eta)`` by ``metric`` after rung ``rung`` and records who stopped there,
    and why; returns the kept variants' specs unchanged, best first, and as ``Output`` the epoch the next rung trains
    them to (the output kfp.local's runner resolves in the ``dsl.If`` on it: kfp 2.17 reads no other name of a task's
    output there).

    The keep is worked out here, from the variants that entered the rung: the pipeline's run form sets their number
    and the halving settings. Each variant's score is the mean validation value over the last third of its epochs
    (``halving.rung_score``); the record goes to ``runs/<run>/search/rung-<k>.json`` (``halving.halve``). A
    ``deadline`` (a budgeted local run's, as JSON; empty: none) keeps as many as the rest of the search can train by
    it, more or fewer. The next rung is the last (``max_epochs``) where one is kept or where it is the pipeline's
    last of ``rungs`` (``halving.next_rung``).
    """
    from bakeoff.components.errors import reported
    from bakeoff.components.search import halving
    from bakeoff.components.search.deadline import check_deadline
    from bakeoff.components.spec import Halving
    from bakeoff.components.storage import open_store, use_s3_endpoint

    with reported():
        use_s3_endpoint(s3_endpoint)
        by_name = {variant["name"]: variant for variant in variants}
        until = check_deadline(deadline, list(by_name))
        settings = Halving(min_epochs, max_epochs, eta)
        kept, epochs = halving.next_rung(
            open_store(store), run_id, list(by_name), rung, settings, rungs - 1, metric, until
        )
    return [by_name[name] for name in kept], epochs  # kfp's executor takes a tuple for the NamedTuple
