"""The memory allocator the local backend starts replicas with: tcmalloc when the machine has it.

TensorFlow frees and reallocates the same multi-megabyte tensors every step;
glibc's malloc serves them from fresh mmaps and returns them on free, so every
step page-faults and zeroes them again, while tcmalloc keeps the memory (the
speed-up is in benchmarks/results.md). Preloaded by loader name, so it works
on any architecture (Debian's ``libtcmalloc-minimal4``; the image has it too).
"""

from __future__ import annotations

import ctypes.util
from collections.abc import Mapping

from bakeoff.components.environment import PRELOAD_ENV

TCMALLOC = "tcmalloc_minimal"
INSTALL_HINT = "apt-get install libtcmalloc-minimal4"


def tcmalloc() -> str | None:
    """The loader name of tcmalloc on this machine, or None."""
    return ctypes.util.find_library(TCMALLOC)


def with_tcmalloc(env: Mapping[str, str], library: str | None) -> dict[str, str]:
    """``env`` with ``library`` preloaded in front of what LD_PRELOAD already holds."""
    preload = env.get(PRELOAD_ENV, "")
    if not library or library in preload.split():
        return dict(env)
    return {**env, PRELOAD_ENV: f"{library} {preload}".strip()}


def in_use() -> str:
    """Which malloc this process runs on ("tcmalloc" or "default"), recorded in a replica's metrics."""
    with open("/proc/self/maps") as maps:
        return "tcmalloc" if "libtcmalloc" in maps.read() else "default"
