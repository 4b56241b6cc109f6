"""Progress events: each variant's state as JSON lines in a folder the CLI names, for its live display or its plain
lines; and the run's own lines that its tasks and replicas append there (components/logs.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

from bakeoff.components.environment import PROGRESS_DIR_ENV
from bakeoff.components.logs import LINES_FILE

EVENTS_SUFFIX = ".jsonl"
LOG_SUFFIX = ".log"
# The states a variant goes through, in order; "failed" may end any of them.
STATES = (
    "waiting",
    "training",
    "paused",
    "stopped",
    "evaluating",
    "done",
    "failed",
)  # paused: its rung ended, halving decides
# The states the job's own end emits: its clock stops there, whatever select or halving say of it later.
TRAINING_ENDS = frozenset({"paused", "done", "failed"})


def progress_dir() -> Path | None:
    """The folder named by BAKEOFF_PROGRESS_DIR, or None when nobody is watching."""
    path = os.environ.get(PROGRESS_DIR_ENV)
    return Path(path) if path else None


@dataclasses.dataclass(frozen=True)
class Event:
    """What a step or replica says of a variant: one JSON line of its events file, its unset fields left out."""

    state: str  # one of STATES
    time: float | None = None  # set by ``emit``
    epoch: int | None = None
    epochs: int | None = None
    loss: float | None = None
    accuracy: float | None = None
    val_loss: float | None = None
    val_accuracy: float | None = None
    examples_per_second: float | None = None
    restarts: int | None = None
    error: str | None = None

    def after(self, earlier: Event) -> Event:
        """This event's fields over ``earlier``'s: ``done`` keeps the last epoch's numbers."""
        return dataclasses.replace(
            earlier, **{name: value for name, value in dataclasses.asdict(self).items() if value is not None}
        )


_EVENT_FIELDS = frozenset(field.name for field in dataclasses.fields(Event))


@dataclasses.dataclass(frozen=True)
class Progress:
    """A variant's state so far: its events merged in order, and the times its first and job-ending events came."""

    latest: Event
    first_time: float
    end_time: float | None  # None while a job of it runs


def emit(variant: str, event: Event) -> None:
    """Appends ``event``, timed now, to the variant's file; a no-op when nobody is watching.

    One ``write`` of one whole line to a file opened with O_APPEND: the chief, the
    backend and select may append to the same file from different processes.
    """
    folder = progress_dir()
    if folder is None:
        return
    fields = {name: value for name, value in dataclasses.asdict(event).items() if value is not None}
    line = json.dumps(fields | {"time": time.time(), "variant": variant}, separators=(",", ":")) + "\n"
    descriptor = os.open(folder / f"{variant}{EVENTS_SUFFIX}", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, line.encode())
    finally:
        os.close(descriptor)


def log_path(variant: str) -> Path | None:
    """Where the local backend writes the variant's replica log lines instead of stdout, or None."""
    folder = progress_dir()
    return log_file(folder, variant) if folder is not None else None


def log_file(folder: Path, variant: str) -> Path:
    """The variant's log file in a progress folder."""
    return folder / f"{variant}{LOG_SUFFIX}"


def read_events(folder: Path) -> dict[str, Progress]:
    """Each variant's progress from the events files in ``folder``.

    A line still being written (no JSON yet) is skipped; the next read sees it whole.
    """
    states: dict[str, Progress] = {}
    for path in sorted(folder.glob(f"*{EVENTS_SUFFIX}")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")  # a character may be half-written
        except OSError:
            continue
        for line in text.splitlines():
            parsed = _parsed(line)
            if parsed is None:
                continue
            variant, event = parsed
            before = states.get(variant) or Progress(event, event.time or 0.0, None)
            if event.state == "training":  # a job of it runs (again, for the next rung)
                end_time = None
            elif event.state in TRAINING_ENDS:
                end_time = event.time
            else:
                end_time = before.end_time
            states[variant] = Progress(event.after(before.latest), before.first_time, end_time)
    return states


def _parsed(line: str) -> tuple[str, Event] | None:
    """The variant and event of one whole line; None for a partial or foreign one."""
    try:
        fields = json.loads(line)
    except ValueError:
        return None
    if not isinstance(fields, dict) or not isinstance(fields.get("variant"), str) or "state" not in fields:
        return None
    return fields["variant"], Event(**{name: value for name, value in fields.items() if name in _EVENT_FIELDS})


@dataclasses.dataclass
class Tail:
    """The whole lines appended to a file since the last ``read``; a line still being written waits for the next."""

    path: Path
    offset: int = 0

    def read(self) -> list[str]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        whole = data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        return whole.decode("utf-8", errors="replace").splitlines()


@dataclasses.dataclass(frozen=True)
class Said:
    """One thing a run said: a variant's ``event``, or a ``line`` of a task or replica (logs.LINES_FILE)."""

    time: float
    variant: str = ""
    event: Event | None = None
    line: str = ""


class Follower:
    """What a progress folder's files gained since the last ``read``: every event and line once, in time order."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.tails: dict[Path, Tail] = {}

    def read(self) -> list[Said]:
        said = []
        for path in [*sorted(self.folder.glob(f"*{EVENTS_SUFFIX}")), self.folder / LINES_FILE]:
            tail = self.tails.setdefault(path, Tail(path))
            for text in tail.read():
                if path.name == LINES_FILE:
                    said += _line(text)
                elif (parsed := _parsed(text)) is not None:
                    variant, event = parsed
                    said.append(Said(event.time or 0.0, variant, event))
        return sorted(said, key=lambda entry: entry.time)


def _line(text: str) -> list[Said]:
    """The line of one whole JSON line of LINES_FILE; none for a foreign one."""
    try:
        fields = json.loads(text)
    except ValueError:
        return []
    if not isinstance(fields, dict) or not isinstance(fields.get("line"), str):
        return []
    when = fields.get("time")
    return [Said(float(when) if isinstance(when, (int, float)) else 0.0, line=fields["line"])]
