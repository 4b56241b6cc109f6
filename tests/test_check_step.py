"""The check step: what a UI or SDK user sets on a compiled pipeline is refused at the first step, in one line in the
UI's terms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bakeoff.components.errors import ERROR_FILE_ENV
from bakeoff.components.steps.check import check
from bakeoff.pipelines.cli.main import main
from tests.conftest import BUCKET, FASHION_MNIST, free_port

pytestmark = pytest.mark.unit

# Four variants to epoch 1, the best two on to epoch 2 (eta 2): rungs stop at 1, 2 and keep 2, 1.
SEARCH = """
search: {halving: {min_epochs: 1, max_epochs: 2, eta: 2}}
defaults: {workers: 1, training: {batch_size: 64}}
variants:
  - {name: a, model: {type: mlp, hidden_units: [8]}}
  - {name: b, model: {type: mlp, hidden_units: [16]}}
  - {name: c, model: {type: mlp, hidden_units: [8]}, training: {learning_rate: 0.01}}
  - {name: d, model: {type: cnn, filters: [4], dense_units: 16}}
"""
HALVING = {
    "min_epochs": 1.0,
    "max_epochs": 2.0,
    "eta": 2.0,
}  # as KFP hands over the compiled-in constant: numbers as floats
RECOMPILE = "or recompile with `bakeoff compile --config ...`"
# What `bakeoff run` sets for SEARCH's rungs under a budget (components/search/deadline.py).
DEADLINE = (
    '{"began": 0, "ends": 900, "epoch_seconds": {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}, "job_seconds": 9.0,'
    ' "step_seconds": 1.0, "before_seconds": 5.0, "select_seconds": 9.0, "stops": [1, 2], "keeps": [2, 1]}'
)


def variant(name: str, epochs: int = 2, workers: int = 1) -> dict:
    return {
        "name": name,
        "model": {"type": "mlp", "hidden_units": [8]},
        "training": {"epochs": epochs},
        "workers": workers,
    }


@pytest.fixture(autouse=True)
def off_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KUBERNETES_SERVICE_HOST", "BAKEOFF_S3_ENDPOINT", "BAKEOFF_S3_INSECURE"):
        monkeypatch.delenv(name, raising=False)


def parameters(tmp_path: Path, **changes: Any) -> dict:
    """The check step's inputs for a run of the SEARCH pipeline that fits it; ``changes`` replace some."""
    return {
        "variants": [variant(name) for name in "abcd"],
        "store": f"file://{tmp_path / 'store'}",
        "s3_endpoint": "",
        "model_name": "fashion-mnist",
        "source": str(FASHION_MNIST),
        "validation_size": 5000,
        "shards": 8,
        "max_train_examples": 0,
        "metric": "val_accuracy",
        "min_improvement": 0.0,
        "force_publish": False,
        "confidence": 0.95,
        "timeout_seconds": 3600,
        "backend": "auto",
        "trainer": "tfjob",
        "halving": HALVING,
        "compiled_variants": 4,
        "deadline": "",
    } | changes


def refusal(capsys: pytest.CaptureFixture, **inputs: Any) -> str:
    """The one line the check step fails with."""
    with pytest.raises(SystemExit) as exit_:
        check(**inputs)
    assert exit_.value.code == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("bakeoff: error: "), line
    return line.removeprefix("bakeoff: error: ")


def test_parameters_that_fit_the_compiled_pipeline_pass_and_nothing_is_written(
    tmp_path: Path, fashion_dir: Path
) -> None:
    # Another learning rate and model for every variant: only the count and the epochs are compiled in.
    edited = [variant(name) | {"training": {"epochs": 2.0, "learning_rate": 0.02}} for name in "wxyz"]
    check(**parameters(tmp_path, variants=edited))
    check(**parameters(tmp_path, deadline=DEADLINE))
    check(**parameters(tmp_path, variants=[variant("solo", epochs=1)], halving={}, compiled_variants=3))
    assert not (tmp_path / "store").exists()


