"""The one strict reader: each problem a typed value (where, what), and the two coercions its readers use.

spec.py and storage/records.py word these problems in their own lines (tests/test_bad_input.py, test_variants.py,
test_search.py and test_records.py hold the lines); here is what they are built from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from bakeoff.components import strict
from bakeoff.components.spec import COERCION

pytestmark = pytest.mark.unit


@dataclasses.dataclass(frozen=True)
class Inner:
    rate: float
    sizes: Sequence[int] = ()


@dataclasses.dataclass(frozen=True)
class Outer:
    name: str
    inner: Inner
    layers: list[Inner] = dataclasses.field(default_factory=list)
    note: str | None = None


YAML = strict.Reader(COERCION)
JSON = strict.Reader(strict.Coercion())


def refused(reader: strict.Reader, data: object) -> strict.Problem:
    with pytest.raises(strict.Refused) as raised:
        reader.read(Outer, data)
    return raised.value.problem


def test_a_document_reads_into_its_dataclasses() -> None:
    data = {"name": "a", "inner": {"rate": 1, "sizes": [2, 3]}, "layers": [{"rate": 0.5}], "note": None}
    assert YAML.read(Outer, data) == Outer("a", Inner(1.0, (2, 3)), [Inner(0.5)])


def test_unknown_keys_and_missing_fields_are_one_problem_at_their_mapping() -> None:
    problem = refused(YAML, {"name": "a", "inner": {"sizes": [], "size": [], "rait": 1}})
    assert problem == strict.WrongKeys("inner", Inner, unknown=("size", "rait"), missing=("rate",))  # as written


def test_a_wrong_type_names_its_path_the_type_wanted_and_the_value() -> None:
    problem = refused(YAML, {"name": "a", "inner": {"rate": 1}, "layers": [{"rate": 1}, {"rate": 2, "sizes": ["3"]}]})
    assert problem == strict.WrongType("layers[1].sizes[0]", int, "3")
    assert refused(YAML, {"name": "a", "inner": [1]}) == strict.WrongType("inner", Inner, [1])
    assert refused(YAML, {"name": "a", "inner": {"rate": 1}, "layers": {}}) == strict.WrongType("layers", list, {})
    assert refused(YAML, {"name": "a", "inner": {"rate": True}}) == strict.WrongType("inner.rate", float, True)


def test_kfp_and_yaml_numbers_read_loosely_and_json_exactly() -> None:
    """KFP hands 3 back as 3.0, YAML reads `cpu: 2` as a number; a record keeps an int where a float is wanted."""
    loose = {"name": 2, "inner": {"rate": 1, "sizes": [3.0]}}
    assert YAML.read(Outer, loose) == Outer("2", Inner(1.0, (3,)))
    assert refused(JSON, loose) == strict.WrongType("name", str, 2)
    assert refused(JSON, loose | {"name": "a"}) == strict.WrongType("inner.sizes[0]", int, 3.0)
    kept = JSON.read(Outer, {"name": "a", "inner": {"rate": 1}}).inner.rate
    assert (kept, type(kept)) == (1, int)
    assert refused(YAML, loose | {"inner": {"rate": 1, "sizes": [2.5]}}) == strict.WrongType("inner.sizes[0]", int, 2.5)
