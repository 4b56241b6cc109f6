"""Faults injected for real into running 2-worker jobs: a killed replica resumes from the backup, a stopped one is
named."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from bakeoff.components.backends.local import LocalBackend
from bakeoff.components.errors import BakeoffError
from bakeoff.components.spec import from_dict
from bakeoff.components.storage import Store, open_store, runs
from bakeoff.components.training import backup
from bakeoff.components.training.tfjob import build_tfjob, worker_args
from tests.conftest import still_running

EPOCHS = 6
EXAMPLES = 2048  # 32 steps of the global batch 64 per epoch
STEPS = EXAMPLES // 64
TINY_CNN: dict[str, Any] = {
    "name": "tiny",
    "model": {"type": "cnn", "filters": [8, 16], "dense_units": 32},
    "training": {"epochs": EPOCHS, "batch_size": 32, "schedule": "cosine"},
    "workers": 2,
}
# Every family resumes as the cnn does; the backbone's freeze schedule ends in epoch 3, where the fault lands.
FAMILIES: dict[str, dict[str, Any]] = {
    "cnn": TINY_CNN["model"],
    "resnet": {"type": "resnet", "stem_filters": 8, "filters": [8, 16]},
    "backbone": {
        "type": "backbone",
        "network": "MobileNetV3Small",
        "weights": "none",
        "image_size": 32,
        "freeze_epochs": 3,
        "backbone_learning_rate": 0.5,
    },
}
JOB = "ft-job"
PREFIX = "runs/r1/tiny"
# The chief starts its third epoch only after the second is backed up: a fault sent then lands mid-epoch.
TRIGGER = f"[{JOB}-worker-0] Epoch 3/{EPOCHS}"
VICTIM = f"{JOB}-worker-1"
STARTED = re.compile(r"\[[^]]+\] replica (\S+) started as pid (\d+)$")


class Injector:
    """A sink that sends ``signum`` to replica ``target`` the first time a line starts with ``trigger``.

    The pids come from the backend's own "started as pid" lines, so a restarted job's replicas are known too.
    """

    def __init__(self, trigger: str, target: str, signum: int) -> None:
        self.trigger, self.target, self.signum = trigger, target, signum
        self.lines: list[str] = []
        self.pids: dict[str, int] = {}
        self.every_pid: list[int] = []
        self.sent = False

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        started = STARTED.match(line)
        if started:
            self.pids[started[1]] = int(started[2])
            self.every_pid.append(int(started[2]))
        if not self.sent and line.startswith(self.trigger):
            os.kill(self.pids[self.target], self.signum)
            self.sent = True

    def epoch_ends(self, replica: str) -> list[int]:
        """How many epochs ``replica`` completed in each attempt, as its log shows them."""
        counts = [0]
        for line in self.lines:
            if line.startswith(f"[{JOB}] replica ") and "restarting the job" in line:
                counts.append(0)
            elif line.startswith(f"[{replica}] {STEPS}/{STEPS} "):
                counts[-1] += 1
        return counts


def tiny_job(data: Path, store: Store, backoff_limit: int, model: dict[str, Any] = TINY_CNN["model"]):
    variant = from_dict({**TINY_CNN, "model": model})
    return build_tfjob(
        variant,
        name=JOB,
        image="unused",
        args=worker_args(variant, str(data), store.uri, PREFIX, EXAMPLES),
        env={},
        backoff_limit=backoff_limit,
        active_deadline_seconds=600,
    )


@pytest.mark.training
@pytest.mark.parametrize("family", FAMILIES)
def test_a_replica_killed_mid_training_resumes_from_the_last_backed_up_epoch(
    small_dataset: Path, s3_env: str, tmp_path: Path, family: str
) -> None:
    """SIGKILL one replica in epoch 3 of 6: the restarted job restores the backup and trains only the epochs left."""
    store = open_store(f"s3://bakeoff/{tmp_path.name}")
    injector = Injector(TRIGGER, VICTIM, signal.SIGKILL)
    LocalBackend(sink=injector).run(tiny_job(small_dataset, store, backoff_limit=1, model=FAMILIES[family]))

    assert injector.sent
    assert any(
        line == f"[{JOB}] replica {VICTIM} was killed by SIGKILL; restarting the job (1/1)" for line in injector.lines
    )
    metrics = runs.metrics_at(store, PREFIX)
    resumed = metrics.resumed_from_epoch
    assert metrics.attempt == 2 and 2 <= resumed < EPOCHS, metrics
    _, after = injector.epoch_ends(f"{JOB}-worker-0")
    # The second attempt trains only the epochs left; a restart from scratch would train all of them again.
    assert metrics.epochs_trained == after == EPOCHS - resumed < EPOCHS
    assert len(metrics.history["loss"]) == EPOCHS  # the epochs before the restart are kept in the record
    # The optimizer's step count came back with the checkpoint: the cosine schedule ends where a run without faults
    # ends.
    assert metrics.optimizer_iterations == EPOCHS * STEPS
    assert store.exists(f"{PREFIX}/model/saved_model.pb")
    assert store.list(backup.backup_prefix(PREFIX)) == []  # removed once the variant succeeded
    assert still_running(injector.every_pid, "bakeoff.components.training.worker") == []


@pytest.mark.training
@pytest.mark.parametrize(
    ("signum", "what", "hint"),
    [
        (signal.SIGKILL, "was killed by SIGKILL", "OOM killer"),
        (signal.SIGSTOP, r"stopped responding \(no heartbeat for \d+ s\)", "SIGSTOP"),
    ],
    ids=["SIGKILL", "SIGSTOP"],
)
def test_a_lost_replica_past_the_backoff_limit_fails_the_job_in_one_line_and_publishes_nothing(
    small_dataset: Path, tmp_path: Path, signum: int, what: str, hint: str
) -> None:
    """A stopped replica is found out within bounds, not at the deadline, and named, not its peer that gave up on it."""
    store = open_store(str(tmp_path / "store"))
    injector = Injector(TRIGGER, VICTIM, signum)
    with pytest.raises(BakeoffError) as error:
        LocalBackend(sink=injector).run(tiny_job(small_dataset, store, backoff_limit=0))

    message = str(error.value)
    assert "\n" not in message
    assert re.fullmatch(rf"TFJob '{JOB}' failed: replica {VICTIM} {what} after 0 restart\(s\): .*{hint}.*", message), (
        message
    )
    assert [key for key in store.list(PREFIX) if not key.startswith(backup.backup_prefix(PREFIX) + "/")] == []
    assert still_running(injector.every_pid, "bakeoff.components.training.worker") == []


STOPS_ITSELF = """
import json, os, signal, sys, time
from bakeoff.components.backends.heartbeat import start_heartbeat
start_heartbeat()
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
pid_file = os.path.join(sys.argv[1], f"replica-{index}.pid")
with open(pid_file + ".partial", "w") as file:
    file.write(str(os.getpid()))
