"""Serving under load while a new version is published: the soak bench's shape, small (benchmarks/soak.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakeoff.components.data.fashion_mnist import read_idx_dir
from benchmarks.soak import KINDS, Size, run

pytestmark = pytest.mark.serving

SMALL = Size(clients=4, seconds=6.0, model=((8,), 16, False))


def test_a_swap_under_mixed_load_fails_no_request_and_every_answer_is_wholly_one_named_version(
    fashion_dir: Path, tmp_path: Path
) -> None:
    """4 clients send JSON arrays, PNGs and binary tensors of 1 and 64 images to `bakeoff serve` while version 2 is
    published: every request is answered, each answer names its version and every image in it is that version's."""
    result = run(tmp_path, SMALL, read_idx_dir(fashion_dir)["test"].images[:128])
    assert not result.failed(), result.failed()[:3]
    assert not result.mixed(), result.mixed()[:3]
    assert {a.version for a in result.answers} == {"1", "2"}, "both versions answered, and only they"
    assert result.swapped is not None and result.swapped > result.published
    assert {a.kind for a in result.answers} == {f"{kind} {n}" for kind, n in KINDS}, "every kind was sent"
    for client in range(SMALL.clients):  # one client's requests follow each other: none goes back to version 1
        versions = [a.version or "" for a in result.answers if a.client == client]
        assert versions == sorted(versions), versions
