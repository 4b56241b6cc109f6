"""The bake-off pipeline: ingest → train-variants (ParallelFor of TFJobs) → select and publish."""
import dataclasses
from typing import Optional

from kfp import dsl

from components import defaults
from components.spec import load_variants
from components.steps.factory import as_component
from components.steps.ingest import ingest
from components.steps.select import select
from components.steps.train import train
from components.storage import S3_INSECURE_ENV
from components.training.tfjob import STORE_SECRET, STORE_SECRET_KEYS


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The compiled pipeline's defaults for the cluster's object store; store and endpoint stay run-time parameters."""

    store: str = defaults.CLUSTER_STORE
    s3_endpoint: str = defaults.CLUSTER_S3_ENDPOINT
    s3_insecure: bool = True  # KFP's in-cluster store speaks plain HTTP
    secret: str = STORE_SECRET


def build_pipeline(
    parallelism: int = 1,
    variants: Optional[list[dict]] = None,
    image: str = defaults.IMAGE,
    cluster: Optional[Cluster] = None,
):
    """The pipeline function, built for kfp.local (``cluster=None``) or for a cluster.

    A factory because KFP fixes ``parallelism`` and the image at compile time.
    Each train task is told ``parallelism`` so that local replicas divide the
    machine's cores among all running jobs. For a cluster every task gets the
    store keys from the store secret through kfp-kubernetes, never as parameters.

    The fan-in is a sub-pipeline that select waits for, and select reads the
    candidates back from the store: it runs on every supported backend, where
    ``dsl.Collected`` needs KFP 2.14 (README, "On Kubeflow").
    """
    if variants is None:
        variants = [variant.to_dict() for variant in load_variants(defaults.CONFIG)]
    ingest_op, train_op, select_op = (as_component(func, image) for func in (ingest, train, select))

    def on_cluster(task: dsl.PipelineTask) -> dsl.PipelineTask:
        if cluster is not None:
            from kfp import kubernetes

            kubernetes.use_secret_as_env(task, secret_name=cluster.secret, secret_key_to_env=STORE_SECRET_KEYS)
            if cluster.s3_insecure:
                task.set_env_variable(S3_INSECURE_ENV, "1")
        return task

    @dsl.pipeline(name="train-variants", description="One multi-worker TFJob per variant.")
    def train_variants(
        variants: list[dict],
        data: dsl.Input[dsl.Dataset],
        store: str,
        s3_endpoint: str,
        max_train_examples: int,
        timeout_seconds: int,
        backend: str,
    ):
        with dsl.ParallelFor(variants, parallelism=parallelism) as variant:
            trained = on_cluster(train_op(
                variant=variant,
                data=data,
                store=store,
                s3_endpoint=s3_endpoint,
                run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                image=image,
                max_train_examples=max_train_examples,
                concurrent_jobs=parallelism,
                timeout_seconds=timeout_seconds,
                backend=backend,
            ))
            trained.set_caching_options(False)

    @dsl.pipeline(name="bakeoff", description="Trains CNN variants as multi-worker TFJobs and publishes the best.")
    def bakeoff(
        store: str = cluster.store if cluster else "",
        s3_endpoint: str = cluster.s3_endpoint if cluster else "",
        variants: list[dict] = variants,
        model_name: str = defaults.MODEL_NAME,
        source: str = defaults.SOURCE,
        source_digest: str = "",
        validation_size: int = defaults.VALIDATION_SIZE,
        shards: int = defaults.SHARDS,
        max_train_examples: int = 0,
        metric: str = defaults.METRIC,
        min_improvement: float = defaults.MIN_IMPROVEMENT,
        force_publish: bool = False,
        timeout_seconds: int = defaults.TIMEOUT_SECONDS,
        backend: str = "auto",
    ) -> str:
        data = on_cluster(ingest_op(source=source, source_digest=source_digest, validation_size=validation_size,
                                    shards=shards, seed=defaults.SEED))
        trained = train_variants(
            variants=variants,
            data=data.outputs["data"],
            store=store,
            s3_endpoint=s3_endpoint,
            max_train_examples=max_train_examples,
            timeout_seconds=timeout_seconds,
            backend=backend,
        )
        selected = on_cluster(select_op(
            variants=variants,
            data=data.outputs["data"],
            store=store,
            s3_endpoint=s3_endpoint,
            model_name=model_name,
            run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            metric=metric,
            min_improvement=min_improvement,
            force_publish=force_publish,
        ).after(trained))
        selected.set_caching_options(False)
        return selected.outputs["Output"]

    return bakeoff