BAD = {
    "fewer variants than compiled": (
        {"variants": [variant("a", epochs=1), variant("b", epochs=1)]},
        "variants: 2 variants given, but this pipeline was compiled for a halving search of 4 variants"
        f" (rungs stop at 1, 2 and keep 2, 1): list 4 variants, {RECOMPILE} for 2",
    ),
    "a variant's epochs off the schedule": (
        {"variants": [variant("a"), variant("b"), variant("x", epochs=1), variant("d")]},
        "variants: variant 'x' has training.epochs 1, but this pipeline was compiled for a halving schedule to epoch 2"
        f" (rungs stop at 1, 2): set training.epochs to 2, {RECOMPILE}",
    ),
    "a bad field": (
        {"variants": [variant("a", workers=0)], "halving": {}},
        "variants: variant 'a': workers: must be at least 1, got 0",
    ),
    "a search space": (
        {"variants": [variant("a") | {"training": {"learning_rate": {"uniform": [0.001, 0.01]}}}], "halving": {}},
        "variants: variant 'a': training.learning_rate: expected float, got {'uniform': [0.001, 0.01]}",
    ),
    "a name twice": (
        {"variants": [variant("a"), variant("a")], "halving": {}},
        "variants: variant 'a': name: duplicate variant name",
    ),
    "none": ({"variants": [], "halving": {}}, "variants: expected a non-empty list of variants, got []"),
    "more workers than shards": (
        {"shards": 2, "variants": [variant(name, workers=3 if name == "c" else 1) for name in "abcd"]},
        "variants: variant 'c': workers=3 exceeds the dataset's 2 shards: lower workers or ingest with more shards",
    ),
    "no shards": ({"shards": 0}, "shards: shards must be at least 1, got 0"),
    "metric": (
        {"metric": "accuracy"},
        "metric: unknown selection metric 'accuracy': use one of val_accuracy, val_loss",
    ),
    "model name": (
        {"model_name": "../x"},
        "model_name: model name '../x' is not usable in a path: use letters, digits, '-', '_' and '.'",
    ),
    "margin": (
        {"min_improvement": 1.5},
        "min_improvement: min improvement 1.5 must be in [0, 1): a margin of the metric, e.g. 0.002",
    ),
    "confidence": (
        {"confidence": 1.0},
        "confidence: confidence 1.0 must be in [0, 1): the paired test's level, e.g. 0.95 (0: any gain)",
    ),
    "trainer": (
        {"trainer": "TrainJob"},
        "trainer: unknown trainer 'TrainJob': use one of tfjob, trainjob (--param trainer=...)",
    ),
    "backend": ({"backend": "k8s"}, "backend: unknown training backend 'k8s': use one of auto, local, kubernetes"),
    "examples": (
        {"max_train_examples": -1},
        "max_train_examples: -1 examples is below 0: give 0 to train on the whole training split, or a positive cap",
    ),
    "deadline": (
        {"timeout_seconds": 0},
        "timeout_seconds: 0 seconds is no deadline for a TFJob: give 1 to 604800 (a week)",
    ),
    "a deadline that costs not every variant": (
        {"deadline": DEADLINE.replace('"d": 1.0', '"x": 1.0')},
        "deadline: costs no epoch of 'd': leave it empty, or let `bakeoff run` set it from its plan",
    ),
    "a deadline that is no deadline": (
        {"deadline": "soon"},
        "deadline: its value: not JSON (Expecting value: line 1 column 1 (char 0)): written by another version of"
        " bakeoff or by hand: rerun what wrote it with this version",
    ),
    "validation": ({"validation_size": 60000}, "validation_size: validation size 60000 must be between 1 and 59999"),
    "source": (
        {"source": "/nonexistent"},
        "source: Fashion-MNIST not found in '/nonexistent' (missing train-images-idx3-ubyte.gz, "
        "train-labels-idx1-ubyte.gz,"
        " t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz): install Debian's dataset-fashion-mnist"
        " (apt-get install dataset-fashion-mnist) or pass --source tfds on a machine with internet",
    ),
    "store": (
        {"store": "ftp://host/x"},
        "store: store 'ftp://host/x' has an unknown scheme 'ftp': use file:///path/to/dir or s3://bucket/prefix",
    ),
}


