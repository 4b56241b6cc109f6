"""ML Metadata for the KFP 2.15/2.16 driver: tests/kfp/mlmd_server.py in a virtual environment of its own.

The driver dials `metadata-grpc-service.<namespace>:8080` (`backend/src/v2/cmd/driver/main.go`, its
`mlmd_server_address`/`mlmd_server_port` flags). The environment holds PyPI's `ml-metadata` (its protobuf pin,
< 5, conflicts with kfp's), made once in `~/.cache/bakeoff/kfp/mlmd-<version>` with this interpreter's venv and pip.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.kfp import sources

VERSION = "1.17.1"  # the newest ml-metadata with a CPython 3.11 wheel
SERVER = Path(__file__).with_name("mlmd_server.py")
RUNS = Path(__file__).with_name("mlmd_runs.py")


class MlmdError(RuntimeError):
    """The environment could not be made or the server did not start; the message says which."""


def environment(log: Callable[[str], None] = print) -> Path:
    """The virtual environment's python, made first when missing."""
    folder = sources.kfp_cache() / f"mlmd-{VERSION}"
    python = folder / "bin" / "python"
    if (folder / ".installed").is_file():
        return python
    log(f"installing ml-metadata {VERSION} into {folder} (once)")
    for command in (
        [sys.executable, "-m", "venv", "--clear", str(folder)],
        [str(python), "-m", "pip", "install", "--quiet", f"ml-metadata=={VERSION}"],
    ):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise MlmdError(f"{' '.join(command[:4])} failed: {(done.stdout + done.stderr).strip()[-2000:]}")
    (folder / ".installed").touch()
    return python


@dataclass
class Mlmd:
    host: str
    port: int
    process: subprocess.Popen[str]

    def run(self, run_id: str) -> dict[str, Any]:
        """What the store holds of the KFP run ``run_id`` (tests/kfp/mlmd_runs.py's report)."""
        command = [str(environment()), str(RUNS), self.host, str(self.port), run_id]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise MlmdError(f"reading run {run_id} from ML Metadata failed: {done.stderr.strip()[-2000:]}")
        return json.loads(done.stdout)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start(folder: Path, port: int, host: str = "127.0.0.1", log: Callable[[str], None] = print) -> Mlmd:
    """The store's gRPC service on `host`:`port`, its SQLite database and log in `folder`."""
    python = environment(log)
    folder.mkdir(parents=True, exist_ok=True)
    output = (folder / "mlmd.log").open("w")
    command = [str(python), str(SERVER), host, str(port), str(folder / "mlmd.sqlite")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=output, text=True, start_new_session=True)
    output.close()
    server = Mlmd(host, port, process)
    assert process.stdout is not None
    if process.stdout.readline().strip() != "serving":  # what it prints once it listens; nothing when it exits
        server.stop()
        log_text = (folder / "mlmd.log").read_text(errors="replace")[-2000:]
        raise MlmdError(f"the ML Metadata server did not start; its log ends:\n{log_text}")
    return server
