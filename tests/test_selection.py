"""Selection: candidates scored on validation only, ranked by the metric in its own direction, the winner tested."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bakeoff.components.data import artifact
from bakeoff.components.data.fashion_mnist import Split
from bakeoff.components.errors import BakeoffError
from bakeoff.components.selection.promotion import Gate
from bakeoff.components.selection.ranking import METRICS, direction, rank
from bakeoff.components.selection.settings import SelectionSettings
from bakeoff.components.selection.winner import select_winner
from bakeoff.components.storage import open_store, registry, runs
from bakeoff.components.storage.records import (
    Candidate,
    Champion,
    DatasetInfo,
    Manifest,
    Preprocessing,
    Score,
    SelectionBasis,
    SelectionRecord,
    Summary,
)
from tests import samples

pytestmark = pytest.mark.unit

NAMES = [f"class{i}" for i in range(10)]
RUN_ID = "r1"
MODEL = "fashion-mnist"
# (variant, class it always predicts, logit of that class over the other nine at 0).
# `sure_zero` is all but certain of class 0: right on most of validation, and a huge
# loss wherever it is wrong. `unsure_one` barely prefers class 1: mostly wrong on
# validation but never far off. So val_accuracy and val_loss pick different winners.
MODELS = (("sure_zero", 0, 12.0), ("unsure_one", 1, 0.1))
BEHAVIOUR = {variant: (predicted, logit) for variant, predicted, logit in MODELS}


def split(favourite: int, n: int = 64) -> Split:
    """``n`` random images, three quarters labelled ``favourite`` and the rest the other of classes 0 and 1."""
    rng = np.random.default_rng(favourite)
    labels = np.full(n, 1 - favourite, np.uint8)
    labels[: n * 3 // 4] = favourite
    return Split(rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.permutation(labels))


SPLITS = {"train": split(0), "validation": split(0), "test": split(1)}  # validation favours class 0, test class 1


def probabilities(predicted: int, logit: float) -> np.ndarray:
    """What a model of MODELS outputs for every image: the softmax of its constant logits."""
    logits = np.zeros(10)
    logits[predicted] = logit
    return np.exp(logits) / np.exp(logits).sum()


def expected(predicted: int, logit: float, data: Split) -> dict[str, float]:
    """Accuracy and mean cross-entropy of a MODELS entry on ``data``, computed here, not by the code under test."""
    p = probabilities(predicted, logit)
    return {"accuracy": float(np.mean(data.labels == predicted)), "loss": float(np.mean(-np.log(p[data.labels])))}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data")
    artifact.write(SPLITS, out, shards=2, names=NAMES, source="synthetic")
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each MODELS entry exported once with the serving signatures; copied into each test's store."""
    import tf_keras as keras

    from bakeoff.components.modeling.savedmodel import export

    root = tmp_path_factory.mktemp("exported")
    for variant, predicted, logit in MODELS:
        model = keras.Sequential(
            [keras.layers.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(10, activation="softmax")]
        )
        bias = np.zeros(10, np.float32)
        bias[predicted] = logit
        model.layers[-1].set_weights([np.zeros((28 * 28, 10), np.float32), bias])
        export(model, root / variant, NAMES)
    return root


def candidates(exported: Path, store_root: Path) -> list[Candidate]:
    """The records train_variant returns, each model under ``<prefix>/model`` of a folder store."""
    records = []
    for variant, _, _ in MODELS:
        prefix = f"runs/{RUN_ID}/{variant}"
        shutil.copytree(exported / variant, store_root / prefix / "model")
        records.append(
            samples.candidate(
                variant,
                prefix,
                f"file://{store_root / prefix / 'model'}",
                workers=1,
                num_replicas_in_sync=1,
                epochs=1,
                rung=0,  # one job: no earlier rung's record to add
                train_seconds=1.5,
                examples_per_second=100.0,
            )
        )
    return records


def select(exported: Path, data_dir: Path, tmp_path: Path, metric: str) -> Summary:
    store_root = tmp_path / "store"
    return select_winner(
        candidates(exported, store_root),
        str(data_dir),
        f"file://{store_root}",
        RUN_ID,
        SelectionSettings(MODEL, metric),
    )


def published_manifest(tmp_path: Path, version: int = 1) -> Manifest:
    path = tmp_path / "store" / "models" / MODEL / str(version) / "manifest.json"
    return Manifest.from_json(path.read_text(), str(path))


