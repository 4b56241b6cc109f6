"""The select step: the best candidate on validation, tested, then published."""
from kfp import dsl


def select(
    variants: list[dict],
    data: dsl.Input[dsl.Dataset],
    store: str,
    s3_endpoint: str,
    model_name: str,
    run_id: str,
    metric: str,
    min_improvement: float,
    force_publish: bool,
) -> str:
    """Evaluates every variant the run trained on validation, the winner on test, and publishes it past the promotion gate.

    The returned summary is a JSON string, which keeps integers integral.
    """
    import json

    from components.errors import reported
    from components.selection.promotion import Gate
    from components.selection.winner import select_run
    from components.storage import use_s3_endpoint

    with reported():
        use_s3_endpoint(s3_endpoint)
        gate = Gate(min_improvement, force_publish)
        return json.dumps(select_run([variant["name"] for variant in variants], data.path, store, model_name, run_id, metric, gate))
