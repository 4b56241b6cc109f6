"""What `bakeoff run` shows while it works: progress events, the live display on a terminal, plain lines elsewhere."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from rich.console import Console

from bakeoff.components import progress
from bakeoff.pipelines.cli.display import LiveDisplay, Row, rows
from bakeoff.pipelines.local_run import plain

pytestmark = pytest.mark.unit

BAKEOFF = str(Path(sys.executable).parent / "bakeoff")
TWO = """
defaults: {workers: 1, training: {epochs: 1, batch_size: 32}}
variants:
  - {name: mlp, model: {type: mlp, hidden_units: [16]}}
  - {name: small_cnn, model: {type: cnn, filters: [4, 8], dense_units: 16}}
"""
# 100 examples make no full batch of 256: the worker fails at once, on every attempt.
FAILING = """
variants:
  - {name: too_big, model: {type: mlp, hidden_units: [16]}, training: {epochs: 1, batch_size: 256}, workers: 1}
"""
ESCAPE = re.compile(r"\x1b")


def emitted(folder: Path, monkeypatch: pytest.MonkeyPatch, *events: tuple[str, dict]) -> dict[str, progress.Progress]:
    monkeypatch.setenv(progress.PROGRESS_DIR_ENV, str(folder))
    for variant, fields in events:
        progress.emit(variant, progress.Event(**fields))
    return progress.read_events(folder)


def seen(first_time: float, time: float, state: str, **fields: object) -> progress.Progress:
    """A variant's progress after events from ``first_time`` to ``time``, the last in ``state``."""
    ended = time if state in progress.TRAINING_ENDS else None
    return progress.Progress(progress.Event(state, time, **fields), first_time, ended)  # type: ignore[arg-type]


def test_a_variants_events_merge_in_order_and_done_keeps_the_last_epochs_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    states = emitted(
        tmp_path,
        monkeypatch,
        ("mlp", {"state": "training", "restarts": 0}),
        ("mlp", {"state": "training", "epoch": 1, "epochs": 3, "loss": 0.9, "accuracy": 0.6}),
        ("cnn", {"state": "training", "epoch": 1, "epochs": 2, "loss": 1.5}),
        ("mlp", {"state": "training", "epoch": 2, "epochs": 3, "loss": 0.7, "accuracy": 0.7, "val_accuracy": 0.65}),
        ("mlp", {"state": "done"}),
    )
    assert sorted(states) == ["cnn", "mlp"]
    mlp = states["mlp"]
    assert (mlp.latest.state, mlp.latest.epoch, mlp.latest.loss, mlp.latest.val_accuracy) == ("done", 2, 0.7, 0.65)
    assert mlp.latest.time is not None and mlp.first_time < mlp.latest.time
    assert (states["cnn"].latest.state, states["cnn"].latest.epoch) == ("training", 1)


def test_a_line_still_being_written_is_read_only_once_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    emitted(tmp_path, monkeypatch, ("mlp", {"state": "training", "epoch": 1, "epochs": 2}))
    with open(tmp_path / "mlp.jsonl", "a") as events:
        events.write('{"time": 1e12, "variant": "mlp", "state": "do')  # the writer is mid-line
    assert progress.read_events(tmp_path)["mlp"].latest.state == "training"
    with open(tmp_path / "mlp.jsonl", "a") as events:
        events.write('ne"}\n')
    assert progress.read_events(tmp_path)["mlp"].latest.state == "done"


def test_without_the_variable_nothing_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.PROGRESS_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    progress.emit("mlp", progress.Event("training"))
    assert progress.log_path("mlp") is None and list(tmp_path.iterdir()) == []


APPEND = """
import sys
from bakeoff.components import progress
for n in range(200):
    progress.emit(sys.argv[1], progress.Event("training", epoch=n, error="x" * 20000))
"""


def test_processes_appending_at_once_never_tear_a_line(tmp_path: Path) -> None:
    # Lines longer than a buffered file's 8 KiB buffer: only one write per line keeps them whole.
    env = {**os.environ, progress.PROGRESS_DIR_ENV: str(tmp_path)}
    writers = [subprocess.Popen([sys.executable, "-c", APPEND, "mlp"], env=env) for _ in range(4)]
    assert [writer.wait(timeout=120) for writer in writers] == [0] * 4
    lines = (tmp_path / "mlp.jsonl").read_text().splitlines()
    assert len(lines) == 800 and all(json.loads(line)["error"] == "x" * 20000 for line in lines)


