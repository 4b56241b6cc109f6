"""The real KFP backend on loopback, out of cluster, as KFP's own backend/README.md runs its API server for development.

On the real control plane of tests/cluster, its process kubelet running the pods of a run: MariaDB
(tests/kfp/mariadb.py) and SeaweedFS as KFP ≥ 2.16 sets it up (tests/conftest.py's WeedServer, bucket `mlpipeline`),
ML Metadata (tests/kfp/mlmd.py), then KFP's API server, its ScheduledWorkflow controller, its persistence agent and
Argo's workflow controller, each a process built by tests/kfp/binaries.py. The cluster gets what KFP's manifests
install and these need: the namespace `kubeflow`, Argo's CRDs (`manifests/base/crds/minimal` of the pinned Argo
checkout), KFP's ScheduledWorkflow CRD, the `pipeline-runner` account with the checkout's Role and RoleBinding for
it, the store's Secret `mlpipeline-minio-artifact`, the `workflow-controller-configmap` and `kfp-launcher`.

A run's pods name the driver, launcher and argoexec images of tests/kfp/images.py (the API server's
`V2_DRIVER_IMAGE`/`V2_LAUNCHER_IMAGE`, the workflow controller's `--executor-image`) and dial ML Metadata and the API
server's gRPC by their Service names at fixed ports (8080, 8887): every pod's hosts file maps those names to loopback
addresses of their own (tests/kfp/forward.py), where ML Metadata listens and a relay forwards to the API server.

Where it differs from an install, and why:
- every component signs in as the cluster's admin (their RBAC is KFP's manifests', not what is under test);
- the API server listens on `:PORT` of every interface: with `127.0.0.1:PORT` its HTTP gateway dials
  `"localhost" + flag` and answers 503 (its main.go); the ports are free ones, not 8887/8888;
- the config is the checkout's `config.json` without its `plugins` block (2.17.0 enables an MLflow plugin pointed
  at an endpoint a plain install lacks);
- the persistence agent's service-account token (`/var/run/secrets/kubeflow/tokens/...`, which it exits without)
  is a file bind-mounted in a mount namespace of its own: a single-user API server checks no token;
- the node is cordoned but while a test that takes `executing` runs: the other tests' runs are of bakeoff's whole
  pipeline, which the shared 2-core machine should not train; their pods stay Pending until their runs go;
- `kfp-launcher` names the lane's SeaweedFS as the `minio` provider's endpoint, where an install's default is
  `seaweedfs.kubeflow:9000` (a Service this cluster has no route to).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from bakeoff.components.ports import free_ports
from tests.cluster import controlplane
from tests.cluster.binaries import BuildError
from tests.conftest import WeedServer, free_port
from tests.kfp import binaries, forward, images, mariadb, mlmd, sources

NAMESPACE = "kubeflow"  # KFP's manifests' namespace: the driver and launcher look for services in it
BUCKET = "mlpipeline"
RUNNER = "pipeline-runner"  # the service account KFP's compiler names in every Workflow
STORE_SECRET = "mlpipeline-minio-artifact"
START_TIMEOUT = 180.0  # seconds; the API server migrates a fresh database first (~20 s here)
STOP_GRACE = 10.0
TOKEN_PATH = "secrets/kubeflow/tokens/persistenceagent-sa-token"  # under /run (= /var/run)
COMPONENTS = ("apiserver", "relay", "workflow-controller", "scheduledworkflow", "persistence")  # in start order
MLMD_PORT = 8080  # backend/src/v2/metadata/env.go: the port every driver and launcher dials
API_GRPC_PORT = 8887  # backend/src/v2/config/env.go: the API server's gRPC port they dial
MLMD_SERVICE = "metadata-grpc-service"  # backend/src/apiserver/common/const.go's defaults, the names they dial
API_SERVICE = "ml-pipeline"
PIPELINE_ROOT = f"minio://{BUCKET}/v2/artifacts"  # backend/src/v2/config/env.go's default, as the manifests leave it


class BackendError(RuntimeError):
    """A component did not start: the message names it and ends with its log's tail."""