os.rename(pid_file + ".partial", pid_file)
if index == 1:
    os.kill(os.getpid(), signal.SIGSTOP)
time.sleep(120)
"""


@pytest.mark.long_running
@pytest.mark.unit
def test_a_replica_that_goes_quiet_with_no_peer_to_notice_is_stopped_by_the_watchdog(tmp_path: Path) -> None:
    """Before TensorFlow's coordination service runs nothing else notices a stopped replica: the watchdog does."""
    variant = from_dict({"name": "probe", "model": {"type": "mlp"}, "workers": 2})
    job = build_tfjob(
        variant,
        name="probe-job",
        image="unused",
        args=[str(tmp_path)],
        env={},
        backoff_limit=0,
        active_deadline_seconds=20,
    )
    job.spec.tf_replica_specs["Worker"].template.spec.containers[0].command = ["python", "-c", STOPS_ITSELF]
    with pytest.raises(
        BakeoffError,
        match=r"^TFJob 'probe-job' failed: replica probe-job-worker-1 stopped responding \(no heartbeat for 3 s\)",
    ):
        LocalBackend(sink=lambda line: None, stall_seconds=3).run(job)
    pids = [int((tmp_path / f"replica-{index}.pid").read_text()) for index in (0, 1)]
    assert [pid for pid in pids if Path(f"/proc/{pid}").exists()] == []


