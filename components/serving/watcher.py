"""The hot swap: a thread that follows newer complete versions and swaps each in once it is loaded."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.components.serving.tuning import settle_heap
from bakeoff.components.serving.versions import Source

if TYPE_CHECKING:
    from bakeoff.components.serving.loaded import Version
    from bakeoff.components.serving.model import ServedModel

logger = logging.getLogger(__name__)
# Polls after a swap at which the heap is settled even while a request still holds the replaced version (one that
# waits that long is stuck, or a cycle holds it, which settling collects).
SETTLE_POLLS = 20


class Watcher(threading.Thread):
    """Polls the source and swaps in each newer complete version once it is loaded (in this thread, beside the
    serving one)."""

    def __init__(
        self, source: Source, model: ServedModel, poll_seconds: float, load: Callable[[Path, int], Version]
    ) -> None:
        super().__init__(name="version-watcher", daemon=True)
        self.source, self.model, self.poll_seconds, self.load = source, model, poll_seconds, load
        self.stopped = threading.Event()
        self.failed: set[int] = set()  # versions that would not load: tried once, not on every poll
        # The version swapped out, until the heap is settled: once no request holds it, or SETTLE_POLLS polls later
        self.replaced: weakref.ref[Version] | None = None
        self.waited = 0

    def run(self) -> None:
        while not self.stopped.wait(self.poll_seconds):
            self.poll()

    def poll(self) -> None:
        if self.replaced is not None:
            self.waited += 1
            if self.replaced() is None or self.waited >= SETTLE_POLLS:
                self.replaced = None
                settle_heap()
        try:
            newest = max(self.source.versions(), default=0)
        except Exception as error:  # a store that is down for a while must not end the serving of what is loaded
            logger.warning(
                "bakeoff serve: cannot list %s (%s); still serving version %s",
                self.source.description,
                error,
                self.model.current.number,
            )
            return
        serving = self.model.current.number
        if newest <= serving or newest in self.failed:
            return
        try:
            version = self.load(self.source.fetch(newest), newest)
        except Exception as error:
            self.failed.add(newest)
            logger.warning(
                "bakeoff serve: version %s does not load (%s); still serving version %s", newest, error, serving
            )
            return
        self.replaced, self.waited = weakref.ref(self.model.current), 0
        self.model.swap(version)
        self.source.release(serving)
        logger.info("bakeoff serve: now serving version %s (was %s)", newest, serving)
