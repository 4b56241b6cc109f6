"""The S3 store through faults: its server stopped and restarted mid-upload and mid-publish, connections reset,
uploads cut short."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bakeoff.components import defaults
from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage import S3Store, registry
from tests.conftest import BUCKET, WeedServer, free_port
from tests.samples import manifest

pytestmark = pytest.mark.s3

BOUND = 60.0  # seconds of retries: far more than a restart here takes (about 3 s)
SHORT_BOUND = 2.0  # seconds of retries for the test that outlasts them


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WeedServer]:
    """A SeaweedFS of these tests' own, which they stop and start: the suite's shared one is never disturbed."""
    weed = WeedServer(tmp_path_factory.mktemp("weed-faults"))
    try:
        weed.start()
        yield weed
    finally:
        weed.stop()


@pytest.fixture
def running(server: WeedServer, monkeypatch: pytest.MonkeyPatch) -> WeedServer:
    """The server up (a test before may have left it stopped), with its keys in the environment."""
    if server.process is None or server.process.poll() is not None:
        server.start()
    for key, value in server.keys.items():
        monkeypatch.setenv(key, value)
    return server


class Retries:
    """Collects a store's retry lines, and says when the first one came."""

    def __init__(self, store: S3Store) -> None:
        self.lines: list[str] = []
        self.first = threading.Event()
        store.report = self.add

    def add(self, line: str) -> None:
        self.lines.append(line)
        self.first.set()


def kill_after_puts(store: S3Store, server: WeedServer, puts: int) -> None:
    """Stops the server, as a crash would, right after the store's ``puts``-th upload: the next request finds it
    gone."""
    put = store._put_checked
    done = 0

    def counting(name: str, data: bytes) -> None:
        nonlocal done
        put(name, data)
        done += 1
        if done == puts:
            server.kill()

    store._put_checked = counting  # type: ignore[method-assign]


def in_thread(work: Callable[[], object]) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def model_dir(tmp_path: Path, files: int = 8) -> Path:
    path = tmp_path / "model"
    (path / "variables").mkdir(parents=True)
    (path / "saved_model.pb").write_bytes(b"pb" * 1000)
    for index in range(files):
        (path / "variables" / f"variables.data-{index:05d}-of-{files:05d}").write_bytes(bytes([index]) * 10_000)
    return path


def test_an_upload_completes_across_a_restart_of_the_server(running: WeedServer, tmp_path: Path) -> None:
    """Guards put retries: the server dies between two objects of put_dir, comes back, and every object arrives
    whole."""
    store = S3Store(BUCKET, tmp_path.name, running.endpoint, secure=False, retry_seconds=BOUND)
    retries = Retries(store)
    source = model_dir(tmp_path)
    kill_after_puts(store, running, puts=3)
    thread, outcome = in_thread(lambda: store.put_dir(source, "runs/r1/model"))
    # Started again only once the upload has met the dead server.
    assert retries.first.wait(BOUND), "the upload never retried"
    assert running.process is not None and running.process.poll() is not None
    running.start()
    thread.join(BOUND)
    assert not thread.is_alive() and "error" not in outcome, outcome.get("error")
    assert "Connection refused" in retries.lines[0]
    for path in sorted(source.rglob("*")):
        if path.is_file():
            assert store.get_bytes(f"runs/r1/model/{path.relative_to(source).as_posix()}") == path.read_bytes()


def test_a_publish_completes_across_a_restart_of_the_server(running: WeedServer, tmp_path: Path) -> None:
    """Guards publish under an outage: the server dies between the version's files, and the same version completes."""
    store = S3Store(BUCKET, tmp_path.name, running.endpoint, secure=False, retry_seconds=BOUND)
    retries = Retries(store)
    model = model_dir(tmp_path)
    kill_after_puts(store, running, puts=2)
    thread, outcome = in_thread(lambda: registry.publish(store, "fm", model, manifest(run_id="r1")))
    assert retries.first.wait(BOUND), "the publish never retried"
    running.start()
    thread.join(BOUND)
    assert not thread.is_alive() and outcome.get("value") == 1, outcome.get("error")
    assert [(m.version, m.run_id) for m in registry.list_versions(store, "fm")] == [(1, "r1")]
    assert len(store.list("models/fm/1")) == 1 + 1 + 8  # the manifest, saved_model.pb, the variables
    assert store.get_bytes("models/fm/1/variables/variables.data-00007-of-00008") == bytes([7]) * 10_000


def test_a_server_gone_past_the_bound_fails_in_one_line_and_leaves_no_version(
    running: WeedServer, tmp_path: Path
) -> None:
    """Guards the bound: retries stop after retry_seconds with one clear line, and the half-written version never
    looks complete."""
    store = S3Store(BUCKET, tmp_path.name, running.endpoint, secure=False, retry_seconds=SHORT_BOUND)
    retries = Retries(store)
    kill_after_puts(store, running, puts=2)
    with pytest.raises(BakeoffError) as failure:
        registry.publish(store, "fm", model_dir(tmp_path), manifest(run_id="r1"))
    message = str(failure.value)
    assert "\n" not in message
    assert message.startswith(f"S3 put of 's3://{BUCKET}/{tmp_path.name}/models/fm/1/")
    assert message.endswith(
        f"still failed after {SHORT_BOUND:g} s of retries (Connection refused):"
        f" check that {running.endpoint} is up, then run again"
    )
    assert retries.lines  # it did retry before giving up

    running.start()
    later = S3Store(BUCKET, tmp_path.name, running.endpoint, secure=False)
    assert registry.list_versions(later, "fm") == []
    assert "models/fm/1/manifest.json" not in later.list("models/fm")
    assert registry.publish(later, "fm", model_dir(tmp_path / "next"), manifest(run_id="next")) == 2
    assert [(m.version, m.run_id) for m in registry.list_versions(later, "fm")] == [(2, "next")]


