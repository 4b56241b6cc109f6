"""The check step: every run-time parameter checked against the rules and what the pipeline was compiled with, before
any work."""


def check(
    variants: list[dict],
    store: str,
    s3_endpoint: str,
    model_name: str,
    source: str,
    validation_size: int,
    shards: int,
    max_train_examples: int,
    metric: str,
    min_improvement: float,
    force_publish: bool,
    timeout_seconds: int,
    backend: str,
    trainer: str,
    halving: dict,
    compiled_variants: int,
    deadline: str,
) -> None:
    """Fails the run in one line that names the parameter, its value and what to change; reads no data, starts no job.

    A UI or SDK user sets the parameters (``deadline`` is set by ``bakeoff run``); ``halving`` (empty: none) and
    ``compiled_variants`` are constants compiled in: the rungs' stop epochs and
    keeps hold only for that many variants, each scheduled to ``max_epochs``.
    The store is opened (an S3 store answers a listing) but nothing is written.
    """
    from bakeoff.components.data.artifact import check_shards, check_validation_size
    from bakeoff.components.data.fashion_mnist import TRAIN_IMAGES, check_source, source_shape
    from bakeoff.components.errors import for_parameter, reported
    from bakeoff.components.search.deadline import check_deadline
    from bakeoff.components.search.halving import check_compiled
    from bakeoff.components.selection.promotion import Gate
    from bakeoff.components.selection.ranking import check_metric
    from bakeoff.components.spec import Halving, check_fits, parse_variants
    from bakeoff.components.storage import check_shared, open_store, use_s3_endpoint
    from bakeoff.components.storage.registry import check_model_name
    from bakeoff.components.training.launch import (
        check_backend,
        check_max_train_examples,
        check_timeout,
        check_trainer,
        check_workers,
        in_kubernetes,
    )

    with reported():
        with for_parameter("shards"):
            check_shards(shards)
        with for_parameter("variants"):
            parsed = parse_variants(variants)
            if halving:  # KFP hands a dict's numbers over as floats
                check_compiled(
                    parsed, Halving(**{key: int(value) for key, value in halving.items()}), compiled_variants
                )
            for variant in parsed:
                check_workers(variant, shards)
            shape = source_shape(source)
            if shape:  # else the train step checks it against the artifact, before its job
                check_fits(parsed, shape)
        rules = {  # parameter → the rule its value must pass (the same function wherever the rule applies)
            "metric": lambda: check_metric(metric),
            "model_name": lambda: check_model_name(model_name),
            "min_improvement": lambda: Gate(min_improvement, force_publish),
            "trainer": lambda: check_trainer(trainer),
            "backend": lambda: check_backend(backend),
            "max_train_examples": lambda: check_max_train_examples(max_train_examples),
            "timeout_seconds": lambda: check_timeout(timeout_seconds),
            "validation_size": lambda: check_validation_size(validation_size, TRAIN_IMAGES),
            "source": lambda: check_source(source),
            "deadline": lambda: check_deadline(deadline, [variant.name for variant in parsed]),
        }
        for name, rule in rules.items():
            with for_parameter(name):
                rule()
        if in_kubernetes():  # a folder would be each step's pod's own
            check_shared(store, "store")
        use_s3_endpoint(s3_endpoint)
        with for_parameter("store"):
            open_store(store)
