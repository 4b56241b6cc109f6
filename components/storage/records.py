"""The records bakeoff's steps hand each other and keep in the store: typed, versioned, read back strictly.

Each record is a frozen dataclass whose fields are the keys of its JSON, in order: ``to_json`` writes
what the store holds, ``from_json`` reads it back through the one strict reader (components/strict.py,
JSON's types as written) and refuses, in one line, a missing field, an unknown one or a value of the
wrong type. The comments on the fields are the schema.

Versions: a record that stands alone (a file in the store, a step's output) ends with ``schema_version``.
One without it was written before records carried a version (version 0) and had exactly version 1's
fields, so it is read as version 1. A record whose fields changed raises its own ``VERSION`` and reads
its older versions through ``upgrade`` (DatasetMetadata: version 2); any other version is refused.
Records live here, at the bottom of the layers, because the store's own modules (runs, registry) read
and write them and every layer above reads them.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import typing
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from bakeoff.components import strict
from bakeoff.components.errors import BakeoffError

SCHEMA_VERSION = 1
VERSION_FIELD = "schema_version"
UNVERSIONED = 0  # a record without VERSION_FIELD: written before records carried one, with version 1's fields
VAL_EPOCHS = "val_epochs"  # in a WorkerMetrics history: the 1-based epochs whose val_* numbers it holds
REWRITE = "written by another version of bakeoff or by hand: rerun what wrote it with this version"


def timestamp() -> str:
    """When a record is made, as the records' ``created`` fields hold it: ISO 8601, UTC, to the second."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


R = TypeVar("R", bound="Record")


class RecordError(BakeoffError):
    """A record this bakeoff cannot read: its one line names where, which field, and what to do."""


