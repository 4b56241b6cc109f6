"""Search spaces: a variant field's ``choice``/``uniform``/``log_uniform``/``int_uniform`` as data, its grid or
seeded samples, and the names they give."""

from __future__ import annotations

import collections.abc
import dataclasses
import itertools
import math
import random
import re
import typing
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Protocol, TypeGuard

from bakeoff.components.errors import BakeoffError

SPACES = ("choice", "uniform", "log_uniform", "int_uniform")
SAMPLE_DIGITS = 3  # significant digits a sampled float keeps, so a variant's name shows the exact value it trains with
DRAWS_PER_SAMPLE = 20  # a space with fewer distinct points than `samples` gives what it has after this many draws each


class Where(Protocol):
    def error(self, field: str, problem: str) -> BakeoffError: ...


@dataclasses.dataclass(frozen=True)
class Space:
    """One field's search space: ``choice`` lists its values, the others hold ``low`` and ``high`` (both included)."""

    kind: str
    options: tuple = ()
    low: float = 0.0
    high: float = 0.0

    def bounds(self) -> tuple:
        """Every value this space can give at its edges: each choice, or both bounds (each is checked by the strict
        parser)."""
        return self.options if self.kind == "choice" else (self.low, self.high)

    def sample(self, rng: random.Random) -> Any:
        if self.kind == "choice":
            return self.options[rng.randrange(len(self.options))]
        if self.kind == "int_uniform":
            return rng.randint(int(self.low), int(self.high))
        if self.kind == "uniform":
            value = rng.uniform(self.low, self.high)
        else:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return min(max(float(f"{value:.{SAMPLE_DIGITS}g}"), self.low), self.high)


def is_space(value: Any) -> TypeGuard[Mapping]:
    """Whether a field's value is written as a search space (a mapping where a plain value belongs)."""
    return isinstance(value, Mapping)


def _allowed(kind: Any) -> tuple[str, ...]:
    """The spaces a field of this type can hold: numbers take ranges, everything else only ``choice``."""
    if kind is int:
        return ("choice", "int_uniform")
    if kind is float:
        return ("choice", "uniform", "log_uniform")
    return ("choice",)


