"""MariaDB from Debian (`apt-get install mariadb-server`) as the KFP API server's database: a process on loopback.

A data folder of its own, made by `mariadb-install-db`; utf8mb4 as the server's character set, as KFP's manifests
run MySQL 8 (its default): with Debian's latin1 an upload whose pipeline spec holds a non-ASCII character fails
`Error 1366`. One user, `kfp`, with a password, over TCP: Debian's root signs in through the unix socket only.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

USER, PASSWORD = "kfp", "kfp-test-password"
START_TIMEOUT = 60.0  # seconds; it is ready in about 2 s here
PACKAGE = "mariadb-server"  # Debian's: mariadbd and mariadb-install-db


class DatabaseError(RuntimeError):
    """MariaDB is missing or did not start; the message says which, with its log's tail."""


@dataclass
class MariaDB:
    folder: Path
    port: int
    process: subprocess.Popen[bytes]

    @property
    def socket(self) -> Path:
        return self.folder / "mariadb.sock"

    def sql(self, statement: str) -> str:
        """Runs `statement` as the server's root, through its socket."""
        command = ["mariadb", f"--socket={self.socket}", "--user=root", "--batch", "--skip-column-names"]
        done = subprocess.run([*command, "-e", statement], capture_output=True, text=True)
        if done.returncode != 0:
            raise DatabaseError(f"MariaDB refused {statement!r}: {done.stderr.strip()}")
        return done.stdout

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _program(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if found is None:
        raise DatabaseError(f"no {name}: install Debian's {PACKAGE} (`make test-kfp` does, as root)")
    return found


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def start(folder: Path, port: int) -> MariaDB:
    """A fresh server in `folder` on 127.0.0.1:`port`, with the `kfp` user allowed everything over TCP."""
    data, log = folder / "data", folder / "mariadb.log"
    data.mkdir(parents=True)
    install = [_program("mariadb-install-db"), "--no-defaults", f"--datadir={data}", "--user=root"]
    installed = subprocess.run([*install, "--auth-root-authentication-method=socket"], capture_output=True, text=True)
    if installed.returncode != 0:
        raise DatabaseError(f"mariadb-install-db failed: {installed.stderr.strip()[-2000:]}")
    server = [
        _program("mariadbd"),
        "--no-defaults",
        f"--datadir={data}",
        f"--socket={folder / 'mariadb.sock'}",
        f"--pid-file={folder / 'mariadb.pid'}",
        f"--port={port}",
        "--bind-address=127.0.0.1",
        "--user=root",
        "--character-set-server=utf8mb4",
        "--collation-server=utf8mb4_unicode_ci",
        "--skip-name-resolve",
        f"--log-error={log}",
    ]
    with log.open("ab") as output:  # what it says before it opens its log
        process = subprocess.Popen(
            server, stdin=subprocess.DEVNULL, stdout=output, stderr=output, start_new_session=True
        )
    database = MariaDB(folder, port, process)
    deadline = time.monotonic() + START_TIMEOUT
    while not _answers(port):
        if database.process.poll() is not None or time.monotonic() > deadline:
            database.stop()
            raise DatabaseError(f"MariaDB did not start on port {port}; its log ({log}) ends:\n{_tail(log)}")
        time.sleep(0.2)
    database.sql(
        f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'; GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%';"
        " FLUSH PRIVILEGES;"
    )
    return database


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False