@dataclass(frozen=True)
class Addresses:
    """The loopback addresses where the pods find ML Metadata and the API server's gRPC at their fixed ports."""

    mlmd: str
    api: str

    @classmethod
    def free(cls) -> Addresses:
        return cls(forward.free_address(MLMD_PORT), forward.free_address(API_GRPC_PORT))

    def hosts(self) -> dict[str, str]:
        """Every pod's hosts-file lines (the kubelet's `--host`): each Service name as a pod may spell it."""
        return {
            **dict.fromkeys(controlplane.service_names(MLMD_SERVICE, NAMESPACE), self.mlmd),
            **dict.fromkeys(controlplane.service_names(API_SERVICE, NAMESPACE), self.api),
        }


@dataclass
class Backend:
    """The running backend: where its API answers, and what it started."""

    state: Path
    built: binaries.Built
    plane: controlplane.ControlPlane
    database: mariadb.MariaDB
    store: WeedServer
    addresses: Addresses
    grpc_port: int
    http_port: int
    metadata: mlmd.Mlmd | None = None
    processes: dict[str, subprocess.Popen[Any]] = field(default_factory=dict)

    @property
    def host(self) -> str:
        """What `bakeoff upload --host` and kfp.Client take."""
        return f"http://127.0.0.1:{self.http_port}"

    def log(self, component: str) -> Path:
        return self.state / "logs" / f"{component}.log"


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def _spawn(backend: Backend, component: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    backend.log(component).parent.mkdir(parents=True, exist_ok=True)
    with backend.log(component).open("ab") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "KUBECONFIG": str(backend.plane.kubeconfig), **env},
            start_new_session=True,
        )
    backend.processes[component] = process
    return process


def _wait(backend: Backend, component: str, ready: Callable[[], bool]) -> None:
    process = backend.processes[component]
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise BackendError(
                f"{component} exited with code {process.returncode} while starting; its log"
                f" ({backend.log(component)}) ends:\n{_tail(backend.log(component))}"
            )
        try:
            if ready():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise BackendError(
                f"{component} was not ready after {START_TIMEOUT:.0f} s; its log ({backend.log(component)})"
                f" ends:\n{_tail(backend.log(component))}"
            )
        time.sleep(0.5)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except urllib.error.URLError:
        return False


def _log_says(backend: Backend, component: str, words: str) -> Callable[[], bool]:
    return lambda: words in backend.log(component).read_text(errors="replace")


def cluster_objects(backend: Backend) -> None:
    """What KFP's and Argo's manifests install that the servers need, applied server-side."""
    plane, release = backend.plane, backend.built.release
    crds = sorted((release.argo / "manifests/base/crds/minimal").glob("argoproj.io_*.yaml"))
    swf = release.kfp / "manifests/kustomize/base/pipeline/cluster-scoped/scheduled-workflow-crd.yaml"
    for path in (*crds, swf):
        plane.kubectl("apply", "--server-side", "-f", str(path))
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/workflows.argoproj.io")
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/scheduledworkflows.kubeflow.org")
    keys = backend.store.keys
    store = f"127.0.0.1:{backend.store.ports['s3']}"
    # KFP's workflow-controller-configmap-patch.yaml, its endpoint this store's.
    repository = {
        "archiveLogs": True,
        "s3": {
            "endpoint": store,
            "bucket": BUCKET,
            "keyFormat": "private-artifacts/{{workflow.namespace}}/{{workflow.name}}/{{pod.name}}",
            "insecure": True,
            "accessKeySecret": {"name": STORE_SECRET, "key": "accesskey"},
            "secretKeySecret": {"name": STORE_SECRET, "key": "secretkey"},
        },
    }
    documents: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": RUNNER, "namespace": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": STORE_SECRET, "namespace": NAMESPACE},
            "stringData": {"accesskey": keys["AWS_ACCESS_KEY_ID"], "secretkey": keys["AWS_SECRET_ACCESS_KEY"]},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "workflow-controller-configmap", "namespace": NAMESPACE},
            # Metrics off: their default port 9090 is the ScheduledWorkflow controller's too.
            "data": {
                "artifactRepository": json.dumps(repository),
                "metricsConfig": json.dumps({"enabled": False}),
                "telemetryConfig": json.dumps({"enabled": False}),
            },
        },
    ]
    # What the runs' pods may do as `pipeline-runner`, as KFP's manifests grant it (kustomize's namespace set).
    rbac = release.kfp / "manifests/kustomize/base/pipeline"
    documents += controlplane.in_namespace(
        [yaml.safe_load((rbac / f"pipeline-runner-{name}.yaml").read_text()) for name in ("role", "rolebinding")],
        NAMESPACE,
    )
    documents.append(launcher_config(backend))
    plane.kubectl("apply", "--server-side", "-f", "-", input="\n---\n".join(json.dumps(d) for d in documents))


