"""TensorFlow's environment, set before its first import: a quiet start, above all on a machine without CUDA."""

from __future__ import annotations

import ctypes.util
import os
import re
import sys
import tempfile
from collections.abc import Mapping, MutableMapping

from bakeoff.components import defaults
from bakeoff.components.environment import DEVICES_ENV, LOG_LEVEL_ENV

# TensorFlow probes CUDA whenever it lists its devices. Without NVIDIA's driver library the probe can only
# fail, and it says so at ERROR level ("failed call to cuInit: ... (303)"), which the log level above keeps.
# Registering the CPU device factory alone skips the probe.
# absl writes what TensorFlow logs before absl's initialisation (oneDNN's notice, "Could not find cuda drivers")
# straight to stderr, under this notice and below TensorFlow's own level filter: a replica's reader filters them.
ABSL_PREINIT_NOTICE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# absl's line prefix: severity, mmdd hh:mm:ss.micros, thread, file:line] (absl/log/internal/log_format.cc); before
# its initialisation the date is 0000 00:00 and the seconds count from the epoch
_ABSL_LINE = re.compile(r"([IWEF])\d{4} \d\d:\d\d:\d+\.\d{6}\s+\d+ [^\s\]]+:\d+\] ")
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}


def has_cuda_driver() -> bool:
    """Whether the loader finds NVIDIA's driver library (libcuda), without loading it."""
    return ctypes.util.find_library("cuda") is not None


def quiet_tensorflow(environ: MutableMapping[str, str] = os.environ, log_level: bool = True) -> None:
    """Sets what the user has not: the log level (``log_level``), and CPU devices only where CUDA cannot run.

    Children inherit it: call it before TensorFlow's first import in this process or the ones it starts.
    """
    if log_level:
        environ.setdefault(LOG_LEVEL_ENV, defaults.TF_LOG_LEVEL)
    if not has_cuda_driver():
        environ.setdefault(DEVICES_ENV, "CPU")


def log_level(environ: Mapping[str, str] = os.environ) -> int:
    """The level a replica started with ``environ`` runs at: its own, else the one ``quiet_tensorflow`` sets."""
    try:
        return int(environ.get(LOG_LEVEL_ENV, defaults.TF_LOG_LEVEL))
    except ValueError:  # TensorFlow reads a level it cannot parse as 0
        return 0


def shown(line: str, level: int) -> bool:
    """Whether a replica's log ``line`` passes TF_CPP_MIN_LOG_LEVEL ``level``; lines not from absl always do."""
    if line == ABSL_PREINIT_NOTICE:
        return level < 1
    severity = _ABSL_LINE.match(line)
    return severity is None or _SEVERITY[severity[1]] >= level


def import_tensorflow(environ: Mapping[str, str] = os.environ) -> None:
    """Imports TensorFlow in this process with absl's pre-initialisation lines held to the log level (``shown``).

    C++ writes them to file descriptor 2 while TensorFlow's libraries load, so the import runs with that descriptor
    on a temporary file, whose lines are passed on to stderr afterwards when shown (all of them if the import fails).
    """
    if "tensorflow" in sys.modules:
        return
    level = log_level(environ)
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        except BaseException:
            level = 0
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            for line in held.read().decode("utf-8", "replace").splitlines():
                if shown(line, level):
                    print(line, file=sys.stderr)  # noqa: T201 (absl's own lines, passed on as they were)
