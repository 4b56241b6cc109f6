"""The check step: every run-time parameter checked before any work, and the plan the rungs start from."""

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from bakeoff.components.spec import Halving, Variant


def check(
    variants: list[dict],
    store: str,
    s3_endpoint: str,
    model_name: str,
    source: str,
    image_size: list,
    validation_size: int,
    shards: int,
    max_train_examples: int,
    metric: str,
    min_improvement: float,
    force_publish: bool,
    confidence: float,
    timeout_seconds: int,
    backend: str,
    trainer: str,
    min_epochs: int,
    max_epochs: int,
    eta: int,
    rungs: int,
    deadline: str,
) -> NamedTuple("Checked", [("variants", list), ("epochs", int)]):  # type: ignore[valid-type]
    """Fails the run in one line that names the parameter, its value and what to change; starts no job. Of the data
    it reads the source's listing and one image (``inspection.inspect``): a source ingest would refuse fails here.

    A UI or SDK user sets the parameters (``deadline`` is set by ``bakeoff run``); ``rungs`` is compiled in: the
    most rungs the pipeline holds. Only what cannot run is refused: any number of variants, any halving settings
    within their bounds (``min_epochs`` and ``max_epochs`` both 0: no halving). The store is opened (an S3 store
    answers a listing) but nothing is written.

    Returns the variants as the rungs train them (with halving, each one's ``training.epochs`` is ``max_epochs``,
    its learning-rate schedule) and the epoch rung 0 trains them to (0: each its own epochs).
    """
    import dataclasses

    from bakeoff.components.data.inspection import inspect
    from bakeoff.components.errors import for_parameter, reported
    from bakeoff.components.search.halving import rung_epochs
    from bakeoff.components.spec import check_fits, check_image_size
    from bakeoff.components.steps.check import check_values
    from bakeoff.components.storage import check_shared, open_store, use_s3_endpoint
    from bakeoff.components.training.launch import in_kubernetes

    with reported():
        parsed, halving = check_values(
            variants=variants,
            model_name=model_name,
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
        use_s3_endpoint(s3_endpoint)  # an s3:// source is listed with the store's endpoint
        with for_parameter("source"):  # what only this pod can see: the source's files
            shape = inspect(source, check_image_size(image_size), validation_size).shape
        with for_parameter("variants"):
            check_fits(parsed, list(shape))
        if in_kubernetes():  # a folder would be each step's pod's own
            check_shared(store, "store")
        with for_parameter("store"):
            open_store(store)
    if halving:
        scheduled = [
            dataclasses.replace(v, training=dataclasses.replace(v.training, epochs=halving.max_epochs)) for v in parsed
        ]
        first = rung_epochs(0, len(parsed), halving, last=rungs - 1)
    else:
        scheduled, first = parsed, 0
    return [variant.to_dict() for variant in scheduled], first  # kfp's executor takes a tuple for the NamedTuple


def check_values(
    variants: list[dict],
    model_name: str,
    image_size: list,
    validation_size: int,
    shards: int,
    max_train_examples: int,
    metric: str,
    min_improvement: float,
    force_publish: bool,
    confidence: float,
    timeout_seconds: int,
    backend: str,
    trainer: str,
    min_epochs: int,
    max_epochs: int,
    eta: int,
    rungs: int,
    deadline: str,
) -> "tuple[list[Variant], Halving | None]":
    """The check step's rules that need the values alone, each line naming its parameter: the step runs them first,
    and `bakeoff submit` and `schedule` run them before they create anything. The source and the store are checked
    by the step only: what they name is the pod's to reach.

    Returns the variants parsed and the halving (None: none).
    """
    from bakeoff.components.data.artifact import check_shards, check_validation_size
    from bakeoff.components.data.fashion_mnist import TRAIN_IMAGES
    from bakeoff.components.errors import for_parameter
    from bakeoff.components.search.deadline import check_deadline
    from bakeoff.components.search.halving import check_rungs
    from bakeoff.components.selection.promotion import Gate
    from bakeoff.components.selection.ranking import check_metric
    from bakeoff.components.spec import check_fits, check_image_size, parse_variants, pipeline_halving
    from bakeoff.components.storage.registry import check_model_name
    from bakeoff.components.training.launch import (
        check_backend,
        check_max_train_examples,
        check_timeout,
        check_trainer,
        check_workers,
    )

    with for_parameter("shards"):
        check_shards(shards)
    halving = pipeline_halving(min_epochs, max_epochs, eta)  # its lines name min_epochs, max_epochs or eta
    with for_parameter("variants"):
        parsed = parse_variants(variants)
        for variant in parsed:
            check_workers(variant, shards)
        if halving:
            check_rungs(len(parsed), halving, rungs)
    rules = {  # parameter: the rule its value must pass (the same function wherever the rule applies)
        "metric": lambda: check_metric(metric),
        "model_name": lambda: check_model_name(model_name),
        "min_improvement": lambda: Gate(min_improvement, force_publish),
        "confidence": lambda: Gate(confidence=confidence),
        "trainer": lambda: check_trainer(trainer),
        "backend": lambda: check_backend(backend),
        "max_train_examples": lambda: check_max_train_examples(max_train_examples),
        "timeout_seconds": lambda: check_timeout(timeout_seconds),
        "validation_size": lambda: check_validation_size(validation_size, TRAIN_IMAGES),
        "image_size": lambda: check_image_size(image_size),
        "deadline": lambda: check_deadline(deadline, [variant.name for variant in parsed]),
    }
    for name, rule in rules.items():
        with for_parameter(name):
            rule()
    if image_size:
        with for_parameter("variants"):
            check_fits(parsed, list(image_size))
    return parsed, halving
