"""The process kubelet: registers its Node, watches the pods bound to it and the Services, runs the pods."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import watch
from kubernetes.client import V1Pod
from kubernetes.client.rest import ApiException

from tests.cluster.kubelet import image, sandbox, shim
from tests.cluster.kubelet.api import Api
from tests.cluster.kubelet.config import CLUSTER_DOMAIN, SHUTDOWN_GRACE_SECONDS, WATCH_TIMEOUT_SECONDS, KubeletConfig
from tests.cluster.kubelet.logs import LogFile
from tests.cluster.kubelet.names import AddressPool, HostsTable, ServiceName
from tests.cluster.kubelet.node import NodeAgent
from tests.cluster.kubelet.pod import Node, PodWorker
from tests.cluster.kubelet.server import LogError, LogServer
from tests.cluster.kubelet.status import ContainerStatus

log = logging.getLogger("kubelet")
RELIST_PAUSE_SECONDS = 1.0  # after a failed list or watch


def _api_names(config: KubeletConfig) -> dict[str, str]:
    """The `kubernetes` Service's names, at the API server's own address (no ClusterIP routes here)."""
    address = socket.gethostbyname(config.api_host)
    return {
        f"kubernetes{suffix}": address for suffix in ("", ".default", ".default.svc", f".default.svc.{CLUSTER_DOMAIN}")
    }


class Kubelet:
    def __init__(self, config: KubeletConfig) -> None:
        self.config = config
        self.api = Api(config.kubeconfig, config.node)
        self.stopping = threading.Event()
        self.workers: dict[str, PodWorker] = {}
        self.finished: set[str] = set()  # pods this kubelet is done with: their late events are ignored
        self._services: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self.node = Node(
            config=config,
            api=self.api,
            images=image.images(config.images, config.dockerfile),
            tools=sandbox.Tools.find(),
            addresses=AddressPool(config.pod_cidr),
            hosts=HostsTable(CLUSTER_DOMAIN, {**_api_names(config), **config.hosts}),
            shim=shim.build(config.cache_dir),
        )

    def run(self) -> None:
        """Serves until stop() is called, then stops every container and removes what it made."""
        server = LogServer(
            self.config.port, self.config.serving_cert, self.config.serving_key, self.config.client_ca, self
        )
        server.start()
        agent = NodeAgent(self.api, self.config.port, self.api.server_version())
        agent.register()
        log.info("node %s registered, Ready; log endpoint on 127.0.0.1:%d", self.config.node, self.config.port)
        threading.Thread(target=agent.run, name="node heartbeat", daemon=True).start()
        selector = f"spec.nodeName={self.config.node}"
        threading.Thread(
            target=self._reflect,
            name="pod watch",
            daemon=True,
            args=(
                self.api.core.list_pod_for_all_namespaces,
                {"field_selector": selector},
                self._pods_listed,
                self._pod_event,
            ),
        ).start()
        threading.Thread(
            target=self._reflect,
            name="service watch",
            daemon=True,
            args=(self.api.core.list_service_for_all_namespaces, {}, self._services_listed, self._service_event),
        ).start()
        self.stopping.wait()
        log.info("stopping: every container gets %gs before SIGKILL", SHUTDOWN_GRACE_SECONDS)
        with self._lock:
            workers = list(self.workers.values())
        for worker in workers:
            worker.shutdown()
        for worker in workers:
            worker.join(SHUTDOWN_GRACE_SECONDS + 10)
        agent.stopped.set()
        server.shutdown()
        log.info("stopped")

    def stop(self) -> None:
        self.stopping.set()

    # Watching.
    def _reflect(
        self,
        lister: Callable[..., Any],
        selector: Mapping[str, str],
        listed: Callable[[list[Any]], None],
        event: Callable[[str, Any], None],
    ) -> None:
        """List, then watch from the list's resourceVersion; list again when the watch is too old (410)."""
        while not self.stopping.is_set():
            try:
                listing = lister(**selector)
                listed(listing.items)
                version = listing.metadata.resource_version
                while not self.stopping.is_set():
                    stream = watch.Watch().stream(
                        lister,
                        resource_version=version,
                        timeout_seconds=WATCH_TIMEOUT_SECONDS,
                        allow_watch_bookmarks=True,
                        **selector,
                    )
                    for change in stream:
                        version = change["raw_object"]["metadata"]["resourceVersion"]  # bookmarks stay dicts
                        if change["type"] != "BOOKMARK":
                            event(change["type"], change["object"])
            except ApiException as error:
                if error.status != 410:
                    log.warning("%s failed: %s %s", lister.__name__, error.status, error.reason)
                    time.sleep(RELIST_PAUSE_SECONDS)
            except Exception as error:  # the API server restarting, a dropped connection: list again
                log.warning("%s failed: %s", lister.__name__, error)
                time.sleep(RELIST_PAUSE_SECONDS)

    def _pods_listed(self, pods: list[V1Pod]) -> None:
        present = {pod.metadata.uid for pod in pods}
        with self._lock:
            vanished = [worker for uid, worker in self.workers.items() if uid not in present]
        for worker in vanished:
            worker.removed()
        for pod in pods:
            self._pod_event("ADDED", pod)

    def _pod_event(self, kind: str, pod: V1Pod) -> None:
        uid = pod.metadata.uid
        with self._lock:
            for done in [key for key, worker in self.workers.items() if worker.done.is_set()]:
                self.finished.add(done)
                del self.workers[done]
            if uid in self.finished or self.stopping.is_set():
                return
            worker = self.workers.get(uid)
            if worker is None:
                if kind == "DELETED":
                    return
                worker = self.workers[uid] = PodWorker(pod, self.node)
                log.info("pod %s/%s bound here: starting it", pod.metadata.namespace, pod.metadata.name)
                worker.update(pod)
                worker.start()
                return
        if kind == "DELETED":
            worker.removed()
        else:
            worker.update(pod)

    def _services_listed(self, services: list[Any]) -> None:
        with self._lock:
            self._services = {(s.metadata.namespace, s.metadata.name): s for s in services}
        self._publish_services()

    def _service_event(self, kind: str, service: Any) -> None:
        key = (service.metadata.namespace, service.metadata.name)
        with self._lock:
            if kind == "DELETED":
                self._services.pop(key, None)
            else:
                self._services[key] = service
        self._publish_services()

    def _publish_services(self) -> None:
        with self._lock:
            services = list(self._services.values())
        self.node.hosts.set_services(
            ServiceName(
                s.metadata.namespace,
                s.metadata.name,
                dict(s.spec.selector or {}),
                bool(s.spec.publish_not_ready_addresses),
            )
            for s in services
        )

    # The log endpoint's view of the pods.
    def container(self, namespace: str, pod: str, container: str) -> tuple[ContainerStatus, Mapping[str, LogFile]]:
        with self._lock:
            candidates = [
                w for w in self.workers.values() if w.pod.metadata.namespace == namespace and w.pod.metadata.name == pod
            ]
        if not candidates:
            raise LogError(404, f'pod "{pod}" does not exist')
        worker = min(candidates, key=lambda w: w.deleting.is_set())  # a pod being replaced: the new one
        for status in worker.init_statuses + worker.main_statuses:
            if status.name == container:
                runner = worker.runners.get(container)
                return status, dict(runner.logs) if runner else {}
        raise LogError(404, f'container "{container}" not found in pod "{pod}"')
