"""TensorFlow's environment, set before its first import: a quiet start, above all on a machine without CUDA."""

from __future__ import annotations

import ctypes.util
import os
from collections.abc import MutableMapping

from bakeoff.components import defaults

LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
# TensorFlow probes CUDA whenever it lists its devices. Without NVIDIA's driver library the probe can only
# fail, and it says so at ERROR level ("failed call to cuInit: ... (303)"), which the log level above keeps.
# Registering the CPU device factory alone skips the probe.
DEVICES_ENV = "TF_ENABLED_DEVICE_TYPES"


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
