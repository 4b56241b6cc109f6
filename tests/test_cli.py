"""The real pipeline through kfp.local, driven from the `bakeoff` command line, and its bad inputs."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.components.storage import open_store, registry
from bakeoff.components.storage.records import PublishedVersion, SelectionBasis, Summary
from tests.conftest import BUCKET, free_port
from tests.test_report import assert_select_artifacts

pytestmark = pytest.mark.unit

BAKEOFF = str(Path(sys.executable).parent / "bakeoff")
TINY = """
defaults: {workers: 2, training: {epochs: 1, batch_size: 32}}
variants:
  - {name: mlp, model: {type: mlp, hidden_units: [64]}}
  - {name: small_cnn, model: {type: cnn, filters: [8, 16], dense_units: 32}}
"""
# Which way each metric is better, written out here rather than read from the code under test.
BETTER = {"val_accuracy": "max", "val_loss": "min"}
INGEST_EXECUTED = re.compile(r"^task ingest: started$", re.M)  # a cached ingest starts no task


def bakeoff(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BAKEOFF, *args], cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=900
    )


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


@pytest.fixture
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of the kind the test is parametrized with: "folder" or "s3"."""
    if request.param == "folder":
        return f"file://{tmp_path / 'store'}"
    request.getfixturevalue("s3_env")
    return f"s3://{BUCKET}/{tmp_path.name}"