def by_metric(metric: str, data: Split) -> str:
    """The variant that ``metric`` should pick on ``data``, from the independently computed scores."""
    scores = {
        variant: expected(predicted, logit, data)["accuracy" if metric == "val_accuracy" else "loss"]
        for variant, predicted, logit in MODELS
    }
    pick = max if metric == "val_accuracy" else min
    return pick(scores, key=lambda variant: scores[variant])


def test_the_two_metrics_disagree_on_validation_and_test_reverses_accuracy() -> None:
    """The fixtures are what the other tests need: metrics disagree on validation, and test favours the other model."""
    assert by_metric("val_accuracy", SPLITS["validation"]) == "sure_zero"
    assert by_metric("val_loss", SPLITS["validation"]) == "unsure_one"
    assert by_metric("val_accuracy", SPLITS["test"]) == "unsure_one"


def test_selection_scores_on_validation_and_only_the_winner_on_test(
    exported: Path, data_dir: Path, tmp_path: Path
) -> None:
    """Selection never touches the test split: the validation favourite wins though test favours the other."""
    summary = select(exported, data_dir, tmp_path, "val_accuracy")

    assert summary.winner.variant == "sure_zero"
    assert [c.variant for c in summary.candidates] == ["sure_zero", "unsure_one"]
    for candidate in summary.candidates:
        on_validation = expected(*BEHAVIOUR[candidate.variant], SPLITS["validation"])
        assert candidate.val_accuracy == on_validation["accuracy"]
        assert candidate.val_loss == pytest.approx(on_validation["loss"], rel=1e-3)
    on_test = expected(*BEHAVIOUR["sure_zero"], SPLITS["test"])
    assert summary.winner.test_accuracy == on_test["accuracy"] == 0.25
    assert summary.winner.val_accuracy == 0.75
    manifest = published_manifest(tmp_path)
    assert manifest.variant == "sure_zero" and manifest.metrics.test_accuracy == on_test["accuracy"]
    assert manifest.selection == SelectionBasis("val_accuracy", "max", ["sure_zero", "unsure_one"])


def test_val_loss_picks_the_lowest_loss_not_the_highest_accuracy(
    exported: Path, data_dir: Path, tmp_path: Path
) -> None:
    """metric=val_loss publishes the candidate with the lowest validation loss, here the less accurate one."""
    summary = select(exported, data_dir, tmp_path, "val_loss")

    assert summary.winner.variant == "unsure_one"
    losses = [c.val_loss for c in summary.candidates]
    assert losses == sorted(losses)
    assert summary.candidates[0].val_accuracy < summary.candidates[1].val_accuracy
    on_test = expected(*BEHAVIOUR["unsure_one"], SPLITS["test"])
    assert summary.winner.test_accuracy == on_test["accuracy"] == 0.75
    manifest = published_manifest(tmp_path)
    assert manifest.variant == "unsure_one"
    assert manifest.selection == SelectionBasis("val_loss", "min", ["unsure_one", "sure_zero"])


@pytest.mark.parametrize(
    "metric, best_first",
    [
        ("val_accuracy", ["b", "a", "a2", "c"]),
        ("val_loss", ["c", "a", "a2", "b"]),
    ],
)
def test_rank_orders_best_first_in_the_metric_direction(metric: str, best_first: list[str]) -> None:
    """rank: highest val_accuracy first, lowest val_loss first; ties go to the name that sorts first."""
    scored = [
        Champion(1, name, accuracy, loss, "")
        for name, accuracy, loss in (("c", 0.5, 0.2), ("b", 0.9, 0.9), ("a", 0.7, 0.4), ("a2", 0.7, 0.4))
    ]
    assert [c.variant for c in rank(scored, metric)] == best_first


def test_each_metric_carries_its_direction() -> None:
    """val_accuracy is better higher, val_loss lower."""
    assert METRICS == {"val_accuracy": "max", "val_loss": "min"}
    assert direction("val_accuracy") == "max" and direction("val_loss") == "min"


def test_an_unknown_metric_is_refused_in_one_line_before_any_evaluation() -> None:
    """An unknown metric fails with one line naming the known ones, before data or models are read."""
    for call in (lambda: direction("accuracy"), lambda: rank([Score("a", "accuracy", 1.0)], "accuracy")):
        with pytest.raises(BakeoffError) as refused:
            call()
        assert str(refused.value) == "unknown selection metric 'accuracy': use one of val_accuracy, val_loss"
    # A selection's settings refuse it (and a model name no path can hold) when made: no selection starts with them.
    for settings, message in (
        (lambda: SelectionSettings(MODEL, "accuracy"), "unknown selection metric 'accuracy'"),
        (lambda: SelectionSettings("../m"), "model name '../m' is not usable in a path"),
    ):
        with pytest.raises(BakeoffError) as refused:
            settings()
        assert "\n" not in str(refused.value) and str(refused.value).startswith(message)


