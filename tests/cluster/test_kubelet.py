"""The process kubelet under the real control plane: pods bound by the real scheduler, run as processes, reported."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from tests.cluster import controlplane

pytestmark = pytest.mark.cluster
IMAGE = controlplane.TEST_IMAGE
WAIT_SECONDS = 90.0  # a pod's start here is a process's start; this is only a bound on a hang


@pytest.fixture(scope="module")
def core(control_plane: controlplane.ControlPlane) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(control_plane.kubeconfig)))


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"kubelet-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def wait_for(what: str, probe: Callable[[], Any], timeout: float = WAIT_SECONDS) -> Any:
    """``probe()``'s first truthy answer; fails naming ``what`` when none comes in time."""
    deadline = time.monotonic() + timeout
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}; last answer {answer!r}")
        time.sleep(0.2)


def assert_host_untouched() -> None:
    """The kubelet makes a container's mount points inside its namespace, never on this machine: a folder like
    /var/run/secrets/kubernetes.io here would tell every process it runs in a pod (kubeflow-training's SDK does)."""
    for path in ("/var/run/secrets/kubernetes.io", "/home/bakeoff", "/dev/termination-log"):
        assert not os.path.lexists(path), f"{path} was made on this machine"


def python_pod(name: str, script: str, *, restart: str = "Never", **spec: Any) -> dict[str, Any]:
    """A pod of the project's image whose one container runs ``script`` with the environment's Python."""
    container = {"name": "main", "image": IMAGE, "command": ["python", "-c", textwrap.dedent(script)]}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"restartPolicy": restart, "containers": [container], "terminationGracePeriodSeconds": 5, **spec},
    }


def finished(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod:
    return wait_for(
        f"pod {name} to finish",
        lambda: (lambda pod: pod if pod.status.phase in ("Succeeded", "Failed") else None)(
            core.read_namespaced_pod(name, namespace)
        ),
    )


def log_of(core: client.CoreV1Api, namespace: str, name: str, **options: Any) -> str:
    """The container's log as the API server proxies it from the kubelet's endpoint."""
    return core.read_namespaced_pod_log(name, namespace, _preload_content=False, **options).data.decode()


def test_a_pod_gets_its_env_secret_and_configmap(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="creds"), string_data={"user": "alice", "password": "s3cret"}
        ),
    )
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings"), data={"mode": "fast", "size": "3"})
    )
    env = [
        {"name": "USER_NAME", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "user"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "GREETING", "value": "hello $(USER_NAME)"},
    ]
    script = """
        import os
        from pathlib import Path
        for key in ("USER_NAME", "MODE", "POD_NAME", "POD_NAMESPACE", "POD_IP", "GREETING", "CFG_size"):
            print(f"{key}={os.environ.get(key)}")
        print("secret-file=" + Path("/secrets/password").read_text())
        print("configmap-file=" + Path("/config/size").read_text())
    """
    pod = python_pod(
        "env",
        script,
        container={
            "env": env,
            "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
            "volumeMounts": [
                {"name": "secret", "mountPath": "/secrets", "readOnly": True},
                {"name": "config", "mountPath": "/config"},
            ],
        },
        volumes=[
            {"name": "secret", "secret": {"secretName": "creds"}},
            {"name": "config", "configMap": {"name": "settings"}},
        ],
    )
    core.create_namespaced_pod(namespace, pod)
    done = finished(core, namespace, "env")
    assert done.status.phase == "Succeeded", done.status
    address = done.status.pod_ip
    assert address.startswith("127.") and address != "127.0.0.1" and done.status.host_ip == "127.0.0.1"
    lines = log_of(core, namespace, "env").splitlines()
    assert lines == [
        "USER_NAME=alice",
        "MODE=fast",
        "POD_NAME=env",
        f"POD_NAMESPACE={namespace}",
        f"POD_IP={address}",
        "GREETING=hello alice",
        "CFG_size=3",
        "secret-file=s3cret",
        "configmap-file=3",
    ]
    status = done.status.container_statuses[0]
    assert (status.state.terminated.exit_code, status.state.terminated.reason) == (0, "Completed")


