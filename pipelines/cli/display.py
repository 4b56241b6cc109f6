"""What `bakeoff run` shows while it works: on a terminal a live table of each variant's state, epoch, metrics and
speed, and where its log is; off one, bakeoff's own lines as they come, kfp.local's output left in its file."""

from __future__ import annotations

import dataclasses
import itertools
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from bakeoff.components import defaults
from bakeoff.components.errors import BakeoffError
from bakeoff.components.progress import Follower, Progress, Said, log_file, read_events
from bakeoff.components.storage.records import Summary
from bakeoff.pipelines.local_run import PIPELINE_LOG, LocalRun, run_local

STYLES = {
    "waiting": "dim",
    "training": "cyan",
    "paused": "yellow",
    "stopped": "dim yellow",
    "evaluating": "magenta",
    "done": "green",
    "failed": "bold red",
}


@dataclasses.dataclass(frozen=True)
class Row:
    """What the display says about one variant."""

    variant: str
    state: str
    epoch: int | None = None
    epochs: int | None = None
    loss: float | None = None
    accuracy: float | None = None
    val_accuracy: float | None = None
    examples_per_second: float | None = None
    elapsed: float | None = None  # seconds since its job started
    error: str | None = None


def rows(variants: list[str], events: dict[str, Progress], now: float, finished: bool = False) -> list[Row]:
    """Each variant's row, in the run's order: "waiting" until its first event.

    Once the pipeline has returned (``finished``), every variant halving did not stop trained and was scored: it is
    "done".
    """
    result = []
    for name in variants:
        event = events.get(name)
        if event is None:
            result.append(Row(name, "waiting"))
            continue
        latest = event.latest
        state = latest.state
        if finished and state in ("training", "paused", "evaluating"):
            state = "done"
        # Training time runs while the job runs; it stops where the job ended, not at what select or halving said later.
        ended = event.end_time if event.end_time is not None else latest.time
        end = now if (state == "training" and not finished) or ended is None else ended
        result.append(
            Row(
                variant=name,
                state=state,
                epoch=latest.epoch,
                epochs=latest.epochs,
                loss=latest.loss,
                accuracy=latest.accuracy,
                val_accuracy=latest.val_accuracy,
                examples_per_second=latest.examples_per_second,
                elapsed=max(0.0, end - event.first_time),
                error=latest.error if state == "failed" else None,
            )
        )
    return result


def clock(seconds: float | None) -> str:
    if seconds is None:
        return ""
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}:{seconds:02d}"


