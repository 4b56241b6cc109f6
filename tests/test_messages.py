"""User-facing error messages stay searchable: no message is split mid-phrase across string literals.

A user who sees `bakeoff: error: ... but this pipeline was compiled for ...` greps the code for a piece of it; an
automatic re-wrap that left `"... this pipeline was "` and `"compiled"` on two lines makes that grep fail.

The rule, over every `.py` file of components/, pipelines/ and benchmarks/: a message passed to `BakeoffError` (or a
subclass of it defined in the tree), kserve's `InvalidInput` or `SystemExit` that is an implicit concatenation of
literals may be split only at a clause's edge. At each seam between two adjacent literals, either the left one ends in
clause punctuation (`. , ; : ! ?` or `)`, then any spaces), or the right one starts (after any spaces) with `(`.
Anything else, a seam after a word, a space or a `{field}`, is mid-phrase.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import itertools
import tokenize
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("components", "pipelines", "benchmarks")
RAISED = {"BakeoffError", "InvalidInput", "SystemExit"}
CLAUSE_END = tuple(".,;:!?)")
CLAUSE_START = ("(",)
# Files other helpers held while the rest were rejoined (issue 51): join theirs, then drop them from here.
NOT_YET_REJOINED: set[str] = set()


@dataclasses.dataclass(frozen=True)
class Seam:
    path: str
    line: int
    left: str
    right: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: ...{self.left[-30:]!r} | {self.right[:30]!r}..."


def literal_bodies(segment: str) -> list[str]:
    """The text between the quotes of each adjacent literal in ``segment``, the source of one concatenated string."""
    bodies: list[str] = []
    tokens = tokenize.generate_tokens(io.StringIO(segment).readline)
    pending: list[str] = []  # Python 3.12+: an f-string comes as FSTRING_START, its parts, FSTRING_END
    for token in tokens:
        name = tokenize.tok_name[token.type]
        if name == "STRING":
            bodies.append(_body(token.string))
        elif name == "FSTRING_START":
            pending = [token.string]
        elif pending and name != "FSTRING_END":
            pending.append(token.string)
        elif name == "FSTRING_END":
            bodies.append(_body("".join(pending) + token.string))
            pending = []
    return bodies


def _body(literal: str) -> str:
    quote_at = next(index for index, char in enumerate(literal) if char in "'\"")
    quote = literal[quote_at] * 3 if literal[quote_at : quote_at + 3] in ('"""', "'''") else literal[quote_at]
    return literal[quote_at + len(quote) : -len(quote)]


def mid_phrase(left: str, right: str) -> bool:
    return not (left.rstrip().endswith(CLAUSE_END) or right.lstrip().startswith(CLAUSE_START))


def raised_names(trees: dict[str, ast.Module]) -> set[str]:
    """RAISED and every class in the tree that derives from one of them, however indirectly."""
    names = set(RAISED)
    classes = [node for tree in trees.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    while True:
        more = {
            node.name for node in classes if any(isinstance(base, ast.Name) and base.id in names for base in node.bases)
        }
        if more <= names:
            return names
        names |= more


def _callee(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def split_seams(path: str, source: str, tree: ast.Module, names: set[str]) -> list[Seam]:
    seams = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _callee(node) in names):
            continue
        for argument in [*node.args, *(keyword.value for keyword in node.keywords)]:
            if not isinstance(argument, ast.JoinedStr | ast.Constant) or (
                isinstance(argument, ast.Constant) and not isinstance(argument.value, str)
            ):
                continue
            segment = ast.get_source_segment(source, argument)
            if segment is None:
                continue
            bodies = literal_bodies(segment)
            for left, right in itertools.pairwise(bodies):
                if mid_phrase(left, right):
                    seams.append(Seam(path, argument.lineno, left, right))
    return seams


def sources() -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
        for folder in SCANNED
        for path in sorted((ROOT / folder).rglob("*.py"))
        if str(path.relative_to(ROOT)) not in NOT_YET_REJOINED
    }


def test_no_user_facing_message_is_split_mid_phrase() -> None:
    texts = sources()
    trees = {path: ast.parse(text) for path, text in texts.items()}
    names = raised_names(trees)
    seams = [seam for path, tree in trees.items() for seam in split_seams(path, texts[path], tree, names)]
    assert not seams, "messages split mid-phrase; join each into one literal:\n" + "\n".join(map(str, seams))


@pytest.mark.parametrize(
    ("source", "split"),
    [
        ('raise BakeoffError("the run " "failed: retry it")', True),
        ('raise BakeoffError(f"{name}" " is not a variant")', True),
        ('raise BakeoffError("the run failed: " "retry it")', False),
        ('raise BakeoffError("too many variants" " (at most 9)")', False),
        ('raise SystemExit("one literal, no seam")', False),
        ('raise Other("the run " "failed")', False),
    ],
)
def test_the_rule_tells_a_clause_edge_from_mid_phrase(source: str, split: bool) -> None:
    tree = ast.parse(source)
    assert bool(split_seams("x.py", source, tree, raised_names({"x.py": tree}))) is split
