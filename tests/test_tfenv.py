"""TensorFlow's start-up environment: its log level, and no CUDA probe where no NVIDIA driver is installed."""

from __future__ import annotations

import ctypes.util

import pytest

from bakeoff.components import tfenv

pytestmark = pytest.mark.unit


@pytest.fixture
def no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    real = ctypes.util.find_library
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None if name == "cuda" else real(name))


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> None:
    real = ctypes.util.find_library
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libcuda.so.1" if name == "cuda" else real(name))


def test_without_a_driver_only_the_cpu_device_factory_runs_and_errors_still_show(no_driver: None) -> None:
    environ: dict[str, str] = {}
    tfenv.quiet_tensorflow(environ)
    # Level 2 hides INFO and WARNING only: 3 would hide TensorFlow's real errors too.
    assert environ == {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLED_DEVICE_TYPES": "CPU"}


def test_with_a_driver_tensorflow_still_looks_for_gpus(driver: None) -> None:
    environ: dict[str, str] = {}
    tfenv.quiet_tensorflow(environ)
    assert environ == {"TF_CPP_MIN_LOG_LEVEL": "2"}


def test_what_the_user_set_wins(no_driver: None) -> None:
    environ = {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_ENABLED_DEVICE_TYPES": "CPU,GPU"}
    tfenv.quiet_tensorflow(environ)
    assert environ == {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_ENABLED_DEVICE_TYPES": "CPU,GPU"}


def test_debug_keeps_tensorflows_own_log_level(no_driver: None) -> None:
    environ: dict[str, str] = {}
    tfenv.quiet_tensorflow(environ, log_level=False)
    assert environ == {"TF_ENABLED_DEVICE_TYPES": "CPU"}
