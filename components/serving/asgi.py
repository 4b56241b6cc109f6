"""The model server's ASGI middleware: the body limit, and KServe V2's binary tensor data extension."""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING

from kserve.errors import InvalidInput, ModelNotFound
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bakeoff.components.serving import binary

if TYPE_CHECKING:
    from fastapi import FastAPI

    from bakeoff.components.serving.model import ServedModel

INFER_PATH = re.compile(r"/v2/models/([^/]+)/infer")
logger = logging.getLogger("kserve")  # where KServe logs the requests it refuses


async def respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def error_body(message: str) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """KServe's error answer, {"error": message}."""
    return json.dumps({"error": message}).encode(), [(b"content-type", b"application/json")]


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes answers 413 before anything parses it."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and int(length) > self.limit:
            # Read (and drop) what the client sends: most clients read no answer before their body is out.
            while (await receive()).get("more_body"):
                pass
            return await self.refuse(send, int(length))
        if length is not None:
            return await self.app(scope, receive, send)
        chunks, size = [], 0  # chunked: counted as it arrives, then handed on whole
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return await self.refuse(send, size)
            if not message.get("more_body"):
                break
        body, delivered = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def refuse(self, send: Send, size: int) -> None:
        message = f"request body of {size} bytes is over the limit of {self.limit}: send fewer images per request"
        await respond(send, 413, *error_body(message))


class BinaryTensors:
    """ASGI middleware: V2 inference requests in the binary tensor data extension run here, bytes in and bytes out.

    KServe's own route reads them too, but turns every tensor into Python lists first. A request is binary when it
    has the Inference-Header-Content-Length header or is sent as application/octet-stream; others go on to KServe.
    """

    def __init__(self, app: ASGIApp, model: ServedModel) -> None:
        self.app, self.model = app, model

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = INFER_PATH.fullmatch(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        headers = dict(scope["headers"]) if match else {}
        header = headers.get(binary.HEADER.encode())
        if not match or (header is None and headers.get(b"content-type") != binary.CONTENT_TYPE.encode()):
            return await self.app(scope, receive, send)
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        try:
            if match[1] != self.model.name:
                raise ModelNotFound(match[1])
            request = binary.read_request(
                b"".join(chunks), header.decode("latin-1") if header else None, self.model.name
            )
            response, _ = await self.model(request)
        except (InvalidInput, ModelNotFound) as error:
            logger.warning("refused a request: %s", error)
            return await respond(send, 404 if isinstance(error, ModelNotFound) else 400, *error_body(str(error)))
        except Exception as error:  # outermost (see in_front), no framework handler is left to answer for it
            logger.error("Exception:", exc_info=error)  # as KServe's generic_exception_handler logs and answers
            return await respond(send, 500, *error_body(f"{type(error).__name__} : {error}"))
        await respond(send, 200, *binary.write_response(response))


def in_front(app: FastAPI, model: ServedModel, limit: int) -> None:
    """Runs the body limit, then the binary route, before everything else the application stacks up.

    FastAPI puts its error, telemetry and body-limit middleware before any added one, and KServe adds its
    TimingMiddleware (a route match per request) when it starts, after ours: wrapping the stack FastAPI builds
    keeps all of that off a binary request's path. Starlette builds it on the first request.
    """
    build = app.build_middleware_stack
    app.build_middleware_stack = lambda: BodyLimit(BinaryTensors(build(), model), limit)  # type: ignore[method-assign]
