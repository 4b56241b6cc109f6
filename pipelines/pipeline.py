"""The bake-off pipeline: check → ingest → train-variants (ParallelFor of TFJobs), per rung of a halving search →
select and publish."""

import dataclasses
from typing import Any, Self

from kfp import dsl
from kfp.dsl.python_component import PythonComponent

from bakeoff.components import defaults
from bakeoff.components.search.halving import Rung, schedule
from bakeoff.components.spec import Halving, Search
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
    plan: list[Rung | None] = list(schedule(len(variants), halving)) if halving else [None]
    steps = _Steps.on_image(image, parallelism, cluster)
    # Defined here: KFP allows no pipeline definition inside another.
    rungs = [(rung, _train_variants(steps, rung)) for rung in plan]
    return _bakeoff(steps, variants, rungs, halving)


@dataclasses.dataclass(frozen=True)
class _Steps:
    """The steps as components on the pipeline's image, and the compile-time settings their tasks get."""

    image: str
    parallelism: int
    cluster: Cluster | None
    check: PythonComponent
    ingest: PythonComponent
    train: PythonComponent
    halve: PythonComponent
    select: PythonComponent

    @classmethod
    def on_image(cls, image: str, parallelism: int, cluster: Cluster | None) -> Self:
        """Each step made a component on ``image`` once, for every task of it."""
        components = (as_component(func, image) for func in (check, ingest, train, halve, select))
        return cls(image, parallelism, cluster, *components)

    def on_cluster(self, task: dsl.PipelineTask) -> dsl.PipelineTask:
        """``task`` given the store's keys from the cluster's secret (and plain HTTP where the store speaks it)."""
        if self.cluster is not None:
            from kfp import kubernetes

            kubernetes.use_secret_as_env(task, secret_name=self.cluster.secret, secret_key_to_env=STORE_SECRET_KEYS)
            if self.cluster.s3_insecure:
                task.set_env_variable(S3_INSECURE_ENV, "1")
        return task


def _train_variants(steps: _Steps, rung: Rung | None) -> dsl.graph_component.GraphComponent:
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
        with dsl.ParallelFor(variants, parallelism=steps.parallelism) as variant:
            trained = steps.on_cluster(
                steps.train(
                    variant=variant,
                    data=data,
                    store=store,
                    s3_endpoint=s3_endpoint,
                    run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                    image=steps.image,
                    max_train_examples=max_train_examples,
                    concurrent_jobs=steps.parallelism,
                    timeout_seconds=timeout_seconds,
                    backend=backend,
                    trainer=trainer,
                    **until,
                )
            )
            trained.set_caching_options(False)

    return trainer


def _bakeoff(
    steps: _Steps,
    variants: list[dict],
    rungs: list[tuple[Rung | None, dsl.graph_component.GraphComponent]],
    halving: Halving | None,
) -> dsl.graph_component.GraphComponent:
    """The top-level pipeline: check, ingest, each rung's training (and halving), select; its parameters are a run's."""
    cluster = steps.cluster
    compiled = len(variants)  # the rungs' keeps hold for this many; the pipeline's ``variants`` shadows the list

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
        confidence: float = defaults.PROMOTION_CONFIDENCE,
        timeout_seconds: int = defaults.TIMEOUT_SECONDS,
        backend: str = "auto",
        trainer: str = defaults.TRAINER,
        deadline: str = "",
    ) -> str:
        # What a UI or SDK user may set is checked first, against what was compiled in: a mismatch costs no ingest.
        checked = steps.on_cluster(
            steps.check(
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
                confidence=confidence,
                timeout_seconds=timeout_seconds,
                backend=backend,
                trainer=trainer,
                halving=dataclasses.asdict(halving) if halving else {},
                compiled_variants=compiled,
                deadline=deadline,
            )
        )
        checked.set_caching_options(False)  # it opens the store, whose reachability a cached success would not prove
        data = steps.on_cluster(
            steps.ingest(
                source=source,
                source_digest=source_digest,
                validation_size=validation_size,
                shards=shards,
                seed=defaults.SEED,
            ).after(checked)
        )
        entering, trained = _train_rungs(
            steps,
            rungs,
            variants,
            metric,
            deadline,
            data=data.outputs["data"],
            store=store,
            s3_endpoint=s3_endpoint,
            max_train_examples=max_train_examples,
            timeout_seconds=timeout_seconds,
            backend=backend,
            trainer=trainer,
        )
        selected = steps.on_cluster(
            steps.select(
                variants=entering,
                data=data.outputs["data"],
                store=store,
                s3_endpoint=s3_endpoint,
                model_name=model_name,
                run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                metric=metric,
                min_improvement=min_improvement,
                force_publish=force_publish,
                confidence=confidence,
            ).after(trained)
        )
        selected.set_caching_options(False)
        return selected.outputs["Output"]

    return bakeoff


def _train_rungs(
    steps: _Steps,
    rungs: list[tuple[Rung | None, dsl.graph_component.GraphComponent]],
    variants: Any,
    metric: Any,
    deadline: Any,
    **training: Any,
) -> tuple[Any, dsl.PipelineTask]:
    """Each rung's sub-pipeline over the variants the halve step before it kept (as many as ``deadline`` lets it,
    when set); the last rung's variants and task.

    ``training`` holds what every rung's sub-pipeline gets besides its variants (the data, the store, the limits).
    """
    entering = variants
    for rung, train_rung in rungs:
        trained = train_rung(variants=entering, **training)
        if rung is None or rung is rungs[-1][0]:
            break
        # Each next step waits for the whole rung, then reads its results back from the store (no dsl.Collected).
        halved = steps.on_cluster(
            steps.halve(
                variants=entering,
                store=training["store"],
                s3_endpoint=training["s3_endpoint"],
                run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                rung=rung.index,
                keep=rung.keep,
                metric=metric,
                deadline=deadline,
            ).after(trained)
        )
        halved.set_caching_options(False)
        entering = halved.output
    return entering, trained
