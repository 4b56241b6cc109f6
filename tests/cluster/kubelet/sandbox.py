"""A container as a process: a private mount (and host name) namespace whose bind mounts lay out the paths a pod sees."""
from __future__ import annotations

import os
import shlex
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable, Mapping, Optional, Sequence


FIRST_DESCRIPTOR = 10  # the mount script's descriptors of the mount sources, closed before the container starts


class StartError(Exception):
    """The container's process cannot be started (the kubelet's StartError, exit code 128)."""


@dataclass(frozen=True)
class Mount:
    """A bind mount: ``source`` (a path on this machine) shown at ``target`` (a path inside the container)."""

    source: Path
    target: str
    read_only: bool = False

    @property
    def depth(self) -> int:
        return len(PurePosixPath(self.target).parts)


def ordered(mounts: Iterable[Mount]) -> list[Mount]:
    """Outer paths before the paths inside them; a later mount of the same target wins, as in the pod spec."""
    by_target: dict[str, Mount] = {}
    for mount in mounts:
        by_target[os.path.normpath(mount.target)] = mount
    return sorted(by_target.values(), key=lambda mount: mount.depth)


def host_path(target: str, mounts: Sequence[Mount]) -> Path:
    """Where ``target`` (a path inside the container) lies on this machine, through the innermost mount above it."""
    path = PurePosixPath(os.path.normpath(target))
    best: Optional[Mount] = None
    for mount in mounts:
        root = PurePosixPath(os.path.normpath(mount.target))
        if (path == root or root in path.parents) and (best is None or mount.depth >= best.depth):
            best = mount
    if best is None:
        return Path(path)
    return best.source / path.relative_to(PurePosixPath(os.path.normpath(best.target)))


class MountPoints:
    """Creates the mount points a container needs and this machine lacks, and removes them at the kubelet's exit.

    A bind mount needs an existing target; in a private mount namespace the folder itself is still the
    host's, so `/var/run/secrets/kubernetes.io/serviceaccount` and the like are made once, left empty.
    """

    def __init__(self) -> None:
        self._created: list[Path] = []
        self._lock = threading.Lock()

    def ensure(self, path: Path, is_file: bool) -> None:
        with self._lock:
            missing = [p for p in [path, *path.parents] if not os.path.lexists(p)]
            for p in reversed(missing):
                if p == path and is_file:
                    p.touch()
                else:
                    p.mkdir()
                self._created.append(p)

    def remove(self) -> None:
        """Removes what it made, innermost first, where still empty (nothing is mounted on it out here)."""
        with self._lock:
            for path in reversed(self._created):
                try:
                    if path.is_dir() and not path.is_symlink():
                        path.rmdir()
                    elif path.is_file() and path.stat().st_size == 0:
                        path.unlink()
                except OSError:
                    pass
            self._created.clear()


@dataclass(frozen=True)
class Tools:
    """The programs a container's start goes through, found once on this machine's PATH."""

    unshare: str
    mount: str
    hostname: str
    shell: str  # bash: the mount script holds a descriptor per mount, past sh's single digits

    @classmethod
    def find(cls) -> "Tools":
        found = {name: shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin") for name in
                 ("unshare", "mount", "hostname", "bash")}
        missing = [name for name, path in found.items() if path is None]
        if missing:
            raise SystemExit(f"kubelet: {', '.join(missing)} not found: install util-linux, hostname and bash")
        return cls(unshare=found["unshare"], mount=found["mount"], hostname=found["hostname"],  # type: ignore[arg-type]
                   shell=found["bash"])  # type: ignore[arg-type]


def resolve_executable(argv: Sequence[str], env: Mapping[str, str], workdir: str, mounts: Sequence[Mount]) -> None:
    """Fails as the container runtime does when the command is not found, looking through the container's mounts."""
    if not argv:
        raise StartError("no command specified: the pod gives none and the image has neither ENTRYPOINT nor CMD")
    program = argv[0]
    if "/" in program:
        candidates = [program if program.startswith("/") else os.path.join(workdir, program)]
    else:
        candidates = [os.path.join(folder, program) for folder in env.get("PATH", "").split(":") if folder]
    for candidate in candidates:
        path = host_path(candidate, mounts)
        if path.is_file() and os.access(path, os.X_OK):
            return
    if "/" in program:
        raise StartError(f'exec: "{program}": stat {candidates[0]}: no such file or directory')
    raise StartError(f'exec: "{program}": executable file not found in $PATH')


def command(tools: Tools, mounts: Sequence[Mount], hostname: str, workdir: str, argv: Sequence[str]) -> list[str]:
    """The argv that enters a new mount and UTS namespace, mounts, names the host, and execs the container's argv.

    Every source is opened before the first mount and mounted through /proc/self/fd: a source below
    another mount's target (the kubelet's state under /tmp, then the container's private /tmp) stays reachable.
    """
    descriptors = [FIRST_DESCRIPTOR + index for index in range(len(mounts))]
    steps = ["set -e"]
    if mounts:
        steps.append("exec " + " ".join(f"{fd}<{shlex.quote(str(m.source))}" for fd, m in zip(descriptors, mounts)))
    for fd, mount in zip(descriptors, mounts):
        steps.append(f"{tools.mount} --bind /proc/self/fd/{fd} {shlex.quote(mount.target)}")
        if mount.read_only:
            steps.append(f"{tools.mount} -o remount,bind,ro {shlex.quote(mount.target)}")
    if mounts:
        steps.append("exec " + " ".join(f"{fd}<&-" for fd in descriptors))
    steps.append(f"{tools.hostname} {shlex.quote(hostname)}")
    steps.append(f"cd {shlex.quote(workdir)}")
    steps.append('exec "$@"')
    script = "\n".join(steps)
    return [tools.unshare, "--mount", "--uts", "--propagation", "private", "--", tools.shell, "-c", script,
            "container", *argv]
