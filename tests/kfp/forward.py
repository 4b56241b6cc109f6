"""Fixed-port listeners on loopback addresses of their own, and a TCP relay to put one in front of a server.

The driver and the launcher dial KFP's services at fixed ports (the API server's gRPC at 8887: backend/src/v2/config/
env.go; ML Metadata at 8080: backend/src/v2/metadata/env.go) by names the pods' hosts files map to an address.
`free_address(port)` finds a loopback address where that port is free, so that the lane's listeners never meet
another server's (or another lane's) on 127.0.0.1. Pods share this machine's network (the process kubelet unshares
no network namespace), so they reach any of them.

`python -m tests.kfp.forward LISTEN_ADDRESS LISTEN_PORT TARGET_HOST TARGET_PORT` relays every connection to the
listen address to the target, bytes as they come, each direction closed when its sender closes it; it prints
`serving` once it listens. It stands where a server must keep a port of its own: the API server listens on `:PORT`
(tests/kfp/backend.py says why), and the relay gives it 8887 on a chosen address.
"""

from __future__ import annotations

import argparse
import ipaddress
import random
import socket
import socketserver
import subprocess
import sys
import threading
from pathlib import Path

# 127.0.0.0/8 is all loopback; this part holds no pod (a plane's pod network is 127.<api port>>8>.…, the kubelet's
# default 127.1.0.0/16) and not 127.0.0.1 (every other server of the tests).
NETWORK = ipaddress.IPv4Network("127.0.128.0/17")
REPO = Path(__file__).resolve().parents[2]  # where `-m tests.kfp.forward` is found, whatever the caller's folder
TRIES = 1000
READY = "serving"  # what the relay prints once it listens, as tests/kfp/mlmd_server.py does
CONNECT_TIMEOUT = 10.0  # seconds for the relay to reach its target
CHUNK = 64 * 1024


def free_address(port: int, network: ipaddress.IPv4Network = NETWORK) -> str:
    """An address of ``network`` where nothing holds ``port`` now; chosen at random, so that two lanes starting
    together seldom choose the same one before either binds it."""
    hosts = list(network.hosts())
    for host in random.SystemRandom().sample(hosts, min(len(hosts), TRIES)):
        with socket.socket() as probe:
            # As servers bind: a connection of an earlier listener still in TIME_WAIT does not hold the port.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((str(host), port))
            except OSError:
                continue
        return str(host)
    raise OSError(f"port {port} is held on every address of {network} tried: is a server listening on 0.0.0.0:{port}?")


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copies ``source``'s bytes to ``sink`` until ``source`` ends, then ends ``sink`` the same way: its writing side
    at an end of stream (a half close), both sides at a reset."""
    how = socket.SHUT_WR
    try:
        while chunk := source.recv(CHUNK):
            sink.sendall(chunk)
    except OSError:
        how = socket.SHUT_RDWR  # the other direction's read then ends too
    try:
        sink.shutdown(how)
    except OSError:
        pass  # already gone


class _Connection(socketserver.BaseRequestHandler):
    server: Relay

    def handle(self) -> None:
        try:
            target = socket.create_connection(self.server.target, timeout=CONNECT_TIMEOUT)
        except OSError:
            return  # the client sees its connection closed, as behind any proxy with no server
        with target:
            target.settimeout(None)
            back = threading.Thread(target=_pump, args=(target, self.request), daemon=True)
            back.start()
            _pump(self.request, target)
            back.join()


class Relay(socketserver.ThreadingTCPServer):
    """Relays each connection to ``listen`` to ``target``, on threads of its own."""

    allow_reuse_address = True  # a relay started again binds its fixed port at once
    daemon_threads = True

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        super().__init__(listen, _Connection)


def start(listen: tuple[str, int], target: tuple[str, int], log: Path) -> subprocess.Popen[str]:
    """`python -m tests.kfp.forward` from ``listen`` to ``target`` in a session of its own, its errors in ``log``;
    returned once it listens. Raises OSError with the log's end when it does not."""
    with log.open("w") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.kfp.forward", *map(str, (*listen, *target))],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            start_new_session=True,
            cwd=REPO,
        )
    assert process.stdout is not None
    if process.stdout.readline().strip() != READY:  # nothing when it exits
        process.kill()
        process.wait()
        raise OSError(f"the relay {listen[0]}:{listen[1]} did not start; its log ends:\n{log.read_text()[-2000:]}")
    return process


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kfp.forward", description=__doc__.splitlines()[0])
    parser.add_argument("listen_address")
    parser.add_argument("listen_port", type=int)
    parser.add_argument("target_host")
    parser.add_argument("target_port", type=int)
    args = parser.parse_args(argv)
    try:
        relay = Relay((args.listen_address, args.listen_port), (args.target_host, args.target_port))
    except OSError as error:
        print(f"error: cannot listen on {args.listen_address}:{args.listen_port}: {error}", file=sys.stderr)
        return 1
    print(READY, flush=True)
    with relay:
        relay.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
