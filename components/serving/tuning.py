"""The model server process's speed settings: the garbage collector, TensorFlow's threads, uvloop."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
from pathlib import Path

from bakeoff.components.errors import BakeoffError
from bakeoff.components.modeling.savedmodel import mirror_averaged
from bakeoff.components.serving.versions import read_manifest
from bakeoff.components.spec import from_dict


def settle_heap() -> None:
    """Takes what lives now (TensorFlow, KServe, the loaded versions) out of the garbage collector's walks, and gives
    the memory freed meanwhile back to the system.

    Full collections otherwise walk all of it while requests wait: pauses of
    0.2-0.7 s every few seconds under 8 clients sending 64-image batches.
    """
    gc.unfreeze()  # an earlier freeze's objects are looked at again, so a replaced version's cycles are freed
    gc.collect()
    gc.freeze()
    trim_malloc()


def trim_malloc() -> None:
    """glibc's malloc_trim: the free pages of every arena go back to the system.

    glibc keeps what a process frees for its next allocations, and after a version swap that is the replaced
    version's graphs and buffers and the loading's temporaries: the server kept 5-9 MB a swap of the soak's model, 1 %
    of its memory each, which this gives back once the replaced version is gone (benchmarks/journal.md, "The soak's
    memory across swaps"). A no-op where malloc is not glibc's (musl; tcmalloc preloaded, where this trims glibc's
    unused heap).
    """
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


def intra_op_threads(path: Path, max_batch: int) -> int | None:
    """The threads each operation of the model in ``path`` may use: half the cores where its signatures run two views
    of every image (a bakeoff export that averages mirrors) and requests merge, else None (TensorFlow's own choice:
    all of them).

    The two views are independent halves of the graph, which TensorFlow runs side by side: held to their half of the
    cores, its operations stop splitting small batches across threads, and a call of a few images takes about half
    the time while one of 64 takes no longer. Unmerged (``max_batch`` 1), calls overlap, and TensorFlow's threads
    served more (benchmarks/results.md, "Threads for the served model"). Set once per process: a newer version
    swapped in keeps them.
    """
    if max_batch == 1:
        return None
    manifest = read_manifest(path)
    try:
        return threads_for(mirror_averaged(from_dict(manifest.spec).training)) if manifest else None
    except BakeoffError:  # a spec this bakeoff cannot read
        return None


def threads_for(mirrored: bool) -> int | None:
    """``intra_op_threads``'s rule for a model that does or does not average mirrors."""
    return max(1, (os.cpu_count() or 1) // 2) if mirrored else None


def fast_event_loop() -> None:
    """uvloop under KServe's servers where it is installed (uvicorn[standard], KServe's own requirement: all but
    Windows). KServe starts them with a plain asyncio.run, and since 0.36 uvicorn applies its loop setting (KServe's
    --event_loop, "auto": uvloop) only in its own run: KServe's servers ran on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