def test_the_service_account_token_gets_its_own_rbac_answer(
    core: client.CoreV1Api, namespace: str, control_plane: controlplane.ControlPlane
) -> None:
    """In the pod, the Python client's in-cluster config reaches the API server as the pod's service account."""
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader"))
    )
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "pod-reader", "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "reader", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
    }
    control_plane.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [role, binding]})
    )
    script = """
        from pathlib import Path
        from kubernetes import client, config
        from kubernetes.client.rest import ApiException
        config.load_incluster_config()
        api = client.CoreV1Api()
        namespace = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text()
        print("pods:", [pod.metadata.name for pod in api.list_namespaced_pod(namespace).items])
        for call in (lambda: api.list_namespaced_secret(namespace), lambda: api.list_namespaced_pod("kube-system")):
            try:
                call()
                print("allowed")
            except ApiException as error:
                print("refused:", error.status)
    """
    core.create_namespaced_pod(namespace, python_pod("whoami", script, serviceAccountName="reader"))
    done = finished(core, namespace, "whoami")
    assert log_of(core, namespace, "whoami").splitlines() == ["pods: ['whoami']", "refused: 403", "refused: 403"]
    assert done.status.phase == "Succeeded"
    assert_host_untouched()


def test_on_failure_restarts_the_container_in_place(core: client.CoreV1Api, namespace: str) -> None:
    """Two failing runs, then a success: restartCount 2, lastState the second failure, `previous` its log."""
    script = """
        from pathlib import Path
        runs = Path("/state/runs")
        count = len(runs.read_text()) if runs.exists() else 0
        runs.write_text("x" * (count + 1))
        print(f"run {count}")
        raise SystemExit(0 if count == 2 else 3)
    """
    pod = python_pod(
        "flaky",
        script,
        restart="OnFailure",
        container={"volumeMounts": [{"name": "state", "mountPath": "/state"}]},
        volumes=[{"name": "state", "emptyDir": {}}],
    )
    core.create_namespaced_pod(namespace, pod)
    done = finished(core, namespace, "flaky")
    status = done.status.container_statuses[0]
    assert done.status.phase == "Succeeded"
    assert status.restart_count == 2
    assert status.last_state.terminated.exit_code == 3 and status.last_state.terminated.reason == "Error"
    assert log_of(core, namespace, "flaky") == "run 2\n"
    assert log_of(core, namespace, "flaky", previous=True) == "run 1\n"


SERVER = """
    import socket, sys
    family = socket.AF_INET6 if sys.argv[1] == "6" else socket.AF_INET
    server = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET6:
        server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # dual stack, as gRPC (TensorFlow) binds
    server.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", 2222))
    server.listen()
    print("listening on", server.getsockname()[0], flush=True)
    while True:
        connection, _ = server.accept()
        connection.sendall(socket.gethostname().encode())
        connection.close()
"""

CLIENT = """
    import socket, sys, time
    for name in sys.argv[1:]:
        for attempt in range(300):  # the hosts file names a Service once its pod is ready
            try:
                with socket.create_connection((name, 2222), timeout=5) as connection:
                    print(name, "->", connection.recv(100).decode())
                break
            except OSError:
                time.sleep(0.2)
        else:
            print(name, "unreachable")
"""


def test_two_pods_listen_on_one_port_and_are_reached_by_service_name(core: client.CoreV1Api, namespace: str) -> None:
    """Both servers bind the wildcard address on port 2222 (one of them dual-stack IPv6, as TensorFlow's gRPC);
    a client reaches each through its Service's name in the hosts file, each answer from the right pod."""
    for name, family in (("worker-0", "6"), ("worker-1", "4")):
        pod = python_pod(name, SERVER, restart="Always", container={"args": [family]})
        core.create_namespaced_pod(namespace, pod)
        core.create_namespaced_service(
            namespace,
            client.V1Service(
                metadata=client.V1ObjectMeta(name=name),
                spec=client.V1ServiceSpec(
                    cluster_ip="None", selector={"app": name}, ports=[client.V1ServicePort(port=2222)]
                ),
            ),
        )
    names = [
        f"worker-1.{namespace}.svc",
        "worker-0",
        f"worker-0.{namespace}.svc.cluster.local",
        f"worker-1.{namespace}",
    ]
    core.create_namespaced_pod(namespace, python_pod("client", CLIENT, container={"args": names}))
    finished(core, namespace, "client")
    assert log_of(core, namespace, "client").splitlines() == [
        f"worker-1.{namespace}.svc -> worker-1",
        "worker-0 -> worker-0",
        f"worker-0.{namespace}.svc.cluster.local -> worker-0",
        f"worker-1.{namespace} -> worker-1",
    ]
    for name in ("worker-0", "worker-1"):
        address = core.read_namespaced_pod(name, namespace).status.pod_ip
        assert log_of(core, namespace, name).split()[-1] in (address, f"::ffff:{address}")


