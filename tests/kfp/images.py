"""The images a KFP run's pods name for the driver, the launcher and argoexec, made from the programs
tests/kfp/binaries.py built: folders the process kubelet runs as unpacked images (tests/cluster/kubelet/image.py).

Each holds what upstream's image holds of it: KFP's backend/Dockerfile.driver and Dockerfile.launcher put
`/bin/driver` and `/bin/launcher-v2` in an image whose WORKDIR is /bin and whose ENTRYPOINT is the program; Argo's
Dockerfile puts `/bin/argoexec` beside `/etc/nsswitch.conf`, its ENTRYPOINT the bare name (found on PATH, as its
emissary finds itself to copy into `/var/run/argo`: binary.go's `exec.LookPath`). Every one has `/etc/nsswitch.conf`
(`hosts: files dns`), `/etc/passwd` and `/etc/group`, `/tmp`, the empty `/proc`, `/dev` and `/sys` a runtime mounts
over, and an OCI layout `oci/` holding only what the kubelet reads of it, the image config (no layers: the root
filesystem is there unpacked). No USER: the kubelet runs the container as itself, and the pods' emptyDirs are its
own. The names are upstream's manifests' (`ghcr.io/kubeflow/kfp-driver:<tag>`, `ghcr.io/kubeflow/kfp-launcher:<tag>`,
`quay.io/argoproj/argoexec:<Argo version>`), so a compiled Workflow names them as on an install.

They are kept beside the programs: `~/.cache/bakeoff/kfp/<tag>/images-<key>/{driver,launcher-v2}` and
`~/.cache/bakeoff/argo/<version>/images-<key>/argoexec`, the key the programs' own (`bin-<key>`) and a digest of
this module: other programs or another layout make new images, nothing else does. Each folder is made in a staging
folder renamed into place once whole (binaries.staged); the programs are hard links into the cache, else copies.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.cluster.kubelet.image import SYSTEM_PATH, is_unpacked
from tests.kfp import binaries, sources

# Any change here changes what an image holds: the module's own digest is part of the cache key.
LAYOUT = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8]
ETC = {
    "nsswitch.conf": "hosts: files dns\n",  # Go's resolver reads the pod's hosts file (cluster names) before DNS
    # Root (the kubelet's user) and 65532 (upstream images' USER): a lookup of either finds a name.
    "passwd": "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    "group": "root:x:0:\nnonroot:x:65532:\n",
}
KERNEL_MOUNTS = ("proc", "dev", "sys")  # where enter.py binds the machine's kernel file systems into an image's root
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}  # uname's names → OCI's (Go's GOARCH)
MEDIA_TYPE = "application/vnd.oci.image.{}.v1+json"


@dataclass(frozen=True)
class PodImage:
    """One image a run's pods name: its repository as upstream publishes it, the program it holds, how it starts."""

    repository: str
    program: str  # a program tests/kfp/binaries.py builds, at /bin/<program>; also its folder's name here
    entrypoint: str
    workdir: str = "/"

    def name(self, release: sources.Release) -> str:
        """Its name in the release's manifests: KFP's images tagged with the release, argoexec with Argo's version."""
        tag = release.argo_version if self.program in binaries.ARGO_PROGRAMS else release.tag
        return f"{self.repository}:{tag}"


DRIVER = PodImage("ghcr.io/kubeflow/kfp-driver", "driver", "/bin/driver", "/bin")
LAUNCHER = PodImage("ghcr.io/kubeflow/kfp-launcher", "launcher-v2", "/bin/launcher-v2", "/bin")
ARGOEXEC = PodImage("quay.io/argoproj/argoexec", "argoexec", "argoexec")
POD_IMAGES = (DRIVER, LAUNCHER, ARGOEXEC)


def _blob(oci: Path, kind: str, document: dict[str, Any]) -> dict[str, Any]:
    """Writes ``document`` into the layout's blobs under its digest; the descriptor that points at it."""
    data = json.dumps(document, sort_keys=True).encode()
    digest = hashlib.sha256(data).hexdigest()
    path = oci / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"mediaType": MEDIA_TYPE.format(kind), "digest": f"sha256:{digest}", "size": len(data)}


def unpacked(folder: Path, image: PodImage, name: str, program: Path) -> Path:
    """Writes the image ``name`` into the new folder ``folder``: ``program`` at /bin, the files every image here has,
    and its config as an OCI layout (image.py's `read_unpacked` reads it)."""
    rootfs = folder / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "tmp").mkdir()
    (rootfs / "tmp").chmod(0o1777)  # as in any image; the kubelet mounts the container's private /tmp over it
    for mount_point in KERNEL_MOUNTS:  # empty, as in any image: the kubelet mounts this machine's over them
        (rootfs / mount_point).mkdir()
    (rootfs / "etc").mkdir()
    for file, text in ETC.items():
        (rootfs / "etc" / file).write_text(text)
    target = rootfs / "bin" / image.program
    try:
        os.link(program, target)
    except OSError:  # another file system than the cache's
        shutil.copy2(program, target)
    oci = folder / "oci"
    config = {
        "architecture": ARCHITECTURES.get(platform.machine(), platform.machine()),
        "os": "linux",
        "config": {"Env": [f"PATH={SYSTEM_PATH}"], "WorkingDir": image.workdir, "Entrypoint": [image.entrypoint]},
        "rootfs": {"type": "layers", "diff_ids": []},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_TYPE.format("manifest"),
        "config": _blob(oci, "config", config),
        "layers": [],
    }
    described = {**_blob(oci, "manifest", manifest), "annotations": {"org.opencontainers.image.ref.name": name}}
    index = {"schemaVersion": 2, "mediaType": MEDIA_TYPE.format("index"), "manifests": [described]}
    (oci / "index.json").write_text(json.dumps(index, indent=1))
    (oci / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    return folder


def _ensure(programs: Path, images: list[PodImage], release: sources.Release, log: Callable[[str], None]) -> Path:
    """The folder beside ``programs`` (a `bin-<key>` folder) holding ``images``, made first when one is missing."""
    folder = programs.with_name(f"images-{programs.name.removeprefix('bin-')}-{LAYOUT}")
    if all(is_unpacked(folder / image.program) for image in images):
        return folder
    log(f"making the images {', '.join(image.name(release) for image in images)} in {folder}")
    with binaries.staged(folder) as staging:
        for image in images:
            unpacked(staging / image.program, image, image.name(release), programs / image.program)
    return folder


def kubelet_images(built: binaries.Built, log: Callable[[str], None] = print) -> dict[str, Path]:
    """What the process kubelet is told of the release's pod images (`--image NAME=DIR`): each name and its folder,
    made first where the cache has none for these programs."""
    by_programs: defaultdict[Path, list[PodImage]] = defaultdict(list)
    for image in POD_IMAGES:  # KFP's programs and Argo's are in folders of their own
        by_programs[built.path(image.program).parent].append(image)
    folders: dict[str, Path] = {}
    for programs, images in by_programs.items():
        cache = _ensure(programs, images, built.release, log)
        folders.update({image.name(built.release): cache / image.program for image in images})
    return folders
