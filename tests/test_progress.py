"""What `bakeoff run` shows while it works: progress events, the live display on a terminal, plain lines elsewhere."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import logging
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from rich.console import Console

from bakeoff.components import progress
from bakeoff.components.logs import LINES_FILE, append_line
from bakeoff.pipelines.cli.display import LiveDisplay, Narration, Row, print_failure_logs, rows
from bakeoff.pipelines.local_run import TaskLines, plain

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


# Off a terminal: the run's own lines, read from the progress folder.


def test_a_runs_events_and_lines_are_read_once_each_in_time_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = time.time()
    append_line(tmp_path, "task train: started", started - 1)
    emitted(tmp_path, monkeypatch, ("mlp", {"state": "training", "restarts": 0}))
    append_line(tmp_path, "trained mlp: 10 examples/s", time.time() + 1)
    emitted(tmp_path, monkeypatch, ("cnn", {"state": "training", "restarts": 0}))
    with open(tmp_path / LINES_FILE, "a") as lines:
        lines.write('{"time": 1e12, "line": "task tr')  # the writer is mid-line
    follower = progress.Follower(tmp_path)
    said = follower.read()
    assert [(entry.line, entry.variant) for entry in said] == [
        ("task train: started", ""),
        ("", "mlp"),
        ("", "cnn"),
        ("trained mlp: 10 examples/s", ""),
    ]
    assert follower.read() == []
    with open(tmp_path / LINES_FILE, "a") as lines:
        lines.write('ain: done"}\n')
    assert [entry.line for entry in follower.read()] == ["task train: done"]


def said(*entries: tuple[str, dict] | str) -> list[progress.Said]:
    """A line for each string, an event for each (variant, fields), one second apart."""
    return [
        progress.Said(float(when), line=entry)
        if isinstance(entry, str)
        else progress.Said(float(when), entry[0], progress.Event(**entry[1], time=float(when)))
        for when, entry in enumerate(entries)
    ]


def test_the_plain_lines_say_each_epoch_and_a_rungs_halving_in_one_line(tmp_path: Path) -> None:
    narration = Narration(tmp_path)
    epoch = {"epoch": 1, "epochs": 3, "loss": 0.5, "accuracy": 0.8, "val_accuracy": 0.75, "examples_per_second": 1234.4}
    first = narration.lines(
        said(
            "task train: started",
            ("a", {"state": "waiting"}),
            ("a", {"state": "training", "restarts": 0}),
            ("a", {"state": "training", **epoch}),
            ("a", {"state": "paused"}),
            ("b", {"state": "paused"}),
            ("c", {"state": "paused"}),
            ("c", {"state": "stopped"}),
        )
    )
    assert first == [
        "task train: started",
        "a: job started",
        "a: epoch 1/3  loss 0.5000  acc 0.8000  val_acc 0.7500  1234 ex/s",
        "a: rung trained, halving decides",
        "b: rung trained, halving decides",
        "c: rung trained, halving decides",
    ]  # halving may stop more: its line waits for the next thing said
    assert narration.lines(said(("b", {"state": "stopped"}), "task halve: done")) == [
        "halving keeps a; stops c, b",
        "task halve: done",
    ]
    assert narration.lines(
        said(("a", {"state": "training", "restarts": 1}), ("a", {"state": "failed", "error": "TFJob failed"}))
    ) == ["a: job started again (restart 1)", f"a: failed (its log: {tmp_path / 'a.log'})"]
    # The last rung's halving, once the run has ended.
    narration.lines(said(("a", {"state": "paused"}), ("d", {"state": "paused"}), ("d", {"state": "stopped"})))
    assert narration.lines([], end=True) == ["halving keeps a; stops d"]


def test_kfp_locals_task_starts_and_ends_become_lines_and_stay_in_its_log(tmp_path: Path) -> None:
    from kfp.local import logging_utils, status

    success, failure = (
        logging_utils.format_status(status.Status.SUCCESS),
        logging_utils.format_status(status.Status.FAILURE),
    )
    ingest, train = logging_utils.format_task_name("ingest"), logging_utils.format_task_name("train-2")
    records = [  # as kfp/local/task_dispatcher.py logs two tasks
        (logging.INFO, f"Executing task {ingest}"),
        (logging.INFO, "Streamed logs:\n"),
        (logging.INFO, f"Task {ingest} finished with status {success}"),
        (logging.INFO, f"Task {ingest} outputs:\n    data: Dataset( name='data' )"),
        (logging.ERROR, f"Task {train} finished with status {failure}"),
    ]
    kfp_log, root, tasks = io.StringIO(), logging.getLogger(), TaskLines(tmp_path)
    root.addFilter(tasks)
    try:  # kfp.local's handler, on stdout
        with contextlib.redirect_stdout(kfp_log), logging_utils.local_logger_context():
            for level, message in records:
                root.log(level, "%s", message)
    finally:
        root.removeFilter(tasks)
    assert [entry.line for entry in progress.Follower(tmp_path).read()] == [
        "task ingest: started",
        "task ingest: done",
        "task train-2: failed",
    ]
    assert plain(kfp_log.getvalue()).count(" - INFO - ") == 4 and "Executing task 'ingest'" in plain(kfp_log.getvalue())


def test_off_a_terminal_a_failed_variants_log_is_printed_and_kfp_locals_only_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pipeline.log").write_text('KFP Executor: Got executor_input: {"inputs": {}}\n')
    out = io.StringIO()
    print_failure_logs(["mlp"], tmp_path, out, kfp_log=False)
    assert out.getvalue() == "", "no variant failed: the error line names pipeline.log"
    emitted(tmp_path, monkeypatch, ("mlp", {"state": "failed", "error": "replica exited with code 1"}))
    (tmp_path / "mlp.log").write_text("[bakeoff-mlp-worker-0] bakeoff: error: no full batch\n")
    print_failure_logs(["mlp"], tmp_path, out, kfp_log=False)
    assert "[bakeoff-mlp-worker-0] bakeoff: error: no full batch" in out.getvalue()
    assert "executor_input" not in out.getvalue()


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


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
EXECUTOR = re.compile(r"KFP Executor|executor_input|^\s*[{}\[\]]|^\s*\"\w+\": ", re.M)  # its log, its JSON


@pytest.mark.training
def test_off_a_terminal_only_bakeoffs_own_lines_come_and_kfp_locals_log_names_its_file(
    tmp_path: Path, work_dir: Path
) -> None:
    one = config(tmp_path, TWO.split("  - {name: small_cnn")[0])
    result = subprocess.run(
        run_args(one, tmp_path, work_dir, "512"), cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    assert not CONTROL.search(result.stderr + result.stdout), "a control character in plain output"
    lines = result.stderr.splitlines()
    named = re.fullmatch(r"bakeoff: kfp\.local's log, with every task's output: (\S+) \(.*\)", lines[0])
    assert named, lines[0]
    kfp_log = Path(named.group(1))
    assert kfp_log.name == "pipeline.log" and kfp_log.parent.parent == work_dir / "runs"
    assert not EXECUTOR.search(result.stderr), result.stderr
    kfp_text = kfp_log.read_text()
    started = [line for line in lines if re.fullmatch(r"task \S+: started", line)]
    assert len(started) >= 3 and kfp_text.count("Got executor_input:") == len(started), "each task's dump is there"
    assert "Pipeline 'bakeoff' finished with status SUCCESS" in kfp_text
    for line in ("task check: started", "task train: started", "mlp: job started", "mlp: trained", "task select: done"):
        assert line in lines, (line, lines)
    assert re.search(
        r"^mlp: epoch 1/1  loss \d\.\d{4}  acc \d\.\d{4}  val_acc \d\.\d{4}  \d+ ex/s$", result.stderr, re.M
    )
    assert lines[-1].startswith("select: the winner is mlp (test accuracy ")
    assert len(lines) < 40, lines
    # The replicas' lines are in the variant's log, beside kfp.local's.
    assert "[bakeoff-mlp-" not in result.stderr
    assert re.search(r"^\[bakeoff-mlp-\w+-worker-0\] ", (kfp_log.parent / "mlp.log").read_text(), re.M)
    assert_run_ends(result.stdout.splitlines(), "winner: mlp", work_dir)


@pytest.mark.training
def test_with_debug_every_line_comes_on_stderr_as_plain_text(tmp_path: Path, work_dir: Path) -> None:
    one = config(tmp_path, TWO.split("  - {name: small_cnn")[0])
    runs = set((work_dir / "runs").glob("*")) if (work_dir / "runs").exists() else set()
    result = subprocess.run(
        [*run_args(one, tmp_path, work_dir, "512"), "--debug"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert not CONTROL.search(result.stderr + result.stdout), "a control character in plain output"
    assert result.stderr.count("Got executor_input:") == result.stderr.count("Executing task") >= 3
    assert re.search(r"^\s*\[bakeoff-mlp-\w+-worker-0\] ", result.stderr, re.M), result.stderr[-2000:]
    assert "Pipeline 'bakeoff' finished with status SUCCESS" in result.stderr  # kfp.local's colours, gone
    assert set((work_dir / "runs").glob("*")) == runs, "a run with --debug keeps no log files"
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
