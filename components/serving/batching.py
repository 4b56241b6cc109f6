"""Server-side micro-batching: requests that arrive while the model is busy run together as one model call."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import numpy as np

from bakeoff.components.serving.loaded import Batch

Outputs = dict[str, np.ndarray]


@dataclasses.dataclass
class _Group:
    """Batches of one signature and version waiting to run as one call; ``outputs`` is that call's result."""

    outputs: asyncio.Future[Outputs]
    batches: list[Batch] = dataclasses.field(default_factory=list)
    images: int = 0
    timer: asyncio.TimerHandle | None = None


class Batcher:
    """Runs batches through ``run`` in a thread, merging those that arrive together; each gets its own rows back.

    An idle model takes a batch at once, so a lone client never waits for company. Batches that arrive while a
    call runs wait for it to end, for ``window_ms``, or for ``max_images`` between them, whichever comes first, and
    then run as one call. With ``max_images`` 1 every batch runs alone, as it arrives.
    """

    def __init__(self, run: Callable[[Batch], Outputs], max_images: int, window_ms: float) -> None:
        self.run, self.max_images, self.window = run, max_images, window_ms / 1000
        self.running = 0  # model calls in flight
        self.waiting: dict[tuple[str, int], _Group] = {}

    async def __call__(self, batch: Batch) -> Outputs:
        loop = asyncio.get_running_loop()
        key, images = (batch.signature, batch.version.number), len(batch.tensor)
        group = self.waiting.get(key)
        if group is not None and group.images + images > self.max_images:
            self._start(key)  # this batch would overflow the group: the group goes as it is
            group = None
        if group is None:
            group = self.waiting[key] = _Group(loop.create_future())
        start = group.images
        group.batches.append(batch)
        group.images += images
        if not self.running or group.images >= self.max_images:
            self._start(key)
        elif group.timer is None:
            group.timer = loop.call_later(self.window, self._start, key)
        try:
            # Shielded: a client that hangs up cancels its own wait, not the call the others share.
            outputs = await asyncio.shield(group.outputs)
        except Exception:
            if len(group.batches) == 1:
                raise
            # One undecodable image must not fail the requests merged with it: each runs alone, with its own error.
            return await loop.run_in_executor(None, self.run, batch)
        if len(group.batches) == 1:
            return outputs
        return {name: value[start : start + images] for name, value in outputs.items()}

    def _start(self, key: tuple[str, int]) -> None:
        group = self.waiting.pop(key, None)
        if group is None:  # a timer that fired after its group went
            return
        if group.timer is not None:
            group.timer.cancel()
        first = group.batches[0]
        merged = (
            first
            if len(group.batches) == 1
            else dataclasses.replace(first, tensor=np.concatenate([batch.tensor for batch in group.batches]))
        )
        self.running += 1
        # In a thread: TensorFlow releases the GIL, so the event loop keeps accepting while the model runs.
        call = asyncio.get_running_loop().run_in_executor(None, self.run, merged)
        call.add_done_callback(lambda done: self._finished(group, done))

    def _finished(self, group: _Group, call: asyncio.Future[Outputs]) -> None:
        self.running -= 1
        error = call.exception()
        if error is None:
            group.outputs.set_result(call.result())
        else:
            group.outputs.set_exception(error)
        for key in list(self.waiting):  # what queued behind this call goes now
            self._start(key)
