"""Variant specs: YAML → strictly checked dataclasses, and back to plain dicts."""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import yaml

from bakeoff.components import defaults, spaces, strict
from bakeoff.components.errors import BakeoffError
from bakeoff.components.modeling import precision as precision_
from bakeoff.components.modeling.architectures import ARCHITECTURES
from bakeoff.components.modeling.optimizers import OPTIMIZERS, SCHEDULES

# Limits that catch a slip (an extra zero, a sign, a unit) before anything runs; each error names its limit.
MAX_NAME = 128  # a variant names store paths (one file name each); TFJob names and labels get a digest past 63
MAX_WORKERS = 64
MAX_EPOCHS = 1000
MAX_BATCH_SIZE = 8192  # per replica
MAX_STEPS_PER_EXECUTION = 10000
MAX_LEARNING_RATE = 10.0
MAX_RANDOM_SHIFT = 8  # pixels: a third of a 28-pixel image
MAX_LAYERS = 16
MAX_UNITS = 8192  # filters of a convolution, units of a dense layer
MAX_STEM_STRIDE = 4  # a resnet's stem: past it, the stem throws most pixels away
MAX_BLOCKS = 8  # residual blocks per stage
MAX_CPU = Decimal(256)  # cores of one replica
MEMORY_LIMITS = ("64Mi", "4Ti")  # of one replica; the lower one catches a bare "2", which means 2 bytes
MAX_GPUS = 16
MAX_CONFIG_BYTES = 2**20  # a variants file is a few hundred bytes; this stops /dev/zero and friends
MAX_VARIANTS = 256  # after expansion: one more field in a grid multiplies the jobs, and each is minutes of training
MAX_SAMPLES = 256
MAX_ETA = 100
MAX_BUDGET_MINUTES = 7 * 24 * 60.0
MAX_TIMEOUT_SECONDS = 7 * 86400  # a TFJob's activeDeadlineSeconds
IMAGE_SIDES = (8, 1024)  # pixels of a declared image_size's side: below, no pattern is left; above, gigabyte shards
NAME_PATTERN = r"[a-z0-9]([-a-z0-9_]*[a-z0-9])?"  # a variant's name: it names TFJobs and store paths
# A local run's folder holds each variant's <name>.log beside kfp.local's own pipeline.log (pipelines/local_run.py).
RESERVED_NAMES = ("pipeline",)
_SOURCE = defaults.SOURCE  # ConfigFile's default, where its own `defaults` field hides the module

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Training:
    """How one variant trains; ``batch_size`` is per replica."""

    epochs: int = 3
    batch_size: int = 64
    optimizer: str = "adam"
    learning_rate: float = 0.001
    schedule: str = "constant"
    steps_per_execution: int = 64
    random_flip: bool = (
        False  # mirror half the training images left-right (clothes are symmetric); serve the mean over both mirrors
    )
    random_shift: int = 0  # move each training image by up to this many pixels each way, a fresh draw per image
    validation_freq: int = 1  # score the validation split every this many epochs (and always at a job's last epoch)
    # Average the weights over the steps with this momentum (tf-keras' use_ema): validation scores the average, a rung
    # ranks on it and the export carries it; training goes on from the weights as trained. 0: off.
    ema_momentum: float = 0.0
    # Keep a random crop of each training image, at least this fraction of its area (and an aspect ratio from 3/4 to
    # 4/3), resized back to the full size: for larger images, where a crop still shows the object. 0: off.
    random_crop: float = 0.0
    # What the layers compute in: auto (float16 on a GPU; bfloat16 where measured faster on the CPU; else float32),
    # float32, mixed_bfloat16 or mixed_float16. Inputs and the softmax stay float32.
    precision: str = precision_.AUTO


@dataclasses.dataclass(frozen=True)
class Resources:
    """What each worker replica asks of a cluster node."""

    cpu: str = "1"
    memory: str = "2Gi"
    gpu: int = 0


