"""The map, docs/layout.md: every module named once with its one job, in the order of the layers `make lint` holds.

Its "## Modules" section has one fenced block, a line per module: the module's path, then its job. A module with no
line, or a line whose module is gone, fails here; so does a line out of its layer's place in pyproject.toml's
import-linter contract, the one that `make lint` checks the imports against.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
MAP = ROOT / "docs" / "layout.md"
MAPPED_FOLDERS = ("pipelines", "components", "benchmarks")
SECTION = "## Modules"
LINE = re.compile(r"(?P<path>\S+\.py)\s+(?P<job>\S.*)")


@dataclasses.dataclass(frozen=True)
class Entry:
    path: str
    job: str
    line_number: int


def mapped(text: str) -> list[Entry]:
    """The lines of the first fenced block after the Modules heading; each must read `PATH  JOB`."""
    lines = text.splitlines()
    try:
        start = lines.index(SECTION)
        opening = next(index for index in range(start, len(lines)) if lines[index].startswith("```"))
        closing = next(index for index in range(opening + 1, len(lines)) if lines[index].startswith("```"))
    except (ValueError, StopIteration):
        pytest.fail(f"{MAP}: no fenced block under a {SECTION!r} heading")
    entries = []
    for number in range(opening + 1, closing):
        line = lines[number]
        if not line.strip():
            continue  # a blank line between layers
        parsed = LINE.fullmatch(line)
        assert parsed, f"{MAP}:{number + 1}: not `path/to/module.py  its one job`: {line!r}"
        entries.append(Entry(parsed["path"], parsed["job"], number + 1))
    return entries


def modules(root: Path) -> set[str]:
    """Every module file under the mapped folders; a package's __init__.py only when it holds more than a
    docstring."""
    found = set()
    for folder in MAPPED_FOLDERS:
        for path in (root / folder).rglob("*.py"):
            if path.name == "__init__.py" and not _has_code(path):
                continue
            found.add(path.relative_to(root).as_posix())
    return found


def _has_code(path: Path) -> bool:
    body = ast.parse(path.read_text()).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return bool(body)


def dotted(path: str) -> str:
    """The installed name of a module file: components/x.py is bakeoff.components.x."""
    name = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return name if name.startswith("benchmarks") else f"bakeoff.{name}"


def layer_of(name: str, layers: list[list[str]]) -> int | None:
    for index, members in enumerate(layers):
        if any(name == member or name.startswith(f"{member}.") for member in members):
            return index
    return None


def contract_layers() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [[member.strip() for member in re.split(r"[|:]", layer)] for layer in contract["layers"]]


def test_the_map_names_every_module_once_and_none_that_is_gone() -> None:
    entries = mapped(MAP.read_text())
    named = [entry.path for entry in entries]
    twice = sorted({path for path in named if named.count(path) > 1})
    assert not twice, f"{MAP} names these more than once: {twice}"
    on_disk = modules(ROOT)
    missing = sorted(on_disk - set(named))
    assert not missing, f"add a line to {MAP}'s {SECTION} for each, saying its one job: {missing}"
    gone = sorted(set(named) - on_disk)
    assert not gone, f"{MAP} names modules that are gone (remove or rename their lines): {gone}"


def test_the_map_lists_the_modules_layer_by_layer_as_the_import_contract_orders_them() -> None:
    layers = contract_layers()
    previous: Entry | None = None
    for entry in mapped(MAP.read_text()):
        name = dotted(entry.path)
        if name.startswith("benchmarks"):
            continue  # beside bakeoff, not in its layers
        layer = layer_of(name, layers)
        assert layer is not None, f"{MAP}:{entry.line_number}: {name} is in no layer of pyproject.toml's contract"
        if previous is not None:
            above = layer_of(dotted(previous.path), layers)
            assert above is not None and above <= layer, (
                f"{MAP}:{entry.line_number}: {entry.path} is listed below {previous.path}, a lower layer in"
                " pyproject.toml's contract: move its line up to its layer"
            )
        previous = entry
