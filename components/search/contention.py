"""How much of this machine's cores other processes used while a run trained: the cores' busy time (Linux
``/proc/stat``, the hypervisor's steal included) less this process's and its reaped children's CPU time. A run that
shared the cores trained slower than the machine does alone, and its steps would misprice the next plan."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from bakeoff.components.environment import CPU_STAT_ENV

PROC_STAT = Path("/proc/stat")
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # of the "cpu" line: user, nice, system, irq, softirq, steal (guest is in user)


@dataclasses.dataclass(frozen=True)
class CpuSample:
    """The machine's and this process tree's CPU time at one moment."""

    busy_seconds: float  # every core's, since boot
    own_seconds: float  # this process's and its waited-for descendants' (a child still running counts when reaped)
    at: float  # time.monotonic()


def sample(stat: Path | None = None) -> CpuSample | None:
    """Now, from ``stat`` (else ``$BAKEOFF_CPU_STAT``, else ``/proc/stat``); None where the kernel keeps no
    ``/proc/stat`` (not Linux): nothing can be said of others there."""
    stat = stat or Path(os.environ.get(CPU_STAT_ENV) or PROC_STAT)
    try:
        fields = stat.read_text().splitlines()[0].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    busy = sum(int(fields[1 + index]) for index in BUSY_FIELDS) / ticks
    own = os.times()
    return CpuSample(busy, own.user + own.system + own.children_user + own.children_system, time.monotonic())


def others_share(since: CpuSample | None, now: CpuSample | None) -> float:
    """The share of all cores' time between two samples that went to other processes (0 without samples)."""
    if since is None or now is None or now.at <= since.at:
        return 0.0
    others = (now.busy_seconds - since.busy_seconds) - (now.own_seconds - since.own_seconds)
    return max(0.0, others / ((now.at - since.at) * (os.cpu_count() or 1)))