@dataclasses.dataclass(frozen=True)
class Record:
    """The base of every record: its JSON and the strict way back."""

    VERSIONED: ClassVar[bool] = False  # stands alone: its JSON ends with schema_version
    VERSION: ClassVar[int] = SCHEMA_VERSION  # the version this bakeoff writes; older ones go through ``upgrade``
    # (name field, value field): the value is written under the key the name field holds ({"variant": "a", "val_loss":
    # 0.3})
    KEYED: ClassVar[tuple[str, str] | tuple[()]] = ()
    # Fields added to version 1 later, each defaulting to None: left out of the JSON while None and read as None
    # when missing, so records written before them read and write back byte for byte.
    ADDED: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        data = self._fields()
        if self.VERSIONED:
            data[VERSION_FIELD] = self.VERSION
        return data

    def to_json(self, indent: int | None = 2) -> str:
        """Indented for a file in the store; ``indent=None``: one line, for a step's output."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Any, source: str) -> typing.Self:
        """The record ``data`` holds; ``source`` (a store key, a step's name) starts any error line."""
        return _read(cls, data, source)

    @classmethod
    def from_json(cls, text: str | bytes, source: str) -> typing.Self:
        try:
            data = json.loads(text)
        except ValueError as error:
            raise RecordError(f"{source}: not JSON ({error}): {REWRITE}") from None
        return cls.from_dict(data, source)

    @classmethod
    def upgrade(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        """``data`` of an older ``version`` (1 for version 0) as this version's fields; no record has one but its
        own."""
        return data

    @classmethod
    def keys(cls) -> list[str]:
        """The keys of this record's JSON (a KEYED record's value key is named by its data, shown as its field's
        name)."""
        names = [field.name for field in dataclasses.fields(cls) if not cls.KEYED or field.name != cls.KEYED[0]]
        return names + ([VERSION_FIELD] if cls.VERSIONED else [])

    def _fields(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            if self.KEYED and field.name == self.KEYED[0]:
                continue
            if field.name in self.ADDED and getattr(self, field.name) is None:
                continue
            key = getattr(self, self.KEYED[0]) if self.KEYED and field.name == self.KEYED[1] else field.name
            data[key] = _dump(getattr(self, field.name))
        return data


def _dump(value: Any) -> Any:
    if isinstance(value, Record):
        return value._fields()  # nested: the record it sits in carries the version
    if isinstance(value, (list, tuple)):
        return [_dump(item) for item in value]
    if isinstance(value, dict):
        return {key: _dump(item) for key, item in value.items()}
    return value


def _fail(source: str, path: str, problem: str) -> typing.NoReturn:
    raise RecordError(f"{source}: {path + ' ' if path else ''}{problem}: {REWRITE}")


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def _named(names: Sequence[str]) -> str:
    return ", ".join(repr(name) for name in names)


def _read(cls: type[R], data: Any, source: str) -> R:
    """The record ``data`` holds, its version read first; any problem as one line starting with ``source``."""
    if cls.VERSIONED and isinstance(data, dict):
        data, kind = dict(data), f"a {cls.__name__} record"
        version = data.pop(VERSION_FIELD, UNVERSIONED)
        if type(version) is not int or not UNVERSIONED <= version <= cls.VERSION:
            raise RecordError(
                f"{source}: {kind} of {VERSION_FIELD} {version!r}, and this bakeoff reads version {cls.VERSION}:"
                " read it with the bakeoff that wrote it, or rerun what wrote it with this version"
            )
        if version < cls.VERSION:
            data = cls.upgrade(data, max(version, SCHEMA_VERSION))
    try:
        return _READER.read(cls, data)
    except strict.Refused as refused:
        problem = refused.problem
        if isinstance(problem, strict.WrongKeys):
            problems = ([f"lacks {_named(problem.missing)}"] if problem.missing else []) + (
                [f"has unknown {_named(problem.unknown)}"] if problem.unknown else []
            )
            _fail(source, problem.path, f"is a {problem.expected.__name__} record that {' and '.join(problems)}")
        wanted = problem.expected
        expected = f"a {wanted.__name__} record" if dataclasses.is_dataclass(wanted) else _JSON_TYPES[wanted]
        _fail(source, problem.path, f"is {_json_type(problem.got)}, not {expected}")


_JSON_TYPES = {
    list: "a list",
    dict: "an object",
    float: "a number",
    int: "an integer",
    bool: "a boolean",
    str: "a string",
}


def _fields(cls: type, data: Mapping[str, Any]) -> strict.Fields:
    """A record's keys as its fields: each names its own, but a KEYED record's value is under the key its name field
    holds, and an ADDED field may be left out."""
    record = typing.cast(type[Record], cls)  # every dataclass a record holds is a record
    fixed = [field.name for field in dataclasses.fields(record) if field.name not in record.KEYED]
    values = {name: (name, data[name]) for name in fixed if name in data}
    extra = [key for key in data if key not in fixed]
    missing = [name for name in fixed if name not in data and name not in record.ADDED]
    if record.KEYED:
        name_field, value_field = record.KEYED
        if len(extra) == 1:  # the key that names the metric, whatever it is
            (key,) = extra
            return strict.Fields(values | {name_field: (key, key), value_field: (key, data[key])}, [], missing)
        if not extra:
            missing.append(f"<{name_field}>")
    return strict.Fields(values, extra, missing)


# JSON as written: an int where a float is wanted is taken as it is, so the record writes back the same number
_READER = strict.Reader(strict.Coercion(), match=_fields)


class _Scored:
    """A record with both validation metrics: its value of a selection metric, for ranking."""

    val_accuracy: float
    val_loss: float

    def score(self, metric: str) -> float:
        return {"val_accuracy": self.val_accuracy, "val_loss": self.val_loss}[metric]


# ---------------------------------------------------------------- training


@dataclasses.dataclass(frozen=True)
class WorkerMetrics(Record):
    """What a job trained: the chief writes it as ``runs/<run>/<variant>/metrics.json``, launch keeps each rung's as
    ``rung-<k>.json``."""

    VERSIONED: ClassVar[bool] = True

    variant: str
    history: dict[
        str, list[float]
    ]  # tf-keras' History from epoch 1, earlier rungs' and attempts' included, and VAL_EPOCHS
    epochs: int  # done in total: the stop epoch
    schedule_epochs: int  # the learning-rate schedule's length (training.epochs)
    rung: int
    attempt: int  # 1: this rung trained without a restart
    resumed_from_epoch: int  # epochs restored from the backup (0: none)
    epochs_trained: int  # by this attempt
    optimizer_iterations: int  # steps the schedule has seen, restarts included
    learning_rate: float  # the rate of the last step: where this job left the schedule
    workers: int
    num_replicas_in_sync: int
    global_batch_size: int
    steps_per_epoch: int
    train_examples: int
    train_seconds: float
    backup_seconds: float  # of train_seconds, spent saving and uploading the epochs' backups
    validation_seconds: float  # of train_seconds, spent scoring validation
    validation_examples: int
    examples_per_second: float
    examples_per_second_steady: bool  # False: a single execution, rated over the whole fit
    peak_rss_mb: float
    allocator: str  # the replica's malloc: tcmalloc or default
    onednn: bool  # whether TensorFlow ran its oneDNN kernels
    precision: str | None = None  # what training.precision resolved to (float32, mixed_bfloat16, ...); None: float32

    ADDED: ClassVar[tuple[str, ...]] = ("precision",)


@dataclasses.dataclass(frozen=True)
class BackupManifest(Record):
    """An epoch's backup folder is complete once this is in it (``backup.json``, written last by the chief)."""

    VERSIONED: ClassVar[bool] = True

    epochs_done: int
    files: list[str]  # the checkpoint's files in the folder, in the order they were uploaded
    history: dict[str, list[float]]  # tf-keras' History of the epochs done, which the resumed fit continues


# ---------------------------------------------------------------- the Dataset artifact


@dataclasses.dataclass(frozen=True)
class Preprocessing(Record):
    """What ingest did to each decoded image, and what serving does to an image file it is sent
    (components/data/preprocess.py ``prepare``): channels converted, then resized by ``resize``."""

    height: int
    width: int
    channels: int  # 1 (grayscale) or 3 (RGB)
    resize: str  # a Pillow filter's name (bilinear, ...), or "none": every image already had this size


@dataclasses.dataclass(frozen=True)
class SkippedFiles(Record):
    """The files of a source that are not images: skipped by ingest, counted, the first ones named."""

    count: int
    names: list[str]  # at most defaults.SKIPPED_NAMES of them, relative to the source


@dataclasses.dataclass(frozen=True)
class DatasetMetadata(Record):
    """The Dataset artifact's ``metadata.json``, written by ingest beside the shards; every reader of the data
    reads it."""

    VERSIONED: ClassVar[bool] = True
    VERSION: ClassVar[int] = 2  # 2: channels in image_shape, preprocessing, class counts, skipped files, split origins

    counts: dict[str, int]  # examples per split: train, validation, test
    shards: int  # .npz files per split, the most workers that can read disjoint parts
    image_shape: list[int]  # height, width, channels: each shard's images are uint8 [n, *image_shape]
    class_names: list[str]  # by label
    fingerprint: str  # a content hash of every split (data/artifact.py fingerprint)
    source: str  # the source string it was read from (an IDX folder, a class-folder tree, s3://..., tfds:NAME)
    preprocessing: Preprocessing
    class_counts: dict[str, list[int]]  # per split, examples by label
    skipped: SkippedFiles
    split_origins: dict[str, str]  # per split, where it came from: the source's own split, or how it was carved

    @classmethod
    def upgrade(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        """Version 1 held Fashion-MNIST's grayscale images as [height, width], read as they were."""
        shape = list(data.get("image_shape", []))
        if len(shape) == 2:
            shape.append(1)
        upgraded = dict(data, image_shape=shape)
        if len(shape) == 3 and all(type(side) is int for side in shape):
            upgraded.setdefault(
                "preprocessing", {"height": shape[0], "width": shape[1], "channels": 1, "resize": "none"}
            )
        upgraded.setdefault("class_counts", {})  # not recorded then
        upgraded.setdefault("skipped", {"count": 0, "names": []})
        upgraded.setdefault("split_origins", {})
        return upgraded


@dataclasses.dataclass(frozen=True)
class Candidate(Record):
    """One trained variant as selection needs it, read back from the store; the train step's output."""

    VERSIONED: ClassVar[bool] = True

    variant: str
    spec: dict[str, Any]  # the resolved variant spec it was trained from (bakeoff.components.spec.from_dict reads it)
    uri: str  # of its SavedModel
    prefix: str  # its folder below the store: runs/<run>/<variant>
    metrics: WorkerMetrics


# ---------------------------------------------------------------- successive halving


@dataclasses.dataclass(frozen=True)
class Score(Record):
    """A variant's value of the selection metric, written ``{"variant": ..., <metric>: value}``."""

    KEYED: ClassVar[tuple[str, str]] = ("metric", "value")

    variant: str
    metric: str
    value: float

    def score(self, metric: str) -> float:
        if metric != self.metric:
            raise ValueError(f"{self.variant!r} is scored by {self.metric}, not {metric}")
        return self.value


@dataclasses.dataclass(frozen=True)
class RungStop(Score):
    """A variant a rung stopped: its score and why, ``{"variant", <metric>: value, "reason"}``."""

    reason: str


@dataclasses.dataclass(frozen=True)
class RungRecord(Record):
    """Whom a halving rung kept and stopped, and why: ``runs/<run>/search/rung-<k>.json``, written by the halve step."""

    VERSIONED: ClassVar[bool] = True

    rung: int
    epochs: int  # the rung's stop epoch
    metric: str
    entered: list[str]  # the variants, in the order the rung trained them
    kept: list[Score]  # best first
    stopped: list[RungStop]  # best first
    created: str  # ISO 8601, UTC


# ---------------------------------------------------------------- selection


@dataclasses.dataclass(frozen=True)
class ScoredCandidate(_Scored, Record):
    """A candidate as selection scored it on validation: one row of the summary's leaderboard."""

    variant: str
    workers: int
    num_replicas_in_sync: int
    val_accuracy: float
    val_loss: float
    epochs: int
    train_seconds: float  # its jobs' together: a variant halving kept trained in one job per rung
    examples_per_second: float
    uri: str
    precision: str | None = None  # what it trained at (WorkerMetrics.precision); None: float32

    ADDED: ClassVar[tuple[str, ...]] = ("precision",)


@dataclasses.dataclass(frozen=True)
class Stopped(Record):
    """A variant successive halving stopped before the last rung, ``{"variant", "rung", "epochs", <metric>: value,
    "reason"}``."""

    KEYED: ClassVar[tuple[str, str]] = ("metric", "value")

    variant: str
    rung: int
    epochs: int
    metric: str
    value: float
    reason: str


@dataclasses.dataclass(frozen=True)
class Champion(_Scored, Record):
    """The latest published version, scored during this run on its validation split."""

    version: int
    variant: str
    val_accuracy: float
    val_loss: float
    dataset_fingerprint: str  # of the data it was published from, which may not be this run's


@dataclasses.dataclass(frozen=True)
class Decision(Record):
    """The promotion gate's decision, as the published manifest keeps it."""

    published: bool
    forced: bool
    min_improvement: float
    champion: Champion | None  # None: nothing was published before
    challenger: Score


@dataclasses.dataclass(frozen=True)
class Comparison(Record):
    """The challenger against the champion on the same validation examples, paired: the gain and its interval."""

    test: str  # "mcnemar exact" (val_accuracy) or "paired bootstrap" (val_loss: of the per-example loss difference)
    confidence: float  # the interval's level, e.g. 0.95; 0: the gain alone
    examples: int
    gain: float  # the challenger's over the champion's, the better way up (val_loss: champion − challenger)
    low: float  # the interval of the gain at ``confidence``
    high: float
    p_value: float | None  # McNemar's exact two-sided p-value; None for the bootstrap


@dataclasses.dataclass(frozen=True)
class Promotion(Decision):
    """The decision with its one line for people, as the summary shows it."""

    ADDED: ClassVar[tuple[str, ...]] = ("comparison",)

    message: str
    comparison: Comparison | None = None  # None: no champion to compare with


@dataclasses.dataclass(frozen=True)
class Winner(Record):
    variant: str
    version: int | None  # None: the champion stayed, nothing was published
    uri: str | None  # of the published version
    val_accuracy: float
    test_accuracy: float


@dataclasses.dataclass(frozen=True)
class Summary(Record):
    """A run's outcome: the select step's output and `bakeoff run --json`."""

    VERSIONED: ClassVar[bool] = True

    run_id: str
    winner: Winner
    promotion: Promotion
    candidates: list[ScoredCandidate]  # best first by the selection metric
    stopped: list[Stopped]  # by successive halving, rung by rung; empty without it

    def contestants(self) -> list[ScoredCandidate | Stopped]:
        """Every variant the run trained: the last rung's candidates, then those successive halving stopped earlier."""
        return [*self.candidates, *self.stopped]


@dataclasses.dataclass(frozen=True)
class Mistake(Record):
    """One of the winner's most confident mistakes on test."""

    index: int  # in the test split
    true: int  # class id
    predicted: int
    confidence: float
    png: str  # the image, base64 PNG


@dataclasses.dataclass(frozen=True)
class SelectionRecord(Summary):
    """The summary with what the report shows: ``runs/<run>/selection.json``."""

    metric: str
    class_names: list[str]
    confusion_matrix: list[list[int]]  # the winner on test: rows the true classes, columns the predicted ones
    misclassified: list[Mistake]  # most confident first, ties to the lower index
    created: str  # ISO 8601, UTC

    def summary(self) -> Summary:
        return Summary(**{field.name: getattr(self, field.name) for field in dataclasses.fields(Summary)})


@dataclasses.dataclass(frozen=True)
class LatestRun(Record):
    """Which run's selection record is the newest: ``runs/latest.json``, so `report latest` lists no ``runs/``."""

    VERSIONED: ClassVar[bool] = True

    run_id: str
    created: str  # its selection record's


# ---------------------------------------------------------------- the registry


@dataclasses.dataclass(frozen=True)
class PublishedMetrics(Record):
    val_accuracy: float
    val_loss: float
    test_accuracy: float
    test_loss: float
    training: WorkerMetrics


@dataclasses.dataclass(frozen=True)
class SelectionBasis(Record):
    """How the published version was chosen."""

    metric: str
    direction: str  # max or min
    candidates: list[str]  # best first


@dataclasses.dataclass(frozen=True)
class DatasetInfo(Record):
    fingerprint: str
    counts: dict[str, int]  # examples per split
    preprocessing: Preprocessing  # the artifact's: `bakeoff serve` converts an image file it is sent with it


@dataclasses.dataclass(frozen=True)
class Manifest(Record):
    """A published version's lineage: ``models/<name>/<version>/manifest.json``, written last (the version is
    complete)."""

    VERSIONED: ClassVar[bool] = True
    VERSION: ClassVar[int] = 2  # 2: the dataset's preprocessing

    model: str
    run_id: str
    variant: str
    spec: dict[str, Any]  # the resolved variant spec
    metrics: PublishedMetrics
    selection: SelectionBasis
    dataset: DatasetInfo
    promotion: Decision
    source_uri: str  # the run's copy of the SavedModel
    created: str  # ISO 8601, UTC
    version: int = 0  # registry.publish numbers it

    @classmethod
    def upgrade(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        """Version 1 published Fashion-MNIST models only, whose image files the export resized bilinearly."""
        dataset = data.get("dataset")
        if isinstance(dataset, dict):
            fashion = {"height": 28, "width": 28, "channels": 1, "resize": "bilinear"}
            data = dict(data, dataset={**dataset, "preprocessing": dataset.get("preprocessing", fashion)})
        return data


@dataclasses.dataclass(frozen=True)
class PublishedVersion(Record):
    """One line of `bakeoff models list --json`."""

    version: int
    variant: str
    val_accuracy: float
    test_accuracy: float
    run_id: str
    created: str
    dataset_fingerprint: str

    @classmethod
    def of(cls, manifest: Manifest) -> PublishedVersion:
        return cls(
            manifest.version,
            manifest.variant,
            manifest.metrics.val_accuracy,
            manifest.metrics.test_accuracy,
            manifest.run_id,
            manifest.created,
            manifest.dataset.fingerprint,
        )