def schema(kind: Any, value: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON Schema of each space a field of type ``kind`` may hold in its value's place (``value``: the value's
    schema): its one key, with ``choice``'s values or a range's two bounds."""
    forms = []
    for space in _allowed(kind):
        if space == "choice":
            arguments = {"type": "array", "minItems": 1, "uniqueItems": True, "items": value}
        else:
            bound = {"type": "integer" if space == "int_uniform" else "number"}
            arguments = {"type": "array", "minItems": 2, "maxItems": 2, "items": bound}
        forms.append(
            {"type": "object", "properties": {space: arguments}, "required": [space], "additionalProperties": False}
        )
    return forms


def _kind_name(kind: Any) -> str:
    if typing.get_origin(kind) in (collections.abc.Sequence, list, tuple):
        return "list"
    return getattr(kind, "__name__", str(kind))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_space(value: Mapping, kind: Any, field: str, where: Where) -> Space:
    """One field's space, its shape checked; whether each value suits the field is the strict parser's job."""
    keys = list(value)
    if len(keys) != 1 or keys[0] not in SPACES:
        unknown = [key for key in keys if key not in SPACES]
        if unknown:
            raise where.error(field, f"unknown search space {unknown[0]!r} (known: {', '.join(SPACES)})")
        raise where.error(field, f"one search space per field, got {', '.join(map(str, keys))}")
    space, arguments = keys[0], value[keys[0]]
    allowed = _allowed(kind)
    if space not in allowed:
        raise where.error(field, f"{space} does not fit this field ({_kind_name(kind)}): use {' or '.join(allowed)}")
    if space == "choice":
        if not isinstance(arguments, list) or not arguments:
            raise where.error(field, f"choice takes a non-empty list of values, got {arguments!r}")
        seen = []
        for option in arguments:
            if option in seen:
                raise where.error(field, f"choice lists {option!r} twice")
            seen.append(option)
        return Space("choice", options=tuple(arguments))
    if not isinstance(arguments, list) or len(arguments) != 2 or not all(map(_number, arguments)):
        raise where.error(field, f"{space} takes [low, high], two finite numbers, got {arguments!r}")
    low, high = arguments
    if space == "int_uniform" and not all(float(bound).is_integer() for bound in (low, high)):
        raise where.error(field, f"int_uniform takes whole numbers, got {arguments!r}")
    if low >= high:
        raise where.error(field, f"{space} needs low < high, got [{low}, {high}]: for one value write it plainly")
    if space == "log_uniform" and low <= 0:
        raise where.error(field, f"log_uniform needs bounds above 0, got [{low}, {high}]")
    if space == "int_uniform":
        return Space(space, low=int(low), high=int(high))
    return Space(space, low=float(low), high=float(high))


def grid_size(spaces: Mapping[str, Space]) -> int:
    """How many variants the Cartesian product of ``choice`` spaces gives."""
    return math.prod(len(space.options) for space in spaces.values())


def is_grid(spaces: Mapping[str, Space]) -> bool:
    """A variant whose spaces are all ``choice`` is expanded as a grid, else sampled."""
    return all(space.kind == "choice" for space in spaces.values())


def assignments(spaces: Mapping[str, Space], samples: int, seed: int, key: str) -> list[dict[str, Any]]:
    """The values each expanded variant gets, field → value: the grid in order, or ``samples`` distinct draws.

    Draws come from ``random.Random`` seeded with the seed and ``key`` (the base variant's name), so a variant's samples
    depend on nothing else in the file, and the first k of ``samples`` n are the draws of ``samples`` k.
    """
    fields = list(spaces)
    if is_grid(spaces):
        return [
            dict(zip(fields, values, strict=True)) for values in itertools.product(*(spaces[f].options for f in fields))
        ]
    rng = random.Random(f"{seed}/{key}")  # a str seed is hashed with SHA-512: the same on every machine and run
    drawn: list[dict[str, Any]] = []
    for _ in range(samples * DRAWS_PER_SAMPLE):
        values = {field: spaces[field].sample(rng) for field in fields}
        if values not in drawn:
            drawn.append(values)
        if len(drawn) == samples:
            break
    return drawn


def _abbreviation(field: str) -> str:
    """``training.learning_rate`` → ``lr``: the initials of the field's last part."""
    return "".join(word[0] for word in field.rsplit(".", 1)[-1].split("_") if word)


def _text(value: Any) -> str:
    """A value as name characters: 0.00123 → 0p00123, [64, 128] → 64_128, True → 1, a string lower-cased."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float):
        text = format(Decimal(repr(value)), "f")
        text = text.rstrip("0").rstrip(".") if "." in text else text
        return text.replace(".", "p").replace("-", "m")
    if isinstance(value, int):
        return str(value).replace("-", "m")
    if isinstance(value, (list, tuple)):
        return "_".join(map(_text, value))
    return re.sub(r"[^a-z0-9]+", "_", str(value).lower()).strip("_") or "x"


def abbreviations(fields: list[str]) -> dict[str, str]:
    """Each searched field's tag in names: its initials, or its whole last part where two fields share initials."""
    short = {field: _abbreviation(field) for field in fields}
    shared = {tag for tag in short.values() if list(short.values()).count(tag) > 1}
    return {field: field.rsplit(".", 1)[-1] if tag in shared else tag for field, tag in short.items()}


def variant_name(base: str, values: Mapping[str, Any], index: int, most: int) -> str:
    """``cnn`` + {model.filters: [64, 128, 128], training.learning_rate: 0.00123} → ``cnn-f64_128_128-lr0p00123``.

    Past ``most`` characters the name is ``<base>-<index>`` instead; ``bakeoff plan`` shows the values either way.
    """
    tags = abbreviations(list(values))
    name = "-".join([base] + [f"{tags[field]}{_text(value)}" for field, value in values.items()])
    return name if len(name) <= most else f"{base}-{index}"


def describe(values: Mapping[str, Any]) -> str:
    """``model.dropout=0.31 training.learning_rate=0.00123``: the values a variant was given, as plan shows them."""
    return " ".join(f"{field}={_shown(value)}" for field, value in values.items())


def _shown(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(_shown, value)) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)
