"""The installed distribution: one import package, `bakeoff`, over every package folder of the repository.

`components` and `pipelines` are taken on PyPI by unrelated projects; a wheel that installed them at the top level
would shadow them, or be shadowed, in a user's environment (pyproject.toml's [tool.setuptools] maps the folders).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("components", "pipelines")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The names in the wheel that `pip install .` would install, built from a copy of the sources."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source)
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", dist, source],
        check=True,
        capture_output=True,
    )
    (built,) = dist.glob("*.whl")
    with zipfile.ZipFile(built) as archive:
        return archive.namelist()


def test_the_only_top_level_import_package_is_bakeoff(wheel: list[str]) -> None:
    tops = {name.split("/")[0] for name in wheel if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"bakeoff"}


def test_every_package_folder_and_the_pipeline_files_are_installed_under_bakeoff(wheel: list[str]) -> None:
    expected = {
        PurePosixPath("bakeoff", path.relative_to(ROOT).as_posix())
        for folder in FOLDERS
        for pattern in ("**/*.py", "*.yaml", "*.schema.json")
        for path in (ROOT / folder).glob(pattern)
        if "__pycache__" not in path.parts
    }
    installed = {PurePosixPath(name) for name in wheel}
    assert expected - installed == set(), "add the missing package to [tool.setuptools] packages in pyproject.toml"
