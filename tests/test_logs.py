"""bakeoff's log lines: every component's line reaches stderr whole and once through the one configuration
(components/logs.py), whatever the libraries beside it did to the root logger."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.components.environment import ERROR_FILE_ENV, PROGRESS_DIR_ENV
from bakeoff.components.logs import LINES_FILE
from bakeoff.components.progress import Follower
from bakeoff.components.search import calibration_cache
from tests.images import write_rgb_folder

pytestmark = pytest.mark.unit

# A process as kfp's executor sets up a step's: the root logger writes kfp's own lines on stdout in its format
# (kfp/dsl/executor_main.py), before bakeoff configures its lines twice (the CLI's main, then reported()).
STEP = """
import logging, sys
from pathlib import Path
logging.basicConfig(stream=sys.stdout, format="[KFP Executor %(levelname)s]: %(message)s", level=logging.INFO)
from bakeoff.components import logs
from bakeoff.components.data import artifact
from bakeoff.components.errors import BakeoffError, reported
from bakeoff.components.search import calibration_cache
logs.configure()
with reported():
    artifact.build(sys.argv[1], Path(sys.argv[2]), 3, 1, 0)  # its progress at INFO
    calibration_cache.read(Path(sys.argv[3]))  # a notice at WARNING
    raise BakeoffError("the one line")
"""


def run_step(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """STEP on a folder of 6 images and a broken cost cache, with ``env`` added: the process, the images' folder
    and the cache's file."""
    images = write_rgb_folder(tmp_path / "images", per_class=2, size=8)
    broken = tmp_path / calibration_cache.FILE
    broken.write_text("[]")
    step = subprocess.run(
        [sys.executable, "-c", STEP, str(images), str(tmp_path / "out"), str(broken)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert step.returncode == 1, step.stderr
    return step, images, broken


def test_a_step_s_lines_reach_stderr_once_each_as_they_read_beside_kfp_s_root_logger(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    error_file = tmp_path / "error"
    step, images, broken = run_step(tmp_path, {ERROR_FILE_ENV: str(error_file)})
    assert calibration_cache.read(broken) is None
    notice = capsys.readouterr().err  # the same line in this process, which conftest.py configures as the CLI does
    assert notice.startswith(f"bakeoff: measuring this machine's costs again: {broken}: ") and notice.count("\n") == 1
    assert step.stdout == "", "bakeoff's lines went up to the root logger as well"
    lines = step.stderr.splitlines()
    assert lines[0] == f"ingest: {images}: 3 classes, 6 images (train 4, validation 1, test 1)", lines
    progress = [line.split(" (")[0] for line in lines[1:-2]]  # each line once, the last at the whole
    assert progress == sorted(set(progress)) and progress[-1] == "ingest: 6/6 images read and written", lines
    assert lines[-2:] == [notice.rstrip("\n"), "bakeoff: error: the one line"]
    assert error_file.read_text() == "the one line"


def test_inside_a_local_run_a_step_s_lines_also_go_to_the_run_s_folder_but_its_error_line(tmp_path: Path) -> None:
    """A step started by `bakeoff run` (its progress folder in the environment) logs on stderr as anywhere else, and
    appends each line below ERROR to the folder's lines, for `run` to show apart from kfp.local's output."""
    folder = tmp_path / "run"
    folder.mkdir()
    step, _, _ = run_step(tmp_path, {PROGRESS_DIR_ENV: str(folder)})
    lines = step.stderr.splitlines()
    assert lines[0].startswith("ingest: ") and lines[-1] == "bakeoff: error: the one line", lines
    said = [entry.line for entry in Follower(folder).read()]
    assert said == lines[:-1], "each line but the error, once, in order"
    assert os.listdir(folder) == [LINES_FILE]