@dataclasses.dataclass(frozen=True)
class Variant:
    """One contestant of the bake-off: a model, how it trains, on how many workers."""

    name: str
    model: Mapping[str, Any]
    training: Training = Training()
    workers: int = 2
    resources: Resources = Resources()

    @property
    def architecture(self) -> str:
        return self.model["type"]

    def model_config(self) -> Any:
        """The architecture's config dataclass, filled from ``model``."""
        params = {key: value for key, value in self.model.items() if key != "type"}
        return _read(ARCHITECTURES[self.architecture].config, params, _Where("variant", self.name), "model")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"model": dict(self.model)}


class _Where:
    """Names the place of a value for error messages: file, variant, field."""

    def __init__(self, source: str, variant: str | None = None) -> None:
        self.source, self.variant = source, variant

    def error(self, field: str, problem: str) -> BakeoffError:
        source = f"{self.source}: " if self.source else ""  # none: the caller names the pipeline parameter
        variant = f"variant {self.variant!r}: " if self.variant else ""
        return BakeoffError(f"{source}{variant}{field}: {problem}")


# KFP hands every number of a list parameter back as a float, and YAML reads `cpu: 2` as a number.
COERCION = strict.Coercion(whole_floats_as_int=True, numbers_as_str=True, ints_as_float=True)
_READER = strict.Reader(COERCION)


def _read(cls: type[T], data: Any, where: _Where, path: str = "") -> T:
    """``data`` as a ``cls``, read strictly; its first problem as ``where``'s one line."""
    try:
        return _READER.read(cls, data, path)
    except strict.Refused as refused:
        raise where.error(*_described(refused.problem)) from None


def _described(problem: strict.Problem) -> tuple[str, str]:
    """The field a problem is at, and what is wrong there."""
    if isinstance(problem, strict.WrongKeys):
        if problem.unknown:
            known = ", ".join(field.name for field in dataclasses.fields(problem.expected))
            return strict.path_to(problem.path, sorted(problem.unknown)[0]), f"unknown field (known: {known})"
        return strict.path_to(problem.path, problem.missing[0]), "required field is missing"
    expected = problem.expected
    if expected is dict or dataclasses.is_dataclass(expected):
        return problem.path or "spec", f"expected a mapping, got {problem.got!r}"
    return problem.path, f"expected {'a list' if expected is list else expected.__name__}, got {problem.got!r}"


def _parse_model(data: Any, where: _Where) -> dict:
    if not isinstance(data, Mapping) or "type" not in data:
        raise where.error("model.type", f"required: one of {', '.join(ARCHITECTURES)}")
    kind = data["type"]
    if not isinstance(kind, str) or kind not in ARCHITECTURES:
        raise where.error("model.type", f"unknown architecture {kind!r} (known: {', '.join(ARCHITECTURES)})")
    params = {key: value for key, value in data.items() if key != "type"}
    config: Any = _read(ARCHITECTURES[kind].config, params, where, "model")
    return {"type": kind} | {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()}


