"""Lays out a container's file tree inside its new mount namespace, then execs the container's command.

Run by the kubelet as `unshare --mount --uts --propagation private -- python -I -S enter.py SPEC` with the
container's environment: standard library only, importing nothing of the project (-I drops sys.path's script
folder). Nothing is ever created on this machine's own file system: the root becomes a tmpfs that shows the
machine's top-level folders by bind mounts, and a missing mount point below one of those folders is made on a
tmpfs laid over its nearest existing parent, which shows that parent's entries again by bind mounts.

SPEC (JSON): {"root": folder for the new root, "hostname": ..., "workdir": ..., "argv": [...],
"mounts": [{"source", "target", "read_only", "host"}], "image_root", "user", "preload"}, mounts outermost first;
"host" marks a source that is this machine's own (a hostPath volume), where no mount point may be made either.

With "image_root" (an image `make image` unpacked), the root shows that folder's entries instead, read-only (as
`readOnlyRootFilesystem`: the cached image is never written), with this machine's /proc, /dev and /sys; the
command then runs as "user" ([uid, gid]) with "preload" (the bind shim, inside the container) in LD_PRELOAD.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import stat
import sys
from typing import Any

MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 1, 32, 4096, 16384
STATUS = 128  # the exit status when the container cannot be entered (as a runtime's StartError)
_libc = ctypes.CDLL(None, use_errno=True)


class Tree:
    """The mounts made so far, by target: "private" (a tmpfs of ours), "state" (the kubelet's folders) or "host"."""

    def __init__(self) -> None:
        self.kinds: dict[str, str] = {"/": "private"}

    def kind(self, path: str) -> str:
        """The kind of the innermost mount holding ``path`` (a real path)."""
        best = "/"
        for target in self.kinds:
            if (path == target or path.startswith(target.rstrip("/") + "/")) and len(target) > len(best):
                best = target
        return self.kinds[best]


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda text: text.encode() if text is not None else None  # noqa: E731
    if _libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {source} on {target}: {os.strerror(error)}")


def copy_entries(folder_fd: int, into: str, tree: Tree, kind: str, read_only: bool = False) -> None:
    """Shows every entry of the folder behind ``folder_fd`` again inside ``into`` (a fresh tmpfs)."""
    for name in os.listdir(f"/proc/self/fd/{folder_fd}"):
        source, target = f"/proc/self/fd/{folder_fd}/{name}", os.path.join(into, name)
        mode = os.lstat(source).st_mode
        if stat.S_ISLNK(mode):
            os.symlink(os.readlink(source), target)
            continue
        if stat.S_ISDIR(mode):
            os.mkdir(target)
            mount(source, target, None, MS_BIND | MS_REC)
        else:
            open(target, "w").close()
            mount(source, target, None, MS_BIND)
        if read_only:
            mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
        tree.kinds[target] = kind


def shadow(folder: str, tree: Tree) -> None:
    """Lays a tmpfs over ``folder`` that shows its entries again: new entries then land on the tmpfs."""
    kind = tree.kind(folder)
    descriptor = os.open(folder, os.O_PATH | os.O_DIRECTORY)
    try:
        mount("tmpfs", folder, "tmpfs", 0, f"mode={stat.S_IMODE(os.stat(folder).st_mode):o}")
        tree.kinds[folder] = "private"
        copy_entries(descriptor, folder, tree, kind)
    finally:
        os.close(descriptor)


def ensure(path: str, is_file: bool, tree: Tree) -> None:
    """Makes ``path`` exist, on a tmpfs or in the kubelet's folders, never on this machine's own files."""
    if os.path.lexists(path):
        return
    parent = os.path.dirname(path)
    ensure(parent, False, tree)
    real = os.path.realpath(parent)
    if tree.kind(real) == "host":
        shadow(real, tree)
    target = os.path.join(real, os.path.basename(path))
    if is_file:
        open(target, "w").close()
    else:
        os.mkdir(target, 0o755)


def new_root(root: str, tree: Tree, image_root: str | None = None) -> None:
    """A tmpfs root that shows this machine's top-level entries, or an unpacked image's with this machine's
    kernel file systems; the process moves into it."""
    descriptor = os.open(image_root or "/", os.O_PATH | os.O_DIRECTORY)
    try:
        mount("tmpfs", root, "tmpfs", 0, "mode=755")
        host = Tree()
        copy_entries(descriptor, root, host, "host", read_only=image_root is not None)
        if image_root is not None:
            for kernel in ("/proc", "/dev", "/sys"):
                mount(kernel, root + kernel, None, MS_BIND | MS_REC)
    finally:
        os.close(descriptor)
    os.chroot(root)
    os.chdir("/")
    tree.kinds.update({"/" + os.path.relpath(target, root): kind for target, kind in host.kinds.items()})


def enter(spec: dict[str, Any]) -> None:
    mounts = spec["mounts"]
    # Opened before anything is mounted: a source below another mount's target stays reachable.
    sources = [os.open(m["source"], os.O_PATH) for m in mounts]
    tree = Tree()
    new_root(spec["root"], tree, spec.get("image_root"))
    for descriptor, m in zip(sources, mounts, strict=True):
        source = f"/proc/self/fd/{descriptor}"
        ensure(m["target"], not os.path.isdir(source), tree)
        target = os.path.realpath(m["target"])
        mount(source, target, None, MS_BIND | MS_REC)
        if m["read_only"]:
            mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
        tree.kinds[target] = "host" if m["host"] else "state"
        os.close(descriptor)
    socket.sethostname(spec["hostname"])
    ensure(spec["workdir"], False, tree)
    os.chdir(spec["workdir"])
    if spec.get("user"):  # last: every mount above needs root
        uid, gid = spec["user"]
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    if spec.get("preload"):
        os.environ["LD_PRELOAD"] = f"{spec['preload']} {os.environ.get('LD_PRELOAD', '')}".strip()


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        enter(spec)
    except OSError as error:
        print(f"process kubelet: cannot set up the container: {error}", file=sys.stderr)
        sys.exit(STATUS)
    argv = spec["argv"]
    try:
        os.execvpe(argv[0], argv, os.environ)
    except OSError as error:
        print(f"process kubelet: exec {argv[0]!r}: {error.strerror}", file=sys.stderr)
        sys.exit(STATUS)


if __name__ == "__main__":
    main()
