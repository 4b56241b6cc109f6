"""The model server's event-loop settings reach the loop it serves on (KServe 0.21 put them on one it discarded)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from bakeoff.components.serving.startup import model_server

pytestmark = pytest.mark.serving

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT)  # what KServe's start takes over


class Broken(Exception):
    pass


def _fail() -> None:
    raise Broken("a callback on the serving loop failed")


class ProbeServer:
    """Stands in for KServe's REST server: instead of serving HTTP, it fails one callback on the running loop."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def start(self) -> None:
        asyncio.get_running_loop().call_soon(_fail)
        await asyncio.sleep(0)  # the callback runs, and the loop hands its error to the exception handler


@pytest.fixture
def signals_kept() -> Iterator[None]:
    """KServe's start installs its own SIGINT/SIGTERM/SIGQUIT handlers in this process: put pytest's back."""
    kept = {number: signal.getsignal(number) for number in SIGNALS}
    yield
    for number, handler in kept.items():
        signal.signal(number, handler)


def test_an_exception_handler_registered_with_the_server_sees_the_serving_loops_errors(
    monkeypatch: pytest.MonkeyPatch, signals_kept: None
) -> None:
    import kserve
    import kserve.model_server

    monkeypatch.setattr(kserve.model_server, "RESTServer", ProbeServer)
    model = kserve.Model("probe")
    model.ready = True
    server = model_server(http_port=0, enable_grpc=False, workers=1, enable_docs_url=False)
    seen: list[dict] = []
    server.register_exception_handler(lambda loop, context: seen.append(context))
    server.start([model])
    assert [type(context.get("exception")) for context in seen] == [Broken]
