"""The heartbeat a local replica beats for the local backend's watchdog: the contract both sides import.

Each replica touches its heartbeat file from a thread of its own, so a replica that is stopped, frozen or starved
goes quiet while one tracing its first step, waiting in a collective or saving keeps beating. The file's content
marks the spans in which a healthy replica cannot beat; it is not suspected then. Stdlib only: a replica starts
beating before TensorFlow loads.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from bakeoff.components import defaults
from bakeoff.components.environment import HEARTBEAT_ENV

JOINING = b"joining"  # waiting for the peers: TensorFlow holds the GIL for as long as a peer is late
EXITING = b"exiting"  # done: the interpreter's shutdown ends the heartbeat thread


def start_heartbeat() -> None:
    """The replica's side of the watchdog: touches the file the backend named, from a daemon thread."""
    path = os.environ.get(HEARTBEAT_ENV)
    if not path:
        return  # not started by the local backend

    def beat() -> None:
        while True:
            try:
                Path(path).touch()
            except OSError:
                pass  # the backend has moved on; the replica is being stopped
            time.sleep(defaults.HEARTBEAT_SECONDS)

    threading.Thread(target=beat, name="bakeoff-heartbeat", daemon=True).start()


def mark(phase: bytes) -> None:
    """Tells the watchdog the replica is in a span without heartbeats (JOINING, EXITING), or out of it (b"")."""
    path = os.environ.get(HEARTBEAT_ENV)
    if path:
        Path(path).write_bytes(phase)


@contextlib.contextmanager
def joining() -> Iterator[None]:
    """Marks the span in which the replica waits for its peers."""
    mark(JOINING)
    try:
        yield
    finally:
        mark(b"")
