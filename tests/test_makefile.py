"""The Makefile's targets as a user calls them: what they print is what bakeoff prints."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent


def test_make_run_passes_bakeoff_s_stdout_through_alone() -> None:
    """`make run ARGS=--json > out.json` must be JSON: make echoes no command on stdout.

    ``-o`` keeps make from installing or calling apt here: the recipe of ``run`` itself is what is under test.
    """
    done = subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv/.installed", "-o", "system", "run", "ARGS=--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.startswith("usage: bakeoff run"), done.stdout.splitlines()[:1]
