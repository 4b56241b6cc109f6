"""Container logs in the CRI format (`<RFC3339Nano> stdout F line`), written per line and read as the kubelet reads
them."""

from __future__ import annotations

import calendar
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tests.cluster.kubelet.config import LOG_LINE_BYTES

FOLLOW_POLL_SECONDS = 1.0  # a following reader rechecks the file this often even without a wake-up


def timestamp(ns: int) -> str:
    """RFC 3339 with nine fraction digits (the kubelet's RFC3339NanoFixed), UTC."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{fraction:09d}Z"


def parse_timestamp(text: str) -> int:
    """Nanoseconds since the epoch of an RFC 3339 time (any fraction length, `Z` or an offset)."""
    main, rest = text[:19], text[19:]
    seconds = calendar.timegm(time.strptime(main, "%Y-%m-%dT%H:%M:%S"))
    fraction = 0
    if rest.startswith("."):
        digits = ""
        for char in rest[1:]:
            if not char.isdigit():
                break
            digits += char
        rest = rest[1 + len(digits) :]
        fraction = int((digits + "000000000")[:9])
    offset = 0
    if rest and rest[0] in "+-":
        hours, minutes = int(rest[1:3]), int(rest[4:6])
        offset = (hours * 3600 + minutes * 60) * (1 if rest[0] == "+" else -1)
    return (seconds - offset) * 1_000_000_000 + fraction


class LogFile:
    """One run of one container: lines appended as they come, readers woken, closed when the process is gone."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._handle: IO[bytes] = open(path, "ab")  # noqa: SIM115 (open for the log's life; close() closes it)
        self._changed = threading.Condition()
        self.closed = False

    def append(self, stream: str, chunk: bytes) -> None:
        """One record: ``chunk`` is a whole line (ending in a newline, tag F) or a piece of one (tag P)."""
        tag = "F" if chunk.endswith(b"\n") else "P"
        body = chunk[:-1] if tag == "F" else chunk
        record = f"{timestamp(time.time_ns())} {stream} {tag} ".encode() + body + b"\n"
        with self._changed:
            self._handle.write(record)
            self._handle.flush()
            self._changed.notify_all()

    def pump(self, pipe: IO[bytes], stream: str) -> None:
        """Copies a process's pipe into the log until the pipe closes."""
        with pipe:
            while True:
                chunk = pipe.readline(LOG_LINE_BYTES)
                if not chunk:
                    return
                self.append(stream, chunk)

    def close(self) -> None:
        with self._changed:
            self.closed = True
            self._handle.close()
            self._changed.notify_all()

    def wait(self, timeout: float) -> None:
        with self._changed:
            if not self.closed:
                self._changed.wait(timeout)


@dataclass(frozen=True)
class LogQuery:
    """The PodLogOptions the kubelet's log endpoint honours."""

    follow: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None
    since_ns: int | None = None  # the later of sinceSeconds and sinceTime


@dataclass(frozen=True)
class Record:
    time_ns: int
    stream: str
    partial: bool
    text: bytes

    @classmethod
    def parse(cls, line: bytes) -> Record | None:
        parts = line.rstrip(b"\n").split(b" ", 3)
        if len(parts) < 3:
            return None
        try:
            moment = parse_timestamp(parts[0].decode())
        except ValueError:
            return None
        text = parts[3] if len(parts) == 4 else b""
        return cls(moment, parts[1].decode(), parts[2].startswith(b"P"), text)


def _tail_start(handle: IO[bytes], lines: int | None) -> int:
    """The offset of the last ``lines`` records (the whole file when None)."""
    if lines is None:
        return 0
    offsets = [0]
    for line in handle:
        offsets.append(offsets[-1] + len(line))
    handle.seek(0)
    return offsets[max(0, len(offsets) - 1 - lines)]


def read(log: LogFile, query: LogQuery) -> Iterator[bytes]:
    """The container's output as the kubelet serves it: one chunk per record, ending when the container does."""
    remaining = query.limit_bytes if query.limit_bytes is not None else -1
    limited = query.tail_lines is not None and not query.follow
    count = query.tail_lines or 0
    at_line_start = True
    with open(log.path, "rb") as handle:
        handle.seek(_tail_start(handle, query.tail_lines))
        pending = b""
        while not (limited and count <= 0):
            closed = log.closed  # read before the data: what was written before closing is still read
            line = handle.readline()
            if not line.endswith(b"\n"):
                pending += line
                if not query.follow or closed:
                    return
                log.wait(FOLLOW_POLL_SECONDS)
                continue
            record = Record.parse(pending + line)
            pending = b""
            if record is None:
                continue
            if limited:
                count -= 1
            if query.since_ns is not None and record.time_ns < query.since_ns:
                continue
            out = record.text + (b"" if record.partial else b"\n")
            if query.timestamps and at_line_start:
                out = timestamp(record.time_ns).encode() + b" " + out
            at_line_start = not record.partial
            if remaining >= 0:
                out = out[:remaining]
                remaining -= len(out)
            if out:
                yield out
            if remaining == 0:
                return
