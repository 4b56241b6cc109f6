"""The bake-off pipeline: check → ingest → train-variants (ParallelFor of TFJobs), per rung of a halving search →
select and publish."""

import dataclasses

from kfp import dsl

from bakeoff.components import defaults
from bakeoff.components.search.halving import Rung, schedule
from bakeoff.components.spec import Search
from bakeoff.components.steps.check import check
from bakeoff.components.steps.factory import as_component
from bakeoff.components.steps.halve import halve
from bakeoff.components.steps.ingest import ingest
from bakeoff.components.steps.select import select
from bakeoff.components.steps.train import train
from bakeoff.components.storage import S3_INSECURE_ENV
from bakeoff.components.training.tfjob import STORE_SECRET, STORE_SECRET_KEYS


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The compiled pipeline's defaults for the cluster's object store; store and endpoint stay run-time parameters."""

    store: str = defaults.CLUSTER_STORE
    s3_endpoint: str = defaults.CLUSTER_S3_ENDPOINT
    s3_insecure: bool = True  # KFP's in-cluster store speaks plain HTTP
    secret: str = STORE_SECRET


def build_pipeline(
    variants: list[dict],
    parallelism: int = 1,
    image: str = defaults.IMAGE,
    cluster: Cluster | None = None,
    search: Search | None = None,
) -> dsl.graph_component.GraphComponent:
    """The pipeline function, built for kfp.local (``cluster=None``) or for a cluster.

    A factory because KFP fixes ``parallelism`` and the image at compile time.
    Each train task is told ``parallelism`` so that local replicas divide the
    machine's cores among all running jobs. For a cluster every task gets the
    store keys from the store secret through kfp-kubernetes, never as parameters.

    The fan-in is a sub-pipeline that select waits for, and select reads the
    candidates back from the store: it runs on every supported backend, where
    ``dsl.Collected`` needs KFP 2.14 (docs/kubeflow.md).

    With successive halving (``search.halving``) the rungs are unrolled here,
    at compile time, from the variants' count: rung k trains its variants to
    the rung's epochs in a sub-pipeline of its own, then a halve step keeps the
    best and the next rung's loop runs over its output; select runs over the
    last rung's variants. Without it there is one sub-pipeline, as always.
    """
    halving = search.halving if search else None
    compiled = len(
        variants
    )  # the rungs' keeps hold for this many; the pipeline's own ``variants`` parameter shadows the list
    plan: list[Rung | None] = list(schedule(compiled, halving)) if halving else [None]
    check_op, ingest_op, train_op, halve_op, select_op = (
        as_component(func, image) for func in (check, ingest, train, halve, select)
    )

    def on_cluster(task: dsl.PipelineTask) -> dsl.PipelineTask:
        if cluster is not None:
            from kfp import kubernetes

            kubernetes.use_secret_as_env(task, secret_name=cluster.secret, secret_key_to_env=STORE_SECRET_KEYS)
            if cluster.s3_insecure:
                task.set_env_variable(S3_INSECURE_ENV, "1")
        return task

    def train_variants(rung: Rung | None) -> dsl.graph_component.GraphComponent:
        """The sub-pipeline that trains each of its ``variants`` as a TFJob: to its own epochs, or to ``rung``'s,
        resuming."""
        until = {} if rung is None else {"stop_epoch": rung.epochs, "rung": rung.index}

        @dsl.pipeline(
            name="train-variants" if rung is None else f"rung-{rung.index}",
            description="One multi-worker TFJob per variant."
            if rung is None
            else f"Trains {rung.entering} variants until epoch {rung.epochs} and keeps the best {rung.keep}.",
        )
        def trainer(
            variants: list[dict],
            data: dsl.Input[dsl.Dataset],
            store: str,
            s3_endpoint: str,
            max_train_examples: int,
            timeout_seconds: int,
            backend: str,
            trainer: str,
        ) -> None:
            # The items are this sub-pipeline's list[dict] input, so each is typed STRUCT, as train's variant is,
            # also where a halve step's output feeds it (the KFP driver refuses a string item for a STRUCT input).
            with dsl.ParallelFor(variants, parallelism=parallelism) as variant:
                trained = on_cluster(
                    train_op(
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
                        trainer=trainer,
                        **until,
                    )
                )
                trained.set_caching_options(False)

        return trainer

    trainers = [train_variants(rung) for rung in plan]  # defined here: KFP allows no pipeline definition inside another

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
        trainer: str = defaults.TRAINER,
    ) -> str:
        # What a UI or SDK user may set is checked first, against what was compiled in: a mismatch costs no ingest.
        checked = on_cluster(
            check_op(
                variants=variants,
                store=store,
                s3_endpoint=s3_endpoint,
                model_name=model_name,
                source=source,
                validation_size=validation_size,
                shards=shards,
                max_train_examples=max_train_examples,
                metric=metric,
                min_improvement=min_improvement,
                force_publish=force_publish,
                timeout_seconds=timeout_seconds,
                backend=backend,
                trainer=trainer,
                halving=dataclasses.asdict(halving) if halving else {},
                compiled_variants=compiled,
            )
        )
        checked.set_caching_options(False)  # it opens the store, whose reachability a cached success would not prove
        data = on_cluster(
            ingest_op(
                source=source,
                source_digest=source_digest,
                validation_size=validation_size,
                shards=shards,
                seed=defaults.SEED,
            ).after(checked)
        )
        entering = variants
        for rung, train_rung in zip(plan, trainers, strict=True):
            trained = train_rung(
                variants=entering,
                data=data.outputs["data"],
                store=store,
                s3_endpoint=s3_endpoint,
                max_train_examples=max_train_examples,
                timeout_seconds=timeout_seconds,
                backend=backend,
                trainer=trainer,
            )
            if rung is None or rung is plan[-1]:
                break
            # Each next step waits for the whole rung, then reads its results back from the store (no dsl.Collected).
            halved = on_cluster(
                halve_op(
                    variants=entering,
                    store=store,
                    s3_endpoint=s3_endpoint,
                    run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                    rung=rung.index,
                    keep=rung.keep,
                    metric=metric,
                ).after(trained)
            )
            halved.set_caching_options(False)
            entering = halved.output
        selected = on_cluster(
            select_op(
                variants=entering,
                data=data.outputs["data"],
                store=store,
                s3_endpoint=s3_endpoint,
                model_name=model_name,
                run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                metric=metric,
                min_improvement=min_improvement,
                force_publish=force_publish,
            ).after(trained)
        )
        selected.set_caching_options(False)
        return selected.outputs["Output"]

    return bakeoff
