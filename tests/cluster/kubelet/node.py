"""The Node: registered with the kubelet's labels, its status Ready, its Lease in kube-node-lease renewed."""

from __future__ import annotations

import logging
import platform
import threading
import uuid
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.cluster.kubelet.api import Api, now, rfc3339
from tests.cluster.kubelet.config import CAPACITY, LEASE_RENEW_SECONDS, LEASE_SECONDS, NODE_STATUS_SECONDS

log = logging.getLogger("kubelet.node")
LEASE_NAMESPACE = "kube-node-lease"
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}  # Go's names, as nodeInfo and the well-known labels use


def _architecture() -> str:
    machine = platform.machine()
    return ARCHITECTURES.get(machine, machine)


def labels(node: str) -> dict[str, str]:
    """The labels a kubelet registers with (manifests select on kubernetes.io/os and /arch)."""
    return {
        "kubernetes.io/hostname": node,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": _architecture(),
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": _architecture(),
    }


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _os_image() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return "Linux"


class NodeAgent:
    """Keeps the Node registered, Ready and its Lease fresh until stopped."""

    def __init__(self, api: Api, port: int, version: str) -> None:
        self.api = api
        self.name = api.node
        self.port = port
        self.version = version
        self.uid = ""
        self.ready_since = now()
        self.stopped = threading.Event()
        self.boot_id = _read("/proc/sys/kernel/random/boot_id") or str(uuid.uuid4())

    def register(self) -> None:
        """Creates the Node, or adopts the one left by an earlier run of this kubelet."""
        body = client.V1Node(metadata=client.V1ObjectMeta(name=self.name, labels=labels(self.name)))
        try:
            created = self.api.core.create_node(body)
        except ApiException as error:
            if error.status != 409:
                raise
            created = self.api.core.patch_node(self.name, {"metadata": {"labels": labels(self.name)}})
        self.uid = created.metadata.uid
        self.report()
        self.renew()

    def status(self, moment: datetime) -> dict[str, Any]:
        def condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": rfc3339(moment),
                "lastTransitionTime": rfc3339(self.ready_since),
            }

        return {
            "conditions": [
                condition(
                    "MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"
                ),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "the process kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": self.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            "capacity": CAPACITY,
            "allocatable": CAPACITY,
            "nodeInfo": {
                "machineID": _read("/etc/machine-id"),
                "systemUUID": _read("/sys/class/dmi/id/product_uuid"),
                "bootID": self.boot_id,
                "kernelVersion": platform.release(),
                "osImage": _os_image(),
                "containerRuntimeVersion": "process://bakeoff-process-kubelet",
                "kubeletVersion": self.version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": _architecture(),
            },
        }

    def report(self) -> None:
        self.api.core.patch_node_status(self.name, {"status": self.status(now())})

    def renew(self) -> None:
        """Creates or renews the Lease that tells the node lifecycle controller this node is alive."""
        # MicroTime wants six fraction digits; datetime.isoformat() drops them when they are all zero.
        renewed = now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = client.V1LeaseSpec(holder_identity=self.name, lease_duration_seconds=LEASE_SECONDS, renew_time=renewed)
        leases = self.api.leases
        try:
            lease = leases.read_namespaced_lease(self.name, LEASE_NAMESPACE)
            lease.spec = spec
            leases.replace_namespaced_lease(self.name, LEASE_NAMESPACE, lease)
        except ApiException as error:
            if error.status != 404:
                raise
            owner = client.V1OwnerReference(api_version="v1", kind="Node", name=self.name, uid=self.uid)
            leases.create_namespaced_lease(
                LEASE_NAMESPACE,
                client.V1Lease(
                    metadata=client.V1ObjectMeta(name=self.name, namespace=LEASE_NAMESPACE, owner_references=[owner]),
                    spec=spec,
                ),
            )

    def run(self) -> None:
        """Renews the Lease every LEASE_RENEW_SECONDS and the status every NODE_STATUS_SECONDS, until stopped."""
        since_report = 0.0
        while not self.stopped.wait(LEASE_RENEW_SECONDS):
            try:
                self.renew()
                since_report += LEASE_RENEW_SECONDS
                if since_report >= NODE_STATUS_SECONDS:
                    self.report()
                    since_report = 0.0
            except Exception as error:  # the API server may be restarting: the next round tries again
                log.warning("node heartbeat failed: %s", error)
