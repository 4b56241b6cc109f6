"""TensorFlow's start-up environment: its log level, and no CUDA probe where no NVIDIA driver is installed."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

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


IMPORT = """
import sys
from bakeoff.components.tfenv import import_tensorflow
print("before", file=sys.stderr)
import_tensorflow()
print("after", file=sys.stderr)
"""
START_UP_NOTICES = ("absl::InitializeLog", "port.cc", "cudart_stub.cc")


@pytest.mark.long_running
@pytest.mark.parametrize("level", ["2", "0"])
def test_tensorflow_imported_in_a_step_honours_the_log_level_from_its_first_line(level: str) -> None:
    """A step that imports TensorFlow itself (select, serve): absl's lines before its initialisation obey the level;
    at 0 they all show, which proves this TensorFlow writes them."""
    env = {**os.environ, tfenv.LOG_LEVEL_ENV: level, tfenv.DEVICES_ENV: "CPU"}
    done = subprocess.run([sys.executable, "-c", IMPORT], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "before" and lines[-1] == "after", lines
    noise = [line for line in lines if any(notice in line for notice in START_UP_NOTICES)]
    assert (noise == []) == (level == "2"), lines
