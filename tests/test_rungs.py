"""Rung training and per-epoch validation: a real 2-worker variant trained to epoch 1, then resumed to epoch 3 of its
schedule."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from bakeoff.components import progress
from bakeoff.components.backends.backend import JobFailed
from bakeoff.components.data import artifact as dataset
from bakeoff.components.errors import BakeoffError
from bakeoff.components.modeling import evaluation
from bakeoff.components.spec import from_dict
from bakeoff.components.storage import open_store, runs
from bakeoff.components.storage.records import Candidate, WorkerMetrics
from bakeoff.components.training import backup, launch
from bakeoff.components.training.launch import JobSettings, final_metrics, train_variant
from tests.test_fault_tolerance import TINY_CNN

EPOCHS = 3
EXAMPLES = 1024  # 16 steps of the global batch 64 per epoch
STEPS = EXAMPLES // 64
# 2 workers, a cosine schedule; a moving average of the weights, which validation scores and the export carries
TINY = {**TINY_CNN, "training": {**TINY_CNN["training"], "epochs": EPOCHS, "ema_momentum": 0.9}}
RUN = "r1"
JOB = JobSettings(image="unused", max_train_examples=EXAMPLES, timeout_seconds=600, backend="local")
PREFIX = runs.variant_prefix(RUN, "tiny")
STALE = f"{PREFIX}/{runs.MODEL}/variables/variables.data-00000-of-00002"  # as a model saved in two shards would leave
EPOCH_LINE = re.compile(rf"^\[[^]]*-worker-(\d)\] {STEPS}/{STEPS} - .* - (val_loss: \S+ - val_accuracy: \S+) - ")


@dataclasses.dataclass(frozen=True)
class Rungs:
    store_root: Path
    rung: list[WorkerMetrics]  # each job's rung-<k>.json
    final: Candidate  # the candidate train_variant returned after the last rung
    backup_after_first: list[str]  # backup keys left by the first job
    events: list[dict]  # the progress events of the variant
    log: list[str]  # both jobs' replica log lines


@pytest.fixture(scope="module")
def rungs(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Rungs:
    """Rung 0 trains the 3-epoch schedule to epoch 1, rung 1 resumes it to epoch 3; a live display watches."""
    root = tmp_path_factory.mktemp("rungs")
    watched = root / "progress"
    watched.mkdir()
    store = open_store(str(root / "store"))
    with pytest.MonkeyPatch.context() as env:  # the replicas inherit it
        env.setenv(progress.PROGRESS_DIR_ENV, str(watched))
        train_variant(TINY, str(small_dataset), store.uri, RUN, JOB, stop_epoch=1, rung=0)
        backup_after_first = store.list(backup.backup_prefix(PREFIX))
        store.put_bytes(STALE, b"an earlier rung's file the next model does not have")
        final = train_variant(TINY, str(small_dataset), store.uri, RUN, JOB, stop_epoch=EPOCHS, rung=1)
    rung = [runs.rung_metrics(store, RUN, "tiny", index) for index in (0, 1)]
    events = [json.loads(line) for line in (watched / "tiny.jsonl").read_text().splitlines()]
    return Rungs(
        root / "store", rung, final, backup_after_first, events, (watched / "tiny.log").read_text().splitlines()
    )


@pytest.mark.training
def test_a_later_rung_resumes_the_earlier_one_on_the_same_schedule(rungs: Rungs) -> None:
    import tf_keras as keras

    first, second = rungs.rung
    assert (first.epochs, first.resumed_from_epoch, first.epochs_trained) == (1, 0, 1)
    assert (second.epochs, second.resumed_from_epoch, second.epochs_trained) == (EPOCHS, 1, 2)
    assert first.schedule_epochs == second.schedule_epochs == EPOCHS
    assert (first.rung, second.rung) == (0, 1)
    assert sum(record.epochs_trained for record in rungs.rung) == EPOCHS
    assert first.attempt == second.attempt == 1  # each rung counts its own starts: neither was restarted
    # The optimizer's steps came back with the backup: the cosine schedule ran over all 3 epochs, as one uninterrupted
    # job.
    assert first.optimizer_iterations == STEPS and second.optimizer_iterations == EPOCHS * STEPS
    # The first rung stopped a third of the way down the 3-epoch cosine, not at the end of a 1-epoch one.
    cosine = keras.optimizers.schedules.CosineDecay(0.001, decay_steps=EPOCHS * STEPS)
    assert first.learning_rate == pytest.approx(float(cosine(STEPS - 1)), rel=1e-5)
    assert second.learning_rate == pytest.approx(float(cosine(EPOCHS * STEPS - 1)), rel=1e-5)
    history = second.history
    assert len(history["loss"]) == len(history["accuracy"]) == EPOCHS
    assert len(history["val_loss"]) == len(history["val_accuracy"]) == EPOCHS and history["val_epochs"] == [1, 2, 3]
    assert history["loss"][0] == first.history["loss"][0]  # the first rung's epoch, carried over
    assert rungs.final.metrics == second  # metrics.json is the last rung's


@pytest.mark.training
def test_the_backup_outlives_an_early_stop_and_goes_with_the_last_rung(rungs: Rungs) -> None:
    assert any(key.endswith(f"/epoch-0001/{backup.MANIFEST}") for key in rungs.backup_after_first)
    store = open_store(str(rungs.store_root))
    assert store.list(backup.backup_prefix(PREFIX)) == []


@pytest.mark.training
def test_a_later_rung_replaces_the_model_leaving_no_file_of_the_earlier(
    rungs: Rungs, small_dataset: Path, tmp_path: Path
) -> None:
    """The stored model is exactly the last rung's export: nothing of an earlier model survives beside it."""
    store = open_store(str(rungs.store_root))
    assert not store.exists(STALE)
    model = store.get_dir(f"{PREFIX}/{runs.MODEL}", tmp_path / "model")
    validation = dataset.read_shards(open_store(str(small_dataset)), "validation")
    assert evaluation.evaluate(model, validation.images, validation.labels)  # it loads and serves


