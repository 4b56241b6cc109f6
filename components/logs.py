"""bakeoff's log lines: the one configuration that writes every module's records as plain lines on stderr.

Each module logs through ``logging.getLogger(__name__)``, a name under ``bakeoff``; ``configure`` gives that one
logger its handler, once per process, from each entry point: the ``bakeoff`` command's main, ``reported()``
(components/errors.py), which every component process enters first (the KFP steps, the replica program, the model
server), and the benchmarks' programs.

Inside a local run (`bakeoff run` names its progress folder in BAKEOFF_PROGRESS_DIR before it starts the tasks), a
task's or replica's lines below ERROR are also appended to ``LINES_FILE`` there, from which `bakeoff run` shows them
apart from kfp.local's output. Elsewhere (a pod on a cluster) a step logs on stderr alone, as ever.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from bakeoff.components.environment import PROGRESS_DIR_ENV

ROOT = "bakeoff"  # the logger above every module's
# bakeoff's own lines of a local run's tasks and replicas, as JSON lines: {"time": ..., "line": ...}. Its suffix is
# no variant's: each variant has <name>.log and <name>.jsonl beside it (components/progress.py).
LINES_FILE = "lines.ndjson"


class Lines(logging.Handler):
    """A record's message alone, one line, written and flushed at once, as ``print(..., flush=True)`` wrote it.

    The stream is looked up at each record, not kept: pytest's capture and a forked replica's swapped streams
    receive the lines as they received ``print``'s.
    """

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except RecursionError:  # as logging.StreamHandler does: a recursion is not a logging error
            raise
        except Exception:
            self.handleError(record)


class Appended(logging.Handler):
    """A record's message, below ERROR, appended to ``LINES_FILE`` in the folder BAKEOFF_PROGRESS_DIR names now.

    An error line is left out: the step writes it for `bakeoff run` to end with (components/errors.py), and a
    replica's reaches the user in its variant's log. A folder that is gone (nobody watches) takes nothing.
    """

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(message)s"))
        self.addFilter(lambda record: record.levelno < logging.ERROR)

    def emit(self, record: logging.LogRecord) -> None:
        folder = os.environ.get(PROGRESS_DIR_ENV)
        if not folder:
            return
        try:
            append_line(Path(folder), self.format(record), record.created)
        except OSError:  # the line is on stderr all the same
            pass
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


def append_line(folder: Path, line: str, when: float) -> None:
    """Appends ``line``, said at ``when`` (seconds since the epoch), to ``folder``'s ``LINES_FILE``.

    One ``write`` of one whole line to a file opened with O_APPEND: tasks and replicas append at once.
    """
    text = json.dumps({"time": when, "line": line}, separators=(",", ":")) + "\n"
    descriptor = os.open(folder / LINES_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, text.encode())
    finally:
        os.close(descriptor)


def configure() -> None:
    """Writes the records of bakeoff's modules at INFO and above through one ``Lines`` handler, and, in a task or
    replica of a local run, through one ``Appended`` handler as well; a second call (a step run inside the CLI's
    process) changes nothing.

    Only the ``bakeoff`` logger, never the root: kfp's executor, absl and KServe configure the root for their own
    lines, so bakeoff's do not propagate there (they would come out again in those formats, or not at all where a
    library set the root's level above INFO). The process that sets BAKEOFF_PROGRESS_DIR (`bakeoff run`) configured
    its lines before: its own go to its stderr alone.
    """
    logger = logging.getLogger(ROOT)
    if not any(isinstance(handler, Lines) for handler in logger.handlers):
        logger.addHandler(Lines())
        if os.environ.get(PROGRESS_DIR_ENV):
            logger.addHandler(Appended())
    logger.setLevel(logging.INFO)
    logger.propagate = False
