"""The kubelet's HTTPS endpoint, as far as the API server uses it here: `/containerLogs/{ns}/{pod}/{container}`."""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from tests.cluster.kubelet.logs import LogFile, LogQuery, parse_timestamp, read
from tests.cluster.kubelet.status import ContainerStatus, Running, Terminated, Waiting

log = logging.getLogger("kubelet.server")


class LogError(Exception):
    """A log request the kubelet answers with an error: the HTTP status and the kubelet's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class LogSource(Protocol):
    def container(self, namespace: str, pod: str, container: str) -> tuple[ContainerStatus, Mapping[str, LogFile]]:
        """The container's status and its runs' logs by containerID; LogError(404) when unknown."""


def choose(status: ContainerStatus, logs: Mapping[str, LogFile], previous: bool, pod: str) -> LogFile:
    """The run whose log the request means, with the kubelet's errors (validateContainerLogStatus)."""
    name, state, last = status.name, status.state, status.last
    wanted: str = ""
    if previous:
        if last is None or not last.container_id:
            raise LogError(400, f'previous terminated container "{name}" in pod "{pod}" not found')
        wanted = last.container_id
    elif isinstance(state, Running):
        wanted = status.container_id
    elif isinstance(state, Terminated) and state.container_id:
        wanted = state.container_id
    elif last is not None and last.container_id:
        wanted = last.container_id
    elif isinstance(state, Terminated) or last is not None:
        raise LogError(400, f'container "{name}" in pod "{pod}" is terminated')
    elif isinstance(state, Waiting):
        reason = {"ErrImagePull": "image can't be pulled", "ImagePullBackOff": "trying and failing to pull image"}.get(
            state.reason, state.reason
        )
        raise LogError(400, f'container "{name}" in pod "{pod}" is waiting to start: {reason}')
    if wanted not in logs:
        raise LogError(400, f'container "{name}" in pod "{pod}" has no log')
    return logs[wanted]


def _number(query: Mapping[str, list[str]], key: str) -> int | None:
    if key not in query:
        return None
    try:
        return int(query[key][0])
    except ValueError:
        raise LogError(400, f"{key}={query[key][0]!r} is not an integer") from None


def parse_query(raw: str) -> tuple[bool, LogQuery]:
    """``previous`` and the reading options from the query string the API server passes on."""
    query = parse_qs(raw)

    def flag(key: str) -> bool:
        return query.get(key, ["false"])[0].lower() in ("true", "1")

    since: int | None = None
    seconds = _number(query, "sinceSeconds")
    if seconds is not None:
        since = time.time_ns() - seconds * 1_000_000_000
    if "sinceTime" in query:
        try:
            at = parse_timestamp(query["sinceTime"][0])
        except ValueError:
            raise LogError(400, f"sinceTime={query['sinceTime'][0]!r} is not an RFC 3339 time") from None
        since = at if since is None else max(since, at)
    return flag("previous"), LogQuery(
        follow=flag("follow"),
        timestamps=flag("timestamps"),
        tail_lines=_number(query, "tailLines"),
        limit_bytes=_number(query, "limitBytes"),
        since_ns=since,
    )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: LogServer

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _error(self, status: int, message: str) -> None:
        body = (message + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        parts = [unquote(part) for part in url.path.strip("/").split("/")]
        if parts == ["healthz"]:
            self._error(200, "ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._error(404, f"{url.path}: the process kubelet serves only /containerLogs/{{ns}}/{{pod}}/{{container}}")
            return
        _, namespace, pod, container = parts
        try:
            previous, query = parse_query(url.query)
            status, logs = self.server.source.container(namespace, pod, container)
            log_file = choose(status, logs, previous, pod)
        except LogError as error:
            self._error(error.status, str(error))
            return
        self._stream(read(log_file, query))

    def _stream(self, chunks: Iterator[bytes]) -> None:
        """HTTP/1.1 chunked, one chunk per log line, flushed at once (a follower sees each line as it comes)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True


class LogServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, cert: Path, key: Path, client_ca: Path | None, source: LogSource) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.source = source
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        if client_ca is not None:
            context.load_verify_locations(client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
        # The handshake happens in the request's thread, so one slow client never holds up accept().
        self.socket = context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="log server", daemon=True)
        thread.start()
        return thread
