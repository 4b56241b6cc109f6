"""Pod addresses (one loopback address each) and the per-pod hosts files that stand in for cluster DNS."""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# The kubelet's managed header (pkg/kubelet/kubelet_pods.go, managedHostsFileContent).
HOSTS_HEADER = (
    "# Kubernetes-managed hosts file.\n"
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "fe00::0\tip6-mcastprefix\n"
    "fe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n"
)


class AddressPool:
    """Hands each pod its own address of a loopback network, never two pods the same one at once."""

    def __init__(self, network: ipaddress.IPv4Network) -> None:
        if not network.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")):
            raise ValueError(f"pod network {network} is not loopback (127.0.0.0/8): pods would be unreachable")
        self._hosts = list(network.hosts())
        self._next = 0
        self._taken: dict[str, ipaddress.IPv4Address] = {}
        self._lock = threading.Lock()

    def take(self, uid: str, wanted: str | None = None) -> str:
        """The pod's address: ``wanted`` (what its status already says) when free and in range, else the next free
        one."""
        with self._lock:
            if uid in self._taken:
                return str(self._taken[uid])
            used = set(self._taken.values())
            if wanted:
                address = ipaddress.IPv4Address(wanted)
                if address in self._hosts and address not in used:
                    self._taken[uid] = address
                    return wanted
            for _ in range(len(self._hosts)):  # round robin: a freed address is reused last
                address = self._hosts[self._next]
                self._next = (self._next + 1) % len(self._hosts)
                if address not in used:
                    self._taken[uid] = address
                    return str(address)
            raise RuntimeError(f"all {len(self._hosts)} pod addresses are in use")

    def release(self, uid: str) -> None:
        with self._lock:
            self._taken.pop(uid, None)


@dataclass
class PodName:
    """What the hosts files need to know of one pod of this node."""

    namespace: str
    name: str
    address: str
    hostname: str
    subdomain: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    aliases: tuple[tuple[str, tuple[str, ...]], ...] = ()  # spec.hostAliases
    ready: bool = False
    hosts_file: Path | None = None


@dataclass(frozen=True)
class ServiceName:
    namespace: str
    name: str
    selector: Mapping[str, str]
    publish_not_ready: bool = False


class HostsTable:
    """The names of the cluster's Services and pods, and every pod's hosts file, rewritten in place on each change."""

    def __init__(self, cluster_domain: str, extra: Mapping[str, str]) -> None:
        self.cluster_domain = cluster_domain
        self.extra = dict(extra)
        self._pods: dict[str, PodName] = {}
        self._services: dict[tuple[str, str], ServiceName] = {}
        self._lock = threading.RLock()

    def set_pod(self, uid: str, pod: PodName) -> None:
        with self._lock:
            self._pods[uid] = pod
            self._write_all()

    def update_pod(self, uid: str, *, ready: bool | None = None, labels: Mapping[str, str] | None = None) -> None:
        with self._lock:
            pod = self._pods.get(uid)
            if pod is None:
                return
            changed = (ready is not None and ready != pod.ready) or (labels is not None and dict(labels) != pod.labels)
            pod.ready = pod.ready if ready is None else ready
            pod.labels = pod.labels if labels is None else dict(labels)
            if changed:
                self._write_all()

    def remove_pod(self, uid: str) -> None:
        with self._lock:
            if self._pods.pop(uid, None) is not None:
                self._write_all()

    def set_services(self, services: Iterable[ServiceName]) -> None:
        with self._lock:
            fresh = {(s.namespace, s.name): s for s in services}
            if fresh != self._services:
                self._services = fresh
                self._write_all()

    def _service_address(self, service: ServiceName) -> str | None:
        """The address of the first pod (by name) the Service selects, among the ready ones unless it publishes all."""
        chosen = sorted(
            (pod.name, pod.address)
            for pod in self._pods.values()
            if pod.namespace == service.namespace
            and (pod.ready or service.publish_not_ready)
            and all(pod.labels.get(key) == value for key, value in service.selector.items())
        )
        return chosen[0][1] if chosen else None

    def render(self, uid: str) -> str:
        """The hosts file of one pod: the kubelet's own lines, its host aliases, then the cluster's names."""
        with self._lock:
            pod = self._pods[uid]
            lines = [HOSTS_HEADER]
            if pod.subdomain:
                lines.append(
                    f"{pod.address}\t{pod.hostname}.{pod.subdomain}.{pod.namespace}.svc."
                    f"{self.cluster_domain}\t{pod.hostname}\n"
                )
            else:
                lines.append(f"{pod.address}\t{pod.hostname}\n")
            if pod.aliases:
                lines.append("\n# Entries added by HostAliases.\n")
                lines.extend(f"{ip}\t" + "\t".join(names) + "\n" for ip, names in pod.aliases)
            lines.append("\n# Cluster names (the process kubelet's stand-in for cluster DNS).\n")
            lines.extend(f"{address}\t{name}\n" for name, address in sorted(self.extra.items()))
            for _, service in sorted(self._services.items()):
                address = self._service_address(service)
                if address is None or not service.selector:
                    continue
                names = [
                    f"{service.name}.{service.namespace}.svc.{self.cluster_domain}",
                    f"{service.name}.{service.namespace}.svc",
                    f"{service.name}.{service.namespace}",
                ]
                if service.namespace == pod.namespace:
                    names.append(service.name)
                lines.append(f"{address}\t" + "\t".join(names) + "\n")
            for other in sorted(self._pods.values(), key=lambda p: (p.namespace, p.name)):
                if not other.subdomain:
                    continue
                short = f"{other.hostname}.{other.subdomain}"
                # Cluster DNS's name, then what a pod's search path (<ns>.svc.<domain>, svc.<domain>) completes.
                names = [
                    f"{short}.{other.namespace}.svc.{self.cluster_domain}",
                    f"{short}.{other.namespace}.svc",
                    f"{short}.{other.namespace}",
                    *([short] if other.namespace == pod.namespace else []),
                ]
                if other is pod:
                    names = names[1:]  # its cluster DNS name is in the kubelet's line above
                lines.append(f"{other.address}\t" + "\t".join(names) + "\n")
            return "".join(lines)

    def _write_all(self) -> None:
        for uid, pod in self._pods.items():
            if pod.hosts_file is not None:
                write_in_place(pod.hosts_file, self.render(uid))


def write_in_place(path: Path, text: str) -> None:
    """Rewrites the file's own inode (a bind mount shows that inode), never a blank moment: write, then cut the rest."""
    data = text.encode()
    mode = "r+b" if path.exists() else "wb"
    with open(path, mode) as handle:
        handle.write(data)
        handle.truncate(len(data))