# ---------------------------------------------------------------- the promotion gate


def publish_champion(exported: Path, store_root: Path, variant: str) -> None:
    """Publishes a MODELS entry as version 1, as an earlier run would have."""
    earlier = samples.manifest()
    manifest = dataclasses.replace(
        earlier,
        model=MODEL,
        run_id="earlier",
        variant=variant,
        dataset=DatasetInfo("earlier-data", {}, Preprocessing(28, 28, 1, "none")),
        metrics=dataclasses.replace(earlier.metrics, val_accuracy=0.99, val_loss=0.01),
    )  # stale numbers on purpose
    registry.publish(open_store(f"file://{store_root}"), MODEL, exported / variant, manifest)


def gated(
    exported: Path, data_dir: Path, tmp_path: Path, variants: tuple[str, ...], gate: Gate, metric: str = "val_accuracy"
) -> Summary:
    store_root = tmp_path / "store"
    records = [c for c in candidates(exported, store_root) if c.variant in variants]
    return select_winner(records, str(data_dir), f"file://{store_root}", RUN_ID, SelectionSettings(MODEL, metric, gate))


def versions(tmp_path: Path) -> list[int]:
    return [m.version for m in registry.list_versions(open_store(f"file://{tmp_path / 'store'}"), MODEL)]


def test_a_better_challenger_is_published_over_the_champion(exported: Path, data_dir: Path, tmp_path: Path) -> None:
    """The champion is scored now on this validation split, not by its manifest's stale numbers (0.99)."""
    publish_champion(exported, tmp_path / "store", "unsure_one")
    summary = gated(exported, data_dir, tmp_path, ("sure_zero",), Gate())
    assert summary.promotion.published and summary.winner.version == 2 and versions(tmp_path) == [1, 2]
    champion, accuracy = (
        summary.promotion.champion,
        expected(*BEHAVIOUR["unsure_one"], SPLITS["validation"])["accuracy"],
    )
    assert accuracy == 0.25
    assert ((champion.val_accuracy, champion.dataset_fingerprint) if champion else None) == (accuracy, "earlier-data")
    recorded = published_manifest(tmp_path, 2).promotion.champion
    assert (recorded.version if recorded else None) == 1
    comparison = summary.promotion.comparison
    assert comparison is not None and (comparison.gain, comparison.examples) == (0.5, 64) and comparison.low > 0
    assert summary.promotion.message == (
        "published version 2: sure_zero (val_accuracy 0.7500) over version 1 (0.2500): the challenger's +0.5000"
        f" ({comparison.low:+.4f} … {comparison.high:+.4f}, 95% mcnemar exact) is beyond noise"
    )


@pytest.mark.parametrize(
    "champion, challenger, margin, why",
    [
        ("sure_zero", "unsure_one", 0.0, "is no gain"),  # worse (0.25 against 0.75)
        ("sure_zero", "sure_zero", 0.0, "is no gain"),  # the same model: a tie keeps the champion
        ("unsure_one", "sure_zero", 0.51, "is below the margin 0.51 (--min-improvement)"),  # better by 0.5 < margin
    ],
)
def test_a_challenger_that_does_not_beat_the_champion_by_the_margin_is_not_published(
    exported: Path, data_dir: Path, tmp_path: Path, champion: str, challenger: str, margin: float, why: str
) -> None:
    """The champion stays: nothing is published, the store is unchanged, and the summary says which version was kept."""
    publish_champion(exported, tmp_path / "store", champion)
    summary = gated(exported, data_dir, tmp_path, (challenger,), Gate(min_improvement=margin))
    assert not summary.promotion.published
    assert summary.winner.version is None and summary.winner.uri is None
    assert versions(tmp_path) == [1], "the store is unchanged"
    assert summary.promotion.champion is not None
    kept = summary.promotion.champion.val_accuracy
    assert summary.promotion.message.startswith(
        f"kept version 1 (val_accuracy {kept:.4f}) over {challenger} ({summary.winner.val_accuracy:.4f}): the"
        " challenger's "
    )
    assert summary.promotion.message.endswith(why)


# `lucky_few` is `sure_zero` except where pixel (0, 8) is brighter than 229: there it says class 1, and is right on 4
# of the 5 validation images. On 64 images that +3/64 is chance (McNemar's exact p = 0.375), yet a point
# comparison would publish it.
LUCKY_PIXEL, LUCKY_THRESHOLD = (0, 8), 229


