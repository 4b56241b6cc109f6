"""One pod on this node: its address, volumes and containers, its status reports, and its deletion."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes.client import V1Container, V1Pod

from tests.cluster.kubelet import layout, sandbox
from tests.cluster.kubelet.api import Api, now, rfc3339
from tests.cluster.kubelet.config import (
    BACKOFF_MAX_SECONDS,
    DEFAULT_GRACE_SECONDS,
    SHUTDOWN_GRACE_SECONDS,
    KubeletConfig,
)
from tests.cluster.kubelet.container import ContainerRunner, Launch
from tests.cluster.kubelet.image import Image
from tests.cluster.kubelet.names import AddressPool, HostsTable, PodName
from tests.cluster.kubelet.podenv import PodFacts, command_line, container_env
from tests.cluster.kubelet.status import Conditions, ContainerStatus, Terminated, Waiting, phase
from tests.cluster.kubelet.volumes import PodVolumes, VolumeError

log = logging.getLogger("kubelet.pod")
TICK_SECONDS = 5.0  # how often a running pod's projected tokens are looked at
HOST_IP = "127.0.0.1"


@dataclass(frozen=True)
class Node:
    """What every pod of the node shares."""

    config: KubeletConfig
    api: Api
    images: dict[str, Image]
    tools: sandbox.Tools
    addresses: AddressPool
    hosts: HostsTable
    shim: Path | None


def _hostname(pod: V1Pod) -> str:
    return (pod.spec.hostname or pod.metadata.name)[:63]


class PodWorker:
    """Runs one pod from its binding to its deletion, in a thread of its own."""

    def __init__(self, pod: V1Pod, node: Node) -> None:
        self.pod = pod
        self.node = node
        self.uid: str = pod.metadata.uid
        self.key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        self.folder = node.config.pods_dir / self.uid
        self.log_root = node.config.logs_dir / f"{pod.metadata.namespace}_{pod.metadata.name}_{self.uid}"
        self.deleting = threading.Event()
        self.gone = threading.Event()  # the API object is gone: nothing left to report
        self.done = threading.Event()  # the worker thread has ended
        self.wake = threading.Event()
        self.runners: dict[str, ContainerRunner] = {}
        self.init_statuses = [ContainerStatus(c.name, c.image) for c in pod.spec.init_containers or []]
        self.main_statuses = [ContainerStatus(c.name, c.image) for c in pod.spec.containers]
        self.conditions = Conditions()
        self.pod_ip = ""
        self.started_at = now()
        self.sandbox_ready = False
        self._status_lock = threading.Lock()
        self._sent: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._run, name=f"pod {self.key}", daemon=True)
        self.killed = threading.Event()  # the deletion's SIGTERM/SIGKILL round is over

    def start(self) -> None:
        self._thread.start()

    # Called from the pod watch.
    def update(self, pod: V1Pod) -> None:
        self.pod = pod
        self.node.hosts.update_pod(self.uid, labels=pod.metadata.labels or {})
        if pod.metadata.deletion_timestamp is not None and not self.deleting.is_set():
            grace = pod.metadata.deletion_grace_period_seconds
            self.stop(float(DEFAULT_GRACE_SECONDS if grace is None else grace))

    def removed(self) -> None:
        """The pod was removed from the API (a forced deletion): stop at once."""
        self.gone.set()
        self.stop(0.0)

    def stop(self, grace: float) -> None:
        """SIGTERM every container, SIGKILL what is left after ``grace`` seconds (in a thread: never blocks the
        watch)."""
        if self.deleting.is_set():
            return
        self.deleting.set()
        self.wake.set()
        threading.Thread(target=self._terminate, args=(grace,), name=f"kill {self.key}", daemon=True).start()

    def _terminate(self, grace: float) -> None:
        try:
            runners = list(self.runners.values())
            for runner in runners:
                runner.terminate()
            deadline = time.monotonic() + grace
            for runner in runners:
                runner.finished.wait(max(0.0, deadline - time.monotonic()))
            for runner in runners:
                if not runner.finished.is_set():
                    log.info("%s: container %s outlived its %gs grace period: SIGKILL", self.key, runner.name, grace)
                    runner.kill()
        finally:
            self.killed.set()

    def shutdown(self) -> None:
        """The kubelet is stopping: containers get a short grace, the pod stays in the API."""
        self.gone.set()
        self.stop(SHUTDOWN_GRACE_SECONDS)

    # The worker thread.
    def _run(self) -> None:
        try:
            if self.deleting.is_set():
                pass  # deleted before it started: only the API object is left to remove
            elif self.pod.status.phase in ("Succeeded", "Failed"):
                self.deleting.wait()  # finished before this kubelet started: only its deletion is left
            elif self._set_up():
                self._run_containers()
                self.sandbox_ready = False
                self.sync_status()
                self.deleting.wait()
        except Exception:  # a bug here must not take the kubelet down: the pod is logged and left
            log.exception("%s: the pod worker failed", self.key)
            self.deleting.wait()
        finally:
            self._finish()

    def _set_up(self) -> bool:
        """Address, hosts file, images, volumes; False when the pod was deleted before it could start."""
        pod, node = self.pod, self.node
        # A hostNetwork pod has the node's address and binds as it asks; every other pod its own loopback address.
        self.pod_ip = HOST_IP if pod.spec.host_network else node.addresses.take(self.uid, pod.status.pod_ip)
        self.folder.mkdir(parents=True, exist_ok=True)
        hosts_file = self.folder / "etc-hosts"
        aliases = tuple((alias.ip, tuple(alias.hostnames or [])) for alias in pod.spec.host_aliases or [])
        node.hosts.set_pod(
            self.uid,
            PodName(
                namespace=pod.metadata.namespace,
                name=pod.metadata.name,
                address=self.pod_ip,
                hostname=_hostname(pod),
                subdomain=pod.spec.subdomain or "",
                labels=dict(pod.metadata.labels or {}),
                aliases=aliases,
                hosts_file=hosts_file,
            ),
        )
        initial = "PodInitializing" if self.init_statuses else "ContainerCreating"
        for status in self.main_statuses:
            status.state = Waiting(initial)
        self.sandbox_ready = True
        self.sync_status()
        if not self._images_known():
            self.deleting.wait()
            return False
        self.volumes = PodVolumes(pod, self.folder / "volumes", node.api, self.facts())
        while not self.deleting.is_set():
            try:
                self.volumes.prepare()
                return True
            except VolumeError as error:
                node.api.event(pod, "FailedMount", str(error), warning=True)
                self.deleting.wait(BACKOFF_MAX_SECONDS)
        return False

    def _images_known(self) -> bool:
        """Refuses a pod with an image the node does not stand in for: ErrImagePull, then ImagePullBackOff."""
        unknown = [s for s in self.init_statuses + self.main_statuses if s.image not in self.node.images]
        for status in self.init_statuses + self.main_statuses:
            if status.image in self.node.images:
                status.image_id = self.node.images[status.image].image_id
        if not unknown:
            return True
        known = ", ".join(sorted(self.node.images)) or "none"
        for status in unknown:
            message = (
                f'Failed to pull image "{status.image}": the process kubelet runs only the images it '
                f"was given (--image): {known}"
            )
            self.node.api.event(self.pod, "Failed", message, warning=True, container=status.name)
            status.state = Waiting("ErrImagePull", message)
        self.sync_status()
        for status in unknown:
            self.node.api.event(
                self.pod, "BackOff", f'Back-off pulling image "{status.image}"', warning=True, container=status.name
            )
            status.state = Waiting("ImagePullBackOff", f'Back-off pulling image "{status.image}"')
        self.sync_status()
        return False

    def facts(self) -> PodFacts:
        pod = self.pod
        return PodFacts(
            name=pod.metadata.name,
            namespace=pod.metadata.namespace,
            uid=self.uid,
            node=self.node.config.node,
            service_account=pod.spec.service_account_name or "default",
            pod_ip=self.pod_ip,
            host_ip=HOST_IP,
            labels=dict(pod.metadata.labels or {}),
            annotations=dict(pod.metadata.annotations or {}),
        )

    def _runner(self, container: V1Container, status: ContainerStatus, init: bool) -> ContainerRunner:
        def report(reason: str, message: str, warning: bool) -> None:
            self.node.api.event(self.pod, reason, message, warning=warning, container=container.name)

        runner = ContainerRunner(
            status,
            self.pod.spec.restart_policy or "Always",
            init,
            lambda: self._launch(container),
            self.node.tools,
            _hostname(self.pod),
            self.log_root / container.name,
            self.sync_status,
            report,
        )
        self.runners[container.name] = runner
        if self.deleting.is_set():  # registered first, then checked: a deletion in between still stops it
            runner.stopping.set()
        return runner

    def _launch(self, container: V1Container) -> Launch:
        node = self.node
        image = node.images[container.image]
        env = container_env(
            container, self.facts(), node.api, layout.service_env(node.config.api_host, node.config.api_port)
        )
        folder = self.folder / "containers" / container.name
        mounts, message = layout.container_mounts(
            container, self.volumes.paths, folder, self.folder / "etc-hosts", image, env, self.volumes.host
        )
        shim = None if self.pod.spec.host_network else node.shim
        image_root = None
        if image.rootfs is not None:  # an unpacked image: the shim is mounted in, as the image's files are not ours
            if shim is not None:
                mounts = sandbox.ordered([*mounts, sandbox.Mount(shim, layout.IMAGE_SHIM, read_only=True)])
            image_root = sandbox.ImageRoot(image.rootfs, image.user, layout.IMAGE_SHIM if shim else "")
        return Launch(
            argv=command_line(container, image.config, env),
            env=layout.process_env(image, _hostname(self.pod), env, self.pod_ip, shim),
            workdir=container.working_dir or image.config.workdir,
            mounts=mounts,
            root=folder / "root",
            message_file=message,
            image=image_root,
        )

    def _run_containers(self) -> None:
        spec = self.pod.spec
        for container, status in zip(spec.init_containers or [], self.init_statuses, strict=True):
            runner = self._runner(container, status, init=True)
            runner.run()
            if self.deleting.is_set() or not isinstance(status.state, Terminated) or status.state.exit_code:
                return  # stopped, or failed for good (restartPolicy Never): the main containers never start
        for status in self.main_statuses:
            status.state = Waiting("ContainerCreating")
        threads = [
            threading.Thread(
                target=self._run_main,
                args=(self._runner(container, status, init=False),),
                name=f"{self.key}/{container.name}",
                daemon=True,
            )
            for container, status in zip(spec.containers, self.main_statuses, strict=True)
        ]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            self.wake.wait(TICK_SECONDS)
            self.wake.clear()
            if not self.deleting.is_set():
                self._refresh_tokens()
            for thread in threads:
                thread.join(0)

    def _run_main(self, runner: ContainerRunner) -> None:
        runner.run()
        self.wake.set()  # the pod's loop notices at once that a container is done for good

    def _refresh_tokens(self) -> None:
        try:
            self.volumes.refresh_tokens()
        except Exception as error:  # the old token still works a while; the next tick retries
            log.warning("%s: token refresh failed: %s", self.key, error)

    def status(self) -> dict[str, Any]:
        policy = self.pod.spec.restart_policy or "Always"
        pod_phase = phase(policy, self.init_statuses, self.main_statuses)
        body: dict[str, Any] = {
            "phase": pod_phase,
            "conditions": self.conditions.wire(pod_phase, self.sandbox_ready, self.init_statuses, self.main_statuses),
            "hostIP": HOST_IP,
            "hostIPs": [{"ip": HOST_IP}],
            "startTime": rfc3339(self.started_at),
            "containerStatuses": [s.wire() for s in self.main_statuses],
        }
        if self.pod_ip:
            body["podIP"], body["podIPs"] = self.pod_ip, [{"ip": self.pod_ip}]
        if self.init_statuses:
            body["initContainerStatuses"] = [s.wire() for s in self.init_statuses]
        return body

    def sync_status(self) -> None:
        """Reports the status when it changed; ready pods become Service addresses in the hosts files."""
        with self._status_lock:
            body = self.status()
            ready = all(s.ready for s in self.main_statuses)
            self.node.hosts.update_pod(self.uid, ready=ready)
            if self.gone.is_set() or body == self._sent:
                return
            try:
                if not self.node.api.patch_pod_status(self.pod.metadata.namespace, self.pod.metadata.name, body):
                    self.gone.set()
                self._sent = body
            except Exception as error:  # the next change reports again
                log.warning("%s: status not reported: %s", self.key, error)
        self.wake.set()

    def _finish(self) -> None:
        """After the deletion: containers gone, the API object removed with grace 0, the pod's files and address
        freed."""
        self.killed.wait()
        for runner in self.runners.values():
            runner.finished.wait()
        if not self.gone.is_set():
            try:
                self.node.api.delete_pod(self.pod.metadata.namespace, self.pod.metadata.name, self.uid)
            except Exception as error:
                log.warning("%s: not deleted: %s", self.key, error)
        self.node.hosts.remove_pod(self.uid)
        self.node.addresses.release(self.uid)
        shutil.rmtree(self.folder, ignore_errors=True)
        shutil.rmtree(self.log_root, ignore_errors=True)
        self.done.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)