def test_kubectl_logs_follow_ends_with_the_container(
    core: client.CoreV1Api, namespace: str, control_plane: controlplane.ControlPlane
) -> None:
    script = """
        import time
        for line in range(5):
            print("line", line, flush=True)
            time.sleep(0.5)
    """
    core.create_namespaced_pod(namespace, python_pod("talker", script))
    wait_for("talker to start", lambda: core.read_namespaced_pod("talker", namespace).status.phase != "Pending")
    kubectl = [str(control_plane.binaries.path("kubectl")), "--kubeconfig", str(control_plane.kubeconfig)]
    follow = subprocess.run(
        [*kubectl, "logs", "-f", "talker", "-n", namespace], capture_output=True, text=True, timeout=WAIT_SECONDS
    )
    assert follow.returncode == 0, follow.stderr
    assert follow.stdout.splitlines() == [f"line {n}" for n in range(5)]
    stamped = log_of(core, namespace, "talker", timestamps=True, tail_lines=2).splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["line 3", "line 4"]


def test_deletion_sigterms_then_sigkills_after_the_grace_period(
    core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    """One container leaves on SIGTERM, one ignores it and is SIGKILLed after the grace; then the pod is gone."""
    tmp_path.chmod(0o777)
    polite = """
        import os, signal, sys, time
        from pathlib import Path
        def leave(signum, frame):
            Path("/out/polite").write_text("SIGTERM")
            sys.exit(0)
        signal.signal(signal.SIGTERM, leave)
        Path("/out/polite.pid").write_text(str(os.getpid()))
        while True:
            time.sleep(1)
    """
    stubborn = """
        import os, signal, time
        from pathlib import Path
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        Path("/out/stubborn.pid").write_text(str(os.getpid()))
        while True:
            time.sleep(1)
    """
    mounts = [{"name": "out", "mountPath": "/out"}]
    pod = python_pod(
        "stoppable",
        polite,
        restart="Always",
        container={"volumeMounts": mounts},
        volumes=[{"name": "out", "hostPath": {"path": str(tmp_path)}}],
    )
    pod["spec"]["containers"].append(
        {
            "name": "stubborn",
            "image": IMAGE,
            "volumeMounts": mounts,
            "command": ["python", "-c", textwrap.dedent(stubborn)],
        }
    )
    core.create_namespaced_pod(namespace, pod)
    pids = wait_for(
        "both containers to run",
        lambda: (
            all((tmp_path / f"{c}.pid").exists() for c in ("polite", "stubborn"))
            and [int((tmp_path / f"{c}.pid").read_text()) for c in ("polite", "stubborn")]
        ),
    )
    assert_host_untouched()  # while its containers run
    core.delete_namespaced_pod("stoppable", namespace, grace_period_seconds=2)

    def gone() -> bool:
        try:
            core.read_namespaced_pod("stoppable", namespace)
            return False
        except client.ApiException as error:
            return error.status == 404

    wait_for("the pod to be deleted", gone)
    assert (tmp_path / "polite").read_text() == "SIGTERM"
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), f"process {pid} outlived its pod"


def test_an_unknown_image_is_refused_and_its_pending_pod_deleted(core: client.CoreV1Api, namespace: str) -> None:
    pod = python_pod("elsewhere", "print('never')", container={"image": "docker.io/library/busybox:1.36"})
    core.create_namespaced_pod(namespace, pod)

    def waiting() -> str | None:
        statuses = core.read_namespaced_pod("elsewhere", namespace).status.container_statuses or []
        return statuses[0].state.waiting.reason if statuses and statuses[0].state.waiting else None

    assert wait_for("the pull to be refused", lambda: waiting() == "ImagePullBackOff")
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=elsewhere").items
    assert any(
        e.reason == "Failed" and 'Failed to pull image "docker.io/library/busybox:1.36"' in e.message for e in events
    )
    assert core.read_namespaced_pod("elsewhere", namespace).status.phase == "Pending"
    core.delete_namespaced_pod("elsewhere", namespace)
    wait_for(
        "the pending pod to be deleted",
        lambda: not [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name == "elsewhere"],
    )


def test_init_containers_run_first_and_share_an_empty_dir(core: client.CoreV1Api, namespace: str) -> None:
    init = {
        "name": "prepare",
        "image": IMAGE,
        "command": ["sh", "-c", "echo prepared > /data/ready; hostname"],
        "volumeMounts": [{"name": "work", "mountPath": "/data"}],
    }
    pod = python_pod(
        "staged",
        "print(open('/data/ready').read().strip())",
        container={"volumeMounts": [{"name": "work", "mountPath": "/data"}]},
        initContainers=[init],
        volumes=[{"name": "work", "emptyDir": {}}],
    )
    core.create_namespaced_pod(namespace, pod)
    done = finished(core, namespace, "staged")
    assert done.status.phase == "Succeeded"
    assert done.status.init_container_statuses[0].state.terminated.reason == "Completed"
    assert log_of(core, namespace, "staged", container="prepare") == "staged\n"  # its host name is the pod's
    assert log_of(core, namespace, "staged", container="main") == "prepared\n"