def launcher_config(backend: Backend) -> dict[str, Any]:
    """The ConfigMap `kfp-launcher` the root driver reads the runs' artifact store from (backend/src/v2/config/
    env.go's `FromConfigMap`; providers as s3.go's `S3ProviderConfig`): the default pipeline root on this SeaweedFS,
    with the credentials of the Secret an install's default names."""
    minio = {
        "default": {
            "endpoint": f"127.0.0.1:{backend.store.ports['s3']}",
            "region": "minio",
            "disableSSL": True,
            "forcePathStyle": True,
            "credentials": {
                "fromEnv": False,
                "secretRef": {"secretName": STORE_SECRET, "accessKeyKey": "accesskey", "secretKeyKey": "secretkey"},
            },
        }
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kfp-launcher", "namespace": NAMESPACE},
        "data": {"defaultPipelineRoot": PIPELINE_ROOT, "providers": yaml.safe_dump({"minio": minio})},
    }


def apiserver(backend: Backend) -> None:
    kfp = backend.built.release.kfp
    config = json.loads((kfp / "backend/src/apiserver/config/config.json").read_text())
    config.pop("plugins", None)
    folder = backend.state / "apiserver-config"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    keys = backend.store.keys
    env = {
        "POD_NAMESPACE": NAMESPACE,
        "DBCONFIG_MYSQLCONFIG_HOST": "127.0.0.1",
        "DBCONFIG_MYSQLCONFIG_PORT": str(backend.database.port),
        "DBCONFIG_MYSQLCONFIG_USER": mariadb.USER,
        "DBCONFIG_MYSQLCONFIG_PASSWORD": mariadb.PASSWORD,
        "OBJECTSTORECONFIG_HOST": "127.0.0.1",
        "OBJECTSTORECONFIG_PORT": str(backend.store.ports["s3"]),
        "OBJECTSTORECONFIG_SECURE": "false",
        "OBJECTSTORECONFIG_BUCKETNAME": BUCKET,
        "OBJECTSTORECONFIG_ACCESSKEY": keys["AWS_ACCESS_KEY_ID"],
        "OBJECTSTORECONFIG_SECRETACCESSKEY": keys["AWS_SECRET_ACCESS_KEY"],
        # The images a run's pods name (tests/kfp/images.py); logs and their level as the manifests set them.
        "V2_DRIVER_IMAGE": images.DRIVER.name(backend.built.release),
        "V2_LAUNCHER_IMAGE": images.LAUNCHER.name(backend.built.release),
        "PUBLISH_LOGS": "true",
        "PIPELINE_LOG_LEVEL": "1",
        # Read at start-up, never dialled for what the lane does (the UI's visualisations).
        "ML_PIPELINE_VISUALIZATIONSERVER_SERVICE_HOST": "127.0.0.1",
        "ML_PIPELINE_VISUALIZATIONSERVER_SERVICE_PORT": "1",
    }
    command = [
        str(backend.built.path("apiserver")),
        f"--config={folder}",
        f"--rpcPortFlag=:{backend.grpc_port}",
        f"--httpPortFlag=:{backend.http_port}",
        "--logtostderr=true",
    ]
    _spawn(backend, "apiserver", command, env)
    _wait(backend, "apiserver", lambda: _http_ok(f"{backend.host}/apis/v2beta1/healthz"))


