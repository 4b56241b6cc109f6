"""The bake-off pipeline: check → ingest → the search (per rung: a ParallelFor of TFJobs, then a halve step where
another rung follows) → select and publish."""

import dataclasses
import re
from typing import Any, Self

from kfp import dsl
from kfp.dsl.python_component import PythonComponent

from bakeoff.components import defaults
from bakeoff.components.environment import S3_INSECURE_ENV
from bakeoff.components.errors import BakeoffError
from bakeoff.components.spec import MAX_VARIANTS, Data, Halving, Search
from bakeoff.components.steps.check import check
from bakeoff.components.steps.factory import as_component
from bakeoff.components.steps.halve import halve
from bakeoff.components.steps.ingest import ingest
from bakeoff.components.steps.select import select
from bakeoff.components.steps.train import train
from bakeoff.components.training.tfjob import STORE_SECRET, STORE_SECRET_KEYS


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The compiled pipeline's defaults for the cluster's object store; store and endpoint stay run-time parameters."""

    store: str = defaults.CLUSTER_STORE
    s3_endpoint: str = defaults.CLUSTER_S3_ENDPOINT
    s3_insecure: bool = True  # KFP's in-cluster store speaks plain HTTP
    secret: str = STORE_SECRET


CPU = re.compile(r"([0-9]*[.])?[0-9]+m?")  # what kfp's set_cpu_request takes, and Kubernetes with it
MEMORY = re.compile(r"[0-9]+(Ki|Mi|Gi|Ti|Pi|Ei|M|G|T|P|E)?")  # kfp's set_memory_request's, less "K" (no quantity)
MEMORY_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18} | {
    f"{prefix}i": 1024**power for power, prefix in enumerate("KMGTPE", start=1)
}


def _cpu_millis(quantity: str) -> float:
    return float(quantity[:-1]) if quantity.endswith("m") else float(quantity) * 1000


def _memory_bytes(quantity: str) -> int:
    digits = quantity.rstrip("KMGTPEi")
    return int(digits) * MEMORY_UNITS[quantity[len(digits) :]]


@dataclasses.dataclass(frozen=True)
class StepResources:
    """One step's pod: its CPU and memory requests and limits, as Kubernetes quantities."""

    cpu_request: str
    cpu_limit: str
    memory_request: str
    memory_limit: str

    def check(self, step: str) -> Self:
        """One line for a quantity kfp or Kubernetes would refuse, or a request above its limit (`--cpu`, `--memory`
        set them)."""
        kinds = (("cpu", CPU, "500m or 2", _cpu_millis), ("memory", MEMORY, "512Mi or 4Gi", _memory_bytes))
        for kind, pattern, example, size in kinds:
            request, limit = getattr(self, f"{kind}_request"), getattr(self, f"{kind}_limit")
            for quantity in (request, limit):
                if not pattern.fullmatch(quantity) or size(quantity) == 0:
                    raise BakeoffError(
                        f"--{kind} {step}: {quantity!r} is not a quantity above 0 that kfp and Kubernetes read:"
                        f" write e.g. {example}"
                    )
            if size(request) > size(limit):
                raise BakeoffError(
                    f"--{kind} {step}: the request {request} is above the limit {limit}, which Kubernetes refuses:"
                    f" write --{kind} {step}=REQUEST,LIMIT with the request at most the limit"
                )
        return self


def _default_resources(step: str) -> StepResources:
    return StepResources(*defaults.STEP_RESOURCES[step])


@dataclasses.dataclass(frozen=True)
class Resources:
    """Every step's pod size (defaults.STEP_RESOURCES unless changed): a profile's ResourceQuota needs requests."""

    check: StepResources = dataclasses.field(default_factory=lambda: _default_resources("check"))
    ingest: StepResources = dataclasses.field(default_factory=lambda: _default_resources("ingest"))
    train: StepResources = dataclasses.field(default_factory=lambda: _default_resources("train"))
    halve: StepResources = dataclasses.field(default_factory=lambda: _default_resources("halve"))
    select: StepResources = dataclasses.field(default_factory=lambda: _default_resources("select"))

    def of(self, step: str) -> StepResources:
        return getattr(self, step)


STEPS = tuple(field.name for field in dataclasses.fields(Resources))


