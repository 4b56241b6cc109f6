"""Serving under load while a new version is published: the soak bench's shape, small (benchmarks/soak.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bakeoff.components.data.fashion_mnist import read_idx_dir
from benchmarks.soak import KINDS, SMALL_MODEL, Size, run

pytestmark = pytest.mark.serving

SMALL = Size(clients=4, seconds=6.0, model=SMALL_MODEL, swaps=1)


@pytest.mark.parametrize("swaps", [1, 2])
def test_swaps_under_mixed_load_fail_no_request_and_every_answer_is_wholly_one_named_version(
    swaps: int, fashion_dir: Path, tmp_path: Path
) -> None:
    """4 clients send JSON arrays, PNGs and binary tensors of 1 and 64 images to `bakeoff serve` while newer versions
    are published: every request is answered, each answer names its version and every image in it is that version's,
    and no client is answered by an older version after a newer one."""
    size = dataclasses.replace(SMALL, swaps=swaps)
    result = run(tmp_path, size, read_idx_dir(fashion_dir)["test"].images[:128])
    assert not result.failed(), result.failed()[:3]
    assert not result.mixed(), result.mixed()[:3]
    assert {a.version for a in result.answers} == {str(v) for v in range(1, swaps + 2)}, "each version, and only they"
    assert len(result.publications) == swaps and result.swapped is not None and result.swapped > result.published
    assert {a.kind for a in result.answers} == {f"{kind} {n}" for kind, n in KINDS}, "every kind was sent"
    for client in range(SMALL.clients):  # one client's requests follow each other: none goes back a version
        versions = [int(a.version or 0) for a in result.answers if a.client == client]
        assert versions == sorted(versions), versions
    start, warmed, end = result.rss_mb
    assert min(start, warmed, end) > 0 and len(result.rss_timeline) > 2, "the server's memory was read"
