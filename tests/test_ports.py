"""Ports for the servers the suite and the local backend start: distinct, free, and out of the kernel's hands."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bakeoff.components.ports import ephemeral, free_ports
from tests.conftest import WeedServer

pytestmark = pytest.mark.s3  # the second starts a SeaweedFS


def test_ports_are_distinct_free_and_never_the_kernel_s_to_hand_out() -> None:
    ports = free_ports(64)
    assert len(set(ports)) == 64
    # An outgoing connection's source port comes from the ephemeral range: it can never take one of these.
    assert not set(ports) & set(ephemeral())
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_first_start_whose_port_was_taken_moves_to_others(tmp_path: Path) -> None:
    weed = WeedServer(tmp_path)
    taken = weed.ports["master"]  # its first listener: a taken one ends weed within a second
    with socket.create_server(("127.0.0.1", taken)):
        try:
            weed.start()
            assert weed.ports["master"] != taken
            assert b"address already in use" in weed.log.read_bytes()  # the first try did meet it
        finally:
            weed.stop()
