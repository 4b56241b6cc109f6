"""The select step: the best candidate on validation, tested, then published."""
from kfp import dsl


def select(candidates: list, data: dsl.Input[dsl.Dataset], store: str, model_name: str, run_id: str, metric: str) -> str:
    """Evaluates every candidate on validation, the winner on test, and publishes the winner.

    Candidates and the returned summary are JSON strings, which keep integers integral.
    """
    import json

    from components.errors import reported
    from components.selection.winner import select_winner

    with reported():
        return json.dumps(select_winner([json.loads(c) for c in candidates], data.path, store, model_name, run_id, metric))
