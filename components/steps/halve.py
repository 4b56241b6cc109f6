"""The halve step: after a rung of successive halving, the variants best on validation go on; the rest stop."""


def halve(
    variants: list[dict],
    store: str,
    s3_endpoint: str,
    run_id: str,
    rung: int,
    keep: int,
    metric: str,
    deadline: str,
) -> list:
    """Keeps the ``keep`` variants best by ``metric`` after rung ``rung`` and records who stopped there, and why.

    Each variant's score is the mean validation value over the last third of
    its epochs (``halving.rung_score``); the record goes to
    ``runs/<run>/search/rung-<k>.json`` (``halving.halve``). A ``deadline``
    (a budgeted local run's, as JSON; empty: none) keeps as many as the rest
    of the search can train by it, more or fewer than ``keep``. Returns the
    kept variants' specs unchanged, best first: the next rung's loop runs over
    them.
    """
    from bakeoff.components.errors import reported
    from bakeoff.components.search import halving
    from bakeoff.components.search.deadline import check_deadline
    from bakeoff.components.storage import open_store, use_s3_endpoint

    with reported():
        use_s3_endpoint(s3_endpoint)
        by_name = {variant["name"]: variant for variant in variants}
        until = check_deadline(deadline, list(by_name))
        kept = halving.halve(open_store(store), run_id, list(by_name), rung, keep, metric, until)
        return [by_name[name] for name in kept]
