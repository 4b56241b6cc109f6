"""The typed records: the JSON the store holds, byte for byte; strict reading; the version field."""

from __future__ import annotations

import json

import pytest

from bakeoff.components.storage import records
from bakeoff.components.storage.records import (
    BackupManifest,
    Candidate,
    DatasetMetadata,
    Manifest,
    RecordError,
    RungRecord,
    Score,
    SelectionRecord,
    Summary,
    WorkerMetrics,
)
from tests.samples import RECORDS as SAMPLES

pytestmark = pytest.mark.unit

# tests/data/records: written by bakeoff's own writers before records carried a version, in a halving run of three
# variants (mlp won) and a run that published over it. The train step's output is compact JSON; the others are indented.
KINDS: dict[str, type[records.Record]] = {
    "metrics.json": WorkerMetrics,  # runs/<run>/mlp/metrics.json, the worker's
    "candidate.json": Candidate,  # the train step's output
    "rung-record.json": RungRecord,  # runs/<run>/search/rung-0.json, the halve step's
    "summary.json": Summary,  # `bakeoff run --json`
    "selection.json": SelectionRecord,  # runs/<run>/selection.json, select's
    "manifest.json": Manifest,  # models/fashion-mnist/2/manifest.json, with the champion it replaced
    "dataset-metadata.json": DatasetMetadata,  # the Dataset artifact's metadata.json, ingest's from Debian's files
    "backup.json": BackupManifest,  # runs/<run>/dropout/backup/<digest>/epoch-0003/backup.json, the chief's
}


def versioned(text: str) -> str:
    """``text``, a JSON object without a version, as this bakeoff writes it: the version field last."""
    indented = text.rstrip().endswith("\n}")
    body = text.rstrip()[:-1].rstrip()
    return body + (
        f',\n  "{records.VERSION_FIELD}": {records.SCHEMA_VERSION}\n}}'
        if indented
        else f', "{records.VERSION_FIELD}": {records.SCHEMA_VERSION}}}'
    )


def written(record: records.Record, compact: bool) -> str:
    return record.to_json(indent=None) if compact else record.to_json()


@pytest.mark.parametrize("name", [name for name, kind in KINDS.items() if kind.VERSION == records.SCHEMA_VERSION])
def test_a_record_of_the_unversioned_writers_reads_back_and_writes_the_same_json_with_its_version(name: str) -> None:
    """Byte for byte: the same keys in the same order, the same numbers, only the version added at the end."""
    text = (SAMPLES / name).read_text()
    compact = "\n" not in text.strip()
    record = KINDS[name].from_json(text, name)
    again = written(record, compact)
    assert again == versioned(text)
    assert KINDS[name].from_json(again, name) == record  # and a versioned one reads back the same


def test_an_unversioned_dataset_metadata_reads_as_grayscale_images_with_a_channel_axis() -> None:
    """Version 2 added channels to image_shape: Fashion-MNIST's old artifact reads as [28, 28, 1], written as 2."""
    old = DatasetMetadata.from_json((SAMPLES / "dataset-metadata.json").read_text(), "metadata.json")
    assert old.image_shape == [28, 28, 1]
    assert old.preprocessing == records.Preprocessing(28, 28, 1, "none")
    assert old.counts == {"train": 55000, "validation": 5000, "test": 10000} and old.class_counts == {}
    again = json.loads(old.to_json())
    assert again[records.VERSION_FIELD] == 2 and again["image_shape"] == [28, 28, 1]
    assert DatasetMetadata.from_json(old.to_json(), "metadata.json") == old
    with pytest.raises(RecordError, match=r"of schema_version 3, and this bakeoff reads version 2:"):
        DatasetMetadata.from_dict(again | {records.VERSION_FIELD: 3}, "metadata.json")


def test_the_samples_hold_every_kind_of_value_the_records_allow() -> None:
    """The samples are worth their bytes: a stop and a keep with metric-named keys, a champion and none, mistakes."""
    rung = RungRecord.from_json((SAMPLES / "rung-record.json").read_text(), "rung")
    assert rung.kept == [Score("mlp", "val_accuracy", 0.4054)] and [s.variant for s in rung.stopped] == ["cnn", "slow"]
    selection = SelectionRecord.from_json((SAMPLES / "selection.json").read_text(), "selection")
    assert selection.promotion.champion is None and len(selection.misclassified) == 24 and selection.stopped
    assert selection.summary() == Summary.from_json((SAMPLES / "summary.json").read_text(), "summary")
    manifest = Manifest.from_json((SAMPLES / "manifest.json").read_text(), "manifest")
    assert manifest.promotion.champion is not None and manifest.version == 2
    assert manifest.metrics.training.variant == manifest.variant


def sample(name: str) -> dict:
    return json.loads((SAMPLES / name).read_text())


