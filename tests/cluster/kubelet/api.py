"""The kubelet's calls to the API server, as its node identity: reads that wait out the Node authorizer, tokens,
events."""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.cluster.kubelet.config import API_RETRY_SECONDS

log = logging.getLogger("kubelet.api")
T = TypeVar("T")
RETRY_PAUSE_SECONDS = 0.5


def now() -> datetime:
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    """metav1.Time's form: whole seconds, UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Api:
    """One API client for the whole kubelet (thread-safe: urllib3's pool)."""

    def __init__(self, kubeconfig: Path, node: str) -> None:
        self.node = node
        self.client = config.new_client_from_config(config_file=str(kubeconfig))
        self.core = client.CoreV1Api(self.client)
        self.leases = client.CoordinationV1Api(self.client)

    def server_version(self) -> str:
        return client.VersionApi(self.client).get_code().git_version

    def _read(self, what: str, call: Callable[[], T]) -> T | None:
        """``call``'s answer; None when the object does not exist. A 403 is retried a while: the Node
        authorizer adds a pod's Secrets and ConfigMaps to its graph a moment after the pod is bound."""
        deadline = time.monotonic() + API_RETRY_SECONDS
        while True:
            try:
                return call()
            except ApiException as error:
                if error.status == 404:
                    return None
                if error.status != 403 or time.monotonic() > deadline:
                    raise
                log.info("%s refused (%s), retrying: %s", what, error.status, error.body)
                time.sleep(RETRY_PAUSE_SECONDS)

    def secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        found = self._read(f"secret {namespace}/{name}", lambda: self.core.read_namespaced_secret(name, namespace))
        if found is None:
            return None
        return {key: base64.b64decode(value) for key, value in (found.data or {}).items()}

    def config_map(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        """A ConfigMap's keys (data and binaryData) as bytes, like a Secret's."""
        found = self._read(
            f"configmap {namespace}/{name}", lambda: self.core.read_namespaced_config_map(name, namespace)
        )
        if found is None:
            return None
        data = {key: value.encode() for key, value in (found.data or {}).items()}
        data.update({key: base64.b64decode(value) for key, value in (found.binary_data or {}).items()})
        return data

    def token(
        self, namespace: str, service_account: str, audience: str, seconds: int, pod: str, pod_uid: str
    ) -> tuple[str, datetime]:
        """A service-account token bound to the pod (the NodeRestriction admission plugin requires the binding)."""
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[audience] if audience else [],
                expiration_seconds=seconds,
                bound_object_ref=client.V1BoundObjectReference(api_version="v1", kind="Pod", name=pod, uid=pod_uid),
            )
        )
        answer = self._read(
            f"token for {namespace}/{service_account}",
            lambda: self.core.create_namespaced_service_account_token(service_account, namespace, request),
        )
        if answer is None:
            raise LookupError(f'serviceaccount "{service_account}" not found in namespace {namespace}')
        return answer.status.token, answer.status.expiration_timestamp

    def patch_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        """A strategic-merge patch of pods/status; False when the pod is gone."""
        try:
            self.core.patch_namespaced_pod_status(name, namespace, {"status": status})
            return True
        except ApiException as error:
            if error.status == 404:
                return False
            raise

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Removes a pod whose containers are gone, as the kubelet does: grace 0, only this very pod (its uid)."""
        body = client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid))
        try:
            self.core.delete_namespaced_pod(name, namespace, body=body)
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def event(
        self, pod: client.V1Pod, reason: str, message: str, *, warning: bool = False, container: str = ""
    ) -> None:
        """Records an Event on the pod, as the kubelet's recorder does (component kubelet, this node)."""
        moment = now()
        involved = client.V1ObjectReference(
            api_version="v1",
            kind="Pod",
            namespace=pod.metadata.namespace,
            name=pod.metadata.name,
            uid=pod.metadata.uid,
            resource_version=pod.metadata.resource_version,
            field_path=f"spec.containers{{{container}}}" if container else None,
        )
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(
                name=f"{pod.metadata.name}.{uuid.uuid4().hex[:16]}", namespace=pod.metadata.namespace
            ),
            involved_object=involved,
            reason=reason,
            message=message,
            type="Warning" if warning else "Normal",
            count=1,
            first_timestamp=moment,
            last_timestamp=moment,
            source=client.V1EventSource(component="kubelet", host=self.node),
            reporting_component="kubelet",
            reporting_instance=self.node,
        )
        try:
            self.core.create_namespaced_event(pod.metadata.namespace, event)
        except ApiException as error:  # an event is advice: a refusal is logged, never fatal
            log.info(
                "event %s on %s/%s not recorded: %s %s",
                reason,
                pod.metadata.namespace,
                pod.metadata.name,
                error.status,
                error.reason,
            )
