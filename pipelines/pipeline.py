"""The bake-off pipeline: ingest → ParallelFor(train as TFJob) → Collected → select and publish."""
from kfp import dsl

from components.ingest import ingest
from components.select import select
from components.train import train
from components.variants import DEFAULT_CONFIG, load_variants

DEFAULT_MODEL_NAME = "fashion-mnist"
DEFAULT_SOURCE = "/usr/share/datasets/fashion-mnist"


def build_pipeline(parallelism: int = 1, default_variants: list[dict] | None = None):
    """The pipeline function; ``parallelism`` is compile-time in KFP, hence a factory.

    ``parallelism`` bounds how many variants train at once; each train task
    is told it so that local replicas divide the machine's cores among all
    running jobs.
    """
    if default_variants is None:
        default_variants = [variant.to_dict() for variant in load_variants(DEFAULT_CONFIG)]

    @dsl.pipeline(name="bakeoff", description="Trains CNN variants as multi-worker TFJobs and publishes the best.")
    def bakeoff(
        store: str,
        variants: list = default_variants,
        model_name: str = DEFAULT_MODEL_NAME,
        source: str = DEFAULT_SOURCE,
        validation_size: int = 5000,
        shards: int = 8,
        max_train_examples: int = 0,
        metric: str = "val_accuracy",
        direction: str = "max",
        timeout_seconds: int = 3600,
    ) -> str:
        data = ingest(source=source, validation_size=validation_size, shards=shards)
        with dsl.ParallelFor(variants, parallelism=parallelism) as variant:
            trained = train(
                variant=variant,
                data=data.outputs["data"],
                store=store,
                run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                max_train_examples=max_train_examples,
                concurrent_jobs=parallelism,
                timeout_seconds=timeout_seconds,
            )
            trained.set_caching_options(False)
        selected = select(
            candidates=dsl.Collected(trained.output),
            data=data.outputs["data"],
            store=store,
            model_name=model_name,
            run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            metric=metric,
            direction=direction,
        )
        selected.set_caching_options(False)
        return selected.output

    return bakeoff
