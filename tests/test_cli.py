"""The real pipeline through kfp.local, driven from the `bakeoff` command line, and its bad inputs."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BUCKET, free_port

BAKEOFF = str(Path(sys.executable).parent / "bakeoff")
TINY = """
defaults: {workers: 2, training: {epochs: 1, batch_size: 32}}
variants:
  - {name: mlp, model: {type: mlp, hidden_units: [64]}}
  - {name: small_cnn, model: {type: cnn, filters: [8, 16], dense_units: 32}}
"""


def bakeoff(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([BAKEOFF, *args], cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=900)


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


@pytest.fixture(params=["folder", "s3"])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "folder":
        return f"file://{tmp_path / 'store'}"
    request.getfixturevalue("s3_env")
    return f"s3://{BUCKET}/{tmp_path.name}"


def test_pipeline_runs_and_publishes_a_version_that_models_list_shows(tiny_config: Path, store_uri: str, tmp_path: Path) -> None:
    run = bakeoff("run", "--local", "--config", str(tiny_config), "--store", store_uri,
                  "--max-train-examples", "2048", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout)
    assert summary["winner"]["version"] == 1
    assert summary["winner"]["uri"] == f"{store_uri}/models/fashion-mnist/1"
    assert {c["variant"] for c in summary["candidates"]} == {"mlp", "small_cnn"}
    assert summary["winner"]["variant"] == summary["candidates"][0]["variant"]
    for candidate in summary["candidates"]:
        assert candidate["workers"] == 2 and candidate["num_replicas_in_sync"] == 2
        assert set(candidate) >= {"val_accuracy", "val_loss", "epochs", "train_seconds", "examples_per_second", "uri"}
        assert candidate["val_accuracy"] > 0.3
    assert summary["candidates"][0]["val_accuracy"] >= summary["candidates"][1]["val_accuracy"]
    assert 0.3 < summary["winner"]["test_accuracy"] <= 1

    listing = bakeoff("models", "list", "--store", store_uri, "--json", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    (version,) = json.loads(listing.stdout)
    assert version["version"] == 1 and version["run_id"] == summary["run_id"]
    assert version["variant"] == summary["winner"]["variant"]
    assert version["test_accuracy"] == summary["winner"]["test_accuracy"]
    human = bakeoff("models", "list", "--store", store_uri, cwd=tmp_path)
    assert summary["winner"]["variant"] in human.stdout.splitlines()[1]


def test_a_second_run_reuses_the_cached_ingest_and_publishes_the_next_version(tiny_config: Path, tmp_path: Path) -> None:
    args = ("run", "--config", str(tiny_config), "--store", str(tmp_path / "store"), "--max-train-examples", "1024",
            "--epochs", "1", "--workers", "1", "--json")
    first = bakeoff(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    executed = re.compile(r"Executing task (\x1b\[[0-9;]*m)?'ingest'")  # kfp.local colours task names
    assert executed.search(first.stderr)
    second = bakeoff(*args, cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert not executed.search(second.stderr), "same inputs must hit kfp.local's cache for ingest"
    assert json.loads(second.stdout)["winner"]["version"] == json.loads(first.stdout)["winner"]["version"] + 1
    assert {c["workers"] for c in json.loads(second.stdout)["candidates"]} == {1}


def assert_one_line_error(result: subprocess.CompletedProcess, message: str) -> None:
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("bakeoff: error: ") and message in last, last
    assert "Traceback" not in result.stderr.split("bakeoff: error:")[-1]


def test_missing_config(tmp_path: Path) -> None:
    result = bakeoff("run", "--config", str(tmp_path / "none.yaml"), "--store", str(tmp_path / "s"), cwd=tmp_path)
    assert_one_line_error(result, "cannot read config")
    assert not (tmp_path / "s").exists()


def test_malformed_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("variants:\n  - {name: a, model: {type: cnn}, workers: 0}\n")
    result = bakeoff("run", "--config", str(bad), "--store", str(tmp_path / "s"), cwd=tmp_path)
    assert_one_line_error(result, "variant 'a': workers: must be at least 1, got 0")


def test_unwritable_store(tiny_config: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = bakeoff("run", "--config", str(tiny_config), "--store", str(tmp_path / "file" / "store"), cwd=tmp_path)
    assert_one_line_error(result, "is not writable")


def test_dataset_missing_offline(tiny_config: Path, tmp_path: Path) -> None:
    result = bakeoff("run", "--config", str(tiny_config), "--source", str(tmp_path / "nothing"), "--store", str(tmp_path / "s"), cwd=tmp_path)
    assert_one_line_error(result, "install Debian's dataset-fashion-mnist")


def test_s3_endpoint_down(tiny_config: Path, tmp_path: Path, s3_env: str) -> None:
    result = bakeoff("run", "--config", str(tiny_config), "--store", "s3://bakeoff/x",
                     "--s3-endpoint", f"127.0.0.1:{free_port()}", cwd=tmp_path)
    assert_one_line_error(result, "is unreachable")


def test_s3_wrong_keys(tiny_config: Path, tmp_path: Path, s3_env: str) -> None:
    result = bakeoff("models", "list", "--store", "s3://bakeoff/x", cwd=tmp_path, env={"AWS_SECRET_ACCESS_KEY": "wrong"})
    assert_one_line_error(result, "refused the credentials")


def test_a_crashing_replica_fails_the_run_and_publishes_nothing(tiny_config: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = bakeoff("run", "--config", str(tiny_config), "--store", str(store), "--max-train-examples", "10", cwd=tmp_path)
    assert_one_line_error(result, "10 training examples make no full global batch of 64")
    assert "TFJob 'bakeoff-" in result.stderr.strip().splitlines()[-1]
    assert not (store / "models").exists()