def relay(backend: Backend) -> None:
    """The API server's gRPC at the pods' `ml-pipeline` address and port (the server itself listens on `:PORT`)."""
    listen = (backend.addresses.api, API_GRPC_PORT)
    backend.log("relay").parent.mkdir(parents=True, exist_ok=True)
    backend.processes["relay"] = forward.start(listen, ("127.0.0.1", backend.grpc_port), backend.log("relay"))


def workflow_controller(backend: Backend) -> None:
    command = [
        str(backend.built.path("workflow-controller")),
        "--configmap=workflow-controller-configmap",
        f"--executor-image={images.ARGOEXEC.name(backend.built.release)}",  # tests/kfp/images.py's, from the build
        f"--namespace={NAMESPACE}",  # where its ConfigMap is; it watches every namespace, as KFP installs it
    ]
    env = {"LEADER_ELECTION_DISABLE": "true", "ARGO_NAMESPACE": NAMESPACE}
    _spawn(backend, "workflow-controller", command, env)
    _wait(backend, "workflow-controller", _log_says(backend, "workflow-controller", "Starting Workflow Controller"))


def _controller(backend: Backend, program: str) -> list[str]:
    """A KFP controller's command line up to its own flags: the cluster, its namespace, the API server's gRPC."""
    return [
        str(backend.built.path(program)),
        f"--kubeconfig={backend.plane.kubeconfig}",
        f"--namespace={NAMESPACE}",
        "--mlPipelineAPIServerName=127.0.0.1",
        f"--mlPipelineServiceGRPCPort={backend.grpc_port}",
    ]


def scheduledworkflow(backend: Backend) -> None:
    command = [
        *_controller(backend, "scheduledworkflow"),
        f"--metricsPort={free_port()}",
        "--recurringRunResyncIntervalSeconds=2",
    ]
    _spawn(backend, "scheduledworkflow", command, {"CRON_SCHEDULE_TIMEZONE": "UTC"})
    _wait(backend, "scheduledworkflow", _log_says(backend, "scheduledworkflow", "Started workers"))


def persistence(backend: Backend) -> None:
    run = backend.state / "run"
    (run / TOKEN_PATH).parent.mkdir(parents=True, exist_ok=True)
    (run / TOKEN_PATH).write_text("not-checked-by-a-single-user-api-server")
    agent = [*_controller(backend, "persistence"), f"--mlPipelineServiceHttpPort={backend.http_port}"]
    mounted = f'mount --bind {run} /run; exec "$@"'
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-ec", mounted, "sh", *agent]
    _spawn(backend, "persistence", command, {})
    _wait(backend, "persistence", _log_says(backend, "persistence", "Started workers"))


def start(
    state: Path,
    built: binaries.Built,
    plane: controlplane.ControlPlane,
    addresses: Addresses,
    log: Callable[[str], None] = print,
) -> Backend:
    """MariaDB, SeaweedFS, ML Metadata on ``addresses.mlmd``, the cluster's objects, and KFP's and Argo's servers
    with the relay on ``addresses.api``, each waited for; on a failure, what started is stopped and the error
    raised."""
    state.mkdir(parents=True, exist_ok=True)
    database = mariadb.start(state / "mariadb", free_port())
    store = WeedServer(state / "seaweedfs", buckets=(BUCKET,), kfp=True)
    http_port, grpc_port = free_ports(2)
    backend = Backend(state, built, plane, database, store, addresses, grpc_port=grpc_port, http_port=http_port)
    try:
        store.start()
        log(f"MariaDB on {database.port}, SeaweedFS on {store.endpoint}")
        backend.metadata = mlmd.start(state / "mlmd", MLMD_PORT, host=addresses.mlmd, log=log)
        log(f"ML Metadata on {addresses.mlmd}:{MLMD_PORT}")
        cluster_objects(backend)
        starters = (apiserver, relay, workflow_controller, scheduledworkflow, persistence)
        for component, starter in zip(COMPONENTS, starters, strict=True):
            starter(backend)
            log(f"KFP {built.release.tag}'s {component} ready")
    except BaseException:
        stop(backend)
        raise
    return backend