class FaultyProxy:
    """A loopback TCP proxy in front of the S3 server that breaks the next exchange exactly as a test says.

    ``fault`` is one of: "cut-request" (reset the connection once ``cut_after`` more request
    bytes passed), "drop-response" (reset it instead of passing the next answer on),
    "stall-response" (swallow the next answer: the client times out), "503" (answer the
    next request with 503 Service Unavailable instead of passing it on).
    """

    UNAVAILABLE = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", free_port()))
        self.endpoint = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.lock = threading.Lock()
        self.fault: str | None = None
        self.cut_after = 0
        self.faults = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(client, upstream, client, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, client, False), daemon=True).start()

    def _strike(self, data: bytes, request: bool) -> tuple[bytes, str | None]:
        """What of ``data`` passes, and the fault to strike now, if any."""
        with self.lock:
            fault = self.fault
            if request and fault == "cut-request":
                if len(data) < self.cut_after:
                    self.cut_after -= len(data)
                    return data, None
                data = data[: self.cut_after]
            elif not ((request and fault == "503") or (not request and fault in ("drop-response", "stall-response"))):
                return data, None
            self.fault, self.faults = None, self.faults + 1
        return (data if fault == "cut-request" else b""), fault

    def _pump(self, source: socket.socket, target: socket.socket, client: socket.socket, request: bool) -> None:
        try:
            while data := source.recv(65536):
                data, fault = self._strike(data, request)
                if data:
                    target.sendall(data)
                if fault == "503":
                    client.sendall(self.UNAVAILABLE)
                if fault in ("cut-request", "drop-response", "503"):
                    # SO_LINGER 0: the client gets a TCP reset, as from a crashed peer; shutdown first, as
                    # the other direction's thread is still reading this socket and would keep it open.
                    if fault != "503":
                        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    client.shutdown(socket.SHUT_RDWR)
                    break
        except OSError:
            pass
        for sock in (source, target):
            try:
                sock.close()
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def proxy(running: WeedServer) -> Iterator[FaultyProxy]:
    faulty = FaultyProxy(running.endpoint)
    yield faulty
    faulty.close()


def test_a_connection_reset_mid_upload_is_retried(proxy: FaultyProxy, tmp_path: Path) -> None:
    """Guards retries of a reset: the connection breaks 64 KiB into a 1 MiB body, and the object still arrives whole."""
    store = S3Store(BUCKET, tmp_path.name, proxy.endpoint, secure=False, retry_seconds=BOUND)
    retries = Retries(store)
    data = bytes(range(256)) * 4096
    proxy.fault, proxy.cut_after = "cut-request", 64 * 1024
    store.put_bytes("big.bin", data)
    assert proxy.faults == 1 and len(retries.lines) == 1
    assert store.get_bytes("big.bin") == data


def test_a_create_only_put_whose_answer_was_lost_is_still_ours(proxy: FaultyProxy, tmp_path: Path) -> None:
    """Guards the claim's retry: the server created the object, the answer was lost, the retry meets 412 and reads it
    back."""
    store = S3Store(BUCKET, tmp_path.name, proxy.endpoint, secure=False, retry_seconds=BOUND)
    retries = Retries(store)
    proxy.fault = "drop-response"
    assert store._create("claims/owner", b"mine")
    assert proxy.faults == 1 and len(retries.lines) == 1
    assert not store._create("claims/owner", b"another publisher")
    assert store.get_bytes("claims/owner") == b"mine"


def test_a_request_that_times_out_is_retried(
    proxy: FaultyProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards retries of a timeout: the server's answer never comes, the read times out, the request is made again."""
    monkeypatch.setattr(defaults, "S3_READ_TIMEOUT", 1.0)
    store = S3Store(BUCKET, tmp_path.name, proxy.endpoint, secure=False, retry_seconds=BOUND)
    retries = Retries(store)
    store.put_bytes("a.txt", b"a")
    proxy.fault = "stall-response"
    assert store.get_bytes("a.txt") == b"a"
    assert proxy.faults == 1 and len(retries.lines) == 1 and "timed out" in retries.lines[0]


def test_a_5xx_answer_is_retried(proxy: FaultyProxy, tmp_path: Path) -> None:
    """Guards retries of a server error: a 503 Service Unavailable, then the answer."""
    store = S3Store(BUCKET, tmp_path.name, proxy.endpoint, secure=False, retry_seconds=BOUND)
    retries = Retries(store)
    store.put_bytes("a.txt", b"a")
    proxy.fault = "503"
    assert store.get_bytes("a.txt") == b"a"
    assert proxy.faults == 1 and len(retries.lines) == 1 and "(HTTP 503)" in retries.lines[0]


def test_an_upload_stored_short_is_repeated(s3_env: str, tmp_path: Path) -> None:
    """Guards the upload check: a put whose stored object is one byte short (its ETag and size differ) is made again."""
    store = S3Store(BUCKET, tmp_path.name, s3_env, secure=False, retry_seconds=BOUND)
    retries = Retries(store)
    put = store.client.put_object
    calls = []

    def short_once(bucket: str, name: str, data, length: int):
        calls.append(name)
        if len(calls) == 1:  # what a server that lost the body's tail would store
            return put(bucket, name, type(data)(data.read()[:-1]), length - 1)
        return put(bucket, name, data, length)

    store.client.put_object = short_once  # type: ignore[method-assign, assignment]
    store.put_bytes("model/saved_model.pb", b"0123456789")
    assert len(calls) == 2 and "the server stored 9 of 10 bytes" in retries.lines[0]
    assert store.get_bytes("model/saved_model.pb") == b"0123456789"