def parse_variant(data: Any, where: _Where) -> Variant:
    """One variant from its mapping, every field checked."""
    if not isinstance(data, Mapping):
        raise where.error("variants", f"each variant must be a mapping, got {data!r}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise where.error("name", f"every variant needs a non-empty name, got {name!r}")
    where = _Where(where.source, name)
    variant = _read(Variant, {**data, "model": {}}, where)
    variant = dataclasses.replace(variant, model=_parse_model(data.get("model"), where))
    _validate(variant, where)
    return variant


def _bounded(where: _Where, field: str, value: int, low: int, high: int) -> None:
    if value < low:
        raise where.error(field, f"must be at least {low}, got {value}")
    if value > high:
        raise where.error(field, f"must be at most {high}, got {value}")


def _quantity(text: str) -> Decimal | None:
    """A Kubernetes quantity ("2", "500m", "2Gi", "1e3") as a number, by the Kubernetes client's own parser; None
    when it is not one."""
    from kubernetes.utils import parse_quantity

    try:
        value = parse_quantity(text)
    except (ValueError, TypeError, ArithmeticError):
        return None
    return value if value.is_finite() else None


def _validate_model(variant: Variant, where: _Where) -> None:
    model = variant.model
    if not 0 <= model.get("dropout", 0) < 1:
        raise where.error("model.dropout", f"must be in [0, 1), got {model['dropout']}")
    for field in ("filters", "hidden_units"):
        if field in model:
            layers = model[field]
            if len(layers) > MAX_LAYERS or (field == "filters" and not layers):
                low = 1 if field == "filters" else 0
                raise where.error(f"model.{field}", f"must list {low} to {MAX_LAYERS} layers, got {len(layers)}")
            for index, units in enumerate(layers):
                _bounded(where, f"model.{field}[{index}]", units, 1, MAX_UNITS)
    if "dense_units" in model:
        _bounded(where, "model.dense_units", model["dense_units"], 1, MAX_UNITS)
    if "kernel_size" in model:  # against the image itself in check_fits, once the dataset's size is known
        _bounded(where, "model.kernel_size", model["kernel_size"], 1, defaults.IMAGE_SIDES[1])
    for field, high in (
        ("stem_filters", MAX_UNITS),
        ("stem_stride", MAX_STEM_STRIDE),
        ("blocks", MAX_BLOCKS),
        ("freeze_epochs", MAX_EPOCHS),
        ("image_size", IMAGE_SIDES[1]),
    ):
        if field in model:
            _bounded(where, f"model.{field}", model[field], 0 if field in ("freeze_epochs", "image_size") else 1, high)
    problem = ARCHITECTURES[variant.architecture].check(variant.model_config())
    if problem:
        raise where.error(*problem)


def check_fits(variants: Sequence[Variant], image_shape: Sequence[int], source: str = "") -> None:
    """One line naming the first variant whose network does not fit images of ``image_shape`` ([height, width,
    channels]: a CNN's convolutions leave no pixels, a backbone gets 4 channels); ``source`` (a config file) starts it.
    Checked where the dataset's size is first known: the run's source or image_size, else the artifact's metadata
    before any job starts."""
    height, width = image_shape[:2]
    channels = image_shape[2] if len(image_shape) > 2 else 1
    for variant in variants:
        problem = ARCHITECTURES[variant.architecture].fits(variant.model_config(), (height, width, channels))
        if problem:
            raise _Where(source, variant.name).error(*problem)


def _validate(variant: Variant, where: _Where) -> None:
    if not re.fullmatch(NAME_PATTERN, variant.name):
        raise where.error("name", "use lower-case letters, digits, '-' and '_' (it names TFJobs and store paths)")
    if variant.name in RESERVED_NAMES:
        raise where.error("name", f"{variant.name!r} names kfp.local's log in a run's folder: choose another name")
    if len(variant.name) > MAX_NAME:
        raise where.error(
            "name", f"must be at most {MAX_NAME} characters (it names TFJobs and store paths), got {len(variant.name)}"
        )
    _bounded(where, "workers", variant.workers, 1, MAX_WORKERS)
    training = variant.training
    _bounded(where, "training.epochs", training.epochs, 1, MAX_EPOCHS)
    _bounded(where, "training.batch_size", training.batch_size, 1, MAX_BATCH_SIZE)
    _bounded(where, "training.steps_per_execution", training.steps_per_execution, 1, MAX_STEPS_PER_EXECUTION)
    _bounded(where, "training.validation_freq", training.validation_freq, 1, MAX_EPOCHS)
    _bounded(where, "training.random_shift", training.random_shift, 0, MAX_RANDOM_SHIFT)
    if not (math.isfinite(training.ema_momentum) and 0 <= training.ema_momentum < 1):
        raise where.error(
            "training.ema_momentum", f"must be in [0, 1) (0: off; e.g. 0.99), got {training.ema_momentum}"
        )
    if not (math.isfinite(training.random_crop) and 0 <= training.random_crop < 1):
        raise where.error(
            "training.random_crop",
            "must be in [0, 1): the least fraction of the image a crop keeps (0: off; e.g. 0.5),"
            f" got {training.random_crop}",
        )
    if training.precision not in precision_.PRECISIONS:
        raise where.error(
            "training.precision",
            f"unknown precision {training.precision!r} (known: {', '.join(precision_.PRECISIONS)})",
        )
    if not math.isfinite(training.learning_rate):
        raise where.error("training.learning_rate", f"must be a finite number, got {training.learning_rate}")
    if training.learning_rate <= 0:
        raise where.error("training.learning_rate", f"must be positive, got {training.learning_rate}")
    if training.learning_rate > MAX_LEARNING_RATE:
        raise where.error(
            "training.learning_rate", f"must be at most {MAX_LEARNING_RATE:g}, got {training.learning_rate:g}"
        )
    if training.optimizer not in OPTIMIZERS:
        raise where.error(
            "training.optimizer", f"unknown optimizer {training.optimizer!r} (known: {', '.join(OPTIMIZERS)})"
        )
    if training.schedule not in SCHEDULES:
        raise where.error(
            "training.schedule", f"unknown schedule {training.schedule!r} (known: {', '.join(SCHEDULES)})"
        )
    _validate_model(variant, where)
    resources = variant.resources
    cpu = _quantity(resources.cpu)
    if cpu is None or not 0 < cpu <= MAX_CPU:
        raise where.error(
            "resources.cpu",
            f'must be a CPU quantity above 0 and at most {MAX_CPU} cores, e.g. "2" or "500m", got {resources.cpu!r}',
        )
    memory, (low, high) = _quantity(resources.memory), map(_quantity, MEMORY_LIMITS)
    assert low is not None and high is not None  # MEMORY_LIMITS are quantities
    if memory is None or not low <= memory <= high:
        raise where.error(
            "resources.memory",
            f"must be a memory quantity from {MEMORY_LIMITS[0]} to {MEMORY_LIMITS[1]},"
            f' e.g. "2Gi" or "512Mi", got {resources.memory!r}',
        )
    _bounded(where, "resources.gpu", resources.gpu, 0, MAX_GPUS)


@dataclasses.dataclass(frozen=True)
class Halving:
    """Train everyone to ``min_epochs``, keep the best 1/``eta``, multiply the epochs by ``eta``, until
    ``max_epochs``."""

    min_epochs: int
    max_epochs: int
    eta: int


@dataclasses.dataclass(frozen=True)
class Search:
    """The top-level ``search`` section: draws per sampled variant, their seed, successive halving, a time budget."""

    samples: int = defaults.SEARCH_SAMPLES
    seed: int = defaults.SEED
    halving: Halving | None = None
    budget_minutes: float | None = None


@dataclasses.dataclass(frozen=True)
class Data:
    """The top-level ``source`` and ``image_size`` of a config: what ingest reads, and the size it resizes to."""

    source: str = defaults.SOURCE
    image_size: tuple[int, ...] = ()  # () the source's own size, else (height, width), as the pipeline's list says


def check_image_size(value: Any) -> tuple[int, ...]:
    """``value`` as an image size: () for the source's own, or (height, width) with each side in ``IMAGE_SIDES``."""
    low, high = IMAGE_SIDES
    sides = list(value) if isinstance(value, (list, tuple)) else None
    whole = sides is not None and all(
        isinstance(side, (int, float)) and not isinstance(side, bool) and float(side).is_integer() for side in sides
    )
    if sides is None or not whole or len(sides) not in (0, 2) or not all(low <= side <= high for side in sides):
        raise BakeoffError(
            f"{value!r} is no image size:"
            f" give [] for the source's own size, or [HEIGHT, WIDTH] with each side {low} to {high} pixels"
        )
    return tuple(int(side) for side in sides)


def check_halving(min_epochs: int, max_epochs: int, eta: int, where: _Where | None = None, prefix: str = "") -> Halving:
    """The halving of these settings, each bounded (``prefix`` names the fields where ``where`` is: the file's
    ``search.halving.``, or none for the pipeline's parameters)."""
    where = where or _Where("")
    _bounded(where, f"{prefix}min_epochs", min_epochs, 1, MAX_EPOCHS)
    _bounded(where, f"{prefix}max_epochs", max_epochs, min_epochs, MAX_EPOCHS)
    _bounded(where, f"{prefix}eta", eta, 2, MAX_ETA)
    return Halving(min_epochs, max_epochs, eta)


def pipeline_halving(min_epochs: int, max_epochs: int, eta: int) -> Halving | None:
    """The pipeline's halving parameters as a halving: both epochs 0 is none (each variant trains its own
    ``training.epochs`` in one rung); each other value bounded as in a file, its line naming the parameter."""
    if min_epochs == max_epochs == 0:
        return None
    return check_halving(int(min_epochs), int(max_epochs), int(eta))


@dataclasses.dataclass(frozen=True)
class Expansion:
    """Where an expanded variant came from: its base variant, the searched values, its draw (None: grid or no space)."""

    base: str
    values: Mapping[str, Any]
    sample: int | None = None


@dataclasses.dataclass(frozen=True)
class Base:
    """A config entry before expansion, defaults merged in: its fields and the search spaces among them."""

    item: Mapping[str, Any]
    spaces: Mapping[str, spaces.Space]  # by dotted field name, as Expansion.values holds the values

    def variant(self, values: Mapping[str, Any]) -> Variant:
        """The variant that one value per space gives (another search tool's draw), checked as an expanded one is."""
        return parse_variant(_assign(self.item, values), _Where("draw", self.item["name"]))


@dataclasses.dataclass(frozen=True)
class Config:
    """A config file, read: every variant expanded and checked, the search settings, and each variant's expansion."""

    variants: list[Variant]
    search: Search | None = None
    expansions: Mapping[str, Expansion] = dataclasses.field(default_factory=dict)
    source: str = ""  # the file, for error lines about the config as a whole
    bases: Mapping[str, Base] = dataclasses.field(default_factory=dict)  # each entry by name, before expansion
    data: Data = dataclasses.field(default_factory=lambda: Data())  # the file's `source` and `image_size`

    @property
    def budget_minutes(self) -> float | None:
        """``search.budget.minutes``; None without a budget."""
        return self.search.budget_minutes if self.search else None

    def with_budget(self, minutes: float) -> Config:
        """This config with ``search.budget.minutes`` set as ``--budget`` gives it (``math.inf``: no budget)."""
        budget = None if math.isinf(minutes) else minutes
        if self.search is None and budget is None:
            return self
        search = dataclasses.replace(self.search or Search(), budget_minutes=budget)
        return dataclasses.replace(self, search=search)


def _merge(base: Mapping, override: Mapping) -> dict:
    merged = dict(base)
    for key, value in override.items():
        # A field's space replaces a default's space (or value) whole, as any other value would.
        nested = (
            isinstance(value, Mapping) and isinstance(merged.get(key), Mapping) and not set(value) & set(spaces.SPACES)
        )
        merged[key] = _merge(merged[key], value) if nested else value
    return merged


@dataclasses.dataclass(frozen=True)
class _SearchFields:
    """How the file's search spaces are drawn (samples per sampled variant, their seed), halving and a budget."""

    samples: int = defaults.SEARCH_SAMPLES
    seed: int = defaults.SEED
    halving: _HalvingFields | None = None
    budget: _BudgetFields | None = None


@dataclasses.dataclass(frozen=True)
class _BudgetFields:
    """A time budget: `run` shrinks the search to end in it, on this machine's measured costs."""

    minutes: float


@dataclasses.dataclass(frozen=True)
class _HalvingFields:
    """Successive halving: every variant trains min_epochs, the best 1/eta go on to eta times the epochs, and so on
    to max_epochs."""

    min_epochs: int
    max_epochs: int
    eta: int = defaults.HALVING_ETA


def _parse_search(data: Any, where: _Where) -> Search:
    fields = _read(_SearchFields, data, where, "search")
    _bounded(where, "search.samples", fields.samples, 1, MAX_SAMPLES)
    _bounded(where, "search.seed", fields.seed, 0, 2**32 - 1)
    halving = None
    if fields.halving is not None:
        given = fields.halving
        halving = check_halving(given.min_epochs, given.max_epochs, given.eta, where, "search.halving.")
    budget = None
    if fields.budget is not None:
        budget = fields.budget.minutes
        if not math.isfinite(budget) or not 0 < budget <= MAX_BUDGET_MINUTES:
            raise where.error(
                "search.budget.minutes", f"must be above 0 and at most {MAX_BUDGET_MINUTES:g} (a week), got {budget}"
            )
    return Search(fields.samples, fields.seed, halving, budget)


def _find_spaces(item: Mapping, where: _Where) -> dict[str, spaces.Space]:
    """Every field of a variant written as a search space, by dotted name; unknown fields are left to the strict
    parser."""
    found = {}
    for key in (
        "model",
        "training",
        "resources",
        "workers",
        "name",
    ):  # names and draws list model fields first, whatever the YAML's order
        value = item.get(key)
        if key in ("model", "training", "resources") and isinstance(value, Mapping):
            kinds: Mapping[str, Any] = {}
            if key == "training":
                kinds = typing.get_type_hints(Training)
            elif key == "model":
                if spaces.is_space(value.get("type")):
                    raise where.error(
                        "model.type", "a search space cannot pick the architecture: write one variant per type"
                    )
                if isinstance(value.get("type"), str) and value["type"] in ARCHITECTURES:
                    kinds = typing.get_type_hints(ARCHITECTURES[value["type"]].config)
            for sub, subvalue in value.items():
                if not spaces.is_space(subvalue):
                    continue
                if key == "resources":
                    raise where.error(
                        f"resources.{sub}", "resources are not searched: they size the pods, not the model"
                    )
                if sub in kinds:
                    found[f"{key}.{sub}"] = spaces.parse_space(subvalue, kinds[sub], f"{key}.{sub}", where)
        elif key == "name" and spaces.is_space(value):
            raise where.error("name", "a name cannot be searched: each expanded variant is named after its values")
        elif key == "workers" and spaces.is_space(value):
            found[key] = spaces.parse_space(value, int, key, where)
    return found


def _assign(item: Mapping, values: Mapping[str, Any]) -> dict:
    """``item`` with each dotted field set to its value."""
    result = dict(item)
    for field, value in values.items():
        section, _, leaf = field.rpartition(".")
        value = list(value) if isinstance(value, tuple) else value
        if section:
            result[section] = {**result[section], leaf: value}
        else:
            result[leaf] = value
    return result


def _expand(item: Any, where: _Where, search: Search) -> list[tuple[Variant, Expansion]]:
    """One config entry as its variants: itself when it holds no space, else its grid or its samples, each checked."""
    if not isinstance(item, Mapping) or not isinstance(item.get("name"), str) or not item["name"]:
        return [(parse_variant(item, where), Expansion(str(item), {}))]  # parse_variant names what is wrong
    base, named = item["name"], _Where(where.source, item["name"])
    found = _find_spaces(item, named)
    if search.halving:
        if "training.epochs" in found:
            raise named.error(
                "training.epochs", "search.halving trains every variant to its max_epochs: remove this search space"
            )
        item = _merge(item, {"training": {"epochs": search.halving.max_epochs}})
    if not found:
        return [(parse_variant(item, where), Expansion(base, {}))]
    # Every edge of every space passes the strict parser under the base name: a bad bound is named where it is written.
    first = {field: space.bounds()[0] for field, space in found.items()}
    for field, space in found.items():
        for value in space.bounds():
            parse_variant(_assign(item, first | {field: value}), where)
    grid = spaces.is_grid(found)
    if grid and spaces.grid_size(found) > MAX_VARIANTS:
        raise named.error(
            " × ".join(found),
            f"the grid gives {spaces.grid_size(found)} variants, more than {MAX_VARIANTS}:"
            " list fewer choices, or add a uniform space and sample",
        )
    expanded = []
    for index, values in enumerate(spaces.assignments(found, search.samples, search.seed, base)):
        name = spaces.variant_name(base, values, index, MAX_NAME)
        variant = parse_variant(_assign(item, values) | {"name": name}, where)
        expanded.append((variant, Expansion(base, values, None if grid else index)))
    return expanded


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConfigFile:
    """A bakeoff config file: the variants to train (``defaults`` merged into each), how to search them, the data.

    Its fields are the file's top-level keys: ``parse_config`` reads them into a ``Config``, config_schema.py describes
    them for editors."""

    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # merged into every entry of variants
    variants: list[Mapping[str, Any]]  # each a Variant's fields, search spaces where their values may be
    search: _SearchFields | None = None
    source: str = _SOURCE  # what ingest reads (a folder, tfds:NAME, s3://...)
    image_size: tuple[int, ...] = ()  # [] the source's own size, else [HEIGHT, WIDTH]


def parse_config(document: Any, source: str) -> Config:
    """A config document: ``defaults`` merged into each of ``variants``, search spaces expanded, ``search`` read."""
    where = _Where(source)
    if not isinstance(document, Mapping):
        raise where.error("spec", "expected a mapping with a 'variants' list")
    known = [field.name for field in dataclasses.fields(ConfigFile)]
    unknown = sorted(set(document) - set(known))
    if unknown:
        raise where.error(unknown[0], f"unknown top-level field (known: {', '.join(known)})")
    data = _parse_data(document, where)
    defaults_ = document.get("defaults") or {}
    if not isinstance(defaults_, Mapping):
        raise where.error("defaults", f"expected a mapping, got {defaults_!r}")
    items = document.get("variants")
    if not isinstance(items, list) or not items:
        raise where.error("variants", "expected a non-empty list of variants")
    search = _parse_search(document["search"], where) if document.get("search") is not None else None
    merged = [_merge(defaults_, item) if isinstance(item, Mapping) else item for item in items]
    expanded = [pair for item in merged for pair in _expand(item, where, search or Search())]
    variants = [variant for variant, _ in expanded]
    _check_unique(variants, where)
    if len(variants) > MAX_VARIANTS:
        raise where.error(
            "variants",
            f"expand to {len(variants)} variants, more than {MAX_VARIANTS}: lower search.samples or list fewer choices",
        )
    bases = {item["name"]: Base(item, _find_spaces(item, _Where(source, item["name"]))) for item in merged}
    return Config(variants, search, {variant.name: expansion for variant, expansion in expanded}, source, bases, data)


def _parse_data(document: Mapping, where: _Where) -> Data:
    """The document's ``source`` (a non-empty string; the data modules read what it names) and ``image_size``."""
    source = document.get("source", defaults.SOURCE)
    if not isinstance(source, str) or not source.strip():
        raise where.error("source", f"expected a non-empty string (a folder, tfds:NAME or s3://...), got {source!r}")
    try:
        image_size = check_image_size(document.get("image_size", []))
    except BakeoffError as error:
        raise where.error("image_size", str(error)) from None
    return Data(source, image_size)


def _check_unique(variants: list[Variant], where: _Where) -> None:
    """One line for the first variant whose name an earlier one has: names key store paths and TFJobs."""
    seen: set[str] = set()
    for variant in variants:
        if variant.name in seen:
            raise _Where(where.source, variant.name).error("name", "duplicate variant name")
        seen.add(variant.name)


def parse_variants(items: Any) -> list[Variant]:
    """A compiled pipeline's ``variants`` parameter: expanded already, so no search space; each checked, names unique.

    Its lines name no file: the caller says which parameter the list came from.
    """
    if not isinstance(items, list) or not items:
        raise BakeoffError(f"expected a non-empty list of variants, got {items!r}")
    where = _Where("")
    variants = [parse_variant(item, where) for item in items]
    _check_unique(variants, where)
    if len(variants) > MAX_VARIANTS:
        raise BakeoffError(f"{len(variants)} variants, more than {MAX_VARIANTS}: list fewer")
    return variants


def load_config(path: Path, changes: Mapping[str, Any] | None = None) -> Config:
    """Reads and checks a config file before anything runs: its variants expanded, its search settings.

    ``changes`` (the command's flags: ``source``, ``image_size``, ``search.halving``'s fields) are merged into the
    document first, so a variant's epochs follow a changed ``max_epochs`` as they would have in the file.
    """
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)  # bounded: --config /dev/zero must not fill the memory
    except OSError as error:
        raise BakeoffError(
            f"cannot read config {str(path)!r} ({error.strerror}): pass an existing YAML file to --config"
        ) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise BakeoffError(
            f"config {str(path)!r} is larger than {MAX_CONFIG_BYTES // 2**20} MiB: pass the variants YAML to --config"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BakeoffError(
            f"config {str(path)!r} is not UTF-8 text (byte {error.start}): pass the variants YAML to --config"
        ) from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        raise BakeoffError(f"{path}: malformed YAML{line}: fix the syntax") from None
    if changes and isinstance(document, Mapping):
        document = _merge(document, changes)
    return parse_config(document, str(path))


def load_variants(path: Path) -> list[Variant]:
    """Reads and checks a variants YAML file before anything runs: every variant, spaces expanded."""
    return load_config(path).variants


def from_dict(data: Mapping) -> Variant:
    """A variant handed over as a pipeline parameter or a worker argument."""
    return parse_variant(data, _Where("variant"))