@pytest.fixture(scope="module")
def lucky_few(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import tf_keras as keras

    from bakeoff.components.modeling.savedmodel import export

    path = tmp_path_factory.mktemp("lucky") / "lucky_few"
    model = keras.Sequential(
        [keras.layers.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(10, activation="softmax")]
    )
    weights, bias = np.zeros((28 * 28, 10), np.float32), np.zeros(10, np.float32)
    weights[LUCKY_PIXEL[0] * 28 + LUCKY_PIXEL[1], 1] = 1.0  # class 1's logit: the pixel
    bias[0] = LUCKY_THRESHOLD + 0.5  # class 0's: the threshold
    model.layers[-1].set_weights([weights, bias])
    export(model, path, NAMES)
    return path


def test_the_lucky_challenger_is_better_by_a_chance_few_images() -> None:
    """The fixture is what the next test needs: 4 wins and 1 loss against `sure_zero`, nowhere else a difference."""
    validation = SPLITS["validation"]
    flips = validation.images[:, LUCKY_PIXEL[0], LUCKY_PIXEL[1]] > LUCKY_THRESHOLD
    assert (int(np.sum(validation.labels[flips] == 1)), int(np.sum(validation.labels[flips] == 0))) == (4, 1)


@pytest.mark.parametrize("confidence, published", [(0.95, False), (0.0, True)])
def test_a_challenger_better_within_noise_keeps_the_champion_through_select(
    exported: Path, lucky_few: Path, data_dir: Path, tmp_path: Path, confidence: float, published: bool
) -> None:
    """Through the real select path: the champion is scored now, paired with the challenger image by image, and the
    +0.0469 stays out at 95 %; at confidence 0 (the old point gate) the same challenger would have got in."""
    store_root = tmp_path / "store"
    publish_champion(exported, store_root, "sure_zero")
    prefix = f"runs/{RUN_ID}/lucky_few"
    shutil.copytree(lucky_few, store_root / prefix / "model")
    candidate = samples.candidate(
        "lucky_few",
        prefix,
        f"file://{store_root / prefix / 'model'}",
        workers=1,
        num_replicas_in_sync=1,
        epochs=1,
        rung=0,
    )
    gate = Gate(confidence=confidence)
    summary = select_winner(
        [candidate], str(data_dir), f"file://{store_root}", RUN_ID, SelectionSettings(MODEL, "val_accuracy", gate)
    )
    comparison = summary.promotion.comparison
    assert comparison is not None and comparison.gain == 3 / 64
    assert summary.promotion.published is published and versions(tmp_path) == ([1, 2] if published else [1])
    if not published:
        assert comparison.p_value == pytest.approx(0.375) and comparison.low < 0 < comparison.high
        assert summary.promotion.message == (
            "kept version 1 (val_accuracy 0.7500) over lucky_few (0.7969): the challenger's +0.0469"
            f" ({comparison.low:+.4f} … {comparison.high:+.4f}, 95% mcnemar exact) is within noise"
        )
    written = selection_record(tmp_path).promotion.comparison  # the selection record keeps it too
    assert written == comparison


def test_the_gate_follows_the_metrics_direction(exported: Path, data_dir: Path, tmp_path: Path) -> None:
    """Under val_loss a lower loss is the better one: the less accurate but lower-loss challenger gains.

    On 64 images its gain is within noise (the champion's 16 losses of 12 nats against 48 near 0), so the point gate
    (confidence 0) shows the direction.
    """
    publish_champion(exported, tmp_path / "store", "sure_zero")
    summary = gated(exported, data_dir, tmp_path, ("unsure_one",), Gate(confidence=0), metric="val_loss")
    assert summary.promotion.published and versions(tmp_path) == [1, 2]
    comparison = summary.promotion.comparison
    assert comparison is not None and comparison.test == "paired bootstrap" and comparison.gain > 0


def test_force_publish_publishes_a_worse_challenger(exported: Path, data_dir: Path, tmp_path: Path) -> None:
    publish_champion(exported, tmp_path / "store", "sure_zero")
    summary = gated(exported, data_dir, tmp_path, ("unsure_one",), Gate(force=True))
    assert summary.promotion.published and summary.promotion.forced and versions(tmp_path) == [1, 2]


def test_a_margin_outside_0_to_1_is_refused_in_one_line() -> None:
    with pytest.raises(BakeoffError, match=r"^min improvement -0\.1 must be in \[0, 1\)"):
        Gate(min_improvement=-0.1)


# ---------------------------------------------------------------- the selection record (runs/<run>/selection.json)


def selection_record(tmp_path: Path) -> SelectionRecord:
    return runs.selection(open_store(str(tmp_path / "store")), RUN_ID)


def decoded(png: str) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(png, validate=True))) as image:
        assert image.format == "PNG"
        return np.asarray(image)


