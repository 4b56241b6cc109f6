"""A warm process that local replicas fork from: TensorFlow is imported once per run, not once per replica.

A replica's start is mostly ``import tensorflow`` (benchmarks/results.md, "Cheaper job starts"). ``warm`` starts
one process that imports the worker program and then, asked over a Unix socket, forks a child per replica: the
child takes the replica's stdout, environment, folder and arguments and runs ``python -m MODULE ARGS`` (or
``-c CODE``) as that command would. The launcher gets a ``Forked``, which acts as the ``subprocess.Popen`` it
stands in for.

What a process reads once at its start (the loader's preload, Python's flags, TensorFlow's log level and kernels,
the allocator) cannot change after the fork: a request whose environment differs from the warm process's in
such a variable is refused, and the replica starts as a fresh process.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TextIO

from bakeoff.components import defaults, tfenv
from bakeoff.components.backends import allocator
from bakeoff.components.environment import INTER_OP_THREADS_ENV, INTRA_OP_THREADS_ENV, PREFORK_ENV, TF_CONFIG_ENV

# Read at a process's start or at TensorFlow's import, so they must be the warm process's own...
STARTUP_PREFIXES = ("LD_", "PYTHON", "TF_", "ONEDNN_", "DNNL_", "MALLOC_", "TCMALLOC_", "CUDA_")
# ...except these, read when the replica builds its strategy (TF_CONFIG) and first runs an op (the pools' sizes).
PER_REPLICA = (TF_CONFIG_ENV, INTRA_OP_THREADS_ENV, INTER_OP_THREADS_ENV)
MESSAGE_BYTES = 1 << 20  # a request: arguments and environment, far below this


def startup_difference(ours: Mapping[str, str], theirs: Mapping[str, str]) -> str | None:
    """The first variable read at a process's start whose value differs between the two environments, if any."""
    for name in sorted(set(ours) | set(theirs)):
        if name.startswith(STARTUP_PREFIXES) and name not in PER_REPLICA and ours.get(name) != theirs.get(name):
            return name
    return None


class Forked:
    """A replica forked by the warm process, with the part of ``subprocess.Popen`` the local backend uses."""

    def __init__(self, connection: socket.socket, pid: int, stdout: TextIO) -> None:
        self.connection, self.pid, self.stdout = connection, pid, stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
        return code

    def _status(self, timeout: float | None) -> int | None:
        """The exit code the warm process sends once it has reaped the child (Popen's: -N for signal N)."""
        if self.returncode is None:
            self.connection.settimeout(timeout)
            try:
                message = self.connection.recv(64)
            except (TimeoutError, BlockingIOError):
                return None
            if not message:  # the warm process is gone: nothing would tell this child's end, so it ends now
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
            self.returncode = int(message) if message else -signal.SIGKILL
            self.connection.close()
        return self.returncode


def spawn(command: list[str], env: Mapping[str, str]) -> Forked | str:
    """``command`` (``python -m MODULE ...`` or ``python -c CODE ...`` on this interpreter) forked by the warm
    process that ``env`` names; else why not, for the command to start fresh ("" when ``env`` names none)."""
    path = env.get(PREFORK_ENV)
    if not path:
        return ""
    if len(command) < 3 or command[0] != sys.executable or command[1] not in ("-m", "-c"):
        return "the warm process runs only python -m or -c on its own interpreter"
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read, write = os.pipe()
    connection.settimeout(defaults.PREFORK_WAIT_SECONDS)
    try:
        connection.connect(path)
        option, target, *args = command[1:]
        request = {"option": option, "target": target, "args": args, "env": dict(env), "cwd": os.getcwd()}
        socket.send_fds(connection, [json.dumps(request).encode()], [write])
        reply = connection.recv(MESSAGE_BYTES)  # waits while the warm process is still importing
    except OSError as error:
        reply = f"the warm process did not answer ({error.strerror or type(error).__name__})".encode()
    finally:
        os.close(write)
    if not reply.isdigit():
        connection.close()
        os.close(read)
        return reply.decode().removeprefix("refused: ") or "the warm process is gone"
    return Forked(connection, int(reply), open(read, encoding=None, errors=None))  # the reader closes it


def replica_environment(tcmalloc: str | None) -> dict[str, str]:
    """What every local replica starts with: this process's environment, ``tcmalloc`` preloaded, output unbuffered."""
    return {**allocator.with_tcmalloc(os.environ, tcmalloc), "PYTHONUNBUFFERED": "1"}


