"""User-facing errors: one line that says what is wrong and what to do."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from bakeoff.components import logs
from bakeoff.components.environment import ERROR_FILE_ENV

logger = logging.getLogger(__name__)

ERROR_PREFIX = "bakeoff: error:"  # what every user-facing error line starts with


class BakeoffError(Exception):
    """A problem the user can fix; its message is the one line they see."""


@contextlib.contextmanager
def reported() -> Iterator[None]:
    """Turns a BakeoffError inside a component into exit code 1 plus one line.

    Components run in subprocesses (kfp.local) or pods, so the message would
    otherwise reach the CLI only as a task failure. The line goes to the
    task log and, when the CLI asked for it through ``BAKEOFF_ERROR_FILE``,
    is written to that file so the CLI can repeat it as its own error line.
    Every component process enters here first: its log lines are configured here.
    """
    logs.configure()
    try:
        yield
    except BakeoffError as error:
        message = str(error)
        logger.error("%s %s", ERROR_PREFIX, message)
        error_file = os.environ.get(ERROR_FILE_ENV)
        if error_file:
            with open(error_file, "w", encoding="utf-8") as handle:
                handle.write(message)
        raise SystemExit(1) from None


@contextlib.contextmanager
def for_parameter(name: str) -> Iterator[None]:
    """Prefixes a BakeoffError raised inside with the pipeline parameter ``name``: the word the KFP UI shows for what
    to change."""
    try:
        yield
    except BakeoffError as error:
        raise BakeoffError(f"{name}: {error}") from None
