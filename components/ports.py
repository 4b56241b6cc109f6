"""Loopback ports for the servers a process is about to start: distinct, and out of the kernel's ephemeral range."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Linux's range for the source ports of outgoing connections; elsewhere IANA's dynamic range (macOS, Windows).
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
IANA_DYNAMIC = range(49152, 65536)
LOWEST = 10000  # below: ports that well-known services listen on
TRIES = 1000


def ephemeral() -> range:
    """The ports the kernel hands out to outgoing connections and to binds on port 0."""
    try:
        low, high = (int(field) for field in EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        return IANA_DYNAMIC
    return range(low, high + 1)


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that nothing holds on 127.0.0.1 now.

    Chosen out of the ephemeral range: a port the kernel gave out (a bind on port 0) may be handed again to the next
    bind on port 0 or to any client's outgoing connection before its server binds it, and that server then fails
    with "address already in use". All are held until all are chosen, so none repeats."""
    taken = ephemeral()
    candidates = [port for port in range(LOWEST, 65536) if port not in taken]
    pick = random.SystemRandom().choice
    held: dict[int, socket.socket] = {}
    try:
        for _ in range(TRIES + 1):
            if len(held) == count:
                return list(held)
            port = pick(candidates)
            if port in held:
                continue
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            held[port] = sock
        raise OSError(f"found {len(held)} of {count} free ports in {TRIES} tries: free some loopback ports")
    finally:
        for sock in held.values():
            sock.close()
