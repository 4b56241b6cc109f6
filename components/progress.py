"""Progress events: each variant's state as JSON lines in a folder the CLI names, for its live display."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

# Set by `bakeoff run` for a live display; inherited by the kfp.local tasks and from them by the replicas.
PROGRESS_DIR_ENV = "BAKEOFF_PROGRESS_DIR"
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


def emit(variant: str, **fields: Any) -> None:
    """Appends one event ``{"time", "variant", **fields}`` to the variant's file; a no-op when nobody is watching.

    One ``write`` of one whole line to a file opened with O_APPEND: the chief, the
    backend and select may append to the same file from different processes.
    """
    folder = progress_dir()
    if folder is None:
        return
    line = json.dumps({"time": time.time(), "variant": variant, **fields}, separators=(",", ":")) + "\n"
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


def read_events(folder: Path) -> dict[str, dict]:
    """Each variant's state: its events merged in order, so ``done`` keeps the last epoch's numbers.

    ``first_time`` is its first event's time; ``end_time`` that of the event that ended its job (absent while a job
    of it runs). A line still being written (no JSON yet) is skipped; the next read sees it whole.
    """
    states: dict[str, dict] = {}
    for path in sorted(folder.glob(f"*{EVENTS_SUFFIX}")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")  # a character may be half-written
        except OSError:
            continue
        for line in text.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict) or "variant" not in event:
                continue
            state = states.setdefault(event["variant"], {"first_time": event.get("time")})
            state.update(event)
            if event.get("state") in TRAINING_ENDS:
                state["end_time"] = event.get("time")
            elif event.get("state") == "training":
                state.pop("end_time", None)
    return states
