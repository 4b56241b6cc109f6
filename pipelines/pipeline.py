"""The bake-off pipeline: ingest → ParallelFor(train as TFJob) → Collected → select and publish."""
import dataclasses
from typing import Optional

from kfp import dsl

from components.image import BASE_IMAGE, as_component
from components.ingest import ingest
from components.select import select
from components.store import S3_ENDPOINT_ENV, S3_INSECURE_ENV
from components.tfjob import STORE_SECRET, STORE_SECRET_KEYS
from components.train import train
from components.variants import DEFAULT_CONFIG, load_variants

DEFAULT_MODEL_NAME = "fashion-mnist"
DEFAULT_SOURCE = "/usr/share/datasets/fashion-mnist"


@dataclasses.dataclass(frozen=True)
class Cluster:
    """How the compiled pipeline reaches the cluster's object store (KFP's MinIO/SeaweedFS by default)."""

    store: str = "s3://mlpipeline/bakeoff"
    s3_endpoint: str = "minio-service.kubeflow:9000"
    s3_insecure: bool = True
    secret: str = STORE_SECRET


def build_pipeline(
    parallelism: int = 1,
    variants: Optional[list[dict]] = None,
    image: str = BASE_IMAGE,
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
        variants = [variant.to_dict() for variant in load_variants(DEFAULT_CONFIG)]
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
        model_name: str = DEFAULT_MODEL_NAME,
        source: str = DEFAULT_SOURCE,
        validation_size: int = 5000,
        shards: int = 8,
        max_train_examples: int = 0,
        metric: str = "val_accuracy",
        direction: str = "max",
        timeout_seconds: int = 3600,
        backend: str = "auto",
    ) -> str:
        data = on_cluster(ingest_op(source=source, validation_size=validation_size, shards=shards))
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
            direction=direction,
        ))
        selected.set_caching_options(False)
        return selected.output

    return bakeoff
