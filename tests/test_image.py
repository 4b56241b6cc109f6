"""The runtime image itself, not the venv: `make image` (images/build.sh) builds images/Dockerfile with whatever
engine the machine has, and these tests run its unpacked root filesystem as its own user with its own environment,
and read every layer's file list.

In the cluster lane: a cold build takes minutes (TensorFlow and friends, ~2 GB); a warm one finds its cache.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes.client import V1Container

from bakeoff.components import defaults
from tests.cluster.kubelet import layout, sandbox, shim
from tests.cluster.kubelet.image import Image, is_unpacked, read_unpacked

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("BAKEOFF_IMAGE_CACHE", Path.home() / ".cache" / "bakeoff" / "image"))
BUILD_TIMEOUT = 3600  # seconds; a cold build took ~15 min on a shared 2-core machine (docs/tests.md)
RUN_TIMEOUT = 300  # seconds for one command in the image (importing TensorFlow on a loaded machine)
STEPS = sorted(path.stem for path in (ROOT / "components" / "steps").glob("*.py") if path.stem != "__init__")
# Paths that must be in no layer: the developer's venv, git, local stores, credentials and key files.
FORBIDDEN = re.compile(
    r"(^|/)(\.venv|\.git|\.bakeoff|\.aws|\.ssh|\.docker|\.kube)(/|$)|(^|/)run/secrets/|\.env$|(^|/)id_(rsa|ed25519)$"
    r"|\.deb$"  # apt's downloaded packages: ~100 MB that a base without docker-clean keeps unless cleaned
)


@dataclass(frozen=True)
class Layer:
    digest: str
    size: int  # bytes of the files it adds
    paths: tuple[str, ...]


@dataclass(frozen=True)
class BuiltImage:
    """What images/build.sh leaves in the cache for one build."""

    folder: Path

    @property
    def rootfs(self) -> Path:
        return self.folder / "rootfs"

    def _blob(self, digest: str) -> Path:
        algorithm, _, value = digest.partition(":")
        return self.folder / "oci" / "blobs" / algorithm / value

    def _manifest(self) -> dict:
        index = json.loads((self.folder / "oci" / "index.json").read_text())
        return json.loads(self._blob(index["manifests"][0]["digest"]).read_text())

    def config(self) -> dict:
        return json.loads(self._blob(self._manifest()["config"]["digest"]).read_text())["config"]

    def layers(self) -> Iterator[Layer]:
        for layer in self._manifest()["layers"]:
            with tarfile.open(self._blob(layer["digest"])) as archive:  # any compression
                members = archive.getmembers()
            yield Layer(layer["digest"], sum(m.size for m in members), tuple(m.name for m in members))

    def run(self, *command: str) -> subprocess.CompletedProcess:
        """`command` inside the root filesystem as the image's USER, with only its ENV, in its WORKDIR: a private
        mount namespace lends it /proc and /dev, chroot enters it, and its own setpriv drops to the user."""
        config = self.config()
        uid, _, gid = config["User"].partition(":")
        env = [f"{name}={value}" for name, value in (item.split("=", 1) for item in config["Env"])]
        inner = [
            "chroot", str(self.rootfs),
            "setpriv", f"--reuid={uid}", f"--regid={gid or 0}", "--clear-groups",
            "env", "-i", *env,
            "sh", "-c", 'cd "$0" && exec "$@"', config.get("WorkingDir") or "/", *command,
        ]  # fmt: skip
        script = 'mount --rbind /proc "$0/proc" && mount --rbind /dev "$0/dev" && exec "$@"'
        return subprocess.run(
            ["unshare", "--mount", "--fork", "sh", "-c", script, str(self.rootfs), *inner],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )


@pytest.fixture(scope="module")
def image() -> BuiltImage:
    """The image `make image` builds (built here when the cache lacks it): the same script, the same name."""
    build = subprocess.run(
        ["images/build.sh", defaults.IMAGE], cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT
    )
    assert build.returncode == 0, f"make image failed:\n{build.stdout[-3000:]}\n{build.stderr[-3000:]}"
    return BuiltImage((CACHE / "current").resolve())


def test_the_image_runs_as_a_numeric_non_root_user(image):
    user = image.config()["User"]
    uid = user.partition(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"USER {user}: runAsNonRoot needs a numeric, non-zero UID"
    result = image.run("id", "-u")
    assert result.returncode == 0 and result.stdout.strip() == uid, result.stderr


def test_the_cli_and_the_worker_start_in_the_image(image):
    for command in (["bakeoff", "--help"], ["python", "-m", "bakeoff.components.training.worker", "--help"]):
        result = image.run(*command)
        assert result.returncode == 0, f"{' '.join(command)} in the image: {result.stderr[-2000:]}"
        assert "usage" in result.stdout.lower()


def test_every_step_imports_in_the_image_with_tcmalloc_preloaded(image):
    """Each KFP step's module imports as the user, from HOME; the replicas' allocator is the one the ENV names."""
    imports = "; ".join(f"import bakeoff.components.steps.{step}" for step in STEPS)
    probe = f"{imports}; import os; print(os.getcwd()); print(open('/proc/self/maps').read())"
    result = image.run("python", "-c", probe)
    assert result.returncode == 0, f"a step fails to import in the image: {result.stderr[-2000:]}"
    assert result.stdout.splitlines()[0] == image.config()["WorkingDir"]
    assert "libtcmalloc_minimal.so.4" in result.stdout, "LD_PRELOAD names an allocator the image lacks"


def test_no_layer_holds_a_venv_or_credentials(image):
    layers = list(image.layers())
    lines = [f"{layer.digest[7:19]}  {layer.size / 2**20:9.1f} MiB  {len(layer.paths):6d} files" for layer in layers]
    total = sum(layer.size for layer in layers) / 2**20
    print("\nimage layers (uncompressed):\n" + "\n".join(lines) + f"\ntotal {total:.1f} MiB")
    found = [path for layer in layers for path in layer.paths if FORBIDDEN.search(path)]
    assert not found, f"files that must stay out of the image: {found[:20]}"
    ca = Path(os.environ.get("CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt"))
    copies = [path for layer in layers for path in layer.paths if path.endswith("secrets/ca")]
    assert not copies, f"the build secret landed in a layer ({ca}): {copies}"


KUBELET_PROBE = """
import ctypes, errno, os, sys
print(os.getuid(), os.getgid(), os.getcwd(), sys.executable)
try:
    open("/usr/written-by-a-container", "w")
    print("rootfs writable")