def number(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def table(variant_rows: list[Row]) -> Table:
    grid = Table(box=None, pad_edge=False, header_style="bold")
    for title in ("variant", "state", "epoch", "loss", "acc", "val_acc", "ex/s", "elapsed"):
        grid.add_column(title, justify="left" if title in ("variant", "state") else "right", no_wrap=True)
    for row in variant_rows:
        epoch = f"{row.epoch or 0}/{row.epochs}" if row.epochs else ""
        grid.add_row(
            row.variant,
            Text(row.state, style=STYLES.get(row.state, "")),
            epoch,
            number(row.loss, ".4f"),
            number(row.accuracy, ".4f"),
            number(row.val_accuracy, ".4f"),
            number(row.examples_per_second, ".0f"),
            clock(row.elapsed),
        )
    return grid


class LiveDisplay:
    """Redraws the variants' table from the progress folder while the run goes on."""

    def __init__(self, variants: list[str], folder: Path, console: Console) -> None:
        self.variants = variants
        self.folder = folder
        self.started = time.time()
        self.finished = False
        self.live = Live(
            console=console,
            get_renderable=self.render,
            refresh_per_second=defaults.PROGRESS_REFRESH_PER_SECOND,
            redirect_stdout=False,
        )  # stdout is bakeoff's report; stray stderr lines print above the table

    def render(self) -> RenderableType:
        now = time.time()
        variant_rows = rows(self.variants, read_events(self.folder), now, self.finished)
        parts: list[RenderableType] = [
            Text(f"bakeoff run: {len(self.variants)} variant(s), {clock(now - self.started)} elapsed", style="bold"),
            table(variant_rows),
        ]
        parts += [
            Text(f"{row.variant}: {row.error}", style="red", overflow="ellipsis", no_wrap=True)
            for row in variant_rows
            if row.error
        ]
        if not self.finished and all(row.state in ("done", "evaluating", "stopped") for row in variant_rows):
            parts.append(
                Text("select: scoring every candidate on validation, then the winner on test", style="magenta")
            )
        parts.append(
            Text(f"logs: {log_file(self.folder, '<variant>')}\nkfp.local: {self.folder / PIPELINE_LOG}", style="dim")
        )
        return Group(*parts)

    def __enter__(self) -> LiveDisplay:
        self.live.start()
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        self.finished = kind is None
        self.live.stop()  # draws the last state once more, and leaves it on the screen


def new_progress_folder(work_dir: Path) -> Path:
    """A fresh ``<work_dir>/runs/<timestamp>[-n]/`` for one run's events and logs."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for count in itertools.count(1):
        folder = work_dir / defaults.PROGRESS_RUNS / (stamp if count == 1 else f"{stamp}-{count}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
        except OSError as error:
            raise BakeoffError(
                f"cannot create {str(folder)!r} for the run's logs ({error.strerror}): choose another --work-dir"
            ) from None
    raise AssertionError("unreachable")


def print_failure_logs(variants: list[str], folder: Path, out: TextIO, kfp_log: bool = True) -> None:
    """Each failed variant's whole log, named; kfp.local's own log when no variant failed (ingest, select), unless
    not ``kfp_log``."""
    events = read_events(folder)
    failed = [name for name in variants if name in events and events[name].latest.state == "failed"]
    logs = [(f"{name}'s log", log_file(folder, name)) for name in failed]
    if not logs and kfp_log:
        logs = [("kfp.local's log", folder / PIPELINE_LOG)]
    for title, path in logs:
        print(f"---- {title}: {path} ----", file=out)
        try:
            out.write(path.read_text(encoding="utf-8", errors="replace"))
        except FileNotFoundError:
            print("(no log was written)", file=out)
        print(f"---- end of {title}: {path} ----", file=out, flush=True)


def run_watched(run: LocalRun) -> Summary:
    """run_local under the live display, the run's ``progress_dir`` its source; on failure, the logs that tell why."""
    assert run.progress_dir is not None, "a watched run needs its progress folder"
    names = [variant.name for variant in run.variants]
    try:
        with LiveDisplay(names, run.progress_dir, Console(file=sys.stderr)):
            return run_local(run)
    except BakeoffError:
        print_failure_logs(names, run.progress_dir, sys.stderr)
        raise


def said_line(said: Said, folder: Path) -> str | None:
    """One thing the run said as a plain line: a task's or replica's own line as it is, a variant's event in words;
    None for one that says nothing new (``waiting``; ``stopped``, which ``Narration`` says for its whole rung)."""
    event, name = said.event, said.variant
    if event is None:
        return said.line
    if event.state == "training" and event.epoch is None:  # the local backend starts the job's replicas
        return f"{name}: job started" + (f" again (restart {event.restarts})" if event.restarts else "")
    if event.state == "training":
        numbers = [("loss", event.loss), ("acc", event.accuracy), ("val_acc", event.val_accuracy)]  # the table's
        parts = [f"{name}: epoch {event.epoch}/{event.epochs}"] + [
            f"{label} {value:.4f}" for label, value in numbers if value is not None
        ]
        if event.examples_per_second is not None:
            parts.append(f"{event.examples_per_second:.0f} ex/s")
        return "  ".join(parts)
    words = {
        "paused": "rung trained, halving decides",
        "evaluating": "scoring on validation",
        "done": "trained",
        "failed": f"failed (its log: {log_file(folder, name)})",
    }
    return f"{name}: {words[event.state]}" if event.state in words else None


class Narration:
    """The plain lines of what a run says, in its order; the variants one halve step stops make one line with those
    it keeps (the ones its rung paused), said once the next thing comes or the run ends."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.states: dict[str, str] = {}  # each variant's latest state, in the order they came
        self.stopped: list[str] = []  # by the halve step now deciding, best first

    def lines(self, said: list[Said], end: bool = False) -> list[str]:
        text = []
        for entry in said:
            if entry.event is not None and entry.event.state == "stopped":
                self.stopped.append(entry.variant)
                continue
            text += self._decision()
            if entry.event is not None:
                self.states[entry.variant] = entry.event.state
            line = said_line(entry, self.folder)
            if line is not None:
                text.append(line)
        return text + self._decision() if end else text

    def _decision(self) -> list[str]:
        if not self.stopped:
            return []
        kept = [name for name, state in self.states.items() if state == "paused" and name not in self.stopped]
        line = f"halving keeps {', '.join(kept) or 'none'}; stops {', '.join(self.stopped)}"
        self.states.update(dict.fromkeys(self.stopped, "stopped"))
        self.stopped = []
        return [line]


class PlainLines:
    """Off a terminal: what the run's tasks and replicas say in its progress folder, one plain line each, as it
    comes (read in a thread, as often as the live table redraws), and what came last once the run has returned."""

    def __init__(self, folder: Path, out: TextIO) -> None:
        self.out = out
        self.follower, self.narration = Follower(folder), Narration(folder)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._follow, name="bakeoff-lines", daemon=True)

    def _follow(self) -> None:
        while not self.stopped.wait(1 / defaults.PROGRESS_REFRESH_PER_SECOND):
            self.write()

    def write(self, end: bool = False) -> None:
        for line in self.narration.lines(self.follower.read(), end):
            print(line, file=self.out, flush=True)

    def __enter__(self) -> PlainLines:
        self.thread.start()
        return self

    def __exit__(self, *exception: object) -> None:
        self.stopped.set()
        self.thread.join()
        self.write(end=True)


def run_quiet(run: LocalRun) -> Summary:
    """run_local off a terminal: first the line that names kfp.local's log, then bakeoff's own lines as they come
    (``PlainLines``) and the winner; on failure, the failed variants' logs."""
    assert run.progress_dir is not None, "a quiet run needs its progress folder"
    folder, names = run.progress_dir, [variant.name for variant in run.variants]
    print(
        f"bakeoff: kfp.local's log, with every task's output: {folder / PIPELINE_LOG}"
        f" (each variant's replicas: {log_file(folder, '<variant>')})",
        file=sys.stderr,
        flush=True,
    )
    try:
        with PlainLines(folder, sys.stderr):
            summary = run_local(run)
    except BakeoffError:
        print_failure_logs(names, folder, sys.stderr, kfp_log=False)
        raise
    winner = summary.winner
    print(f"select: the winner is {winner.variant} (test accuracy {winner.test_accuracy:.4f})", file=sys.stderr)
    return summary