def test_the_selection_record_is_the_summary_with_the_winners_test_confusion_matrix_and_mistakes(
    exported: Path, data_dir: Path, tmp_path: Path
) -> None:
    """sure_zero wins and calls every test image class 0: the 48 shirts of class 1 land in row 1 (true), column 0."""
    summary = select(exported, data_dir, tmp_path, "val_accuracy")
    record = selection_record(tmp_path)

    assert record.summary() == summary
    assert record.metric == "val_accuracy" and record.class_names == NAMES
    assert datetime.datetime.fromisoformat(record.created).tzinfo is not None
    test = SPLITS["test"]
    matrix = np.array(record.confusion_matrix)
    assert matrix.sum() == len(test.labels) == 64
    expected_matrix = np.zeros((10, 10), int)
    expected_matrix[0, 0], expected_matrix[1, 0] = (test.labels == 0).sum(), (test.labels == 1).sum()  # 16 and 48
    assert matrix.tolist() == expected_matrix.tolist(), "rows are the true labels, columns the predictions"
    assert np.trace(matrix) / matrix.sum() == summary.winner.test_accuracy

    # 48 mistakes, all equally sure: the 24 kept are the first by index, each with its own image.
    mistakes = record.misclassified
    assert [m.index for m in mistakes] == np.flatnonzero(test.labels == 1)[:24].tolist()
    for mistake in mistakes:
        assert (mistake.true, mistake.predicted) == (1, 0)
        assert mistake.confidence == pytest.approx(probabilities(0, 12.0)[0], rel=1e-5)
        assert np.array_equal(decoded(mistake.png), test.images[mistake.index])


def test_the_kept_mistakes_are_the_most_confident_first(tmp_path: Path) -> None:
    """A model whose certainty of class 0 grows with brightness: the brightest wrongly labelled images come first."""
    import tf_keras as keras

    from bakeoff.components.modeling.savedmodel import export

    n = 64
    values = np.random.default_rng(7).permutation(n) * 4  # every image one grey level of its own: no ties
    labels = np.where(np.arange(n) % 3 == 0, 0, 2).astype(np.uint8)  # a third truly 0, the rest 2: mistakes
    test = Split(np.repeat(values.astype(np.uint8), 28 * 28).reshape(n, 28, 28), labels)
    artifact.write(
        {"train": test, "validation": test, "test": test}, tmp_path / "data", shards=2, names=NAMES, source="synthetic"
    )
    model = keras.Sequential(
        [keras.layers.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(10, activation="softmax")]
    )
    kernel = np.zeros((28 * 28, 10), np.float32)
    kernel[:, 0] = 1 / (28 * 28 * 64)  # logit of class 0 = grey level / 64, from 0 to 4; the others 0
    model.layers[-1].set_weights([kernel, np.full(10, -0.5, np.float32) * (np.arange(10) != 0)])
    store_root = tmp_path / "store"
    export(model, store_root / "runs" / RUN_ID / "bright" / "model", NAMES)
    record = samples.candidate("bright", f"runs/{RUN_ID}/bright", rung=0)
    select_winner([record], str(tmp_path / "data"), f"file://{store_root}", RUN_ID, SelectionSettings(MODEL))

    mistakes = selection_record(tmp_path).misclassified
    wrong = np.flatnonzero(labels == 2)
    assert len(wrong) > 24
    assert [m.index for m in mistakes] == wrong[np.argsort(-values[wrong])][:24].tolist()
    confidences = [m.confidence for m in mistakes]
    assert confidences == sorted(confidences, reverse=True) and len(set(confidences)) == 24
    assert all((m.true, m.predicted) == (2, 0) for m in mistakes)


def test_select_reports_each_candidate_as_evaluating(
    exported: Path, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For `bakeoff run`'s live display (contract 2): one "evaluating" event per candidate, in its own file."""
    monkeypatch.setenv("BAKEOFF_PROGRESS_DIR", str(tmp_path / "progress"))
    (tmp_path / "progress").mkdir()
    select(exported, data_dir, tmp_path, "val_accuracy")
    for variant, _, _ in MODELS:
        (event,) = [json.loads(line) for line in (tmp_path / "progress" / f"{variant}.jsonl").read_text().splitlines()]
        assert event["variant"] == variant and event["state"] == "evaluating"
