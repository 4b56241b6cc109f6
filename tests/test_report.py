"""The run report: one self-contained page with the leaderboard, per-epoch curves, the confusion matrix and the
mistakes."""

from __future__ import annotations

import base64
import dataclasses
import html.parser
import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from kfp import dsl
from PIL import Image

from bakeoff.components.data import artifact
from bakeoff.components.data.fashion_mnist import Split, read_idx_dir
from bakeoff.components.errors import BakeoffError
from bakeoff.components.reporting import figures
from bakeoff.components.reporting.report import latest_run, markdown, render, write_report
from bakeoff.components.selection.settings import SelectionSettings
from bakeoff.components.selection.winner import select_run
from bakeoff.components.steps.select import select
from bakeoff.components.storage import FolderStore, open_store, runs
from bakeoff.components.storage.records import SelectionRecord, Summary
from bakeoff.pipelines.cli.main import main
from tests import samples

pytestmark = pytest.mark.unit

RUN_ID = "report-run"
# Two small real models on real data, trained here so their metrics.json holds a real tf-keras history:
# `mlp` is validated every epoch, `every_other` only at epochs 2 and 4 (validation_freq), as contract 1 allows.
# `every_other` trained in two rungs' jobs, the second resumed from the first's backup: RUNG_SECONDS each.
TRAINED = {
    "mlp": {"epochs": 3, "validation_freq": 1, "units": 32},
    "every_other": {"epochs": 4, "validation_freq": 2, "units": 8},
}
RUNG_SECONDS = {"mlp": [1.0], "every_other": [1.0, 2.5]}
TEST_SIZE = 700
CHROMIUM = shutil.which("chromium")


