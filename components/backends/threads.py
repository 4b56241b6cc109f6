"""How replicas running at once share this machine's cores: the threads each may use.

The local backend caps its replicas with it; the calibration prices a job at the threads its replicas get.
"""

from __future__ import annotations

import os


def thread_cap(replicas: int, concurrent_jobs: int, cores: int | None = None) -> int:
    """Threads per replica so that all concurrently running replicas share the cores."""
    cores = cores or os.cpu_count() or 1
    return max(1, cores // max(1, replicas * concurrent_jobs))