def test_a_missing_field_is_one_line_naming_the_source_and_the_field() -> None:
    data = sample("metrics.json")
    del data["onednn"]
    with pytest.raises(RecordError) as refused:
        WorkerMetrics.from_dict(data, "runs/r/mlp/metrics.json")
    assert str(refused.value) == (
        "runs/r/mlp/metrics.json: is a WorkerMetrics record that lacks 'onednn': written by another"
        " version of bakeoff or by hand: rerun what wrote it with this version"
    )


def test_an_unknown_field_and_a_missing_one_deep_inside_are_one_line_with_the_path() -> None:
    data = sample("manifest.json")
    data["metrics"]["training"]["one_dnn"] = data["metrics"]["training"].pop("onednn")
    with pytest.raises(RecordError) as refused:
        Manifest.from_dict(data, "models/m/2/manifest.json")
    assert str(refused.value).startswith(
        "models/m/2/manifest.json: metrics.training is a WorkerMetrics record that lacks 'onednn'"
        " and has unknown 'one_dnn': "
    )
    assert "\n" not in str(refused.value)


def test_a_metric_named_entry_needs_exactly_one_key_besides_its_fields() -> None:
    data = sample("rung-record.json")
    data["stopped"][1]["val_loss"] = 0.5
    with pytest.raises(
        RecordError, match=r"^rung: stopped\[1\] is a RungStop record that has unknown 'val_accuracy', 'val_loss': "
    ):
        RungRecord.from_dict(data, "rung")
    data["stopped"][1] = {"variant": "slow", "reason": "why"}
    with pytest.raises(RecordError, match=r"^rung: stopped\[1\] is a RungStop record that lacks '<metric>': "):
        RungRecord.from_dict(data, "rung")


@pytest.mark.parametrize(
    "path, value, problem",
    [
        (("epochs",), "2", "epochs is a string, not an integer"),
        (("examples_per_second_steady",), 1, "examples_per_second_steady is a number, not a boolean"),
        (("epochs",), True, "epochs is a boolean, not an integer"),
        (("history", "loss"), {"0": 1.0}, "history.loss is an object, not a list"),
        (("history", "loss", 0), None, "history.loss[0] is null, not a number"),
    ],
)
def test_a_value_of_the_wrong_type_is_one_line_with_its_path(path: tuple, value: object, problem: str) -> None:
    data = sample("metrics.json")
    holder = data
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    with pytest.raises(RecordError) as refused:
        WorkerMetrics.from_dict(data, "m")
    assert str(refused.value).startswith(f"m: {problem}: ")


def test_an_integral_number_reads_as_a_float_and_writes_back_as_it_was() -> None:
    data = sample("metrics.json") | {"train_seconds": 12}
    assert json.loads(WorkerMetrics.from_dict(data, "m").to_json())["train_seconds"] == 12


@pytest.mark.parametrize("version", [2, 1.0, True, "1", None])
def test_a_version_this_bakeoff_does_not_read_is_refused_in_one_line(version: object) -> None:
    data = sample("summary.json") | {records.VERSION_FIELD: version}
    with pytest.raises(RecordError) as refused:
        Summary.from_dict(data, "run --json")
    assert str(refused.value) == (
        f"run --json: a Summary record of schema_version {version!r}, and this bakeoff reads version 1:"
        " read it with the bakeoff that wrote it, or rerun what wrote it with this version"
    )


def test_the_version_is_written_once_at_the_top_and_refused_in_a_nested_record() -> None:
    """A nested record carries none: the candidate's metrics are metrics.json without the version field."""
    candidate = Candidate.from_json((SAMPLES / "candidate.json").read_text(), "c")
    data = candidate.to_dict()
    assert list(data)[-1] == records.VERSION_FIELD and records.VERSION_FIELD not in data["metrics"]
    data["metrics"][records.VERSION_FIELD] = 1
    with pytest.raises(RecordError, match=r"^c: metrics is a WorkerMetrics record that has unknown 'schema_version': "):
        Candidate.from_dict(data, "c")


@pytest.mark.parametrize(
    "text, problem",
    [
        ("[]", "is a list, not a Summary record"),
        ("{", "not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
    ],
)
def test_what_is_no_record_at_all_is_one_line(text: str, problem: str) -> None:
    with pytest.raises(RecordError) as refused:
        Summary.from_json(text, "select")
    assert str(refused.value).startswith(f"select: {problem}: ")


def test_the_keys_of_a_record_are_its_json_keys() -> None:
    """What the README's list of `run --json` fields can point at."""
    assert Summary.keys() == ["run_id", "winner", "promotion", "candidates", "stopped", records.VERSION_FIELD]
    assert Score.keys() == ["variant", "value"]  # the value's key is the metric's name
    summary = json.loads((SAMPLES / "summary.json").read_text())
    assert [*summary, records.VERSION_FIELD] == Summary.keys()