def build_pipeline(
    variants: list[dict],
    parallelism: int = 1,
    image: str = defaults.IMAGE,
    cluster: Cluster | None = None,
    search: Search | None = None,
    data: Data | None = None,
    rungs: int = defaults.MAX_RUNGS,
    resources: Resources | None = None,
) -> dsl.graph_component.GraphComponent:
    """The pipeline function, built for kfp.local (``cluster=None``) or for a cluster.

    A factory because KFP fixes ``parallelism``, the image and the number of rungs at compile time. ``variants``,
    ``search``'s halving and ``data`` are only the defaults of run-time parameters. Each train task is told
    ``parallelism`` so that local replicas divide the machine's cores among all running jobs. For a cluster every
    task gets the store keys from the store secret through kfp-kubernetes, never as parameters, and its step's CPU
    and memory requests and limits from ``resources`` (defaults.STEP_RESOURCES unless changed).

    The search holds ``rungs`` rungs, each a sub-pipeline whose ParallelFor trains the variants entering it to the
    epoch its producer (check for rung 0, the halve step before it for the others) worked out at run time. After
    each rung but the last, a ``dsl.If`` runs a halve step and the next rung only where that rung stopped short of
    ``max_epochs``; so a run uses as many rungs as its variants and halving settings need, and skips the rest.

    Select waits for the whole search and reads the last rung's variants back from the store, as it reads the
    candidates: it runs on every supported backend, where ``dsl.Collected`` and ``dsl.OneOf`` need newer ones
    (docs/kubeflow.md).
    """
    steps = _Steps.on_image(image, parallelism, cluster, resources or Resources())
    # Defined here: KFP allows no pipeline definition inside another.
    search_rungs = _search(steps, [_train_variants(steps, index) for index in range(rungs)])
    halving = search.halving if search else None
    return _bakeoff(steps, variants, halving, data or Data(), search_rungs, rungs)


@dataclasses.dataclass(frozen=True)
class _Steps:
    """The steps as components on the pipeline's image, and the compile-time settings their tasks get."""

    image: str
    parallelism: int
    cluster: Cluster | None
    resources: Resources
    check: PythonComponent
    ingest: PythonComponent
    train: PythonComponent
    halve: PythonComponent
    select: PythonComponent

    @classmethod
    def on_image(cls, image: str, parallelism: int, cluster: Cluster | None, resources: Resources) -> Self:
        """Each step made a component on ``image`` once, for every task of it."""
        components = (as_component(func, image) for func in (check, ingest, train, halve, select))
        return cls(image, parallelism, cluster, resources, *components)

    def on_cluster(self, task: dsl.PipelineTask) -> dsl.PipelineTask:
        """``task`` given its step's CPU and memory, and the store's keys from the cluster's secret (and plain HTTP
        where the store speaks it). Not for kfp.local, which would warn on each task that it ignores the sizes."""
        if self.cluster is not None:
            from kfp import kubernetes

            size = self.resources.of(task.component_spec.name)
            task.set_cpu_request(size.cpu_request).set_cpu_limit(size.cpu_limit)
            task.set_memory_request(size.memory_request).set_memory_limit(size.memory_limit)

            kubernetes.use_secret_as_env(task, secret_name=self.cluster.secret, secret_key_to_env=STORE_SECRET_KEYS)
            if self.cluster.s3_insecure:
                task.set_env_variable(S3_INSECURE_ENV, "1")
        return task


def _train_variants(steps: _Steps, index: int) -> dsl.graph_component.GraphComponent:
    """The sub-pipeline of rung ``index``: it trains each of its ``variants`` as a TFJob until epoch ``stop_epoch``
    (0: each its own epochs), resuming each where the rung before stopped it."""

    @dsl.pipeline(
        name=f"rung-{index}",
        description=f"Rung {index}: one multi-worker TFJob per variant entering it, each until the rung's epoch.",
    )
    def trainer(
        variants: list[dict],
        stop_epoch: int,
        data: dsl.Input[dsl.Dataset],
        store: str,
        s3_endpoint: str,
        max_train_examples: int,
        timeout_seconds: int,
        backend: str,
        trainer: str,
    ) -> None:
        # The items are this sub-pipeline's list[dict] input, so each is typed STRUCT, as train's variant is,
        # also where a step's output feeds it (the KFP driver refuses a string item for a STRUCT input).
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
                    stop_epoch=stop_epoch,
                    rung=index,
                )
            )
            trained.set_caching_options(False)

    return trainer