@pytest.fixture(scope="module")
def run_store(fashion_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A store holding one real run that reached select (its selection.json), and the run's data artifact."""
    import tf_keras as keras

    from bakeoff.components.data.fashion_mnist import class_names
    from bakeoff.components.modeling.savedmodel import export

    root = tmp_path_factory.mktemp("report")
    original = read_idx_dir(fashion_dir)
    train = Split(original["train"].images[:3000], original["train"].labels[:3000])
    validation = Split(original["train"].images[3000:3500], original["train"].labels[3000:3500])
    test = Split(original["test"].images[:TEST_SIZE], original["test"].labels[:TEST_SIZE])
    names = class_names()
    artifact.write(
        {"train": train, "validation": validation, "test": test}, root / "data", shards=2, names=names, source="test"
    )
    store_uri = f"file://{root / 'store'}"
    store = open_store(store_uri)
    keras.utils.set_random_seed(0)
    for variant, settings in TRAINED.items():
        model = keras.Sequential(
            [
                keras.layers.Input((28, 28)),
                keras.layers.Rescaling(1 / 255),
                keras.layers.Flatten(),
                keras.layers.Dense(settings["units"], activation="relu"),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        fit = model.fit(
            train.images,
            train.labels,
            epochs=settings["epochs"],
            batch_size=128,
            verbose=0,
            validation_data=(validation.images, validation.labels),
            validation_freq=settings["validation_freq"],
        )
        history = {key: [float(v) for v in values] for key, values in fit.history.items()}
        history["val_epochs"] = list(
            range(settings["validation_freq"], settings["epochs"] + 1, settings["validation_freq"])
        )
        prefix = runs.variant_prefix(RUN_ID, variant)
        export(model, root / "export" / variant, names)
        store.put_dir(root / "export" / variant, f"{prefix}/{runs.MODEL}")
        for rung, seconds in enumerate(RUNG_SECONDS[variant]):
            metrics = samples.metrics(
                variant=variant,
                workers=1,
                num_replicas_in_sync=1,
                epochs=settings["epochs"],
                rung=rung,
                train_seconds=seconds,
                examples_per_second=3000.0,
                history=history,
            )
            store.put_bytes(f"{prefix}/{runs.rung_name(rung)}", metrics.to_json().encode())
        store.put_bytes(f"{prefix}/{runs.METRICS}", metrics.to_json().encode())  # the last rung's, as launch leaves it
        store.put_bytes(f"{prefix}/{runs.SPEC}", json.dumps({"name": variant}).encode())
    select_run(list(TRAINED), str(root / "data"), store_uri, RUN_ID, SelectionSettings("fashion-mnist", "val_accuracy"))
    return store_uri, root / "data"


@pytest.fixture(scope="module")
def record(run_store: tuple[str, Path]) -> SelectionRecord:
    return runs.selection(open_store(run_store[0]), RUN_ID)


@pytest.fixture(scope="module")
def histories(run_store: tuple[str, Path]) -> dict[str, dict]:
    store = open_store(run_store[0])
    return {variant: runs.metrics(store, RUN_ID, variant).history for variant in TRAINED}


@pytest.fixture(scope="module")
def seconds() -> dict[str, list[float]]:
    return RUNG_SECONDS


@pytest.fixture(scope="module")
def page(run_store: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report as `write_report` writes it from the store."""
    return write_report(open_store(run_store[0]), RUN_ID, tmp_path_factory.mktemp("page") / "report.html")


class Page(html.parser.HTMLParser):
    """What a test needs of the page: every tag with its attributes, the leaderboard's rows, the text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.rows: list[tuple[dict, list[str]]] = []
        self.text: list[str] = []
        self._table = False
        self._row: tuple[dict, list[str]] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if tag == "table" and attributes.get("id") == "leaderboard":
            self._table = True
        elif tag == "tr" and self._table:
            self._row = (attributes, [])
            self.rows.append(self._row)
        elif tag == "td" and self._row:
            self._row[1].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table, self._row = False, None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._row and self._row[1]:
            self._row[1][-1] += data

    def attribute(self, tag_id: str, name: str) -> str:
        (value,) = [attributes[name] for _, attributes in self.tags if attributes.get("id") == tag_id]
        return value


@pytest.mark.training
def test_the_page_is_self_contained_and_every_image_is_a_png(page: Path, record: SelectionRecord) -> None:
    """Nothing outside the page is fetched: no URL anywhere, images are data: URIs that decode as PNGs."""
    text = page.read_text()
    assert not re.search(r"https?:|<link|<script|<iframe|url\(|@import", text, re.IGNORECASE)
    parsed = Page(text)
    references = [
        value
        for _, attributes in parsed.tags
        for name, value in attributes.items()
        if name in ("src", "href", "srcset", "action", "poster", "data")
    ]
    assert references and all(value.startswith("data:") for value in references)
    sources = [attributes.get("src") for tag, attributes in parsed.tags if tag == "img"]
    # The curves, the confusion matrix, and one image per kept mistake.
    assert len(sources) == 2 + len(record.misclassified) and len(record.misclassified) == 24
    for source in sources:
        assert source and source.startswith("data:image/png;base64,")
        with Image.open(io.BytesIO(base64.b64decode(source.split(",", 1)[1], validate=True))) as image:
            image.verify()
            assert image.format == "PNG"


@pytest.mark.training
def test_the_leaderboard_has_every_candidate_best_first_the_winner_marked_and_the_decision(
    page: Path, record: SelectionRecord
) -> None:
    parsed = Page(page.read_text())
    assert [attributes["data-variant"] for attributes, _ in parsed.rows[1:]] == [c.variant for c in record.candidates]
    assert sorted(c.variant for c in record.candidates) == sorted(TRAINED)
    winners = [cells for attributes, cells in parsed.rows if attributes.get("class") == "winner"]
    assert winners == [parsed.rows[1][1]], "exactly one row, the first, is the winner's"
    assert winners[0][1] == f"{record.winner.variant} ★ winner"
    for (_, cells), candidate in zip(parsed.rows[1:], record.candidates, strict=True):
        assert cells[2] == f"{candidate.val_accuracy:.4f}"
    train_seconds = {attributes["data-variant"]: cells[6] for attributes, cells in parsed.rows[1:]}
    assert train_seconds == {"mlp": "1.0", "every_other": "3.5 (1.0 + 2.5)"}, "a resumed variant: total, then rungs"
    assert [cells[8].strip() for _, cells in parsed.rows[1:]] == ["float32", "float32"], "each trained at auto: float32"
    decision = parsed.attribute("decision", "class")
    assert decision == "decision"
    text = "".join(parsed.text)
    assert f"{record.promotion.message} at {record.winner.uri}" in text
    assert record.promotion.message.startswith("published version 1: ")


@pytest.mark.training
def test_the_curves_have_one_point_per_recorded_epoch(page: Path, histories: dict[str, dict]) -> None:
    """Training at every epoch, validation at the epochs it ran (val_epochs): the numbers the figure draws."""
    drawn = json.loads(Page(page.read_text()).attribute("curves", "data-curves"))
    expected = {}
    for variant, history in histories.items():
        epochs = list(range(1, TRAINED[variant]["epochs"] + 1))
        assert len(history["loss"]) == len(epochs) and len(history["val_loss"]) == len(history["val_epochs"])
        for key in ("loss", "accuracy"):
            expected[f"{variant}/{key}"] = {"epoch": epochs, "value": history[key]}
            expected[f"{variant}/val_{key}"] = {"epoch": history["val_epochs"], "value": history[f"val_{key}"]}
    assert histories["every_other"]["val_epochs"] == [2, 4]
    assert drawn.keys() == expected.keys()
    for line, points in expected.items():
        assert drawn[line]["epoch"] == points["epoch"], line
        assert drawn[line]["value"] == pytest.approx(points["value"]), line


def test_a_history_without_validation_draws_its_training_curves_only() -> None:
    """metrics.json written before contract 1 has no val_* keys: the report still draws what there is."""
    drawn = figures.series(figures.curves({"old": {"loss": [0.9, 0.6], "accuracy": [0.6, 0.8]}}))
    assert drawn == {
        "old/loss": {"epoch": [1, 2], "value": [0.9, 0.6]},
        "old/accuracy": {"epoch": [1, 2], "value": [0.6, 0.8]},
    }


@pytest.mark.training
def test_the_confusion_matrix_is_the_winners_on_the_whole_test_split_labelled_with_class_names(
    page: Path, record: SelectionRecord, run_store: tuple[str, Path]
) -> None:
    test = artifact.read_shards(open_store(str(run_store[1])), "test")
    matrix = np.array(record.confusion_matrix)
    assert matrix.shape == (10, 10) and matrix.sum() == TEST_SIZE
    assert matrix.sum(axis=1).tolist() == np.bincount(test.labels, minlength=10).tolist(), "rows are the true labels"
    assert np.trace(matrix) / TEST_SIZE == pytest.approx(record.winner.test_accuracy)
    assert json.loads(Page(page.read_text()).attribute("confusion", "data-confusion")) == record.confusion_matrix
    figure = figures.confusion(record.confusion_matrix, record.class_names)
    (ax,) = [ax for ax in figure.axes if ax.get_ylabel()]
    assert (
        [t.get_text() for t in ax.get_xticklabels()]
        == [t.get_text() for t in ax.get_yticklabels()]
        == record.class_names
    )
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("true", "predicted")
    drawn = ax.images[0].get_array()
    assert drawn is not None and np.array_equal(drawn, matrix), (
        "the heat map's rows are the matrix's rows (true labels)"
    )


@pytest.mark.training
def test_the_mistakes_grid_shows_each_kept_mistake_with_its_true_and_predicted_names(
    page: Path, record: SelectionRecord
) -> None:
    names = record.class_names
    text = " ".join(Page(page.read_text()).text)
    for mistake in record.misclassified:
        assert f"true: {names[mistake.true]}" in text and f"predicted: {names[mistake.predicted]}" in text
        assert f"test #{mistake.index}" in text
    shown = [int(n) for n in re.findall(r"test #(\d+)", text)]
    assert shown == [m.index for m in record.misclassified], "in the record's order: most confident first"


@pytest.mark.training
def test_the_markdown_leaderboard_lists_every_candidate_and_marks_the_winner(
    record: SelectionRecord, seconds: dict[str, list[float]]
) -> None:
    text = markdown(record, seconds)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "variant" not in line]
    assert [row.split(" | ")[1] for row in rows] == [c.variant for c in record.candidates]
    assert {row.split(" | ")[1]: row.removesuffix(" |").split(" | ")[6] for row in rows} == {
        "mlp": "1.0",
        "every_other": "3.5 (1.0 + 2.5)",
    }
    assert [row.removesuffix(" |").split(" | ")[7] for row in rows] == ["float32", "float32"]
    assert rows[0].startswith("| 1 ★ winner | ") and "★" not in "".join(rows[1:])
    assert record.promotion.message in text


@pytest.mark.training
def test_the_page_renders_in_headless_chromium(page: Path, record: SelectionRecord, tmp_path: Path) -> None:
    """A real browser draws the page (not blank) and its DOM holds the leaderboard."""
    assert CHROMIUM, "chromium is not installed: `make test` installs it (Debian's chromium)"
    flags = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*flags, f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri()],
        check=True,
        capture_output=True,
        timeout=120,
    )
    with Image.open(shot) as image:
        pixels = np.asarray(image.convert("L"), np.float64)
    assert pixels.shape == (1600, 1200) and pixels.std() > 20, "the screenshot is blank"
    dom = subprocess.run(
        [*flags, "--dump-dom", page.as_uri()], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    rows = Page(dom).rows
    assert [cells[1].replace(" ★ winner", "") for _, cells in rows[1:]] == [c.variant for c in record.candidates]
    assert record.promotion.message in dom


@pytest.mark.training
def test_bakeoff_report_writes_the_latest_run_or_a_named_one(
    run_store: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`latest` is the run whose selection record is newest, whatever its id."""
    store_uri, _ = run_store
    store_root = tmp_path / "store"
    shutil.copytree(store_uri[len("file://") :], store_root)
    newer = runs.selection(open_store(str(store_root)), RUN_ID)
    newer = dataclasses.replace(
        newer, run_id="a-newer-run", created="2999-01-01T00:00:00+00:00"
    )  # sorts before RUN_ID by name
    shutil.copytree(store_root / "runs" / RUN_ID, store_root / "runs" / "a-newer-run")
    runs.write_selection(open_store(str(store_root)), newer)

    assert main(["report", "--store", str(store_root), "-o", str(tmp_path / "latest.html")]) == 0
    assert "bakeoff run a-newer-run" in (tmp_path / "latest.html").read_text()
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "latest.html").stat().st_mode & 0o777 == 0o666 & ~umask, (
        "an ordinary file, as any other the user writes"
    )
    assert main(["report", RUN_ID, "--store", str(store_root), "-o", str(tmp_path / "named.html")]) == 0
    assert f"bakeoff run {RUN_ID}</h1>" in (tmp_path / "named.html").read_text()
    assert capsys.readouterr().err.splitlines()[-1] == f"wrote the report of run {RUN_ID} to {tmp_path / 'named.html'}"


@pytest.mark.training
def test_the_select_steps_page_has_an_html_name(run_store: tuple[str, Path], tmp_path: Path) -> None:
    store_uri, data_dir = run_store
    shutil.copytree(store_uri[len("file://") :], tmp_path / "store")
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    report = dsl.HTML(uri=str(outputs / "report"))
    select(
        variants=[{"name": variant} for variant in TRAINED],
        data=dsl.Dataset(uri=str(data_dir)),
        store=f"file://{tmp_path / 'store'}",
        s3_endpoint="",
        model_name="fashion-mnist",
        run_id=RUN_ID,
        metric="val_accuracy",
        min_improvement=0.0,
        force_publish=False,
        confidence=0.95,
        confusion=dsl.ClassificationMetrics(uri=str(outputs / "confusion")),
        report=report,
        leaderboard=dsl.Markdown(uri=str(outputs / "leaderboard")),
    )
    assert report.uri == str(outputs / "report.html")
    assert Path(report.path).read_text().startswith("<!doctype html>")


def selection_sample(run_id: str, created: str) -> SelectionRecord:
    sample = SelectionRecord.from_json((samples.RECORDS / "selection.json").read_text(), "selection.json")
    return dataclasses.replace(sample, run_id=run_id, created=created)


class Unlisted(FolderStore):
    """A store on which listing fails: what `report latest` must not need on a big S3 store."""

    def list(self, prefix: str) -> list[str]:
        raise AssertionError(f"listed {prefix!r}")


def test_latest_reads_the_newest_runs_pointer_without_listing_and_an_older_run_never_moves_it(tmp_path: Path) -> None:
    store = Unlisted(tmp_path)
    runs.write_selection(store, selection_sample("first", "2026-01-01T00:00:00+00:00"))
    assert latest_run(store) == "first"
    runs.write_selection(store, selection_sample("newer", "2026-03-01T00:00:00+00:00"))
    runs.write_selection(store, selection_sample("late-but-older", "2026-02-01T00:00:00+00:00"))  # a slow select
    assert latest_run(store) == "newer"
    assert runs.selection(store, "late-but-older").run_id == "late-but-older"  # its record is written all the same


def test_latest_of_a_store_written_before_the_pointer_is_found_by_listing(tmp_path: Path) -> None:
    store = FolderStore(tmp_path)
    for run_id, created in (("old", "2025-01-01T00:00:00+00:00"), ("older", "2024-01-01T00:00:00+00:00")):
        store.put_bytes(runs.selection_key(run_id), selection_sample(run_id, created).to_json().encode())
    assert latest_run(store) == "old"


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            ["unknown-run"],
            "cannot report run 'unknown-run' in file://{store}: no such run;"
            " `bakeoff report latest` reports the newest run that has one",
        ),
        (
            ["trained-only"],
            "cannot report run 'trained-only' in file://{store}: it has no selection record (it did not reach select);"
            " `bakeoff report latest` reports the newest run that has one",
        ),
        (
            ["../outside"],
            "run id '../outside' is not one bakeoff writes: pass the run id `bakeoff run` printed, or latest",
        ),
        (
            ["latest"],
            "no run in file://{store} has a selection record: run a bake-off (`bakeoff run`) or check --store",
        ),
    ],
)
def test_bakeoff_report_refuses_what_it_cannot_report_in_one_line_and_writes_nothing(
    arguments: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    store = tmp_path / "store"
    (store / "runs" / "trained-only" / "mlp").mkdir(parents=True)
    (store / "runs" / "trained-only" / "mlp" / "metrics.json").write_text("{}")
    out = tmp_path / "report.html"
    assert main(["report", *arguments, "--store", str(store), "-o", str(out)]) == 1
    assert capsys.readouterr().err.splitlines() == [f"bakeoff: error: {message.format(store=store)}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"], "nothing written"


@pytest.mark.training
def test_a_report_that_cannot_be_written_is_one_line(run_store: tuple[str, Path], tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(
        BakeoffError, match=r"^cannot write '.*/a-file/report.html' \(File exists\): choose another -o$"
    ):
        write_report(open_store(run_store[0]), RUN_ID, tmp_path / "a-file" / "report.html")
    assert write_report(
        open_store(run_store[0]), RUN_ID, tmp_path / "new" / "report.html"
    ).is_file()  # missing folders are made


@pytest.mark.training
def test_the_winner_mark_follows_the_records_winner_not_the_first_row(
    record: SelectionRecord, histories: dict[str, dict], seconds: dict[str, list[float]]
) -> None:
    swapped = dataclasses.replace(
        record, winner=dataclasses.replace(record.winner, variant=record.candidates[1].variant)
    )
    rows = Page(render(swapped, histories, seconds)).rows
    assert [attributes.get("class") for attributes, _ in rows[1:]] == [None, "winner"]


def assert_select_artifacts(work_dir: Path, store_uri: str, summary: Summary) -> None:
    """The select step's KFP outputs of a real kfp.local run (tests/test_cli.py): the confusion matrix, the page, the
    leaderboard."""
    (select_dir,) = (work_dir / "pipeline-root").glob("*/select")
    record = runs.selection(open_store(store_uri), summary.run_id)
    (confusion,) = json.loads((select_dir / "executor_output.json").read_text())["artifacts"]["confusion"]["artifacts"]
    matrix = confusion["metadata"]["confusionMatrix"]
    assert [spec["displayName"] for spec in matrix["annotationSpecs"]] == record.class_names
    rows = np.array([row["row"] for row in matrix["rows"]])
    assert rows.tolist() == record.confusion_matrix and rows.sum() == 10_000, "the winner on the whole test split"
    assert np.trace(rows) / rows.sum() == summary.winner.test_accuracy
    page = Page((select_dir / "report.html").read_text())
    assert [attributes["data-variant"] for attributes, _ in page.rows[1:]] == [c.variant for c in summary.candidates]
    assert [attributes.get("class") for attributes, _ in page.rows[1:]] == ["winner"] + [None] * (
        len(summary.candidates) - 1
    )
    assert summary.promotion.message in "".join(page.text)
    leaderboard = (select_dir / "leaderboard").read_text()
    assert f"| 1 ★ winner | {summary.winner.variant} |" in leaderboard
    assert all(f"| {c.variant} |" in leaderboard for c in summary.candidates)


def test_the_page_shows_each_class_s_test_images_and_accuracy_by_name() -> None:
    from bakeoff.components.storage.records import SelectionRecord as Record

    sample = Record.from_json((Path(__file__).parent / "data" / "records" / "selection.json").read_text(), "sample")
    matrix = [[0] * 3 for _ in range(3)]
    matrix[0][0], matrix[0][2], matrix[1][1] = 3, 1, 5  # class 0: 3 of 4 right; class 1: 5 of 5; class 2: none
    record = dataclasses.replace(
        sample, class_names=["cat", "dog", "<bird>"], confusion_matrix=matrix, misclassified=[]
    )
    parsed = Page(render(record, {}, {c.variant: [1.0] for c in record.contestants()}))
    table = "".join(parsed.text)
    assert "0cat40.7500" in table and "1dog51.0000" in table and "2<bird>0-" in table
