"""`bakeoff run`'s live view on a terminal: each variant's state, epoch, metrics and speed, and where its log is."""

from __future__ import annotations

import dataclasses
import itertools
import sys
import time
from pathlib import Path
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from bakeoff.components import defaults
from bakeoff.components.errors import BakeoffError
from bakeoff.components.progress import Progress, log_file, read_events
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


def print_failure_logs(variants: list[str], folder: Path, out: TextIO) -> None:
    """Each failed variant's whole log, named; kfp.local's own log when no variant failed (ingest, select)."""
    events = read_events(folder)
    failed = [name for name in variants if name in events and events[name].latest.state == "failed"]
    logs = [(f"{name}'s log", log_file(folder, name)) for name in failed] or [
        ("kfp.local's log", folder / PIPELINE_LOG)
    ]
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