except OSError as error:
    print("rootfs", errno.errorcode[error.errno])
open(os.path.join(os.environ["HOME"], "note"), "w").write("mine")
maps = open("/proc/self/maps").read()
print("bindshim" in maps, "libtcmalloc_minimal" in maps)
"""


def test_the_process_kubelet_runs_a_container_from_the_images_root(image, tmp_path):
    """What the cluster lane's kubelet does for bakeoff's image under BAKEOFF_KUBELET_IMAGE: the container's root is
    the image's (read-only, the cache stays as built), it runs as the image's user with the image's Python and
    allocator, the bind shim preloaded from inside, and HOME is its own writable folder."""
    assert is_unpacked(image.folder)
    rootfs = image.rootfs.resolve()
    built = Image("built", image.folder, read_unpacked(image.folder), rootfs=rootfs)
    assert built.user is not None and built.user[0] != 0
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    mounts, _ = layout.container_mounts(V1Container(name="c"), {}, tmp_path / "c", hosts, built, {})
    library = shim.build(tmp_path / "cache")
    mounts = sandbox.ordered([*mounts, sandbox.Mount(library, layout.IMAGE_SHIM, read_only=True)])
    root = sandbox.ImageRoot(rootfs, built.user, layout.IMAGE_SHIM)
    argv = sandbox.command(
        sandbox.Tools.find(), tmp_path / "root", mounts, "pod-a", built.config.workdir, ["python", "-c", KUBELET_PROBE],
        root,
    )  # fmt: skip
    (tmp_path / "root").mkdir()
    env = layout.process_env(built, "pod-a", {}, "127.0.0.1", library)
    ran = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert ran.returncode == 0, ran.stderr[-2000:]
    uid, gid = built.user
    ids = ran.stdout.splitlines()[0].rsplit(" ", 1)
    assert ids[0] == f"{uid} {gid} {built.config.workdir}"
    python = ids[1]
    assert (rootfs / python.lstrip("/")).is_file() and not python.startswith(sys.prefix), "the image's Python"
    assert ran.stdout.splitlines()[1:] == ["rootfs EROFS", "True True"]
    assert not (rootfs / "usr" / "written-by-a-container").exists()
    note = tmp_path / "c" / "home" / "note"
    assert note.read_text() == "mine" and note.stat().st_uid == uid
