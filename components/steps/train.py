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
    trainer: str,
    metrics: dsl.Output[dsl.Metrics],
    stop_epoch: int = 0,
    rung: int = 0,
) -> str:
    """Trains one variant as a multi-worker TFJob until epoch ``stop_epoch`` (0: all); returns its candidate record as
    JSON.

    JSON rather than a dict: KFP would turn every integer of a dict into a float.
    ``metrics`` shows the job's final numbers in the KFP UI.
    """
    from bakeoff.components.errors import reported
    from bakeoff.components.storage import use_s3_endpoint
    from bakeoff.components.training.launch import JobSettings, final_metrics, train_variant

    with reported():
        use_s3_endpoint(s3_endpoint)
        settings = JobSettings(image, max_train_examples, concurrent_jobs, timeout_seconds, backend, trainer)
        candidate = train_variant(variant, data.uri, store, run_id, settings, stop_epoch, rung)
        for name, value in final_metrics(candidate.metrics).items():
            metrics.log_metric(name, value)
        return candidate.to_json(indent=None)