def stop(backend: Backend) -> None:
    """Stops what `start` started, the last first."""
    for component in reversed(COMPONENTS):
        process = backend.processes.pop(component, None)
        if process is None:
            continue
        os.killpg(process.pid, 15)
        try:
            process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
    if backend.metadata is not None:
        backend.metadata.stop()
    backend.store.stop()
    backend.database.stop()


def cordon(plane: controlplane.ControlPlane, on: bool = True) -> None:
    """Keeps new pods off the node (or lets them on again), as `kubectl cordon` does."""
    plane.kubectl("cordon" if on else "uncordon", controlplane.NODE)


def delete_workflows(backend: Backend) -> None:
    """Deletes every Workflow in the namespace and its pods, Pending ones at once (no node holds them): nothing of
    an earlier test's run starts when the node is opened."""
    for kind, selector in (("workflows.argoproj.io", "--all"), ("pods", "--selector=workflows.argoproj.io/workflow")):
        backend.plane.kubectl("delete", kind, selector, "--namespace", NAMESPACE, "--wait", "--timeout=120s")


# ------------------------------------------------------------------------------------------ one per pytest session


@dataclass
class _Shared:
    backend: Backend
    plane_state: Path
    users: int = 0


_SHARED = pytest.StashKey[dict[str, _Shared]]()


def built(release: sources.Release) -> binaries.Built:
    """The release's KFP and Argo programs, built once per tag (`make kfp-binaries` builds them before the lane)."""
    try:
        return binaries.ensure(release, log=lambda line: print(line, file=sys.stderr))
    except BuildError as error:
        pytest.fail(f"the KFP backend did not build: {error}", pytrace=False)


def shared(
    config: pytest.Config, programs: binaries.Built, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    """The release's backend on the real control plane, started for the first session fixture that asks for it
    (tests/kfp's `kfp_backend`, or the `real` KFP API of tests/kfp_fixtures.py) and stopped after the last one that
    holds it is torn down: two fixtures of one session never start two backends side by side."""
    running = config.stash.setdefault(_SHARED, {})
    tag = programs.release.tag
    if tag not in running:
        state = tmp_path_factory.mktemp(f"kfp-{tag}")
        say = functools.partial(print, file=sys.stderr)
        addresses = Addresses.free()
        try:
            pod_images = images.kubelet_images(programs, log=say)
            plane = controlplane.start(state / "cluster", images=pod_images, hosts=addresses.hosts(), log=say)
            cordon(plane)  # the runs of tests that do not take `executing` never start
        except (BuildError, OSError, RuntimeError) as error:
            controlplane.stop(state / "cluster")
            pytest.fail(f"the control plane did not start: {error}", pytrace=False)
        try:
            running[tag] = _Shared(start(state / "kfp", programs, plane, addresses, log=say), state / "cluster")
        except (BackendError, mariadb.DatabaseError, mlmd.MlmdError, RuntimeError, OSError) as error:
            controlplane.stop(state / "cluster")
            pytest.fail(f"KFP {tag} did not start: {error}", pytrace=False)
    held = running[tag]
    held.users += 1
    try:
        yield held.backend
    finally:
        held.users -= 1
        if held.users == 0:
            del running[tag]
            stop(held.backend)
            controlplane.stop(held.plane_state)