def _search(steps: _Steps, rungs: list[dsl.graph_component.GraphComponent]) -> dsl.graph_component.GraphComponent:
    """The sub-pipeline of the whole search, ``len(rungs)`` deep: select waits for it, whichever rung ends the run.

    KFP lets no task outside a ``dsl.If`` wait for one inside it: only the sub-pipeline's end marks the last rung's.
    Each ``dsl.If`` nests in the one before. (One sub-pipeline per level instead would make kfp's renaming of the
    levels' like-named components differ from one compile to the next.)
    """

    @dsl.pipeline(
        name="search",
        description=f"Successive halving over up to {len(rungs)} rungs: each halve step keeps the best"
        " ceil(entering / eta) and works out the next rung's epoch; rungs a run does not need are skipped.",
    )
    def search(
        variants: list[dict],
        stop_epoch: int,
        data: dsl.Input[dsl.Dataset],
        store: str,
        s3_endpoint: str,
        max_train_examples: int,
        timeout_seconds: int,
        backend: str,
        trainer: str,
        min_epochs: int,
        max_epochs: int,
        eta: int,
        metric: str,
        deadline: str,
    ) -> None:
        training = {
            "data": data,
            "store": store,
            "s3_endpoint": s3_endpoint,
            "max_train_examples": max_train_examples,
            "timeout_seconds": timeout_seconds,
            "backend": backend,
            "trainer": trainer,
        }

        def rung(index: int, entering: Any, epochs: Any) -> None:
            """Rung ``index`` over ``entering`` to epoch ``epochs``; then, within a condition, its halve and on."""
            trained = rungs[index](variants=entering, stop_epoch=epochs, **training)
            if index == len(rungs) - 1:
                return  # the last rung the pipeline holds: a halve step before it sent its variants to max_epochs
            # A rung that reached max_epochs is the run's last (without halving: stop_epoch 0 of max_epochs 0).
            with dsl.If(epochs < max_epochs, name=f"halve-rung-{index}"):
                # Waits for the whole rung, then reads its results back from the store (no dsl.Collected).
                halved = steps.on_cluster(
                    steps.halve(
                        variants=entering,
                        store=store,
                        s3_endpoint=s3_endpoint,
                        run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                        rung=index,
                        min_epochs=min_epochs,
                        max_epochs=max_epochs,
                        eta=eta,
                        rungs=len(rungs),
                        metric=metric,
                        deadline=deadline,
                    ).after(trained)
                )
                halved.set_caching_options(False)
                rung(index + 1, halved.outputs["variants"], halved.outputs["Output"])

        rung(0, variants, stop_epoch)

    return search


def _bakeoff(
    steps: _Steps,
    variants: list[dict],
    halving: Halving | None,
    data: Data,
    search: dsl.graph_component.GraphComponent,
    rungs: int,
) -> dsl.graph_component.GraphComponent:
    """The top-level pipeline: check, ingest, the search, select; its parameters are a run's, these their defaults."""
    cluster = steps.cluster
    min_epochs, max_epochs, eta = (
        (halving.min_epochs, halving.max_epochs, halving.eta) if halving else (0, 0, defaults.HALVING_ETA)
    )
    image_size = list(data.image_size)

    @dsl.pipeline(
        name="bakeoff",
        description="Trains CNN variants as multi-worker TFJobs and publishes the best. Any number of variants"
        f" (1 to {MAX_VARIANTS}); successive halving from min_epochs to max_epochs at eta over up to {rungs} rungs"
        " (min_epochs and max_epochs 0: none); source and image_size name the data.",
    )
    def bakeoff(
        store: str = cluster.store if cluster else "",
        s3_endpoint: str = cluster.s3_endpoint if cluster else "",
        variants: list[dict] = variants,
        model_name: str = defaults.MODEL_NAME,
        source: str = data.source,
        source_digest: str = "",
        image_size: list = image_size,
        validation_size: int = defaults.VALIDATION_SIZE,
        shards: int = defaults.SHARDS,
        max_train_examples: int = 0,
        min_epochs: int = min_epochs,
        max_epochs: int = max_epochs,
        eta: int = eta,
        metric: str = defaults.METRIC,
        min_improvement: float = defaults.MIN_IMPROVEMENT,
        force_publish: bool = False,
        confidence: float = defaults.PROMOTION_CONFIDENCE,
        timeout_seconds: int = defaults.TIMEOUT_SECONDS,
        backend: str = "auto",
        trainer: str = defaults.TRAINER,
        deadline: str = "",
    ) -> str:
        # What a UI or SDK user may set is checked first: a value that cannot run costs no ingest.
        checked = steps.on_cluster(
            steps.check(
                variants=variants,
                store=store,
                s3_endpoint=s3_endpoint,
                model_name=model_name,
                source=source,
                image_size=image_size,
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
                min_epochs=min_epochs,
                max_epochs=max_epochs,
                eta=eta,
                rungs=rungs,
                deadline=deadline,
            )
        )
        checked.set_caching_options(False)  # it opens the store, whose reachability a cached success would not prove
        data = steps.on_cluster(
            steps.ingest(
                source=source,
                source_digest=source_digest,
                image_size=image_size,
                validation_size=validation_size,
                shards=shards,
                seed=defaults.SEED,
            ).after(checked)
        )
        searched = search(
            variants=checked.outputs["variants"],
            stop_epoch=checked.outputs["epochs"],
            data=data.outputs["data"],
            store=store,
            s3_endpoint=s3_endpoint,
            max_train_examples=max_train_examples,
            timeout_seconds=timeout_seconds,
            backend=backend,
            trainer=trainer,
            min_epochs=min_epochs,
            max_epochs=max_epochs,
            eta=eta,
            metric=metric,
            deadline=deadline,
        )
        selected = steps.on_cluster(
            steps.select(
                variants=checked.outputs["variants"],
                data=data.outputs["data"],
                store=store,
                s3_endpoint=s3_endpoint,
                model_name=model_name,
                run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                metric=metric,
                min_improvement=min_improvement,
                force_publish=force_publish,
                confidence=confidence,
            ).after(searched)
        )
        selected.set_caching_options(False)
        return selected.outputs["Output"]

    return bakeoff