def test_rows_follow_the_runs_variants_waiting_until_their_first_event() -> None:
    events = {
        "b": seen(100.0, 130.0, "training", epoch=2, epochs=5, loss=0.5),
        "c": seen(100.0, 110.0, "failed", error="TFJob 'c' failed"),
        "d": seen(100.0, 140.0, "evaluating", epoch=5, epochs=5),
    }
    running = rows(["a", "b", "c", "d"], events, now=150.0)
    assert running == [
        Row("a", "waiting"),
        Row("b", "training", epoch=2, epochs=5, loss=0.5, elapsed=50.0),  # still training: its clock runs
        Row("c", "failed", elapsed=10.0, error="TFJob 'c' failed"),  # stopped at its last event
        Row("d", "evaluating", epoch=5, epochs=5, elapsed=40.0),
    ]
    finished = rows(["b", "d"], events, now=150.0, finished=True)
    assert [row.state for row in finished] == ["done", "done"]  # the pipeline returned: every variant was scored


def test_a_variants_clock_stops_where_its_job_ended_not_at_what_select_or_halving_said_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = iter([100.0, 130.0, 200.0, 100.0, 130.0, 160.0, 100.0, 130.0, 150.0])
    monkeypatch.setattr(progress.time, "time", lambda: next(clock))
    states = emitted(
        tmp_path,
        monkeypatch,
        ("scored", {"state": "training"}),
        ("scored", {"state": "done"}),
        ("scored", {"state": "evaluating"}),  # select, long after its training ended
        ("dropped", {"state": "training"}),
        ("dropped", {"state": "paused"}),
        ("dropped", {"state": "stopped"}),  # halving, after the rung's last variant
        ("resumed", {"state": "training"}),
        ("resumed", {"state": "paused"}),
        ("resumed", {"state": "training"}),  # the next rung: its clock runs again
    )
    elapsed = {row.variant: row.elapsed for row in rows(["scored", "dropped", "resumed"], states, now=250.0)}
    assert elapsed == {"scored": 30.0, "dropped": 30.0, "resumed": 150.0}
    assert [row.elapsed for row in rows(["scored"], states, now=250.0, finished=True)] == [30.0]


def test_halving_shows_who_waits_for_its_rung_and_who_it_stopped() -> None:
    events = {
        "kept": seen(100.0, 130.0, "paused", epoch=3, epochs=3),
        "dropped": seen(100.0, 131.0, "stopped", epoch=3, epochs=3),
    }
    assert [row.state for row in rows(["kept", "dropped"], events, now=150.0)] == ["paused", "stopped"]
    # A variant halving stopped was never scored by select: it stays stopped when the run ends.
    assert [row.state for row in rows(["kept", "dropped"], events, now=150.0, finished=True)] == ["done", "stopped"]


def test_the_table_shows_each_variants_epoch_metrics_speed_and_where_the_logs_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emitted(
        tmp_path,
        monkeypatch,
        (
            "wide",
            {
                "state": "training",
                "epoch": 3,
                "epochs": 10,
                "loss": 0.4321,
                "accuracy": 0.8765,
                "val_loss": 0.5,
                "val_accuracy": 0.8642,
                "examples_per_second": 1234.5,
            },
        ),
        ("broken", {"state": "failed", "error": "TFJob 'bakeoff-broken' failed: replica exited with code 1"}),
    )
    screen = io.StringIO()
    Console(file=screen, width=160).print(
        LiveDisplay(["wide", "broken", "later"], tmp_path, Console(file=io.StringIO())).render()
    )
    text = screen.getvalue()
    assert re.search(r"^wide\s+training\s+3/10\s+0\.4321\s+0\.8765\s+0\.8642\s+1234\s+0:0\d$", text, re.M), text
    assert re.search(r"^broken\s+failed\b", text, re.M) and re.search(r"^later\s+waiting\s*$", text, re.M), text
    assert "broken: TFJob 'bakeoff-broken' failed: replica exited with code 1" in text
    assert f"logs: {tmp_path}/<variant>.log" in text and f"kfp.local: {tmp_path}/pipeline.log" in text


def test_plain_text_loses_kfps_colours_and_every_control_character() -> None:
    from kfp.local import logging_utils, status

    coloured = (
        f"Task {logging_utils.format_task_name('ingest')} finished with status "
        f"{logging_utils.format_status(status.Status.SUCCESS)}"
    )
    assert "\x1b" in coloured
    assert plain(coloured + "\r\n\tdone\x07") == "Task 'ingest' finished with status SUCCESS\n\tdone"


# The real command, on a terminal and off one.


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One kfp.local work dir for the module: ingest runs once, training is never cached."""
    return tmp_path_factory.mktemp("work")


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "variants.yaml"
    path.write_text(text)
    return path


def on_terminal(args: list[str], cwd: Path, timeout: float = 600) -> tuple[int, str]:
    """Runs ``args`` with stdin, stdout and stderr on a 120×40 pseudo-terminal; its exit code and all it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen(
        args, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env={**os.environ, "TERM": "xterm-256color"}
    )
    os.close(slave)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                process.kill()
                raise AssertionError(f"{args} wrote nothing for {timeout} s")
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every holder of the terminal has closed it
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    return process.wait(timeout=60), b"".join(chunks).decode(errors="replace")


