"""The KFP backend and Argo as the lane builds them from the checkouts: the programs a real install runs."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest

from tests.kfp import binaries

pytestmark = pytest.mark.kfp

PT_INTERP = 3  # the program header naming a dynamic loader (ELF)
# What runs inside the pods' root filesystems, copied there by Argo's init containers: it must need no loader.
IN_PODS = ("driver", "launcher-v2", "argoexec")


def interpreter(path: Path) -> bool:
    """Whether an ELF64 program asks for a dynamic loader (a PT_INTERP header)."""
    with path.open("rb") as program:
        header = program.read(64)
        assert header[:5] == b"\x7fELF\x02", f"{path} is no 64-bit ELF program"
        (offset,) = struct.unpack_from("<Q", header, 0x20)
        size, count = struct.unpack_from("<HH", header, 0x36)
        program.seek(offset)
        table = program.read(size * count)
    return any(struct.unpack_from("<I", table, index * size)[0] == PT_INTERP for index in range(count))


def test_every_program_is_built(built: binaries.Built) -> None:
    for program in (*binaries.KFP_PROGRAMS, *binaries.ARGO_PROGRAMS):
        path = built.path(program)
        assert path.is_file() and path.stat().st_mode & 0o111, f"{program} was not built into {path.parent}"


@pytest.mark.parametrize("program", IN_PODS)
def test_what_runs_in_the_pods_is_static(built: binaries.Built, program: str) -> None:
    """The process kubelet runs the driver, the launcher and argoexec inside other images' root filesystems
    (bakeoff's, Debian's), as a cluster does: a program that needs this machine's loader and libc would not start."""
    assert not interpreter(built.path(program)), f"{program} needs a dynamic loader: build it with CGO_ENABLED=0"


def test_argoexec_is_the_release_the_kfp_tag_pins(built: binaries.Built) -> None:
    """Argo's workflow controller and its executor must be the release KFP's go.mod pins: they share the Workflow
    types and the executor's protocol (the `wait` sidecar, the emissary)."""
    done = subprocess.run([built.path("argoexec"), "version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert built.release.argo_version in done.stdout, done.stdout
