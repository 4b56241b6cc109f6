"""The train component: one variant as one multi-worker TFJob."""
from kfp import dsl


def train(
    variant: dict,
    data: dsl.Input[dsl.Dataset],
    store: str,
    run_id: str,
    image: str,
    max_train_examples: int = 0,
    concurrent_jobs: int = 1,
    timeout_seconds: int = 3600,
    backend: str = "auto",
) -> str:
    """Trains one variant as a multi-worker TFJob; returns its candidate record as JSON.

    JSON rather than a dict: KFP would turn every integer of a dict into a float.
    """
    import json

    from components.errors import reported
    from components.training import train_variant

    with reported():
        return json.dumps(train_variant(variant, data.uri, store, run_id, image, max_train_examples, concurrent_jobs, timeout_seconds, backend))
