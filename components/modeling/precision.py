"""Mixed precision: which one a variant trains at (``training.precision``), and the Keras policy it is built under.

Every family's last layer computes in float32 (``layers.classifier``) and its input layer takes float32 pixels, so the
export serves float32 in and out whatever the network computed in between.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from bakeoff.components.environment import CPUINFO_ENV

AUTO, FLOAT32, BFLOAT16, FLOAT16 = "auto", "float32", "mixed_bfloat16", "mixed_float16"
PRECISIONS = (AUTO, FLOAT32, BFLOAT16, FLOAT16)
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo's names of the CPU units that compute in bfloat16
CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: Path | None = None) -> frozenset[str]:
    """The CPU's feature flags, as /proc/cpuinfo (or ``$BAKEOFF_CPUINFO``) lists them (none where it cannot be read)."""
    try:
        text = (cpuinfo or Path(os.environ.get(CPUINFO_ENV) or CPUINFO)).read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def resolve(requested: str, gpus: int, flags: frozenset[str], bf16_faster: bool | None = None) -> str:
    """The precision a replica trains at: ``requested`` itself unless it is ``auto``; then float16 on a GPU, bfloat16
    on a CPU with bfloat16 units where a measurement at the variant's shape found it faster (``bf16_faster``; None:
    not measured), else float32. bfloat16 without a measurement is no default: on AVX-512 BF16 without AMX it was
    measured from 1.34x faster to no faster, step by step (issue 59)."""
    if requested != AUTO:
        return requested
    if gpus:
        return FLOAT16
    if bf16_faster and has_bf16_units(flags):
        return BFLOAT16
    return FLOAT32


def has_bf16_units(flags: frozenset[str]) -> bool:
    return any(flag in flags for flag in BF16_FLAGS)


def computed_at(requested: str) -> str:
    """What a CPU replica trains a variant written at ``requested`` at, unmeasured: ``auto`` is float32 there."""
    return FLOAT32 if requested == AUTO else requested


@contextlib.contextmanager
def policy(precision: str) -> Iterator[None]:
    """Inside, the layers Keras builds compute at ``precision`` (a resolved one: not ``auto``); after, float32 again."""
    from tf_keras import mixed_precision

    before = mixed_precision.global_policy()
    mixed_precision.set_global_policy(precision)
    try:
        yield
    finally:
        mixed_precision.set_global_policy(before)
