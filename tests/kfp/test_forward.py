"""Fixed-port listeners on addresses of their own, and the relay in front of a server, without a checkout."""

from __future__ import annotations

import ipaddress
import socket
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.kfp import forward

pytestmark = pytest.mark.unit

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB: more than one read of the relay's


class Echo(socketserver.BaseRequestHandler):
    """Sends back what it reads until the client ends its side, then ends its own."""

    def handle(self) -> None:
        while chunk := self.request.recv(65536):
            self.request.sendall(chunk)


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)  # its shutdown waits a poll
    thread.start()
    yield "127.0.0.1", server.server_address[1]
    server.shutdown()
    server.server_close()


def exchange(address: tuple[str, int], data: bytes) -> bytes:
    """Sends ``data`` and ends the sending side, while reading until the other side ends (on a thread of its own:
    a megabyte echoed fills the sockets' buffers before it is all sent)."""
    with socket.create_connection(address, timeout=30) as client:

        def send() -> None:
            client.sendall(data)
            client.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        received = bytearray()
        while chunk := client.recv(65536):
            received += chunk
        sender.join()
    return bytes(received)


def test_the_relay_carries_both_directions_to_their_ends(echo: tuple[str, int], tmp_path: Path) -> None:
    port = free_port()
    listen = (forward.free_address(port), port)
    relay = forward.start(listen, echo, tmp_path / "forward.log")
    try:
        assert exchange(listen, PAYLOAD) == PAYLOAD, "bytes lost or reordered, or the half close not passed on"
        assert exchange(listen, b"again") == b"again", "one connection ended the relay"
    finally:
        relay.terminate()
        relay.wait(10)


def test_a_target_that_does_not_listen_closes_the_client_and_the_relay_serves_on(tmp_path: Path) -> None:
    silent = ("127.0.0.1", free_port())
    port = free_port()
    listen = (forward.free_address(port), port)
    relay = forward.start(listen, silent, tmp_path / "forward.log")
    try:
        for _ in range(2):
            with socket.create_connection(listen, timeout=30) as client:
                assert client.recv(1) == b"", "the client's connection is closed"
        assert relay.poll() is None
    finally:
        relay.terminate()
        relay.wait(10)


def test_a_relay_whose_port_is_held_says_so(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        with pytest.raises(OSError, match="did not start") as raised:
            forward.start(holder.getsockname(), ("127.0.0.1", 9), tmp_path / "forward.log")
    assert "cannot listen on 127.0.0.1:" in str(raised.value)


def test_a_held_address_is_not_chosen_again() -> None:
    port = free_port()
    network = ipaddress.IPv4Network("127.0.129.0/30")  # two addresses: .1 and .2
    with socket.socket() as first:
        first.bind((forward.free_address(port, network), port))
        first.listen()
        held = first.getsockname()[0]
        other = {forward.free_address(port, network) for _ in range(20)}
        assert other == {str(address) for address in network.hosts()} - {held}
        with socket.socket() as second:
            second.bind((other.pop(), port))
            second.listen()
            with pytest.raises(OSError, match=f"port {port} is held on every address of {network}"):
                forward.free_address(port, network)
