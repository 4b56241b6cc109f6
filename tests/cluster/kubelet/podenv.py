"""A container's environment and command line as the kubelet makes them: envFrom, env, valueFrom, `$(VAR)`."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kubernetes.client import V1Container, V1ResourceFieldSelector
from kubernetes.utils.quantity import parse_quantity

from tests.cluster.kubelet.config import CAPACITY
from tests.cluster.kubelet.image import ImageConfig


class ConfigError(Exception):
    """The container cannot be configured (yet): the kubelet's CreateContainerConfigError, retried."""


class Objects(Protocol):
    """The Secrets and ConfigMaps a pod refers to; None when the object does not exist."""

    def secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None: ...

    def config_map(self, namespace: str, name: str) -> Mapping[str, bytes] | None: ...


@dataclass(frozen=True)
class PodFacts:
    """What the downward API can tell a container about its pod."""

    name: str
    namespace: str
    uid: str
    node: str
    service_account: str
    pod_ip: str
    host_ip: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


def expand(text: str, *contexts: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: `$$` is a literal `$`; an unknown or unclosed reference stays as written."""
    out: list[str] = []
    cursor, checkpoint = 0, 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            following = text[cursor + 1]
            advance = 1
            if following == "$":
                out.append("$")
            elif following == "(":
                close = text.find(")", cursor + 2)
                if close < 0:
                    out.append("$(")
                else:
                    name = text[cursor + 2 : close]
                    out.append(next((ctx[name] for ctx in contexts if name in ctx), f"$({name})"))
                    advance = close - cursor
            else:
                out.append("$" + following)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_value(pod: PodFacts, path: str) -> str:
    """The value of a fieldRef (the paths the API server accepts for env)."""
    simple = {
        "metadata.name": pod.name,
        "metadata.namespace": pod.namespace,
        "metadata.uid": pod.uid,
        "spec.nodeName": pod.node,
        "spec.serviceAccountName": pod.service_account,
        "status.podIP": pod.pod_ip,
        "status.podIPs": pod.pod_ip,
        "status.hostIP": pod.host_ip,
        "status.hostIPs": pod.host_ip,
    }
    if path in simple:
        return simple[path]
    subscript = _SUBSCRIPT.match(path)
    if subscript:
        table = pod.labels if subscript.group(1) == "labels" else pod.annotations
        return table.get(subscript.group(2), "")
    if path in ("metadata.labels", "metadata.annotations"):  # downward API volumes only
        table = pod.labels if path == "metadata.labels" else pod.annotations
        return "\n".join(f'{key}="{value}"' for key, value in sorted(table.items()))
    raise ConfigError(f"unsupported fieldRef {path!r}")


def resource_value(container: V1Container, ref: V1ResourceFieldSelector) -> str:
    """A resourceFieldRef: the container's request or limit (a limit defaults to the node's allocatable)."""
    kind, _, resource = ref.resource.partition(".")
    resources = container.resources
    given = (resources.limits if kind == "limits" else resources.requests) if resources else None
    value = (given or {}).get(resource) or (CAPACITY.get(resource) if kind == "limits" else "0")
    if value is None:
        raise ConfigError(f"unsupported resourceFieldRef {ref.resource!r}")
    divisor = parse_quantity(str(ref.divisor or "1"))
    return str(math.ceil(parse_quantity(str(value)) / divisor))


def fetch(objects: Objects, namespace: str, kind: str, name: str) -> Mapping[str, bytes] | None:
    """A Secret's or a ConfigMap's keys; None when it does not exist."""
    return objects.secret(namespace, name) if kind == "Secret" else objects.config_map(namespace, name)


def _lookup_key(objects: Objects, namespace: str, kind: str, name: str, key: str, optional: bool) -> str | None:
    data = fetch(objects, namespace, kind, name)
    if data is None:
        if optional:
            return None
        raise ConfigError(f'{kind.lower()} "{name}" not found')
    if key not in data:
        if optional:
            return None
        raise ConfigError(f"couldn't find key {key} in {kind} {namespace}/{name}")
    return data[key].decode("utf-8", "replace")


def _from_sources(container: V1Container, pod: PodFacts, objects: Objects) -> dict[str, str]:
    env: dict[str, str] = {}
    for source in container.env_from or []:
        ref = source.secret_ref or source.config_map_ref
        kind = "Secret" if source.secret_ref else "ConfigMap"
        data = fetch(objects, pod.namespace, kind, ref.name)
        if data is None:
            if ref.optional:
                continue
            raise ConfigError(f'{kind.lower()} "{ref.name}" not found')
        for key, value in data.items():
            env[(source.prefix or "") + key] = value.decode("utf-8", "replace")
    return env


def container_env(
    container: V1Container, pod: PodFacts, objects: Objects, service_env: Mapping[str, str]
) -> dict[str, str]:
    """The variables the pod spec gives the container, then the service variables it did not set itself."""
    env = _from_sources(container, pod, objects)
    for var in container.env or []:
        if var.value_from is None:
            env[var.name] = expand(var.value or "", env, service_env)
            continue
        source = var.value_from
        value: str | None
        if source.field_ref is not None:
            value = field_value(pod, source.field_ref.field_path)
        elif source.resource_field_ref is not None:
            value = resource_value(container, source.resource_field_ref)
        elif source.secret_key_ref is not None:
            ref = source.secret_key_ref
            value = _lookup_key(objects, pod.namespace, "Secret", ref.name, ref.key, bool(ref.optional))
        elif source.config_map_key_ref is not None:
            ref = source.config_map_key_ref
            value = _lookup_key(objects, pod.namespace, "ConfigMap", ref.name, ref.key, bool(ref.optional))
        else:
            raise ConfigError(f"env {var.name!r}: unsupported valueFrom")
        if value is not None:
            env[var.name] = value
    return {**service_env, **env}


def command_line(container: V1Container, image: ImageConfig, env: Mapping[str, str]) -> list[str]:
    """The argv: the pod's command (else the image's ENTRYPOINT) and args (else, without a command, the image's CMD)."""
    command: Sequence[str] = container.command or image.entrypoint
    args: Sequence[str] = container.args or ([] if container.command else image.cmd)
    return [expand(word, env) for word in [*command, *args]]
