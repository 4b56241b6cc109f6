"""A pod's volumes as folders of this machine: emptyDir, hostPath, secret, configMap, downwardAPI, projected."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from kubernetes.client import V1Container, V1KeyToPath, V1Pod, V1Volume

from tests.cluster.kubelet.config import TOKEN_REFRESH_FRACTION
from tests.cluster.kubelet.podenv import ConfigError, Objects, PodFacts, fetch, field_value, resource_value

DEFAULT_MODE = 0o644  # the API server's default for secret, configMap, downwardAPI and projected volumes


class VolumeError(Exception):
    """A volume cannot be set up (yet): the kubelet's FailedMount, retried."""


class Tokens(Protocol):
    def token(
        self, namespace: str, service_account: str, audience: str, seconds: int, pod: str, pod_uid: str
    ) -> tuple[str, datetime]: ...


class VolumeSource(Objects, Tokens, Protocol):
    """Everything a volume is filled from: the API server's Secrets, ConfigMaps and tokens."""


@dataclass
class TokenFile:
    """A projected service-account token, renewed after TOKEN_REFRESH_FRACTION of its life."""

    path: Path
    audience: str
    seconds: int
    mode: int
    issued: datetime
    expires: datetime

    def due(self, moment: datetime) -> bool:
        return moment >= self.issued + (self.expires - self.issued) * TOKEN_REFRESH_FRACTION


def write_file(path: Path, data: bytes, mode: int) -> None:
    """Writes atomically inside the volume's folder (the folder is what the container has mounted)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    os.chmod(temporary, mode)
    os.replace(temporary, path)


def _project(folder: Path, data: Mapping[str, bytes], items: list[V1KeyToPath] | None, mode: int, what: str) -> None:
    """Writes the object's keys (or only the listed items, at their paths) as files."""
    chosen = [(item.key, item.path, item.mode) for item in items] if items else [(k, k, None) for k in data]
    for key, path, item_mode in chosen:
        if key not in data:
            raise VolumeError(f"couldn't find key {key} in {what}")
        write_file(folder / path, data[key], item_mode if item_mode is not None else mode)


class PodVolumes:
    """The folder of each volume of one pod, filled on ``prepare`` and its tokens kept fresh."""

    def __init__(self, pod: V1Pod, folder: Path, source: VolumeSource, facts: PodFacts) -> None:
        self.pod = pod
        self.folder = folder
        self.source = source
        self.facts = facts
        self.paths: dict[str, Path] = {}
        self.host: set[str] = set()  # the hostPath volumes: this machine's own folders
        self.tokens: list[TokenFile] = []

    def prepare(self) -> None:
        for volume in self.pod.spec.volumes or []:
            try:
                self.paths[volume.name] = self._volume(volume)
            except (ConfigError, LookupError) as error:
                raise VolumeError(f"MountVolume.SetUp failed for volume {volume.name!r}: {error}") from error

    def _volume(self, volume: V1Volume) -> Path:
        folder = self.folder / volume.name
        if volume.host_path is not None:
            self.host.add(volume.name)
            return self._host_path(volume)
        folder.mkdir(parents=True, exist_ok=True)
        if volume.empty_dir is not None:
            folder.chmod(0o777)  # as the kubelet makes it: any user of the pod may write
        elif volume.secret is not None:
            self._object(
                folder,
                "Secret",
                volume.secret.secret_name,
                volume.secret.items,
                volume.secret.default_mode,
                volume.secret.optional,
            )
        elif volume.config_map is not None:
            self._object(
                folder,
                "ConfigMap",
                volume.config_map.name,
                volume.config_map.items,
                volume.config_map.default_mode,
                volume.config_map.optional,
            )
        elif volume.downward_api is not None:
            self._downward(folder, volume.downward_api.items or [], volume.downward_api.default_mode)
        elif volume.projected is not None:
            mode = volume.projected.default_mode if volume.projected.default_mode is not None else DEFAULT_MODE
            for part in volume.projected.sources or []:
                if part.secret is not None:
                    self._object(folder, "Secret", part.secret.name, part.secret.items, mode, part.secret.optional)
                elif part.config_map is not None:
                    self._object(
                        folder, "ConfigMap", part.config_map.name, part.config_map.items, mode, part.config_map.optional
                    )
                elif part.downward_api is not None:
                    self._downward(folder, part.downward_api.items or [], mode)
                elif part.service_account_token is not None:
                    sat = part.service_account_token
                    self._token(
                        TokenFile(
                            folder / sat.path,
                            sat.audience or "",
                            sat.expiration_seconds or 3600,
                            mode,
                            datetime.min.replace(tzinfo=UTC),
                            datetime.min.replace(tzinfo=UTC),
                        )
                    )
                else:
                    raise VolumeError(
                        f"volume {volume.name!r}: a projected source the process kubelet "
                        f"does not support: {part.to_dict()}"
                    )
        else:
            kinds = [key for key, value in volume.to_dict().items() if value is not None and key != "name"]
            raise VolumeError(
                f"volume {volume.name!r}: {', '.join(kinds)} volumes are not supported by the process kubelet"
            )
        return folder

    def _host_path(self, volume: V1Volume) -> Path:
        path = Path(volume.host_path.path)
        kind = volume.host_path.type or ""
        if kind == "DirectoryOrCreate":
            path.mkdir(parents=True, exist_ok=True)
        elif kind == "FileOrCreate" and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        elif kind and not path.exists():
            raise VolumeError(f"hostPath type check failed: {path} is not a {kind}")
        return path

    def _object(
        self,
        folder: Path,
        kind: str,
        name: str,
        items: list[V1KeyToPath] | None,
        mode: int | None,
        optional: bool | None,
    ) -> None:
        namespace = self.facts.namespace
        data = fetch(self.source, namespace, kind, name)
        if data is None:
            if optional:
                return
            raise VolumeError(f'{kind.lower()} "{name}" not found')
        _project(folder, data, items, mode if mode is not None else DEFAULT_MODE, f"{kind} {namespace}/{name}")

    def _downward(self, folder: Path, items: list, mode: int | None) -> None:
        for item in items:
            if item.field_ref is not None:
                value = field_value(self.facts, item.field_ref.field_path)
            else:
                container = next(
                    (c for c in self.pod.spec.containers if c.name == item.resource_field_ref.container_name),
                    V1Container(name=""),
                )
                value = resource_value(container, item.resource_field_ref)
            write_file(folder / item.path, value.encode(), item.mode or mode or DEFAULT_MODE)

    def _token(self, token: TokenFile) -> None:
        facts = self.facts
        text, expires = self.source.token(
            facts.namespace, facts.service_account, token.audience, token.seconds, facts.name, facts.uid
        )
        token.issued, token.expires = datetime.now(UTC), expires
        write_file(token.path, text.encode(), token.mode)
        if token not in self.tokens:
            self.tokens.append(token)

    def refresh_tokens(self) -> None:
        moment = datetime.now(UTC)
        for token in self.tokens:
            if token.due(moment):
                self._token(token)
