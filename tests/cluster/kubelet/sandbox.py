"""A container as a process: a private mount and UTS namespace whose bind mounts lay out the paths a pod sees."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ENTER = Path(__file__).with_name("enter.py")


class StartError(Exception):
    """The container's process cannot be started (the kubelet's StartError, exit code 128)."""


@dataclass(frozen=True)
class Mount:
    """A bind mount: ``source`` (a path on this machine) shown at ``target`` (a path inside the container)."""

    source: Path
    target: str
    read_only: bool = False
    host: bool = False  # the source is this machine's own folder (hostPath): no mount point is made in it

    @property
    def depth(self) -> int:
        return len(PurePosixPath(self.target).parts)


@dataclass(frozen=True)
class ImageRoot:
    """An unpacked image a container enters: its root filesystem (shown read-only), the user it runs as, and
    the libraries preloaded into its command (the bind shim, mounted inside)."""

    rootfs: Path
    user: tuple[int, int] | None = None
    preload: str = ""


def ordered(mounts: Iterable[Mount]) -> list[Mount]:
    """Outer paths before the paths inside them; a later mount of the same target wins, as in the pod spec."""
    by_target: dict[str, Mount] = {}
    for mount in mounts:
        by_target[os.path.normpath(mount.target)] = mount
    return sorted(by_target.values(), key=lambda mount: mount.depth)


def host_path(target: str, mounts: Sequence[Mount]) -> Path:
    """Where ``target`` (a path inside the container) lies on this machine, through the innermost mount above it."""
    path = PurePosixPath(os.path.normpath(target))
    best: Mount | None = None
    for mount in mounts:
        root = PurePosixPath(os.path.normpath(mount.target))
        if (path == root or root in path.parents) and (best is None or mount.depth >= best.depth):
            best = mount
    if best is None:
        return Path(path)
    return best.source / path.relative_to(PurePosixPath(os.path.normpath(best.target)))


@dataclass(frozen=True)
class Tools:
    """The programs a container's start goes through: `unshare`, and this Python for enter.py."""

    unshare: str
    python: str = sys.executable

    @classmethod
    def find(cls) -> Tools:
        found = shutil.which("unshare", path="/usr/sbin:/usr/bin:/sbin:/bin")
        if found is None:
            raise SystemExit("kubelet: unshare not found: apt-get install util-linux")
        return cls(unshare=found)


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


def command(
    tools: Tools,
    root: Path,
    mounts: Sequence[Mount],
    hostname: str,
    workdir: str,
    argv: Sequence[str],
    image: ImageRoot | None = None,
) -> list[str]:
    """The argv that enters a new mount and UTS namespace, lays out the container's files there (enter.py,
    on a tmpfs root in the folder ``root``, showing this machine's files or ``image``'s), names the host, and
    execs the container's argv (as ``image``'s user)."""
    spec = {
        "root": str(root),
        "image_root": str(image.rootfs) if image else None,
        "user": list(image.user) if image and image.user else None,
        "preload": image.preload if image else "",
        "hostname": hostname,
        "workdir": workdir,
        "argv": list(argv),
        "mounts": [
            {"source": str(m.source), "target": m.target, "read_only": m.read_only, "host": m.host} for m in mounts
        ],
    }
    return [
        tools.unshare,
        "--mount",
        "--uts",
        "--propagation",
        "private",
        "--",
        tools.python,
        "-I",
        "-S",
        str(ENTER),
        json.dumps(spec),
    ]
