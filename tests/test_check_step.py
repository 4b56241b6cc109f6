"""The check step: what a UI or SDK user sets on a compiled pipeline is refused at the first step, in one line in the
UI's terms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bakeoff.components.environment import ERROR_FILE_ENV
from bakeoff.components.steps.check import check
from bakeoff.pipelines.cli.main import main
from tests.conftest import BUCKET, FASHION_MNIST, free_port
from tests.images import write_rgb_folder

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
NO_HALVING = {"min_epochs": 0, "max_epochs": 0}  # each variant trains its own epochs
# What `bakeoff run` sets for SEARCH's rungs under a budget (components/search/deadline.py).
DEADLINE = (
    '{"pipeline_started": 0, "ends": 900, "epoch_seconds": {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0},'
    ' "job_seconds": 9.0, "step_seconds": 1.0, "before_seconds": 5.0, "select_seconds": 9.0,'
    ' "stops": [1, 2], "keeps": [2, 1]}'
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
        "image_size": [],
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
        "min_epochs": 1,
        "max_epochs": 2,
        "eta": 2,
        "rungs": 9,
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


def test_whatever_can_run_passes_and_nothing_is_written(tmp_path: Path, fashion_dir: Path) -> None:
    """Any number of variants, each with its own epochs, under any halving within its bounds: nothing is compiled in
    but the most rungs, which 256 variants at eta 2 fill."""
    edited = [variant(name) | {"training": {"epochs": 2.0, "learning_rate": 0.02}} for name in "wxyz"]
    check(**parameters(tmp_path, variants=edited))
    check(**parameters(tmp_path, deadline=DEADLINE))
    check(**parameters(tmp_path, variants=[variant("solo", epochs=1)], **NO_HALVING))
    check(**parameters(tmp_path, variants=[variant("a", epochs=5), variant("b", epochs=1)], min_epochs=3, max_epochs=3))
    many = [variant(f"v{index}") for index in range(256)]
    check(**parameters(tmp_path, variants=many, min_epochs=1, max_epochs=1000, eta=2, image_size=[1024.0, 8.0]))
    assert not (tmp_path / "store").exists()


def test_the_plan_the_rungs_start_from(tmp_path: Path, fashion_dir: Path) -> None:
    """With halving every variant's schedule is max_epochs and rung 0 trains to min_epochs, or straight to max_epochs
    for a lone variant; without, each keeps its own epochs (stop epoch 0)."""
    mixed = [variant("a", epochs=5), variant("b", epochs=1)]
    scheduled, epochs = check(**parameters(tmp_path, variants=mixed, min_epochs=3, max_epochs=9, eta=3))
    assert [v["training"]["epochs"] for v in scheduled] == [9, 9] and epochs == 3
    assert [v["name"] for v in scheduled] == ["a", "b"]
    assert check(**parameters(tmp_path, variants=mixed[:1], min_epochs=3, max_epochs=9))[1] == 9
    own, epochs = check(**parameters(tmp_path, variants=mixed, **NO_HALVING))
    assert [v["training"]["epochs"] for v in own] == [5, 1] and epochs == 0


BAD = {
    "a bad field": (
        {"variants": [variant("a", workers=0)]},
        "variants: variant 'a': workers: must be at least 1, got 0",
    ),
    "a search space": (
        {"variants": [variant("a") | {"training": {"learning_rate": {"uniform": [0.001, 0.01]}}}]},
        "variants: variant 'a': training.learning_rate: expected float, got {'uniform': [0.001, 0.01]}",
    ),
    "a name twice": (
        {"variants": [variant("a"), variant("a")]},
        "variants: variant 'a': name: duplicate variant name",
    ),
    "none": ({"variants": []}, "variants: expected a non-empty list of variants, got []"),
    "more rungs than compiled": (
        {"rungs": 2, "max_epochs": 8},
        "variants: 4 variants from 1 to 8 epochs at eta 2 take 3 rungs; this pipeline holds 2: raise min_epochs or"
        " eta, or list fewer variants",
    ),
    "eta below 2": ({"eta": 1}, "eta: must be at least 2, got 1"),
    "min_epochs above max_epochs": ({"min_epochs": 3, "max_epochs": 2}, "max_epochs: must be at least 3, got 2"),
    "halving half off": ({"min_epochs": 0, "max_epochs": 2}, "min_epochs: must be at least 1, got 0"),
    "max_epochs past the limit": ({"max_epochs": 1001}, "max_epochs: must be at most 1000, got 1001"),
    "image_size too small": (
        {"image_size": [4, 4]},
        "image_size: [4, 4] is no image size: give [] for the source's own size, or [HEIGHT, WIDTH] with each side"
        " 8 to 1024 pixels",
    ),
    "image_size of one side": (
        {"image_size": [64]},
        "image_size: [64] is no image size: give [] for the source's own size, or [HEIGHT, WIDTH] with each side"
        " 8 to 1024 pixels",
    ),
    "image_size not whole": (
        {"image_size": [32.5, 32]},
        "image_size: [32.5, 32] is no image size: give [] for the source's own size, or [HEIGHT, WIDTH] with each"
        " side 8 to 1024 pixels",
    ),
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
        "source: source '/nonexistent' is not a folder, an s3:// prefix or tfds:NAME: give a folder of class folders,"
        " s3://BUCKET/PREFIX/ or tfds:NAME[:VERSION][@DATA_DIR]; for the default Fashion-MNIST, install Debian's"
        " dataset-fashion-mnist (apt-get install dataset-fashion-mnist)",
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
def test_a_run_form_value_that_cannot_run_fails_at_the_first_step_before_any_ingest(
    tmp_path: Path, fashion_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    """The compiled file loaded as the SDK (and the UI) does, run with an eta of 1: one line naming eta, from the
    check step, and nothing ingested or trained."""
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
        pipeline(
            variants=two_small, eta=1, store=f"file://{tmp_path / 'store'}", s3_endpoint="", max_train_examples=512
        )
    line = "eta: must be at least 2, got 1"
    assert error_file.read_text() == line
    assert f"bakeoff: error: {line}\n" in capfd.readouterr().out  # the step's log, as the UI shows it
    assert not (tmp_path / "store").exists()
    assert not [path for path in work.rglob("*") if path.name in ("ingest", "train", "data")], (
        "nothing ingested or trained"
    )


def test_a_source_ingest_would_refuse_fails_at_the_check_step(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The source is listed before ingest starts: an empty folder is the check step's line, naming the parameter."""
    empty = tmp_path / "images"
    empty.mkdir()
    assert refusal(capsys, **parameters(tmp_path, source=str(empty))) == (
        f"source: {empty} holds no images in class folders: put each class's .png/.jpg/.jpeg/.bmp/.gif/.webp files in"
        f" {empty}/<class>/ (or in train/<class>/ ...)"
    )
    assert not (tmp_path / "store").exists()


def test_variants_are_fitted_to_a_folder_s_own_image_size_at_the_check_step(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A folder's size is known from its first image: a network that leaves no pixels of it fails before ingest."""
    folder = write_rgb_folder(tmp_path / "shapes", per_class=3, size=10)
    deep = {"name": "deep", "model": {"type": "cnn", "filters": [4, 4, 4]}, "training": {"epochs": 2}, "workers": 1}
    line = refusal(capsys, **parameters(tmp_path, source=str(folder), variants=[deep], **NO_HALVING))
    assert line.startswith(
        "variants: variant 'deep': model.filters: 3 convolutions of kernel_size 3 leave no pixels of the 10x10 image"
    ), line
