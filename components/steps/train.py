"""The train step: one variant as one multi-worker TFJob."""
from kfp import dsl


def train(
    variant: dict,
    data: dsl.Input[dsl.Dataset],
    store: str,
    s3_endpoint: str,
    run_id: str,
    image: str,
    max_train_examples: int,
    concurrent_jobs: int,
    timeout_seconds: int,
    backend: str,
) -> str:
    """Trains one variant as a multi-worker TFJob; returns its candidate record as JSON.

    JSON rather than a dict: KFP would turn every integer of a dict into a float.
    """
    import json

    from components.errors import reported
    from components.storage import use_s3_endpoint
    from components.training.launch import train_variant

    with reported():
        use_s3_endpoint(s3_endpoint)
        return json.dumps(train_variant(variant, data.uri, store, run_id, image, max_train_examples, concurrent_jobs, timeout_seconds, backend))