@pytest.mark.training
def test_validation_numbers_are_the_whole_split_scored_once(rungs: Rungs, small_dataset: Path, tmp_path: Path) -> None:
    """The recorded final val_* are those of the stored model on the whole validation split, as selection scores it."""
    store = open_store(str(rungs.store_root))
    model = store.get_dir(f"{PREFIX}/{runs.MODEL}", tmp_path / "model")
    validation = dataset.read_shards(open_store(str(small_dataset)), "validation")
    scored = evaluation.evaluate(model, validation.images, validation.labels)
    history = rungs.rung[1].history
    assert history["val_accuracy"][-1] == pytest.approx(scored["accuracy"], abs=1e-4)
    assert history["val_loss"][-1] == pytest.approx(scored["loss"], abs=1e-4)
    assert rungs.rung[1].validation_examples == len(validation.labels)


@pytest.mark.training
def test_every_replica_gets_the_same_validation_numbers(rungs: Rungs) -> None:
    """Each replica's epoch line shows the numbers it computed: the same on both, and the chief's History."""
    lines: dict[str, list[str]] = {"0": [], "1": []}
    for line in rungs.log:
        match = EPOCH_LINE.match(line)
        if match:
            lines[match[1]].append(match[2])
    history = rungs.rung[1].history
    assert (
        lines["0"]
        == lines["1"]
        == [
            f"val_loss: {loss:.4f} - val_accuracy: {accuracy:.4f}"
            for loss, accuracy in zip(history["val_loss"], history["val_accuracy"], strict=True)
        ]
    )


@pytest.mark.training
def test_the_chief_reports_each_epoch_and_the_stored_model_to_a_live_display(rungs: Rungs) -> None:
    chief = [event for event in rungs.events if "epoch" in event or event["state"] in ("paused", "done")]
    # Rung 0 ends before the schedule does: the variant is paused until halving decides, not done.
    assert [(event["state"], event.get("epoch"), event.get("epochs")) for event in chief] == [
        ("training", 1, 1),
        ("paused", None, None),
        ("training", 2, EPOCHS),
        ("training", 3, EPOCHS),
        ("done", None, None),
    ]
    history = rungs.rung[1].history
    for event, index in zip([event for event in chief if event["state"] == "training"], range(EPOCHS), strict=False):
        assert event["variant"] == "tiny" and event["examples_per_second"] > 0
        assert (event["loss"], event["val_loss"], event["val_accuracy"]) == (
            history["loss"][index],
            history["val_loss"][index],
            history["val_accuracy"][index],
        )