@pytest.mark.parametrize("changes, line", BAD.values(), ids=BAD.keys())
def test_a_bad_parameter_is_one_line_naming_it_its_value_and_what_to_change(
    changes: dict, line: str, tmp_path: Path, fashion_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    assert refusal(capsys, **parameters(tmp_path, **changes)) == line
    assert not (tmp_path / "store").exists()


def test_in_a_pod_a_folder_store_is_refused_as_no_other_step_would_see_it(
    tmp_path: Path, fashion_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert refusal(capsys, **parameters(tmp_path)) == (
        f"store 'file://{tmp_path / 'store'}' is not one the cluster's steps can reach:"
        " write s3://BUCKET/PREFIX (default s3://mlpipeline/private/{namespace}/bakeoff)"
    )


def test_an_s3_store_is_opened_but_not_written(
    tmp_path: Path,
    fashion_dir: Path,
    s3_server: tuple[str, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """The store and s3_endpoint parameters reach a real S3 server: a wrong bucket or endpoint fails here, a right
    one passes untouched."""
    endpoint, keys = s3_server
    for key, value in keys.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("BAKEOFF_S3_INSECURE", "1")
    store = f"s3://{BUCKET}/{tmp_path.name}"
    check(**parameters(tmp_path, store=store, s3_endpoint=endpoint))
    from bakeoff.components.storage import open_store

    assert open_store(store, endpoint).list("") == []
    assert refusal(capsys, **parameters(tmp_path, store="s3://nope/x", s3_endpoint=endpoint)) == (
        f"store: bucket 'nope' does not exist on '{endpoint}': create it first"
    )
    down = f"127.0.0.1:{free_port()}"
    assert refusal(capsys, **parameters(tmp_path, store=store, s3_endpoint=down)).startswith(
        f"store: S3 endpoint '{down}' is unreachable"
    )


@pytest.mark.filterwarnings(
    "ignore:.*non-Python base image"
)  # the image matters on a cluster; here the venv runs the steps
def test_a_compiled_halving_pipeline_given_other_variants_fails_at_its_first_step_before_any_ingest(
    tmp_path: Path, fashion_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    """The issue's case: the compiled file loaded as the SDK (and the UI) does, run with two variants of one epoch each.

    Before the check step it ingested, then every train task failed with advice about stop epochs.
    """
    from kfp import components, local

    config, compiled, work = tmp_path / "search.yaml", tmp_path / "search.ir.yaml", tmp_path / "work"
    config.write_text(SEARCH)
    assert main(["compile", "--config", str(config), "-o", str(compiled)]) == 0
    pipeline = components.load_component_from_file(str(compiled))
    error_file = tmp_path / "error"
    monkeypatch.setenv(ERROR_FILE_ENV, str(error_file))
    local.init(
        runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(work / "pipeline-root"), enable_caching=False
    )
    two_small = [
        {"name": name, "model": {"type": "mlp", "hidden_units": [8]}, "training": {"epochs": 1}, "workers": 1}
        for name in "xy"
    ]
    with pytest.raises(RuntimeError, match=r"Inner task failed: .*'check'"):
        pipeline(variants=two_small, store=f"file://{tmp_path / 'store'}", s3_endpoint="", max_train_examples=512)
    line = (
        "variants: 2 variants given, but this pipeline was compiled for a halving search of 4 variants"
        f" (rungs stop at 1, 2 and keep 2, 1): list 4 variants, {RECOMPILE} for 2"
    )
    assert error_file.read_text() == line
    assert f"bakeoff: error: {line}\n" in capfd.readouterr().out  # the step's log, as the UI shows it
    assert not (tmp_path / "store").exists()
    assert not [path for path in work.rglob("*") if path.name in ("ingest", "train", "data")], (
        "nothing ingested or trained"
    )
    # The same count, one variant with its own epochs: the line names it and the epochs the rungs need.
    four = [dict(two_small[0], name=name, training={"epochs": 1 if name == "z" else 2}) for name in "wxyz"]
    with pytest.raises(RuntimeError, match=r"Inner task failed: .*'check'"):
        pipeline(variants=four, store=f"file://{tmp_path / 'store'}", s3_endpoint="", max_train_examples=512)
    assert error_file.read_text() == (
        "variants: variant 'z' has training.epochs 1, but this pipeline was compiled for a halving schedule"
        f" to epoch 2 (rungs stop at 1, 2): set training.epochs to 2, {RECOMPILE}"
    )
    assert not (tmp_path / "store").exists()
