"""Dataclasses read strictly from parsed YAML or JSON, and the JSON Schema of what they read.

One walker over a dataclass's type hints reads every document bakeoff takes in: the config file and the variants KFP
hands back (spec.py), and the records the steps keep (storage/records.py). It stops at the first unknown key, missing
required field or value of the wrong type and raises it as ``Refused``, holding one typed ``Problem``: where (the
field's path) and what. Each reader words that in its own one-line message. A ``Coercion`` says how loosely scalars
read: KFP passes every number of a list parameter as a float, and YAML reads ``cpu: 2`` as a number, while a record's
JSON is read as written.

Hints it reads: a dataclass (from a mapping), ``list``/``tuple``/``Sequence`` (from a list, as the hint's own
container; ``tuple`` and ``Sequence`` give a tuple), ``dict``/``Mapping`` (values read, keys as written),
``X | None``, ``Any`` (taken as written) and the scalars ``int``, ``float``, ``str``, ``bool``.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar, Union

T = TypeVar("T")

_SEQUENCES = (list, tuple, collections.abc.Sequence)
_MAPPINGS = (dict, collections.abc.Mapping)
_UNIONS = (Union, types.UnionType)


@dataclasses.dataclass(frozen=True)
class Coercion:
    """How loosely a scalar reads: each flag lets a value of another type through where the hint names one."""

    whole_floats_as_int: bool = False  # 3.0 reads as 3 where an int is wanted (KFP passes every number as a float)
    numbers_as_str: bool = False  # 2 reads as "2" where a str is wanted (YAML reads `cpu: 2` as a number)
    # 1 reads as 1.0 where a float is wanted; without it an int is taken as written (JSON has one kind of number)
    ints_as_float: bool = False


@dataclasses.dataclass(frozen=True)
class WrongType:
    """A value that is not of its field's type."""

    path: str  # the field, dotted and indexed: "training.epochs", "kept[0].val_loss"; "" the document itself
    expected: type  # a dataclass, list (any sequence), dict (any mapping), or the scalar type the hint names
    got: Any  # the value as written


@dataclasses.dataclass(frozen=True)
class WrongKeys:
    """A mapping whose keys are not its dataclass's fields."""

    path: str  # the mapping's, as WrongType's
    expected: type  # the dataclass it was read as
    unknown: tuple[str, ...]  # keys that name no field, in the mapping's order
    missing: tuple[str, ...]  # required fields that no key gives, in the fields' order


Problem = WrongType | WrongKeys


