"""The pods' images of the driver, the launcher and argoexec, without a checkout: stand-in programs made into image
folders, read as the process kubelet reads them, and handed to it by the control plane with the services' names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kubernetes.client import V1Container

from tests.cluster import controlplane, pki
from tests.cluster.binaries import Binaries
from tests.cluster.kubelet import image, podenv, sandbox
from tests.cluster.kubelet.__main__ import parse as kubelet_flags
from tests.cluster.kubelet.config import CLUSTER_DOMAIN, DOCKERFILE
from tests.cluster.kubelet.names import HostsTable, PodName
from tests.kfp import binaries, sources
from tests.kfp.images import ARGOEXEC, DRIVER, LAUNCHER, kubelet_images

pytestmark = pytest.mark.unit

KEY = "0123456789abcdef"  # what binaries.ensure names a build by (bin-<key>)
NAMES = {
    DRIVER: "ghcr.io/kubeflow/kfp-driver:2.16.0",
    LAUNCHER: "ghcr.io/kubeflow/kfp-launcher:2.16.0",
    ARGOEXEC: "quay.io/argoproj/argoexec:v3.7.8",
}


def stand_in_build(root: Path) -> binaries.Built:
    """A cache as binaries.ensure leaves it for KFP 2.16.0 and Argo v3.7.8, each program a script naming itself."""
    module = "github.com/argoproj/argo-workflows/v3"
    release = sources.Release("2.16.0", root / "kfp/2.16.0/src", module, "v3.7.8", root / "argo/v3.7.8/src")
    built = binaries.Built(release, Binaries(root / f"kfp/2.16.0/bin-{KEY}"), Binaries(root / f"argo/v3.7.8/bin-{KEY}"))
    for program in (*binaries.KFP_PROGRAMS, *binaries.ARGO_PROGRAMS):
        path = built.path(program)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\necho {program}\n")
        path.chmod(0o755)
    return built


def test_each_image_runs_its_program_as_the_kubelet_reads_it(tmp_path: Path) -> None:
    built = stand_in_build(tmp_path)
    said: list[str] = []
    folders = kubelet_images(built, log=said.append)
    assert set(folders) == set(NAMES.values())
    assert len(said) == 2, "one line for KFP's images, one for Argo's"
    read = image.images(folders, DOCKERFILE)
    for pod_image, name in NAMES.items():
        found, folder = read[name], folders[name]
        assert found.rootfs == (folder / "rootfs").resolve(), f"{name} is not read as an unpacked image"
        # Beside the programs it holds, in the folder their key names.
        assert folder.parent.parent == built.path(pod_image.program).parent.parent
        assert folder.parent.name.startswith(f"images-{KEY}-")
        shipped = found.rootfs / "bin" / pod_image.program
        assert shipped.read_bytes() == built.path(pod_image.program).read_bytes()
        env = found.environment()
        assert env["PATH"] == image.SYSTEM_PATH
        # A container naming no command runs the image's entrypoint, and the kubelet finds it in the image's root.
        argv = podenv.command_line(V1Container(name="main"), found.config, env)
        assert argv == [pod_image.entrypoint]
        root = [sandbox.Mount(found.rootfs, "/")]
        sandbox.resolve_executable(argv, env, found.config.workdir, root)
        # KFP's compiler runs `driver` and `launcher-v2` by name, Argo's emissary looks itself up on PATH.
        sandbox.resolve_executable([pod_image.program], env, found.config.workdir, root)
        assert found.user is None, "the kubelet's own user: it made the pods' emptyDirs"
        # enter.py mounts this machine's /proc, /dev and /sys on the image's own (empty) folders.
        assert all((found.rootfs / kernel).is_dir() for kernel in ("proc", "dev", "sys"))
        nsswitch = (found.rootfs / "etc" / "nsswitch.conf").read_text()
        assert "hosts: files dns" in nsswitch, "the pod's hosts file names the cluster's services"
    assert read[NAMES[DRIVER]].config.workdir == "/bin", "backend/Dockerfile.driver's WORKDIR"


def test_a_second_call_makes_nothing(tmp_path: Path) -> None:
    built = stand_in_build(tmp_path)
    first = kubelet_images(built, log=lambda line: None)
    made = {name: os.stat(folder).st_ino for name, folder in first.items()}
    said: list[str] = []
    assert kubelet_images(built, log=said.append) == first
    assert said == []
    assert {name: os.stat(folder).st_ino for name, folder in first.items()} == made, "a folder was made again"
    assert not list(tmp_path.glob("*/*/*.partial")), "a staging folder was left"


def test_the_kubelet_is_told_of_the_images_and_the_service_names(tmp_path: Path) -> None:
    """What controlplane.start hands its kubelet, parsed by the kubelet's own command line, and the hosts file it
    writes for a pod from it."""
    folders = kubelet_images(stand_in_build(tmp_path / "cache"), log=lambda line: None)
    hosts = dict.fromkeys(controlplane.service_names("ml-pipeline", "kubeflow"), "127.0.200.7")
    plane = controlplane.ControlPlane(tmp_path / "cluster", controlplane.Ports.free())
    plane.state.mkdir()
    serving = pki.KeyPair(plane.state / "serving.crt", plane.state / "serving.key")
    for path in (serving.cert, serving.key, plane.state / "kubelet-client.kubeconfig"):
        path.touch()
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    command = controlplane.kubelet_command(plane, serving, venv, folders, hosts)
    assert command[1:3] == ["-m", "tests.cluster.kubelet"]
    config = kubelet_flags(command[3:])
    assert config.images == {**dict.fromkeys(controlplane.BAKEOFF_IMAGES, venv), **folders}
    assert config.hosts == hosts
    table = HostsTable(CLUSTER_DOMAIN, config.hosts)
    table.set_pod("uid", PodName("kubeflow", "driver", "127.1.0.2", "driver"))
    lines = {tuple(line.split("\t")) for line in table.render("uid").splitlines()}
    for name in ("ml-pipeline.kubeflow.svc.cluster.local", "ml-pipeline.kubeflow.svc", "ml-pipeline.kubeflow"):
        assert ("127.0.200.7", name) in lines  # the name the driver dials, and what a search path completes
    assert ("127.0.200.7", "ml-pipeline") in lines
