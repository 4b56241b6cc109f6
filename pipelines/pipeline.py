"""The bake-off pipeline: ingest → ParallelFor(train as TFJob) → Collected → select and publish."""
import dataclasses
from typing import Optional

from kfp import dsl

from components import defaults
from components.spec import load_variants
from components.steps.factory import as_component
from components.steps.ingest import ingest
from components.steps.select import select
from components.steps.train import train
from components.storage import S3_ENDPOINT_ENV, S3_INSECURE_ENV
from components.training.tfjob import STORE_SECRET, STORE_SECRET_KEYS


@dataclasses.dataclass(frozen=True)
class Cluster:
    """How the compiled pipeline reaches the cluster's object store (KFP's MinIO/SeaweedFS by default)."""

    store: str = defaults.CLUSTER_STORE
    s3_endpoint: str = defaults.CLUSTER_S3_ENDPOINT
    s3_insecure: bool = True
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
    machine's cores among all running jobs. For a cluster every task gets
    the store endpoint as plain variables and the keys from the store
    secret through kfp-kubernetes, never as parameters.
    """
    if variants is None:
        variants = [variant.to_dict() for variant in load_variants(defaults.CONFIG)]
    ingest_op, train_op, select_op = (as_component(func, image) for func in (ingest, train, select))

    def on_cluster(task: dsl.PipelineTask) -> dsl.PipelineTask:
        if cluster is not None:
            from kfp import kubernetes

            kubernetes.use_secret_as_env(task, secret_name=cluster.secret, secret_key_to_env=STORE_SECRET_KEYS)
            task.set_env_variable(S3_ENDPOINT_ENV, cluster.s3_endpoint)
            if cluster.s3_insecure:
                task.set_env_variable(S3_INSECURE_ENV, "1")
        return task

    @dsl.pipeline(name="bakeoff", description="Trains CNN variants as multi-worker TFJobs and publishes the best.")
    def bakeoff(
        store: str = cluster.store if cluster else "",
        variants: list = variants,
        model_name: str = defaults.MODEL_NAME,
        source: str = defaults.SOURCE,
        source_digest: str = "",
        validation_size: int = defaults.VALIDATION_SIZE,
        shards: int = defaults.SHARDS,
        max_train_examples: int = 0,
        metric: str = defaults.METRIC,
        timeout_seconds: int = defaults.TIMEOUT_SECONDS,
        backend: str = "auto",
    ) -> str:
        data = on_cluster(ingest_op(source=source, source_digest=source_digest, validation_size=validation_size,
                                    shards=shards, seed=defaults.SEED))
        with dsl.ParallelFor(variants, parallelism=parallelism) as variant:
            trained = on_cluster(train_op(
                variant=variant,
                data=data.outputs["data"],
                store=store,
                run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                image=image,
                max_train_examples=max_train_examples,
                concurrent_jobs=parallelism,
                timeout_seconds=timeout_seconds,
                backend=backend,
            ))
            trained.set_caching_options(False)
        selected = on_cluster(select_op(
            candidates=dsl.Collected(trained.output),
            data=data.outputs["data"],
            store=store,
            model_name=model_name,
            run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            metric=metric,
        ))
        selected.set_caching_options(False)
        return selected.output

    return bakeoff