@contextlib.contextmanager
def warm(module: str) -> Iterator[None]:
    """A warm process that has imported ``module``, started as replicas are, for as long as the context lasts; the
    local replicas this process and its children (kfp.local's steps) start meanwhile fork from it (PREFORK_ENV)."""
    with tempfile.TemporaryDirectory(prefix="bakeoff-prefork-") as folder:
        path = str(Path(folder) / "socket")
        process = subprocess.Popen(
            [sys.executable, "-m", __name__, path, module],
            env={**replica_environment(allocator.tcmalloc()), PREFORK_ENV: path},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # a replica it cannot start starts fresh and says why in its own log
            start_new_session=True,  # a Ctrl-C reaches the run, which ends this process itself
        )
        # It listens before its import: from then on a replica's request waits for it instead of starting fresh.
        while not os.path.exists(path) and process.poll() is None:
            time.sleep(0.01)
        os.environ[PREFORK_ENV] = path
        try:
            yield
        finally:
            del os.environ[PREFORK_ENV]
            process.terminate()
            process.wait()


def serve(path: str, module: str) -> None:
    """The warm process: listens on ``path`` first (a request waits, not fails, while the import runs), imports
    ``module``, then forks a child per request until its parent ends it or goes."""
    parent, environ = os.getppid(), dict(os.environ)  # as it started: a replica sets TensorFlow's defaults itself
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    tfenv.quiet_tensorflow()  # as the worker program does before its import of TensorFlow
    importlib.import_module(module)
    wakeup, woken = socket.socketpair()
    wakeup.setblocking(False)
    signal.set_wakeup_fd(wakeup.fileno())
    signal.signal(signal.SIGCHLD, lambda *_: None)  # reaping happens in the loop; the handler only wakes it
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(woken, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    while os.getppid() == parent:
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is woken:
                woken.recv(4096)
            else:
                connection, _ = listener.accept()
                _fork(connection, environ, children, [listener, wakeup, woken, selector])
        _reap(children)


def _fork(
    connection: socket.socket,
    environ: Mapping[str, str],
    children: dict[int, socket.socket],
    inherited: list[socket.socket | selectors.BaseSelector],
) -> None:
    message, fds, _, _ = socket.recv_fds(connection, MESSAGE_BYTES, 1)
    request = json.loads(message)
    difference = startup_difference(environ, request["env"])
    if difference is not None or len(fds) != 1:
        reason = f"{difference} differs from the warm process's" if difference else "no log pipe came with it"
        connection.send(f"refused: {reason}".encode())
        connection.close()
        for fd in fds:
            os.close(fd)
        return
    pid = os.fork()
    if pid == 0:
        for held in [*inherited, *children.values()]:
            held.close()
        _child(connection, fds[0], request)  # never returns
    os.close(fds[0])
    try:
        connection.send(str(pid).encode())
    except OSError:  # the launcher stopped waiting (PREFORK_WAIT_SECONDS) and started the replica fresh
        os.kill(pid, signal.SIGKILL)
    children[pid] = connection


def _child(connection: socket.socket, stdout: int, request: dict) -> None:
    """Becomes the replica: ``python -m MODULE ARGS`` (or ``-c CODE``) with its stdout, environment and folder;
    exits with its code through ``os._exit``, as the worker program does itself: the warm process's exit handlers
    are not the replica's to run."""
    code = 1
    try:
        connection.close()
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(number, signal.SIG_DFL)
        os.setsid()  # its own group, as Popen(start_new_session=True): a stop reaches its children too
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(stdout, 1)
        os.dup2(stdout, 2)
        os.close(stdout)
        os.close(null)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # the warm process's choice; the replica's own TMPDIR picks again
        # The module ran here before as an import; -m would not know it, nor do the replicas use that copy.
        warnings.filterwarnings("ignore", "'.*' found in sys.modules after import of package", RuntimeWarning)
        if request["option"] == "-m":
            sys.argv = [request["target"], *request["args"]]  # run_module puts the module's file first, as -m does
            runpy.run_module(request["target"], run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *request["args"]]
            exec(compile(request["target"], "<string>", "exec"), {"__name__": "__main__"})  # as python -c runs it
        code = 0
    except SystemExit as exit:
        if exit.code is None or isinstance(exit.code, int):
            code = exit.code or 0
        else:  # sys.exit("message"), as the interpreter does: the message, then 1
            print(exit.code, file=sys.stderr)  # noqa: T201 (the interpreter's own words for it)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _reap(children: dict[int, socket.socket]) -> None:
    """Tells each ended child's launcher its exit code."""
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            connection = children.pop(pid)
            with contextlib.suppress(OSError):  # its launcher may be gone
                connection.send(str(os.waitstatus_to_exitcode(status)).encode())
            connection.close()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
