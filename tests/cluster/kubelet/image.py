"""What an image means here: a virtual environment plus the environment, folder and command images/Dockerfile sets;
or the image itself, as `make image` leaves it unpacked (images/build.sh: rootfs/ and the OCI layout's config)."""

from __future__ import annotations

import ctypes.util
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Docker's PATH for a Debian-based image (python:3.11-slim); the virtual environment goes first.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an image's config a container sees (Docker's `ENV`, `WORKDIR`, `ENTRYPOINT`, `CMD`)."""

    env: Mapping[str, str]
    workdir: str = "/"
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = ""  # UID[:GID], numeric; only an unpacked image's is honoured (the Dockerfile's is ${UID}:0)


@dataclass(frozen=True)
class Image:
    """One image the kubelet runs: its name, the virtual environment it stands for, and its config; or, with
    ``rootfs``, the image's own unpacked root filesystem, entered as the container's root as its USER."""

    name: str
    venv: Path
    config: ImageConfig
    rootfs: Path | None = None

    @property
    def image_id(self) -> str:
        return f"rootfs://{self.rootfs}" if self.rootfs else f"venv://{self.venv}"

    @property
    def user(self) -> tuple[int, int] | None:
        """(uid, gid) the container runs as: an unpacked image's numeric USER; None: the kubelet's own."""
        if self.rootfs is None or not self.config.user:
            return None
        uid, _, gid = self.config.user.partition(":")
        return int(uid), int(gid or 0)

    @property
    def home(self) -> str | None:
        return self.config.env.get("HOME")

    @property
    def files(self) -> tuple[Path, ...]:
        """Where this "image" lies on this machine: the virtual environment, the Python it was made from, and the
        project it sits in (`make install` puts .venv beside pyproject.toml; its editable install reads the sources).
        None for an unpacked image: its files are its own root, as in a real container."""
        if self.rootfs is not None:
            return ()
        paths = [self.venv]
        if (self.venv.parent / "pyproject.toml").is_file():
            paths.append(self.venv.parent)
        config = self.venv / "pyvenv.cfg"
        if config.is_file():
            for line in config.read_text().splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    paths.append(Path(value.strip()).parent)  # home is the interpreter's bin/ folder
        return tuple(paths)

    def environment(self) -> dict[str, str]:
        """The variables every container of this image starts with, before the pod's own."""
        if self.rootfs is not None:  # its own PATH, and its LD_PRELOAD names its own libraries
            return {"PATH": SYSTEM_PATH, **self.config.env}
        env = {"PATH": f"{self.venv}/bin:{SYSTEM_PATH}", **self.config.env}
        preload = [library for library in env.pop("LD_PRELOAD", "").split() if _loadable(library)]
        if preload:
            env["LD_PRELOAD"] = " ".join(preload)
        return env


def _loadable(library: str) -> bool:
    """Whether the dynamic loader finds ``library`` here (the image installs tcmalloc; this machine may not)."""
    if "/" in library:
        return Path(library).is_file()
    stem = re.sub(r"^lib|\.so.*$", "", library)
    return ctypes.util.find_library(stem) is not None


def _instructions(text: str) -> list[tuple[str, str]]:
    """A Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):  # Docker drops comments and blank lines, inside continuations too
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, arguments = (pending + line).strip().partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    return instructions


def _command(arguments: str) -> tuple[str, ...]:
    """The exec form (a JSON list) as is; the shell form as Docker runs it."""
    if arguments.startswith("["):
        return tuple(json.loads(arguments))
    return ("/bin/sh", "-c", arguments)


def read_dockerfile(path: Path) -> ImageConfig:
    """The config the final stage of the Dockerfile at ``path`` gives its containers (``${ARG}`` is not expanded)."""
    env: dict[str, str] = {}
    workdir = "/"
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    for keyword, arguments in _instructions(path.read_text()):
        if keyword == "FROM":
            env, workdir, entrypoint, cmd = {}, "/", (), ()
        elif keyword == "ENV":
            words = shlex.split(arguments)
            if words and "=" not in words[0]:  # the legacy `ENV KEY value` form
                env[words[0]] = arguments.split(None, 1)[1] if len(words) > 1 else ""
            else:
                for word in words:
                    key, _, value = word.partition("=")
                    env[key] = value
        elif keyword == "WORKDIR":
            workdir = arguments if arguments.startswith("/") else f"{workdir.rstrip('/')}/{arguments}"
        elif keyword == "ENTRYPOINT":
            entrypoint = _command(arguments)
        elif keyword == "CMD":
            cmd = _command(arguments)
    return ImageConfig(env=env, workdir=workdir, entrypoint=entrypoint, cmd=cmd)


def is_unpacked(folder: Path) -> bool:
    """Whether ``folder`` is an image as images/build.sh leaves it (rather than a virtual environment)."""
    return (folder / "rootfs").is_dir() and (folder / "oci" / "index.json").is_file()


def read_unpacked(folder: Path) -> ImageConfig:
    """The config of the image images/build.sh unpacked in ``folder``: its OCI layout's image config."""
    blobs = folder / "oci" / "blobs"
    blob = lambda digest: json.loads((blobs / digest.replace(":", "/", 1)).read_text())  # noqa: E731
    index = json.loads((folder / "oci" / "index.json").read_text())
    config = blob(blob(index["manifests"][0]["digest"])["config"]["digest"])["config"]
    return ImageConfig(
        env=dict(item.split("=", 1) for item in config.get("Env") or []),
        workdir=config.get("WorkingDir") or "/",
        entrypoint=tuple(config.get("Entrypoint") or ()),
        cmd=tuple(config.get("Cmd") or ()),
        user=config.get("User") or "",
    )


def images(sources: Mapping[str, Path], dockerfile: Path) -> dict[str, Image]:
    """Every image the kubelet was told of: a virtual environment with the config of the project's one Dockerfile,
    or an unpacked image with its own."""
    config = read_dockerfile(dockerfile)
    return {
        name: Image(name=name, venv=source, config=read_unpacked(source), rootfs=(source / "rootfs").resolve())
        if is_unpacked(source)
        else Image(name=name, venv=source, config=config)
        for name, source in sources.items()
    }