def run_args(config_path: Path, tmp_path: Path, work_dir: Path, examples: str) -> list[str]:
    return [
        BAKEOFF,
        "run",
        "--config",
        str(config_path),
        "--store",
        str(tmp_path / "store"),
        "--work-dir",
        str(work_dir),
        "--max-train-examples",
        examples,
    ]


@pytest.mark.training
def test_on_a_terminal_a_live_table_shows_every_variant_and_the_leaderboard_follows(
    tmp_path: Path, work_dir: Path
) -> None:
    code, output = on_terminal(run_args(config(tmp_path, TWO), tmp_path, work_dir, "512"), tmp_path)
    text = plain(output.replace("\r\n", "\n"))
    assert code == 0, text
    assert "\x1b[1A" in output  # the table was redrawn in place, cursor up line by line
    (folder,) = [path for path in (work_dir / "runs").iterdir() if (path / "small_cnn.log").exists()]
    last_frame = text[text.rindex("bakeoff run: 2 variant(s)") :]
    assert re.search(r"^mlp\s+done\b", last_frame, re.M) and re.search(r"^small_cnn\s+done\b", last_frame, re.M), (
        last_frame
    )
    assert f"logs: {folder}/<variant>.log" in last_frame
    lines = text.strip().splitlines()
    assert_run_ends(lines, "winner: ", work_dir)
    # The replicas' lines went to each variant's log, not over the table.
    assert "[bakeoff-mlp-" not in text and "[bakeoff-small-cnn-" not in text
    for name in ("mlp", "small-cnn"):
        assert re.search(
            rf"^\[bakeoff-{name}-\w+-worker-0\] ", (folder / f"{name.replace('-', '_')}.log").read_text(), re.M
        )
    assert "Executing task" in (folder / "pipeline.log").read_text()


def assert_run_ends(lines: list[str], winner: str, work_dir: Path) -> None:
    """After the leaderboard: the winner, the version it published, then the report's path and how to serve it; a
    costs line between them where the run has one (a run on a busy machine says it kept none)."""
    tail = [line for line in lines[-5:] if not line.startswith("costs: ")][-4:]
    assert tail[0].startswith(winner) and tail[1].startswith("published version "), lines[-6:]
    assert_report_line(tail[2], work_dir)
    assert tail[3].startswith("serve it: bakeoff serve"), tail[3]


def assert_report_line(line: str, work_dir: Path) -> None:
    """The run ends with the path of its report page, written under the work dir."""
    assert line.startswith("report: "), line
    page = Path(line.removeprefix("report: "))
    assert page.parent == (work_dir / "reports").resolve() and 'id="leaderboard"' in page.read_text()


@pytest.mark.training
def test_off_a_terminal_every_line_is_plain_text_and_the_replicas_lines_are_there(
    tmp_path: Path, work_dir: Path
) -> None:
    one = config(tmp_path, TWO.split("  - {name: small_cnn")[0])
    result = subprocess.run(
        run_args(one, tmp_path, work_dir, "512"), cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", result.stderr + result.stdout), (
        "a control character in plain output"
    )
    assert re.search(r"^\s*\[bakeoff-mlp-\w+-worker-0\] ", result.stderr, re.M), result.stderr[-2000:]
    assert "Pipeline 'bakeoff' finished with status SUCCESS" in result.stderr  # kfp.local's colours, gone
    assert_run_ends(result.stdout.splitlines(), "winner: mlp", work_dir)


@pytest.mark.training
def test_a_failed_variants_whole_log_is_printed_and_named_before_the_one_line_error(
    tmp_path: Path, work_dir: Path
) -> None:
    code, output = on_terminal(run_args(config(tmp_path, FAILING), tmp_path, work_dir, "100"), tmp_path)
    text = plain(output.replace("\r\n", "\n"))
    assert code == 1, text
    header = re.search(r"^---- too_big's log: (\S+) ----$", text, re.M)
    assert header, text[-3000:]
    log = Path(header.group(1))
    assert log.name == "too_big.log" and log.read_text().strip() in text  # all of it, not a tail
    printed = text[header.end() :]
    assert "100 training examples make no full global batch of 256" in printed
    assert printed.count("replica bakeoff-too-big-") >= 3  # the first attempt and both restarts
    assert re.search(r"^too_big\s+failed\b", text[: header.start()], re.M)
    assert text.strip().splitlines()[-1].startswith("bakeoff: error: TFJob 'bakeoff-too-big-")