@pytest.mark.training
@pytest.mark.parametrize("store_uri, metric", [("folder", "val_accuracy"), ("s3", "val_loss")], indirect=["store_uri"])
def test_pipeline_runs_and_publishes_the_best_by_the_metric_with_the_documented_json(
    tiny_config: Path, store_uri: str, metric: str, tmp_path: Path
) -> None:
    """`run --metric M --json` publishes the candidate best by M, and prints a Summary record (read strictly: its
    fields and types)."""
    run = bakeoff(
        "run",
        "--config",
        str(tiny_config),
        "--store",
        store_uri,
        "--metric",
        metric,
        "--max-train-examples",
        "2048",
        "--json",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    summary = Summary.from_json(run.stdout, "run --json")
    assert summary.to_json() == run.stdout.strip()
    assert summary.promotion.champion is None  # a fresh store: no champion yet

    assert summary.winner.version == 1
    assert summary.winner.uri == f"{store_uri}/models/fashion-mnist/1"
    # The run ends by saying how to serve what it published.
    assert f"serve it: bakeoff serve --store {store_uri} --model-name fashion-mnist" in run.stderr.splitlines()[-1]
    assert {c.variant for c in summary.candidates} == {"mlp", "small_cnn"}
    better = BETTER[metric]
    best = (max if better == "max" else min)(summary.candidates, key=lambda c: c.score(metric))
    assert summary.winner.variant == best.variant
    assert summary.winner.val_accuracy == best.val_accuracy
    scores = [c.score(metric) for c in summary.candidates]
    assert scores == sorted(scores, reverse=better == "max"), f"candidates are not best first by {metric}"
    for candidate in summary.candidates:
        assert candidate.workers == 2 and candidate.num_replicas_in_sync == 2
        assert candidate.val_accuracy > 0.3
        # 32 steps of 64 per execution: one execution, no steady state; the rate is the whole fit's, never 0.
        assert candidate.examples_per_second > 0
    assert 0.3 < summary.winner.test_accuracy <= 1
    # The metric reached selection even where both metrics agree on the winner.
    (manifest,) = registry.list_versions(open_store(store_uri), "fashion-mnist")
    assert manifest.selection == SelectionBasis(metric, better, [c.variant for c in summary.candidates])

    listing = bakeoff("models", "list", "--store", store_uri, "--json", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    (version,) = [PublishedVersion.from_dict(entry, "models list --json") for entry in json.loads(listing.stdout)]
    assert version == PublishedVersion.of(manifest)
    assert version.version == 1 and version.run_id == summary.run_id
    assert version.variant == best.variant
    assert version.test_accuracy == summary.winner.test_accuracy
    human = bakeoff("models", "list", "--store", store_uri, cwd=tmp_path)
    assert best.variant in human.stdout.splitlines()[1]

    # What people look at: select's KFP artifacts, and `bakeoff report` of the run from the store.
    assert_select_artifacts(tmp_path / ".bakeoff", store_uri, summary)
    report = bakeoff("report", "latest", "--store", store_uri, "-o", "report.html", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert f"<h1>bakeoff run {summary.run_id}</h1>" in (tmp_path / "report.html").read_text()


def change_one_pixel(source: Path) -> None:
    """Adds one to the first pixel of the first training image, in the gzipped IDX file in place."""
    path = source / "train-images-idx3-ubyte.gz"
    data = bytearray(gzip.decompress(path.read_bytes()))
    data[16] = (data[16] + 1) % 256  # the first byte after the 16-byte IDX header
    path.write_bytes(gzip.compress(bytes(data)))


@pytest.mark.training
def test_the_cached_ingest_is_reused_for_the_same_files_and_not_after_a_pixel_changed(
    tiny_config: Path, fashion_dir: Path, tmp_path: Path
) -> None:
    """A rerun on the same files at the same path reuses kfp.local's cached ingest; one changed pixel there re-ingests.

    The reruns also pass the promotion gate's flags: a margin no challenger meets keeps the champion (exit 0,
    nothing published), and --force-publish publishes regardless.
    """
    source = tmp_path / "fashion-mnist"
    shutil.copytree(fashion_dir, source)
    store = tmp_path / "store"
    args = (
        "run",
        "--config",
        str(tiny_config),
        "--store",
        str(store),
        "--source",
        str(source),
        "--max-train-examples",
        "1024",
        "--epochs",
        "1",
        "--workers",
        "1",
        "--json",
    )
    first = bakeoff(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert INGEST_EXECUTED.search(first.stderr)
    # No challenger beats the champion by 0.99: the run keeps version 1, says so, and succeeds.
    second = bakeoff(*args, "--min-improvement", "0.99", cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert not INGEST_EXECUTED.search(second.stderr), "same inputs must hit kfp.local's cache for ingest"
    kept = Summary.from_json(second.stdout, "run --json")
    assert kept.winner.version is None and kept.promotion.published is False
    assert kept.promotion.message.startswith("kept version 1 (val_accuracy ")
    assert kept.promotion.message in second.stderr  # the leaderboard says it too
    assert {c.workers for c in kept.candidates} == {1}

    change_one_pixel(source)
    third = bakeoff(*args, "--force-publish", cwd=tmp_path)
    assert third.returncode == 0, third.stderr[-3000:]
    assert INGEST_EXECUTED.search(third.stderr), "a changed file at the same path must not reuse the cached ingest"
    assert Summary.from_json(third.stdout, "run --json").winner.version == 2
    listing = bakeoff("models", "list", "--store", str(store), "--json", cwd=tmp_path)
    fingerprints = [
        PublishedVersion.from_dict(entry, "models list --json").dataset_fingerprint
        for entry in json.loads(listing.stdout)
    ]
    assert len(fingerprints) == 2 and fingerprints[0] != fingerprints[1]


@pytest.mark.parametrize("state", ["missing", "empty"])
def test_models_list_on_a_store_without_models_says_so_and_succeeds(state: str, tmp_path: Path) -> None:
    """`models list` on a missing or empty store: one note on stderr, exit 0, `[]` on stdout with --json, nothing
    created."""
    store = tmp_path / "store"
    if state == "empty":
        store.mkdir()
    for flags, stdout in (((), ""), (("--json",), "[]")):
        listing = bakeoff("models", "list", "--store", str(store), *flags, cwd=tmp_path)
        assert listing.returncode == 0, listing.stderr
        assert listing.stdout.strip() == stdout
        assert listing.stderr.strip() == f"no published versions of 'fashion-mnist' in {store}"
    assert store.exists() == (state == "empty")


def test_run_serve_serves_as_bakeoff_serve_does_by_default(tmp_path: Path) -> None:
    """`run --serve` documents itself as `bakeoff serve`: the same server settings as serve's defaults, for the
    run's model."""
    from bakeoff.pipelines.cli.local import winner_settings
    from bakeoff.pipelines.cli.main import parser
    from bakeoff.pipelines.cli.serving import serve_settings

    for name in ("fashion-mnist", "shoes"):
        store = ("--store", str(tmp_path / "store"), "--model-name", name)
        run_args = parser().parse_args(["run", *store, "--serve"])
        assert winner_settings(run_args) == serve_settings(parser().parse_args(["serve", *store]))


def assert_one_line_error(result: subprocess.CompletedProcess, message: str) -> None:
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("bakeoff: error: ") and message in last, last
    assert "Traceback" not in result.stderr.split("bakeoff: error:")[-1]


@pytest.mark.parametrize(
    "flags, refusal",
    [
        (("--model-name", "../x"), r"bakeoff: error: model name '\.\./x' is not usable in a path"),
        # either argparse's usage error for --metric's choices, or bakeoff's own line
        (
            ("--metric", "bogus"),
            r"(bakeoff run: error: argument --metric: invalid choice: 'bogus'|bakeoff: error: unknown selection "
            r"metric 'bogus')",
        ),
    ],
)
def test_a_bad_model_name_or_metric_fails_before_ingest(
    tiny_config: Path, tmp_path: Path, flags: tuple[str, str], refusal: str
) -> None:
    """A bad --model-name or --metric fails in one error line before any pipeline work: no work dir, no store."""
    result = bakeoff(
        "run",
        "--config",
        str(tiny_config),
        "--store",
        str(tmp_path / "store"),
        "--work-dir",
        str(tmp_path / "work"),
        "--max-train-examples",
        "10",
        *flags,
        cwd=tmp_path,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and re.match(refusal, errors[0]), result.stderr[-3000:]
    assert not (tmp_path / "work").exists() and not (tmp_path / "store").exists()


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
    result = bakeoff(
        "run",
        "--config",
        str(tiny_config),
        "--source",
        str(tmp_path / "nothing"),
        "--store",
        str(tmp_path / "s"),
        cwd=tmp_path,
    )
    assert_one_line_error(result, "install Debian's dataset-fashion-mnist")


def test_s3_endpoint_down(tiny_config: Path, tmp_path: Path, s3_env: str) -> None:
    result = bakeoff(
        "run",
        "--config",
        str(tiny_config),
        "--store",
        "s3://bakeoff/x",
        "--s3-endpoint",
        f"127.0.0.1:{free_port()}",
        cwd=tmp_path,
    )
    assert_one_line_error(result, "is unreachable")


def test_s3_wrong_keys(tiny_config: Path, tmp_path: Path, s3_env: str) -> None:
    result = bakeoff(
        "models", "list", "--store", "s3://bakeoff/x", cwd=tmp_path, env={"AWS_SECRET_ACCESS_KEY": "wrong"}
    )
    assert_one_line_error(result, "refused the credentials")


@pytest.mark.training
def test_a_crashing_replica_fails_the_run_and_publishes_nothing(tiny_config: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = bakeoff(
        "run", "--config", str(tiny_config), "--store", str(store), "--max-train-examples", "10", cwd=tmp_path
    )
    assert_one_line_error(result, "10 training examples make no full global batch of 64")
    assert "TFJob 'bakeoff-" in result.stderr.strip().splitlines()[-1]
    assert not (store / "models").exists()