class Refused(Exception):
    """What a document holds that its dataclass does not take: the first problem the walker met."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem)
        self.problem = problem


@dataclasses.dataclass(frozen=True)
class Fields:
    """A mapping's keys matched to a dataclass's fields."""

    values: dict[str, tuple[str, Any]]  # field → (the key it is written under, its value), in the order to read them
    unknown: list[str]  # keys that name no field
    missing: list[str]  # required fields no key gives


def by_name(cls: type, data: Mapping[str, Any], optional: Collection[str] | None = None) -> Fields:
    """Each key names its field; a field in ``optional`` (None: each with a default) may be left out."""
    fields = dataclasses.fields(cls)
    names = [field.name for field in fields]
    if optional is None:
        optional = [field.name for field in fields if not _required(field)]
    return Fields(
        {key: (key, value) for key, value in data.items() if key in names},
        [key for key in data if key not in names],
        [name for name in names if name not in data and name not in optional],
    )


def path_to(path: str, key: str) -> str:
    """The path of ``key`` in the mapping at ``path``."""
    return f"{path}.{key}" if path else key


@dataclasses.dataclass(frozen=True)
class Reader:
    """How one kind of document reads: its scalars' coercion, and how a mapping's keys name a dataclass's fields
    (a record names a metric's value by the metric: storage/records.py)."""

    coercion: Coercion
    match: Callable[[type, Mapping[str, Any]], Fields] = by_name

    def read(self, cls: type[T], data: Any, path: str = "") -> T:
        """``data`` as a ``cls``; ``path`` names where ``data`` sits in its document. Raises ``Refused``."""
        return typing.cast(T, self.value(data, cls, path))

    def value(self, value: Any, hint: Any, path: str) -> Any:
        """``value`` as ``hint`` reads it."""
        if hint is Any:
            return value
        origin, args = typing.get_origin(hint) or hint, typing.get_args(hint)
        if origin in _UNIONS:  # X | None: the only union a reader takes
            if value is None and type(None) in args:
                return None
            (inner,) = [arg for arg in args if arg is not type(None)]
            return self.value(value, inner, path)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            return self._dataclass(hint, value, path)
        if origin in _SEQUENCES:
            if not isinstance(value, (list, tuple)):
                raise Refused(WrongType(path, list, value))
            item = args[0] if args else Any
            items = [self.value(each, item, f"{path}[{index}]") for index, each in enumerate(value)]
            return items if origin is list else tuple(items)
        if origin in _MAPPINGS:
            if not isinstance(value, Mapping):
                raise Refused(WrongType(path, dict, value))
            inner = args[1] if args else Any
            return {key: self.value(each, inner, path_to(path, key)) for key, each in value.items()}
        return self._scalar(value, hint, path)

    def _dataclass(self, cls: type, data: Any, path: str) -> Any:
        if not isinstance(data, Mapping):
            raise Refused(WrongType(path, cls, data))
        fields = self.match(cls, data)
        if fields.unknown or fields.missing:
            raise Refused(WrongKeys(path, cls, tuple(fields.unknown), tuple(fields.missing)))
        hints = _hints(cls)
        return cls(
            **{name: self.value(value, hints[name], path_to(path, key)) for name, (key, value) in fields.values.items()}
        )

    def _scalar(self, value: Any, kind: type, path: str) -> Any:
        coercion = self.coercion
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind is float and number:
            return float(value) if coercion.ints_as_float else value
        if kind is int and coercion.whole_floats_as_int and isinstance(value, float) and value.is_integer():
            return int(value)
        if kind is str and coercion.numbers_as_str and number:
            return str(value)
        if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
            return value
        raise Refused(WrongType(path, kind, value))


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


# A field's schema as the caller would have it: (dataclass, field name, its hint, the schema its hint gives) → schema.
Refine = Callable[[type, str, Any, dict[str, Any]], dict[str, Any]]


def schema(cls: type, coercion: Coercion, refine: Refine | None = None) -> dict[str, Any]:
    """The JSON Schema of what ``Reader(coercion).read(cls, ...)`` takes: its types, its required fields, no unknown
    key; each field's default and its class's summary line for editors. ``refine`` may change a field's schema (the
    config file's search spaces)."""
    return _Schema(coercion, refine or (lambda cls, name, hint, schema: schema)).of(cls)


@dataclasses.dataclass(frozen=True)
class _Schema:
    coercion: Coercion
    refine: Refine

    def of(self, hint: Any) -> dict[str, Any]:
        if hint is Any:
            return {}
        origin, args = typing.get_origin(hint) or hint, typing.get_args(hint)
        if origin in _UNIONS:
            (inner,) = [arg for arg in args if arg is not type(None)]
            return {"anyOf": [self.of(inner), {"type": "null"}]}
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            return self._object(hint)
        if origin in _SEQUENCES:
            return {"type": "array", "items": self.of(args[0] if args else Any)}
        if origin in _MAPPINGS:
            inner = args[1] if args else Any
            return {"type": "object"} | ({"additionalProperties": self.of(inner)} if inner is not Any else {})
        if hint is str and self.coercion.numbers_as_str:
            return {"type": ["string", "number"]}
        return {"type": {int: "integer", float: "number", str: "string", bool: "boolean"}[hint]}

    def _object(self, cls: type) -> dict[str, Any]:
        hints, fields = _hints(cls), dataclasses.fields(cls)
        properties = {}
        for field in fields:
            properties[field.name] = self.refine(cls, field.name, hints[field.name], self.of(hints[field.name]))
            if field.default is not dataclasses.MISSING and _plain(field.default):
                properties[field.name] = properties[field.name] | {"default": _json(field.default)}
        summary = " ".join((cls.__doc__ or "").split("\n\n")[0].split())  # the docstring's first paragraph
        written = summary and not summary.startswith(f"{cls.__name__}(")  # else the signature dataclasses made up
        required = [field.name for field in fields if _required(field)]
        return (
            {"type": "object"}
            | ({"description": summary} if written else {})
            | {"properties": properties}
            | ({"required": required} if required else {})
            | {"additionalProperties": False}
        )


def _plain(value: Any) -> bool:
    """Whether ``value`` is a JSON value as it stands (a default worth showing an editor)."""
    if isinstance(value, (list, tuple)):
        return all(map(_plain, value))
    return value is None or isinstance(value, (bool, int, float, str))


def _json(value: Any) -> Any:
    return [_json(item) for item in value] if isinstance(value, (list, tuple)) else value