@pytest.mark.training
def test_the_train_step_shows_the_final_numbers(rungs: Rungs) -> None:
    record = rungs.rung[1]
    assert final_metrics(record) == {
        "val_accuracy": record.history["val_accuracy"][-1],
        "val_loss": record.history["val_loss"][-1],
        "train_seconds": record.train_seconds,
        "examples_per_second": record.examples_per_second,
        "replicas": 2,
        "epochs": EPOCHS,
    }


@pytest.mark.unit
@pytest.mark.parametrize(
    ("stop_epoch", "rung", "message"),
    [
        (
            EPOCHS + 1,
            0,
            f"variant 'tiny': stop epoch {EPOCHS + 1} is outside its schedule of {EPOCHS} epochs: pass 1 to "
            "training.epochs (0: the whole schedule)",
        ),
        (
            -1,
            0,
            f"variant 'tiny': stop epoch -1 is outside its schedule of {EPOCHS} epochs: pass 1 to training.epochs (0: "
            "the whole schedule)",
        ),
        (1, -1, "variant 'tiny': rung=-1 must be 0 or more"),
    ],
)
def test_a_stop_epoch_off_the_schedule_fails_before_anything_runs(
    tmp_path: Path, stop_epoch: int, rung: int, message: str
) -> None:
    with pytest.raises(BakeoffError) as error:
        train_variant(TINY, str(tmp_path / "no-data"), str(tmp_path / "store"), RUN, JOB, stop_epoch, rung)
    assert str(error.value) == message
    assert not (tmp_path / "store").exists()


@pytest.mark.unit
def test_validation_freq_is_checked_and_validates_every_k_epochs_and_at_the_stop() -> None:
    from bakeoff.components.training.callbacks import Validation

    for bad, problem in ((0, "must be at least 1, got 0"), (1001, "must be at most 1000, got 1001")):
        with pytest.raises(BakeoffError, match=rf"^variant: variant 'tiny': training.validation_freq: {problem}$"):
            from_dict({**TINY, "training": {**TINY["training"], "validation_freq": bad}})
    import numpy as np

    validation = Validation(
        None, np.zeros((1, 28, 28), np.uint8), np.zeros(1, np.uint8), freq=3, last_epoch=7, mirror_average=False
    )
    assert [epoch + 1 for epoch in range(7) if validation.due(epoch)] == [3, 6, 7]


@pytest.mark.unit
def test_each_rung_is_a_job_of_its_own_name() -> None:
    """A rung's finished TFJob may still exist under its name (ttlSecondsAfterFinished): the next rung's must not
    collide."""
    from bakeoff.components.training.tfjob import job_name

    names = [job_name("run-a", "tiny", rung) for rung in range(3)]
    assert len(set(names)) == 3 and names[0] == job_name("run-a", "tiny")


class Failing:
    """A backend whose job ends with ``error``: what train_variant does with the variant's backup then."""

    def __init__(self, error: BakeoffError) -> None:
        self.error = error

    def run(self, job: object) -> None:
        raise self.error


@pytest.mark.unit
@pytest.mark.parametrize(
    "error, kept",
    [
        (JobFailed("TFJob 'tiny' failed: replica tiny-worker-0 exited with code 1 after 2 restart(s)"), False),
        (BakeoffError("the Kubernetes API failed 8 times in a row to read TFJob team-a/tiny"), True),
    ],
    ids=["failed for good", "transport error"],
)
def test_a_job_failed_for_good_takes_its_backup_and_one_cut_off_by_the_api_keeps_it_for_a_retry(
    small_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: BakeoffError, kept: bool
) -> None:
    store = open_store(str(tmp_path / "store"))
    saved = f"{backup.backup_prefix(PREFIX)}/0123456789abcdef/epoch-0001/{backup.MANIFEST}"
    store.put_bytes(saved, b"{}")
    monkeypatch.setattr(launch, "make_backend", lambda *args: Failing(error))
    with pytest.raises(BakeoffError) as raised:
        train_variant(TINY, str(small_dataset), store.uri, RUN, JOB)
    assert raised.value is error
    assert store.list(backup.backup_prefix(PREFIX)) == ([saved] if kept else [])
