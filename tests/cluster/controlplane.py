"""The real control plane on loopback: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the
Training Operator and the process kubelet, as local processes built from their Go modules.

`python -m tests.cluster.controlplane up [--state-dir DIR]` starts it and prints the admin kubeconfig's path;
`down` stops everything it started. The pytest fixture in tests/cluster/conftest.py calls `start`/`stop`.
Ports are free loopback ports chosen at start; nothing listens beyond 127.0.0.0/8 except the Training
Operator's webhook and metrics servers, which bind every interface as upstream's flags do (their port only).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from components import defaults
from tests.cluster import binaries, pki

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CONTRACTS = REPO / "tests" / "contracts"
DEFAULT_STATE = REPO / ".bakeoff" / "cluster"
NODE = "bakeoff-node"
TEST_IMAGE = "bakeoff.local/bakeoff:dev"  # what the cluster tests compile their pipelines and jobs for
BAKEOFF_IMAGES = (defaults.IMAGE, TEST_IMAGE)  # the process kubelet runs these in the project's environment
OPERATOR_NAMESPACE = "kubeflow"
SERVICE_CIDR = "10.0.0.0/24"  # allocated, never routed: no kube-proxy runs, pods reach the API server on loopback
START_TIMEOUT = 120.0  # seconds for one component to become ready; they take a few seconds each here
STOP_GRACE = 10.0  # seconds between SIGTERM and SIGKILL
LOG_TAIL = 25  # lines of a failed component's log in its error
# The order to start in; `down` stops in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "training-operator", "kubelet")
# What the operator's webhooks answer to (its cert-controller makes a cert for <service>.<namespace>.svc).
WEBHOOK_SERVICE = "training-operator"
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
OPERATOR_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # pkg/cert/cert.go certDir: fixed, not $TMPDIR


class StartError(RuntimeError):
    """A component did not come up: the message names it and ends with its log's tail."""


@dataclass
class Ports:
    etcd: int
    etcd_peer: int
    api: int
    kubelet: int
    webhook: int
    operator_metrics: int
    operator_health: int

    @classmethod
    def free(cls) -> Ports:
        sockets = []
        for _ in range(len(cls.__dataclass_fields__)):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        ports = [sock.getsockname()[1] for sock in sockets]
        for sock in sockets:
            sock.close()
        return cls(*ports)


