"""Runs the pipeline on this machine with kfp.local; each TFJob's replicas become local processes."""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import logging
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path
from typing import TextIO

from bakeoff.components import defaults
from bakeoff.components.backends import prefork
from bakeoff.components.environment import ERROR_FILE_ENV, PROGRESS_DIR_ENV
from bakeoff.components.errors import BakeoffError
from bakeoff.components.logs import append_line
from bakeoff.components.progress import LOG_SUFFIX
from bakeoff.components.search.deadline import Deadline
from bakeoff.components.selection.settings import SelectionSettings
from bakeoff.components.spec import RESERVED_NAMES, Data, Search, Variant
from bakeoff.components.storage.records import Summary
from bakeoff.components.training import WORKER_PROGRAM
from bakeoff.pipelines.pipeline import build_pipeline

# kfp.local's own output and each task's, in a run's progress folder: named as no variant's log can be
PIPELINE_LOG = f"{RESERVED_NAMES[0]}{LOG_SUFFIX}"
# What makes text no plain text: terminal escape sequences (kfp.local colours its messages), carriage returns
# and the other control characters but tab and newline.
CONTROL = re.compile(r"\x1b\][^\x07\x1b]*(\x07|\x1b\\)?|\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]|[\x00-\x08\x0b-\x1f\x7f]")


def plain(text: str) -> str:
    """``text`` without control characters: what a log file or a pipe should hold."""
    return CONTROL.sub("", text)


# kfp.local's records of a task's start and end (kfp/local/task_dispatcher.py), once plain: it offers no other sign.
TASK_STARTED = re.compile(r"Executing task '(?P<task>[^']+)'")
TASK_ENDED = re.compile(r"Task '(?P<task>[^']+)' finished with status (?P<status>\w+)")


class TaskLines(logging.Filter):
    """Lets every record through; of kfp.local's records of a task's start and end, appends a line of bakeoff's to
    the progress folder's lines (``task ingest: started``, ``task ingest: done``, ``task ingest: failed``).

    A filter of the root logger, which kfp.local logs to: it keeps its filters while kfp.local swaps its handlers.
    """

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    def filter(self, record: logging.LogRecord) -> bool:
        message = plain(record.getMessage())
        if started := TASK_STARTED.fullmatch(message):
            line = f"task {started['task']}: started"
        elif ended := TASK_ENDED.fullmatch(message):
            line = f"task {ended['task']}: {'done' if ended['status'] == 'SUCCESS' else 'failed'}"
        else:
            return True
        with contextlib.suppress(OSError):  # the record goes to PIPELINE_LOG all the same
            append_line(self.folder, line, record.created)
        return True


class PlainWriter:
    """A text stream that passes on only plain text (kfp.local writes each message whole, escapes included)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(plain(text))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self.stream, name)  # encoding, fileno, isatty: the stream's own


@dataclasses.dataclass(frozen=True)
class LocalRun:
    """Everything one local bake-off needs; the store is already checked."""

    variants: list[Variant]
    store_uri: str
    selection: SelectionSettings = SelectionSettings()
    data: Data = dataclasses.field(default_factory=Data)  # the source and the size ingest resizes to
    source_digest: str = ""
    max_train_examples: int = 0
    parallelism: int = defaults.LOCAL_PARALLELISM
    work_dir: Path = defaults.WORK_DIR
    timeout_seconds: int = defaults.TIMEOUT_SECONDS
    search: Search | None = None  # its halving settings become the run's parameters
    progress_dir: Path | None = None  # events, lines, replica logs and kfp.local's output go here; None: all on stderr
    deadline: Deadline | None = None  # a budget's: its halve steps keep as many as the rest can train by it


def run_local(run: LocalRun) -> Summary:
    """Executes the pipeline with kfp.local and returns the select step's summary.

    kfp.local prints its own log and each task's output on stdout; they are sent, as plain text, to stderr so that
    stdout carries only bakeoff's own report, or with ``run.progress_dir`` to its PIPELINE_LOG, while the tasks
    and replicas write their events, their lines and the replicas' logs there (components/progress.py,
    components/logs.py) and kfp.local's task starts and ends become lines there too (``TaskLines``).
    """
    from kfp import local

    pipeline_root = (run.work_dir / "pipeline-root").resolve()
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(pipeline_root),
        enable_caching=True,
        cache_root=str(run.work_dir.resolve() / "cache"),
    )
    variants = [variant.to_dict() for variant in run.variants]
    pipeline = build_pipeline(parallelism=run.parallelism, variants=variants, search=run.search, data=run.data)
    with tempfile.TemporaryDirectory(prefix="bakeoff-run-") as scratch, contextlib.ExitStack() as stack:
        error_file = Path(scratch) / "error"
        os.environ[ERROR_FILE_ENV] = str(error_file)
        task_log: TextIO = sys.stderr
        if run.progress_dir is not None:
            os.environ[PROGRESS_DIR_ENV] = str(run.progress_dir.resolve())  # the tasks and their replicas inherit it
            task_log = stack.enter_context(open(run.progress_dir / PIPELINE_LOG, "a", encoding="utf-8"))
            tasks, root = TaskLines(run.progress_dir), logging.getLogger()
            root.addFilter(tasks)
            stack.callback(root.removeFilter, tasks)
        stack.enter_context(prefork.warm(WORKER_PROGRAM))  # after the variables above, which it keeps
        # kfp.local indents print() by swapping builtins.print per task; tasks of a ParallelFor run on threads and
        # restore each other's swaps, leaving the run's own report indented: the original comes back at the end.
        stack.callback(setattr, builtins, "print", builtins.print)
        try:
            with contextlib.redirect_stdout(PlainWriter(task_log)), warnings.catch_warnings():
                # The image only matters on a cluster; locally the venv runs the code.
                warnings.filterwarnings("ignore", message=".*non-Python base image.*")
                task = pipeline(
                    store=run.store_uri,
                    variants=variants,
                    model_name=run.selection.model_name,
                    source_digest=run.source_digest,
                    metric=run.selection.metric,
                    min_improvement=run.selection.gate.min_improvement,
                    force_publish=run.selection.gate.force,
                    confidence=run.selection.gate.confidence,
                    max_train_examples=run.max_train_examples,
                    timeout_seconds=run.timeout_seconds,
                    backend="local",  # also inside a notebook pod: `run` means this machine
                    deadline=run.deadline.to_json(indent=None) if run.deadline else "",
                )
        except RuntimeError as error:
            if error_file.exists():
                raise BakeoffError(error_file.read_text().strip()) from None
            where = f"in {run.progress_dir / PIPELINE_LOG}" if run.progress_dir is not None else "above"
            raise BakeoffError(f"the local pipeline failed ({plain(str(error))}): see the task log {where}") from None
        finally:
            os.environ.pop(ERROR_FILE_ENV, None)
            os.environ.pop(PROGRESS_DIR_ENV, None)
    return Summary.from_json(task.output, "the select step's output")