def _checkpoint(folder: Path, step: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in (f"ckpt-{step}.index", f"ckpt-{step}.data-00000-of-00001"):
        (folder / name).write_bytes(f"{name} of step {step}".encode())
    (folder / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{step}"\n')
    for stale in folder.glob(f"ckpt-{step - 1}.*"):
        stale.unlink()  # as tf.train.CheckpointManager(max_to_keep=1) does
    return folder


@pytest.mark.unit
def test_the_store_keeps_only_the_newest_complete_backup_of_this_job(store: Store, tmp_path: Path) -> None:
    """Older epochs dropped after each upload; the newest restored; another job's backup ignored; all gone on
    success."""
    local = tmp_path / "chief"
    for epochs_done in (1, 2, 3):
        backup.upload(store, "v", "job-a", _checkpoint(local, epochs_done), epochs_done, {"loss": [1.0] * epochs_done})
    backup.upload(store, "v", "job-b", _checkpoint(tmp_path / "other", 9), 9, {"loss": [0.5] * 9})
    assert [key for key in store.list("v/backup/job-a") if "/epoch-" in key] == [
        f"v/backup/job-a/epoch-0003/{name}"
        for name in ("backup.json", "checkpoint", "ckpt-3.data-00000-of-00001", "ckpt-3.index")
    ]

    restored = backup.restore(store, "v", "job-a", tmp_path / "replica")
    assert restored == backup.Resume(3, {"loss": [1.0] * 3})
    assert sorted(p.name for p in (tmp_path / "replica" / "chief").iterdir()) == [
        "checkpoint",
        "ckpt-3.data-00000-of-00001",
        "ckpt-3.index",
    ]
    assert backup.restore(store, "v", "job-c", tmp_path / "fresh") == backup.Resume(0, {})
    assert [backup.begin_attempt(store, "v", "job-a", 3) for _ in range(2)] == [1, 2]
    assert backup.begin_attempt(store, "v", "job-a", 6) == 1  # the next rung's job counts its own starts

    backup.remove(store, "v")
    assert store.list("v") == []
    assert backup.restore(store, "v", "job-a", tmp_path / "after") == backup.Resume(0, {})


@pytest.mark.unit
def test_a_backup_written_up_to_its_manifest_only_is_not_restored(store: Store, tmp_path: Path) -> None:
    """An upload cut short (the chief killed mid-upload) leaves files without a manifest: the previous epoch is
    restored."""
    backup.upload(store, "v", "job", _checkpoint(tmp_path / "chief", 1), 1, {"loss": [1.0]})
    folder = _checkpoint(tmp_path / "chief", 2)
    for path in sorted(folder.iterdir()):
        store.put_bytes(f"v/backup/job/epoch-0002/{path.name}", path.read_bytes())
    assert backup.restore(store, "v", "job", tmp_path / "replica").epochs_done == 1


WAITS_FOR_PEERS = """
import json, os, time
from bakeoff.components.backends.heartbeat import joining, start_heartbeat
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
if index == 0:  # TensorFlow holds the GIL while it waits for the peers: no heartbeat can run
    with joining():
        time.sleep(6)
else:
    start_heartbeat()
    time.sleep(6)
"""


@pytest.mark.long_running
@pytest.mark.unit
def test_a_replica_waiting_for_its_peers_is_not_taken_for_stalled(tmp_path: Path) -> None:
    """A replica blocked in joining the cluster beats no more than a stopped one, yet is healthy: the watchdog waits."""
    variant = from_dict({"name": "probe", "model": {"type": "mlp"}, "workers": 2})
    job = build_tfjob(
        variant, name="probe-job", image="unused", args=[], env={}, backoff_limit=0, active_deadline_seconds=60
    )
    job.spec.tf_replica_specs["Worker"].template.spec.containers[0].command = ["python", "-c", WAITS_FOR_PEERS]
    LocalBackend(sink=lambda line: None, stall_seconds=3).run(job)
