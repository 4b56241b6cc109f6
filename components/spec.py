"""Variant specs: YAML → strictly checked dataclasses, and back to plain dicts."""
from __future__ import annotations

import collections.abc
import dataclasses
import re
import typing
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from components.errors import BakeoffError
from components.modeling.architectures import ARCHITECTURES
from components.modeling.optimizers import OPTIMIZERS, SCHEDULES


@dataclasses.dataclass(frozen=True)
class Training:
    """How one variant trains; ``batch_size`` is per replica."""

    epochs: int = 3
    batch_size: int = 64
    optimizer: str = "adam"
    learning_rate: float = 0.001
    schedule: str = "constant"
    steps_per_execution: int = 64
    random_flip: bool = False  # mirror half the training images left-right (clothes are symmetric); serve the mean over both mirrors


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
        return _fill(ARCHITECTURES[self.architecture].config, params, _Where("variant", self.name), "model.")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"model": dict(self.model)}


class _Where:
    """Names the place of a value for error messages: file, variant, field."""

    def __init__(self, source: str, variant: Optional[str] = None) -> None:
        self.source, self.variant = source, variant

    def error(self, field: str, problem: str) -> BakeoffError:
        variant = f"variant {self.variant!r}: " if self.variant else ""
        return BakeoffError(f"{self.source}: {variant}{field}: {problem}")


def _check_type(value: Any, kind: Any, where: _Where, field: str) -> Any:
    origin = typing.get_origin(kind)
    if origin in (collections.abc.Sequence, list, tuple):
        if not isinstance(value, (list, tuple)):
            raise where.error(field, f"expected a list, got {value!r}")
        (item,) = typing.get_args(kind)[:1] or (Any,)
        return tuple(_check_type(v, item, where, f"{field}[{i}]") for i, v in enumerate(value))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)  # KFP passes every number of a list parameter as a float
    if kind is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if kind in (int, float, str, bool) and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        raise where.error(field, f"expected {kind.__name__}, got {value!r}")
    return value


def _fill(cls: type, data: Any, where: _Where, prefix: str = "") -> Any:
    """Builds dataclass ``cls`` from ``data``, rejecting unknown keys and wrong types."""
    if not isinstance(data, Mapping):
        raise where.error(prefix.rstrip(".") or "spec", f"expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise where.error(f"{prefix}{unknown[0]}", f"unknown field (known: {', '.join(fields)})")
    values = {}
    for name, value in data.items():
        kind = hints[name]
        if dataclasses.is_dataclass(kind):
            values[name] = _fill(kind, value, where, f"{prefix}{name}.")
        else:
            values[name] = _check_type(value, kind, where, f"{prefix}{name}")
    missing = [n for n, f in fields.items() if n not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise where.error(f"{prefix}{missing[0]}", "required field is missing")
    return cls(**values)


def _parse_model(data: Any, where: _Where) -> dict:
    if not isinstance(data, Mapping) or "type" not in data:
        raise where.error("model.type", f"required: one of {', '.join(ARCHITECTURES)}")
    kind = data["type"]
    if kind not in ARCHITECTURES:
        raise where.error("model.type", f"unknown architecture {kind!r} (known: {', '.join(ARCHITECTURES)})")
    params = {key: value for key, value in data.items() if key != "type"}
    config = _fill(ARCHITECTURES[kind].config, params, where, "model.")
    return {"type": kind} | {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()}


def parse_variant(data: Any, where: _Where) -> Variant:
    """One variant from its mapping, every field checked."""
    if not isinstance(data, Mapping):
        raise where.error("variants", f"each variant must be a mapping, got {data!r}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise where.error("name", f"every variant needs a non-empty name, got {name!r}")
    where = _Where(where.source, name)
    variant = _fill(Variant, {**data, "model": {}}, where)
    variant = dataclasses.replace(variant, model=_parse_model(data.get("model"), where))
    _validate(variant, where)
    return variant


def _validate(variant: Variant, where: _Where) -> None:
    if variant.workers < 1:
        raise where.error("workers", f"must be at least 1, got {variant.workers}")
    training = variant.training
    if training.epochs < 1:
        raise where.error("training.epochs", f"must be at least 1, got {training.epochs}")
    if training.batch_size < 1:
        raise where.error("training.batch_size", f"must be at least 1, got {training.batch_size}")
    if training.steps_per_execution < 1:
        raise where.error("training.steps_per_execution", f"must be at least 1, got {training.steps_per_execution}")
    if training.learning_rate <= 0:
        raise where.error("training.learning_rate", f"must be positive, got {training.learning_rate}")
    if training.optimizer not in OPTIMIZERS:
        raise where.error("training.optimizer", f"unknown optimizer {training.optimizer!r} (known: {', '.join(OPTIMIZERS)})")
    if training.schedule not in SCHEDULES:
        raise where.error("training.schedule", f"unknown schedule {training.schedule!r} (known: {', '.join(SCHEDULES)})")
    if not 0 <= variant.model.get("dropout", 0) < 1:
        raise where.error("model.dropout", f"must be in [0, 1), got {variant.model['dropout']}")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9_]*[a-z0-9])?", variant.name):
        raise where.error("name", "use lower-case letters, digits, '-' and '_' (it names TFJobs and store paths)")


def _merge(base: Mapping, override: Mapping) -> dict:
    merged = dict(base)
    for key, value in override.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping) else value
    return merged


def parse_config(document: Any, source: str) -> list[Variant]:
    """All variants of a config document: ``defaults`` merged into each of ``variants``."""
    where = _Where(source)
    if not isinstance(document, Mapping):
        raise where.error("spec", "expected a mapping with a 'variants' list")
    unknown = sorted(set(document) - {"defaults", "variants"})
    if unknown:
        raise where.error(unknown[0], "unknown top-level field (known: defaults, variants)")
    defaults = document.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise where.error("defaults", f"expected a mapping, got {defaults!r}")
    items = document.get("variants")
    if not isinstance(items, list) or not items:
        raise where.error("variants", "expected a non-empty list of variants")
    variants, seen = [], set()
    for item in items:
        variant = parse_variant(_merge(defaults, item) if isinstance(item, Mapping) else item, where)
        if variant.name in seen:
            raise _Where(source, variant.name).error("name", "duplicate variant name")
        seen.add(variant.name)
        variants.append(variant)
    return variants


def load_variants(path: Path) -> list[Variant]:
    """Reads and checks a variants YAML file before anything runs."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise BakeoffError(f"cannot read config {str(path)!r} ({error.strerror}): pass an existing YAML file to --config") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        raise BakeoffError(f"{path}: malformed YAML{line}: fix the syntax") from None
    return parse_config(document, str(path))


def from_dict(data: Mapping) -> Variant:
    """A variant handed over as a pipeline parameter or a worker argument."""
    return parse_variant(data, _Where("variant"))