@dataclass
class ControlPlane:
    """A running control plane: where its state is, how to reach it, and the processes it started."""

    state: Path
    ports: Ports
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.api}"

    @property
    def pod_cidr(self) -> str:
        """This plane's pod addresses: a loopback /24 named by its API server's port, so two planes never share one."""
        return f"127.{self.ports.api >> 8}.{self.ports.api & 255}.0/24"

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig (system:masters)."""
        return self.state / "admin.kubeconfig"

    @property
    def ca(self) -> Path:
        return self.state / "pki" / "bakeoff-cluster-ca.crt"

    def log(self, component: str) -> Path:
        return self.state / "logs" / f"{component}.log"

    def kubectl(
        self, *args: str, input: str | None = None, kubeconfig: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        command = [str(self.binaries.path("kubectl")), "--kubeconfig", str(kubeconfig or self.kubeconfig), *args]
        result = subprocess.run(command, input=input, capture_output=True, text=True)
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    @property
    def binaries(self) -> binaries.Binaries:
        return binaries.Binaries(Path(json.loads((self.state / "binaries.json").read_text())["folder"]))

    def save(self) -> None:
        record = {"ports": asdict(self.ports), "pids": self.pids}
        (self.state / "control-plane.json").write_text(json.dumps(record, indent=1))

    @classmethod
    def load(cls, state: Path) -> ControlPlane:
        record = json.loads((state / "control-plane.json").read_text())
        return cls(state, Ports(**record["ports"]), record["pids"])


def _tail(path: Path, lines: int = LOG_TAIL) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def _in_private_mounts(command: list[str], binds: Iterable[tuple[Path, str]]) -> list[str]:
    """`command` in a mount namespace of its own, with `binds` (host path, path inside) mounted over."""
    script = "; ".join(f"mount --bind {host} {inside}" for host, inside in binds)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-ec", f'{script}; exec "$@"', "sh", *command]


class _Starter:
    """Starts the components one by one into a ControlPlane, each waited for before the next."""

    def __init__(self, plane: ControlPlane, bins: binaries.Binaries, log: Callable[[str], None]) -> None:
        self.plane, self.bins, self.say = plane, bins, log
        self.pki = plane.state / "pki"
        (plane.state / "logs").mkdir(parents=True, exist_ok=True)

    def spawn(self, component: str, command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(self.plane.log(component), "ab") as log:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        self.plane.pids[component] = process.pid
        self.plane.save()
        return process

    def wait(self, component: str, process: subprocess.Popen[bytes], ready: Callable[[], bool], what: str = "") -> None:
        """Until ``ready()``; ``what`` names the step when it is not the component's start itself."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise StartError(
                    f"{component} exited with code {process.returncode} while {what or 'starting'}; "
                    f"its log ({self.plane.log(component)}) ends:\n{_tail(self.plane.log(component))}"
                )
            try:
                if ready():
                    self.say(f"{component} {what or 'ready'}")
                    return
            except (OSError, RuntimeError, ValueError):
                pass
            time.sleep(0.5)
        raise StartError(
            f"{component} was not {what or 'ready'} after {START_TIMEOUT:.0f} s; "
            f"its log ({self.plane.log(component)}) ends:\n{_tail(self.plane.log(component))}"
        )

    def https_ok(self, url: str, client: pki.KeyPair | None = None) -> bool:
        context = ssl.create_default_context(cafile=str(self.plane.ca))
        if client is not None:
            context.load_cert_chain(str(client.cert), str(client.key))
        try:
            with urllib.request.urlopen(url, context=context, timeout=5) as response:
                return response.status == 200
        except urllib.error.HTTPError:
            return False

    # --- the components -------------------------------------------------------------------------------
    def certificates(self) -> dict[str, pki.KeyPair]:
        ca = pki.Authority(self.pki)
        issued = {
            "apiserver": ca.issue(
                "apiserver", "kube-apiserver", server=True, dns=pki.API_SERVER_NAMES, ips=pki.API_SERVER_IPS
            ),
            "admin": ca.issue("admin", "bakeoff-admin", organization="system:masters", client=True),
            "apiserver-kubelet": ca.issue(
                "apiserver-kubelet", "kube-apiserver-kubelet-client", organization="system:masters", client=True
            ),
            "controller-manager": ca.issue("controller-manager", "system:kube-controller-manager", client=True),
            "scheduler": ca.issue("scheduler", "system:kube-scheduler", client=True),
            "kubelet-client": ca.issue(
                "kubelet-client", f"system:node:{NODE}", organization="system:nodes", client=True
            ),
            "kubelet-serving": ca.issue(
                "kubelet-serving",
                f"system:node:{NODE}",
                organization="system:nodes",
                server=True,
                dns=(NODE, "localhost"),
                ips=("127.0.0.1",),
            ),
        }
        self.sa = pki.service_account_keys(self.pki)
        for name, user in (
            ("admin", "bakeoff-admin"),
            ("controller-manager", "system:kube-controller-manager"),
            ("scheduler", "system:kube-scheduler"),
            ("kubelet-client", f"system:node:{NODE}"),
        ):
            target = self.plane.kubeconfig if name == "admin" else self.plane.state / f"{name}.kubeconfig"
            pki.kubeconfig(target, self.plane.server, self.plane.ca, user=user, client=issued[name])
        return issued

    def etcd(self) -> None:
        p = self.plane.ports
        client, peer = f"http://127.0.0.1:{p.etcd}", f"http://127.0.0.1:{p.etcd_peer}"
        process = self.spawn(
            "etcd",
            [
                str(self.bins.path("etcd")),
                "--name=n0",
                f"--data-dir={self.plane.state / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=n0={peer}",
                "--unsafe-no-fsync=true",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
        )
        self.wait("etcd", process, lambda: urllib.request.urlopen(f"{client}/health", timeout=5).status == 200)

    def apiserver(self, certs: dict[str, pki.KeyPair]) -> None:
        p, s = self.plane.ports, self.pki
        # Webhooks are called by URL at their Service's DNS name; this hosts file is the API server's cluster DNS.
        hosts = self.plane.state / "apiserver-hosts"
        hosts.write_text(f"127.0.0.1 localhost\n127.0.0.1 {WEBHOOK_SERVICE}.{OPERATOR_NAMESPACE}.svc\n")
        command = [
            str(self.bins.path("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{p.etcd}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={p.api}",
            f"--cert-dir={s}",
            f"--tls-cert-file={certs['apiserver'].cert}",
            f"--tls-private-key-file={certs['apiserver'].key}",
            f"--client-ca-file={self.plane.ca}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.sa.cert}",
            f"--service-account-signing-key-file={self.sa.key}",
            f"--kubelet-client-certificate={certs['apiserver-kubelet'].cert}",
            f"--kubelet-client-key={certs['apiserver-kubelet'].key}",
            f"--kubelet-certificate-authority={self.plane.ca}",
            "--kubelet-preferred-address-types=InternalIP",
            # The reconciler would publish 127.0.0.1 as the `kubernetes` Service's endpoint, which validation refuses.
            "--endpoint-reconciler-type=none",
        ]
        process = self.spawn("kube-apiserver", _in_private_mounts(command, [(hosts, "/etc/hosts")]))
        admin = certs["admin"]
        self.wait("kube-apiserver", process, lambda: self.https_ok(f"{self.plane.server}/readyz", admin))

    def controllers(self) -> None:
        s = self.plane.state
        kcm = self.spawn(
            "kube-controller-manager",
            [
                str(self.bins.path("kube-controller-manager")),
                f"--kubeconfig={s / 'controller-manager.kubeconfig'}",
                "--leader-elect=false",
                "--secure-port=0",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.sa.key}",
                f"--root-ca-file={self.plane.ca}",
                f"--cluster-signing-cert-file={self.plane.ca}",
                f"--cluster-signing-key-file={self.pki / 'bakeoff-cluster-ca.key'}",
            ],
        )
        scheduler = self.spawn(
            "kube-scheduler",
            [
                str(self.bins.path("kube-scheduler")),
                f"--kubeconfig={s / 'scheduler.kubeconfig'}",
                "--leader-elect=false",
                "--secure-port=0",
            ],
        )
        # The ServiceAccount controller making `default` shows the controller manager works (envtest's check).
        self.wait(
            "kube-controller-manager",
            kcm,
            lambda: self.plane.kubectl("get", "serviceaccount", "default", check=False).returncode == 0,
        )
        self.wait("kube-scheduler", scheduler, lambda: scheduler.poll() is None)

    def apply(self, documents: list[dict]) -> None:
        self.plane.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(documents)
        )

    def custom_resources(self) -> None:
        crds = [CONTRACTS / "kubeflow.org_tfjobs.yaml", *sorted(CONTRACTS.glob("serving.kserve.io_*.yaml"))]
        self.apply([doc for path in crds for doc in yaml.safe_load_all(path.read_text()) if doc])
        names = [doc["metadata"]["name"] for path in crds for doc in yaml.safe_load_all(path.read_text()) if doc]
        self.plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{name}" for name in names])

    def kubelet(self, certs: dict[str, pki.KeyPair], venv: Path) -> None:
        command = [
            sys.executable,
            "-m",
            "tests.cluster.kubelet",
            f"--kubeconfig={self.plane.state / 'kubelet-client.kubeconfig'}",
            f"--node={NODE}",
            f"--state-dir={self.plane.state / 'kubelet'}",
            f"--port={self.plane.ports.kubelet}",
            f"--serving-cert={certs['kubelet-serving'].cert}",
            f"--serving-key={certs['kubelet-serving'].key}",
            f"--api-server={self.plane.server}",
            f"--pod-cidr={self.plane.pod_cidr}",
            *[f"--image={image}={venv}" for image in BAKEOFF_IMAGES],
        ]
        process = self.spawn("kubelet", command, env={"PYTHONPATH": str(REPO)})
        ready = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
        self.wait(
            "kubelet",
            process,
            lambda: self.plane.kubectl("get", "node", NODE, "-o", ready, check=False).stdout == "True",
        )

    def operator(self) -> None:
        """The Training Operator as upstream deploys it: its own service account, RBAC and webhook cert Secret."""
        upstream = operator_manifests()
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}}
        rbac = [
            yaml.safe_load((upstream / "rbac" / name).read_text())
            for name in ("service-account.yaml", "role.yaml", "cluster-role-binding.yaml")
        ]
        rbac[0]["metadata"]["namespace"] = OPERATOR_NAMESPACE
        for subject in rbac[2]["subjects"]:
            subject["namespace"] = OPERATOR_NAMESPACE
        # cert-controller fills this Secret and injects its CA into the webhook configuration below.
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": "training-operator-webhook-cert", "namespace": OPERATOR_NAMESPACE},
        }
        self.apply([namespace, *rbac, secret, _webhook_configuration(upstream, self.plane.ports.webhook)])
        token = self.plane.kubectl(
            "create", "token", "training-operator", "-n", OPERATOR_NAMESPACE, "--duration=48h"
        ).stdout.strip()
        config = pki.kubeconfig(
            self.plane.state / "training-operator.kubeconfig",
            self.plane.server,
            self.plane.ca,
            user="training-operator",
            token=token,
        )
        # Upstream mounts the Secret at this fixed path; here a folder of the state is mounted there, privately.
        certs = self.plane.state / "training-operator-certs"
        certs.mkdir(exist_ok=True)
        Path(OPERATOR_CERT_DIR).mkdir(parents=True, exist_ok=True)
        p = self.plane.ports
        command = [
            str(self.bins.path("training-operator")),
            f"--kubeconfig={config}",
            "--enable-scheme=tfjob",
            f"--webhook-server-port={p.webhook}",
            f"--metrics-bind-address=127.0.0.1:{p.operator_metrics}",
            f"--health-probe-bind-address=127.0.0.1:{p.operator_health}",
        ]
        process = self.spawn(
            "training-operator",
            _in_private_mounts(command, [(certs, OPERATOR_CERT_DIR)]),
            env={"MY_POD_NAMESPACE": OPERATOR_NAMESPACE},
        )
        # Its cert-controller writes the Secret, then waits for the files, as a kubelet's Secret volume makes them.
        self.wait(
            "training-operator",
            process,
            lambda: self.project_secret(OPERATOR_NAMESPACE, "training-operator-webhook-cert", certs, "tls.crt"),
            what="made its webhook cert",
        )
        self.wait(
            "training-operator",
            process,
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{p.operator_health}/readyz", timeout=5).status == 200,
        )

    def project_secret(self, namespace: str, name: str, folder: Path, required: str) -> bool:
        """Writes the Secret's keys as files into ``folder`` once it holds ``required``."""
        found = self.plane.kubectl("get", "secret", name, "-n", namespace, "-o", "json", check=False)
        data = json.loads(found.stdout).get("data") or {} if found.returncode == 0 else {}
        if required not in data:
            return False
        for key, value in data.items():
            (folder / key).write_bytes(base64.b64decode(value))
        return True


