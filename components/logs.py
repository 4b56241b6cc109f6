"""bakeoff's log lines: the one configuration that writes every module's records as plain lines on stderr.

Each module logs through ``logging.getLogger(__name__)``, a name under ``bakeoff``; ``configure`` gives that one
logger its handler, once per process, from each entry point: the ``bakeoff`` command's main, ``reported()``
(components/errors.py), which every component process enters first (the KFP steps, the replica program, the model
server), and the benchmarks' programs.
"""

from __future__ import annotations

import logging
import sys

ROOT = "bakeoff"  # the logger above every module's


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


def configure() -> None:
    """Writes the records of bakeoff's modules at INFO and above through one ``Lines`` handler; a second call (a
    step run inside the CLI's process) changes nothing.

    Only the ``bakeoff`` logger, never the root: kfp's executor, absl and KServe configure the root for their own
    lines, so bakeoff's do not propagate there (they would come out again in those formats, or not at all where a
    library set the root's level above INFO).
    """
    logger = logging.getLogger(ROOT)
    if not any(isinstance(handler, Lines) for handler in logger.handlers):
        logger.addHandler(Lines())
    logger.setLevel(logging.INFO)
    logger.propagate = False
