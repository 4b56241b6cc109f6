"""The kfp lane's frame, without a checkout: which checkouts it finds, and the one line it says when there are none."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kfp import sources

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
GO_MOD = (
    "module github.com/kubeflow/pipelines\n\ngo 1.24.10\n\n"
    "require (\n\tgithub.com/argoproj/argo-workflows/{major} {version}\n)\n"
)


def kfp_checkout(path: Path, tag: str, argo: str = "v3.7.8", major: str = "v3") -> Path:
    """The files of a kubeflow/pipelines checkout that the lane reads to know it: its release and its Argo pin."""
    (path / "backend/src/apiserver").mkdir(parents=True)
    (path / "VERSION").write_text(tag)
    (path / "go.mod").write_text(GO_MOD.format(major=major, version=argo))
    return path


def argo_checkout(path: Path) -> Path:
    (path / "cmd/argoexec").mkdir(parents=True)
    return path


def lane_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in (sources.KFP_ENV, sources.ARGO_ENV)}
    return {**env, sources.CACHE_ENV: str(tmp_path / "kfp"), **extra}


def run_sources(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tests.kfp.sources"]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)


def test_without_a_checkout_the_lane_says_in_one_line_that_it_did_not_run(tmp_path: Path) -> None:
    done = run_sources(lane_env(tmp_path))
    assert done.returncode == sources.SKIPPED, done.stderr
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert "kfp lane did not run (not a pass)" in line and "KFP_SOURCE" in line
    assert str(tmp_path / "kfp") in line  # where to unpack a tag


def test_every_release_in_the_cache_is_found_with_the_argo_its_go_mod_pins(tmp_path: Path) -> None:
    for tag in ("2.17.0", "2.16.0"):
        kfp_checkout(tmp_path / "kfp" / tag / "src", tag, *(("v4.0.5", "v4") if tag == "2.17.0" else ()))
    argo_checkout(tmp_path / "argo/v3.7.8/src")
    argo_checkout(tmp_path / "argo/v4.0.5/src")
    found = sources.find(lane_env(tmp_path))
    assert [(release.tag, release.argo_version) for release in found] == [("2.16.0", "v3.7.8"), ("2.17.0", "v4.0.5")]
    assert found[1].argo_module == "github.com/argoproj/argo-workflows/v4"
    assert found[0].argo == tmp_path / "argo/v3.7.8/src"


def test_kfp_source_is_used_alone_and_argo_source_with_it(tmp_path: Path) -> None:
    kfp_checkout(tmp_path / "kfp/2.15.0/src", "2.15.0")  # in the cache, and not named: not used
    named = kfp_checkout(tmp_path / "pipelines", "2.16.0")
    argo = argo_checkout(tmp_path / "argo-workflows")
    [found] = sources.find(lane_env(tmp_path, KFP_SOURCE=str(named), ARGO_SOURCE=str(argo)))
    assert (found.tag, found.kfp, found.argo) == ("2.16.0", named, argo)


def test_a_named_folder_that_is_no_checkout_is_an_error_not_a_skip(tmp_path: Path) -> None:
    done = run_sources(lane_env(tmp_path, KFP_SOURCE=str(tmp_path)))
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: {tmp_path} is not a kubeflow/pipelines checkout")
    assert "git clone --branch 2.16.0 https://github.com/kubeflow/pipelines" in line


def test_a_missing_argo_checkout_names_the_version_to_get(tmp_path: Path) -> None:
    kfp_checkout(tmp_path / "kfp/2.16.0/src", "2.16.0")
    with pytest.raises(sources.SourceError, match=r"pins Argo Workflows v3\.7\.8.*set ARGO_SOURCE"):
        sources.find(lane_env(tmp_path))


def test_an_argo_checkout_at_another_tag_is_refused(tmp_path: Path) -> None:
    kfp = kfp_checkout(tmp_path / "kfp/2.16.0/src", "2.16.0")
    argo = argo_checkout(tmp_path / "argo-workflows")
    git = ["git", "-C", str(argo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run([*git, "tag", "v3.7.7"], check=True)
    with pytest.raises(sources.SourceError, match=r"is at v3\.7\.7, and the KFP release pins Argo v3\.7\.8"):
        sources.find(lane_env(tmp_path, KFP_SOURCE=str(kfp), ARGO_SOURCE=str(argo)))
