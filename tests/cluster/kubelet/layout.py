"""What one container sees: its mounts (volumes, service-account files, hosts file, private /tmp) and environment."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path, PurePosixPath

from kubernetes.client import V1Container, V1VolumeMount

from tests.cluster.kubelet import sandbox
from tests.cluster.kubelet.config import POD_IP_ENV
from tests.cluster.kubelet.image import Image
from tests.cluster.kubelet.podenv import ConfigError, expand

TERMINATION_LOG = "/dev/termination-log"  # the API server's default terminationMessagePath
IMAGE_SHIM = "/run/bakeoff-kubelet/bindshim.so"  # where an unpacked image's containers see the bind shim


def service_env(host: str, port: int) -> dict[str, str]:
    """The `kubernetes` Service's variables, pointing at the API server's real address (no ClusterIP routes here)."""
    url = f"tcp://{host}:{port}"
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
        "KUBERNETES_PORT": url,
        "KUBERNETES_PORT_443_TCP": url,
        "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
        "KUBERNETES_PORT_443_TCP_PORT": str(port),
        "KUBERNETES_PORT_443_TCP_ADDR": host,
    }


def process_env(
    image: Image, hostname: str, pod_env: Mapping[str, str], pod_ip: str, shim: Path | None
) -> dict[str, str]:
    """The image's variables, then the runtime's HOSTNAME, then the pod's; the bind shim preloaded first (for an
    unpacked image, by enter.py inside the container: this machine's Python that runs it would not find it)."""
    env = {**image.environment(), "HOSTNAME": hostname, **pod_env}
    if shim is not None:
        if image.rootfs is None:
            env["LD_PRELOAD"] = f"{shim} {env.get('LD_PRELOAD', '')}".strip()
        env[POD_IP_ENV] = pod_ip
    return env


def container_mounts(
    container: V1Container,
    volumes: Mapping[str, Path],
    folder: Path,
    hosts_file: Path,
    image: Image,
    env: Mapping[str, str],
    host_volumes: Collection[str] = (),
) -> tuple[list[sandbox.Mount], Path]:
    """The container's bind mounts, outermost first, and the file its termination message lands in.

    ``folder`` is the container's own state folder: its private /tmp, $HOME and termination message.
    """
    private_tmp, home, message = folder / "tmp", folder / "home", folder / "termination-log"
    for path in (private_tmp, home):
        path.mkdir(parents=True, exist_ok=True)
    private_tmp.chmod(0o1777)
    message.touch()
    if image.user is not None:  # the image's user writes its HOME and its termination message
        for path in (home, message):
            os.chown(path, *image.user)
    mounts = [
        sandbox.Mount(private_tmp, "/tmp"),
        sandbox.Mount(hosts_file, "/etc/hosts"),
        sandbox.Mount(message, container.termination_message_path or TERMINATION_LOG),
    ]
    if image.home:
        mounts.append(sandbox.Mount(home, image.home))
    # The image's files are this machine's: where they lie below /tmp, the private /tmp must show them again.
    mounts.extend(
        sandbox.Mount(path, str(path), host=True)
        for path in image.files
        if PurePosixPath("/tmp") in PurePosixPath(path).parents
    )
    for mount in container.volume_mounts or []:
        if mount.name not in volumes:
            raise ConfigError(f"volumeMount {mount.name!r}: the pod has no volume of that name")
        source = volumes[mount.name]
        sub_path = mount.sub_path or (expand(mount.sub_path_expr, env) if mount.sub_path_expr else "")
        if sub_path:
            if os.path.isabs(sub_path) or ".." in Path(sub_path).parts:
                raise ConfigError(f"subPath {sub_path!r} must be a relative path inside the volume")
            source = source / sub_path
            if not source.exists():
                source.mkdir(parents=True)
        mounts.append(sandbox.Mount(source, mount.mount_path, bool(mount.read_only), mount.name in host_volumes))
        _check_image_visible(mount, image)
    return sandbox.ordered(mounts), message


def _check_image_visible(mount: V1VolumeMount, image: Image) -> None:
    """A volume over the folders the image stands for would hide its programs: in a real container the image's
    files are its own, here they are this machine's, so such a pod is refused with the reason."""
    target = PurePosixPath(os.path.normpath(mount.mount_path))
    for path in image.files:
        if target == PurePosixPath(path) or target in PurePosixPath(path).parents:
            raise sandbox.StartError(
                f"volume {mount.name!r} mounted at {mount.mount_path} would hide the image's files at {path} "
                "(the process kubelet runs containers on this machine's own files): mount it elsewhere"
            )