def operator_manifests() -> Path:
    """Upstream's manifests/base of the pinned Training Operator, read from the Go module cache."""
    result = subprocess.run(
        [binaries.go(), "list", "-m", "-f", "{{.Dir}}", "github.com/kubeflow/training-operator"],
        cwd=HERE / "operator",
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(result.stdout.strip()) / "manifests" / "base"


def _webhook_configuration(upstream: Path, port: int) -> dict:
    """Upstream's validating webhooks for TFJob, called by URL: no Service can route to a loopback pod."""
    config = yaml.safe_load((upstream / "webhook" / "manifests.yaml").read_text())
    config["metadata"]["name"] = WEBHOOK_CONFIGURATION
    hooks = [hook for hook in config["webhooks"] if "tfjobs" in hook["rules"][0]["resources"]]
    for hook in hooks:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": f"https://{WEBHOOK_SERVICE}.{OPERATOR_NAMESPACE}.svc:{port}{path}"}
    config["webhooks"] = hooks
    return config


def start(
    state: Path,
    *,
    venv: Path | None = None,
    kubelet: bool = True,
    ports: Ports | None = None,
    log: Callable[[str], None] = print,
) -> ControlPlane:
    """Builds (once) and starts every component; on a failure stops what started and raises StartError."""
    if (state / "control-plane.json").exists():
        stop(state)
    bins = binaries.ensure(log=log)
    state.mkdir(parents=True, exist_ok=True)
    (state / "binaries.json").write_text(json.dumps({"folder": str(bins.folder)}))
    plane = ControlPlane(state, ports or Ports.free())
    starter = _Starter(plane, bins, log)
    try:
        certs = starter.certificates()
        starter.etcd()
        starter.apiserver(certs)
        starter.controllers()
        starter.custom_resources()
        starter.operator()
        if kubelet:
            starter.kubelet(certs, venv or Path(sys.prefix))
    except BaseException:
        stop(state)
        raise
    return plane


def stop(state: Path) -> None:
    """Stops every process a `start` on this state folder recorded, the last started first."""
    try:
        plane = ControlPlane.load(state)
    except FileNotFoundError:
        return
    for component in reversed(COMPONENTS):
        pid = plane.pids.get(component)
        if pid is None:
            continue
        _stop_group(pid)
    (state / "control-plane.json").unlink(missing_ok=True)


def _stop_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        try:  # reap it when it is our child
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.controlplane", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE)
    parser.add_argument("--no-kubelet", action="store_true", help="start no process kubelet (to run one by hand)")
    args = parser.parse_args(argv)
    state = args.state_dir.resolve()
    if args.action == "down":
        stop(state)
        print(f"control plane in {state} stopped")
        return 0
    try:
        plane = start(state, kubelet=not args.no_kubelet, log=lambda line: print(line, file=sys.stderr))
    except (StartError, binaries.BuildError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(plane.kubeconfig)
    print(plane.kubectl("get", "nodes").stdout.rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
