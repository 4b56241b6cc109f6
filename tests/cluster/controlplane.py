"""The real control plane on loopback: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the
Training Operator, the JobSet controller, Kubeflow Trainer v2's controller manager and the process kubelet, as
local processes built from their Go modules.

`python -m tests.cluster.controlplane up [--state-dir DIR] [--trainer VERSION]` starts it and prints the admin
kubeconfig's path; `down` stops everything it started. The pytest fixture in tests/cluster/conftest.py calls
`start`/`stop`; `use_trainer` swaps in another pinned Trainer release (binaries.TRAINERS) and its JobSet.
Ports are free loopback ports chosen at start; nothing listens beyond 127.0.0.0/8 except the Training
Operator's webhook and metrics servers, which bind every interface as upstream's flags do (their port only).
JobSet's and Trainer's configuration files bind their webhook servers to loopback and turn their metrics off.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bakeoff.components import defaults
from bakeoff.components.ports import free_ports
from tests.cluster import binaries, pki
from tests.cluster.kubelet.config import CLUSTER_DOMAIN

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CONTRACTS = REPO / "tests" / "contracts"
DEFAULT_STATE = REPO / ".bakeoff" / "cluster"
NODE = "bakeoff-node"
TEST_IMAGE = "bakeoff.local/bakeoff:dev"  # what the cluster tests compile their pipelines and jobs for
BAKEOFF_IMAGES = (defaults.IMAGE, TEST_IMAGE)  # the process kubelet runs these in the project's environment
SERVICE_CIDR = "10.0.0.0/24"  # allocated, never routed: no kube-proxy runs, pods reach the API server on loopback
START_TIMEOUT = 120.0  # seconds for one component to become ready; they take a few seconds each here
STOP_GRACE = 10.0  # seconds between SIGTERM and SIGKILL
LOG_TAIL = 25  # lines of a failed component's log in its error
# The order to start in; `down` stops in reverse.
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "training-operator",
    "jobset-controller-manager",
    "trainer-controller-manager",
    "kubelet",
)
# Where each of the three controllers' cert-controller waits for its Secret's files (their pkg/.../cert certDir):
# fixed, not $TMPDIR, so each runs with its own folder mounted there.
CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"


@dataclass(frozen=True)
class Upstream:
    """A controller serving webhooks, named as its upstream manifests and cert code name it."""

    component: str  # its name in COMPONENTS, its log's and its start-up errors'
    namespace: str  # where it runs: its cert code's default when no pod's namespace file exists
    account: str  # its service account
    secret: str  # the Secret its cert-controller fills
    service: str  # the Service its cert is made for

    @property
    def host(self) -> str:
        """What its cert-controller makes the cert for, and what its webhooks are called at."""
        return f"{self.service}.{self.namespace}.svc"


OPERATOR = Upstream(
    "training-operator", "kubeflow", "training-operator", "training-operator-webhook-cert", "training-operator"
)
# config/default's namePrefix `jobset-` on config/components; pkg/util/cert/cert.go defaultNamespace.
JOBSET = Upstream(
    "jobset-controller-manager",
    "jobset-system",
    "jobset-controller-manager",
    "jobset-webhook-server-cert",
    "jobset-webhook-service",
)
# manifests/base's names; pkg/util/cert/cert.go defaultNamespace (manifests/overlays/manager's namespace too).
TRAINER = Upstream(
    "trainer-controller-manager",
    "kubeflow-system",
    "kubeflow-trainer-controller-manager",
    "kubeflow-trainer-webhook-cert",
    "kubeflow-trainer-controller-manager",
)
OPERATOR_WEBHOOKS = "validator.training-operator.kubeflow.org"
UPSTREAMS = (OPERATOR, JOBSET, TRAINER)
# The webhook configurations JobSet's cert-controller injects its CA into (cert.go's names), and their patches
# (config/components/webhook: objectSelectors on the pod webhooks, so that only JobSet's pods are sent).
JOBSET_WEBHOOKS = {
    "MutatingWebhookConfiguration": "jobset-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "jobset-validating-webhook-configuration",
}
JOBSET_WEBHOOK_PATCHES = {
    "MutatingWebhookConfiguration": "mutating-patch.yaml",
    "ValidatingWebhookConfiguration": "validating-patch.yaml",
}
# JobSet's own RBAC in config/components/rbac: its account, ClusterRole and binding, and from v0.11 the Role on its
# webhook Secret (manager_secrets_role.yaml), which the ClusterRole no longer grants. Not its leader election's
# (one replica here) or its metrics' auth proxy.
JOBSET_RBAC = (
    "service_account.yaml",
    "role.yaml",
    "role_binding.yaml",
    "manager_secrets_role.yaml",
    "manager_secrets_role_binding.yaml",
)
# The webhook configurations Trainer's cert-controller injects its CA into (cmd/trainer-controller-manager/main.go's
# names): v2.1 ships the validating one, v2.3 the mutating one too.
TRAINER_WEBHOOKS = {
    "ValidatingWebhookConfiguration": "validator.trainer.kubeflow.org",
    "MutatingWebhookConfiguration": "defaulter.trainer.kubeflow.org",
}


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
    jobset_webhook: int
    jobset_health: int
    trainer_webhook: int
    trainer_health: int

    @classmethod
    def free(cls) -> Ports:
        return cls(*free_ports(len(cls.__dataclass_fields__)))


@dataclass
class ControlPlane:
    """A running control plane: where its state is, how to reach it, and the processes it started."""

    state: Path
    ports: Ports
    pids: dict[str, int] = field(default_factory=dict)
    trainer: str = ""  # the Kubeflow Trainer release its JobSet and Trainer controllers are (a TrainerPin's)

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
        record = {"ports": asdict(self.ports), "pids": self.pids, "trainer": self.trainer}
        (self.state / "control-plane.json").write_text(json.dumps(record, indent=1))

    @classmethod
    def load(cls, state: Path) -> ControlPlane:
        record = json.loads((state / "control-plane.json").read_text())
        return cls(state, Ports(**record["ports"]), record["pids"], record.get("trainer", ""))


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
        hosts.write_text("".join(f"127.0.0.1 {name}\n" for name in ("localhost", *(up.host for up in UPSTREAMS))))
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
        paths = [CONTRACTS / "kubeflow.org_tfjobs.yaml", *sorted(CONTRACTS.glob("serving.kserve.io_*.yaml"))]
        self.crds([doc for path in paths for doc in _documents(path)])

    def crds(self, documents: list[dict]) -> None:
        """Applies the CRDs and waits until each is served (`kubectl wait` fails on one with no status yet)."""
        self.apply(documents)
        names = [f"crd/{doc['metadata']['name']}" for doc in documents]
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            waited = self.plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names, check=False)
            if waited.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise StartError(f"the CRDs were not established: {waited.stderr.strip()[:500]}")
            time.sleep(0.2)

    def named(self, component: str, step: Callable[[], None]) -> None:
        """Runs one component's start; a call of it that fails (kubectl, go) raises StartError naming the component."""
        try:
            step()
        except StartError:
            raise
        except (RuntimeError, OSError, subprocess.CalledProcessError) as error:
            raise StartError(f"{component} did not start: {error}") from error

    def kubelet(
        self,
        certs: dict[str, pki.KeyPair],
        venv: Path,
        images: Mapping[str, Path] | None,
        hosts: Mapping[str, str] | None,
    ) -> None:
        command = kubelet_command(self.plane, certs["kubelet-serving"], venv, images, hosts)
        process = self.spawn("kubelet", command, env={"PYTHONPATH": str(REPO)})
        ready = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
        self.wait(
            "kubelet",
            process,
            lambda: self.plane.kubectl("get", "node", NODE, "-o", ready, check=False).stdout == "True",
        )

    def webhook_controller(
        self, up: Upstream, documents: list[dict], command: list[str], health: int, env: dict[str, str] | None = None
    ) -> None:
        """``up`` started as upstream deploys it: its own service account, RBAC and webhook cert Secret.

        ``documents``: its RBAC and webhook configurations; ``command``: its program and flags but the kubeconfig.
        """
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": up.namespace}}
        # cert-controller fills this Secret and injects its CA into the webhook configurations.
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": up.secret, "namespace": up.namespace},
        }
        self.apply([namespace, *in_namespace(documents, up.namespace), secret])
        token = self.plane.kubectl("create", "token", up.account, "-n", up.namespace, "--duration=48h").stdout.strip()
        config = pki.kubeconfig(
            self.plane.state / f"{up.component}.kubeconfig",
            self.plane.server,
            self.plane.ca,
            user=up.account,
            token=token,
        )
        # Upstream mounts the Secret at this fixed path; here a folder of the state is mounted there, privately.
        certs = self.plane.state / f"{up.component}-certs"
        certs.mkdir(exist_ok=True)
        Path(CERT_DIR).mkdir(parents=True, exist_ok=True)
        command = _in_private_mounts([*command, f"--kubeconfig={config}"], [(certs, CERT_DIR)])
        process = self.spawn(up.component, command, env=env)
        # Its cert-controller writes the Secret, then waits for the files, as a kubelet's Secret volume makes them.
        self.wait(
            up.component,
            process,
            lambda: self.project_secret(up.namespace, up.secret, certs, "tls.crt"),
            what="made its webhook cert",
        )
        self.wait(
            up.component,
            process,
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=5).status == 200,
        )

    def operator(self) -> None:
        """The Training Operator (TFJob), its RBAC and validating webhooks from upstream's manifests/base."""
        upstream = operator_manifests()
        rbac = [
            yaml.safe_load((upstream / "rbac" / name).read_text())
            for name in ("service-account.yaml", "role.yaml", "cluster-role-binding.yaml")
        ]
        p = self.plane.ports
        command = [
            str(self.bins.path("training-operator")),
            "--enable-scheme=tfjob",
            f"--webhook-server-port={p.webhook}",
            f"--metrics-bind-address=127.0.0.1:{p.operator_metrics}",
            f"--health-probe-bind-address=127.0.0.1:{p.operator_health}",
        ]
        self.webhook_controller(
            OPERATOR,
            [*rbac, _webhook_configuration(upstream, p.webhook)],
            command,
            p.operator_health,
            env={"MY_POD_NAMESPACE": OPERATOR.namespace},
        )

    def jobset(self, pin: binaries.TrainerPin) -> None:
        """The JobSet controller ``pin`` pins, from its config/components: CRD, RBAC, webhooks, its own cert
        management."""
        upstream = module_dir(binaries.JOBSET_MODULE, pin.module) / "config" / "components"
        self.crds(_documents(upstream / "crd" / "bases" / "jobset.x-k8s.io_jobsets.yaml"))
        rbac = _prefixed(
            [
                doc
                for name in JOBSET_RBAC
                if (upstream / "rbac" / name).exists()
                for doc in _documents(upstream / "rbac" / name)
            ],
            "jobset-",
        )
        hooks = []
        for config in _documents(upstream / "webhook" / "manifests.yaml"):
            patch = upstream / "webhook" / "patches" / JOBSET_WEBHOOK_PATCHES[config["kind"]]
            config = _patched(config, yaml.safe_load(patch.read_text()))
            config["metadata"]["name"] = JOBSET_WEBHOOKS[config["kind"]]
            hooks.append(_by_url(config, JOBSET.host, self.plane.ports.jobset_webhook))
        p = self.plane.ports
        settings = yaml.safe_load((upstream / "manager" / "controller_manager_config.yaml").read_text())
        settings |= {
            "leaderElection": {"leaderElect": False},  # one replica: no lease to wait for
            "webhook": {"port": p.jobset_webhook, "host": "127.0.0.1"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{p.jobset_health}"},
            "metrics": {"bindAddress": "0"},
        }  # controller-runtime's "off"
        config_file = self.plane.state / "jobset-config.yaml"
        config_file.write_text(yaml.safe_dump(settings))
        command = [str(self.bins.path(pin.programs[1])), f"--config={config_file}"]
        self.webhook_controller(JOBSET, [*rbac, *hooks], command, p.jobset_health)

    def trainer(self, pin: binaries.TrainerPin) -> None:
        """``pin``'s Kubeflow Trainer v2 controller manager from its manifests/base: CRDs, RBAC, webhooks (with their
        kustomization's patches: v2.1 has a validating configuration, v2.3 a mutating one too), config."""
        upstream = module_dir(binaries.TRAINER_MODULE, pin.module) / "manifests" / "base"
        self.crds(
            [
                doc
                for path in sorted((upstream / "crds").glob("trainer.kubeflow.org_*.yaml"))
                for doc in _documents(path)
            ]
        )
        rbac = [doc for name in _resources(upstream / "rbac") for doc in _documents(upstream / "rbac" / name)]
        patches = yaml.safe_load((upstream / "webhook" / "kustomization.yaml").read_text())["patches"]
        hooks = []
        for config in _documents(upstream / "webhook" / "manifests.yaml"):
            for patch in patches:
                if patch["target"]["kind"] == config["kind"]:
                    config = _patched(config, yaml.safe_load((upstream / "webhook" / patch["path"]).read_text()))
            hooks.append(_by_url(config, TRAINER.host, self.plane.ports.trainer_webhook))
        p = self.plane.ports
        settings = yaml.safe_load((upstream / "manager" / "controller_manager_config.yaml").read_text())
        settings |= {
            "leaderElection": {"leaderElect": False},
            "webhook": {"port": p.trainer_webhook, "host": "127.0.0.1"},
            "health": {**settings["health"], "healthProbeBindAddress": f"127.0.0.1:{p.trainer_health}"},
            "metrics": {"bindAddress": "0"},
        }
        config_file = self.plane.state / "trainer-config.yaml"
        config_file.write_text(yaml.safe_dump(settings))
        command = [str(self.bins.path(pin.programs[0])), f"--config={config_file}"]
        self.webhook_controller(TRAINER, [*rbac, *hooks], command, p.trainer_health)

    def trainers(self, pin: binaries.TrainerPin) -> None:
        """``pin``'s JobSet and Trainer controllers, recorded as the plane's."""
        self.named(JOBSET.component, lambda: self.jobset(pin))
        self.named(TRAINER.component, lambda: self.trainer(pin))
        self.plane.trainer = pin.trainer
        self.plane.save()

    def project_secret(self, namespace: str, name: str, folder: Path, required: str) -> bool:
        """Writes the Secret's keys as files into ``folder`` once it holds ``required``."""
        found = self.plane.kubectl("get", "secret", name, "-n", namespace, "-o", "json", check=False)
        data = json.loads(found.stdout).get("data") or {} if found.returncode == 0 else {}
        if required not in data:
            return False
        for key, value in data.items():
            (folder / key).write_bytes(base64.b64decode(value))
        return True


def kubelet_command(
    plane: ControlPlane,
    serving: pki.KeyPair,
    venv: Path,
    images: Mapping[str, Path] | None = None,
    hosts: Mapping[str, str] | None = None,
) -> list[str]:
    """The process kubelet's command line: bakeoff's images run in ``venv``, then ``images`` (name → a virtual
    environment or an unpacked image) and ``hosts`` (name → address, lines of every pod's hosts file)."""
    every_image = {**dict.fromkeys(BAKEOFF_IMAGES, venv), **(images or {})}
    return [
        sys.executable,
        "-m",
        "tests.cluster.kubelet",
        f"--kubeconfig={plane.state / 'kubelet-client.kubeconfig'}",
        f"--node={NODE}",
        f"--state-dir={plane.state / 'kubelet'}",
        f"--port={plane.ports.kubelet}",
        f"--serving-cert={serving.cert}",
        f"--serving-key={serving.key}",
        f"--api-server={plane.server}",
        f"--pod-cidr={plane.pod_cidr}",
        *[f"--image={name}={folder}" for name, folder in every_image.items()],
        *[f"--host={name}={address}" for name, address in (hosts or {}).items()],
    ]


def service_names(name: str, namespace: str) -> tuple[str, ...]:
    """Every name a pod may dial the Service ``name`` of ``namespace`` by, each a line of `start`'s ``hosts``: a hosts
    file matches names whole, where cluster DNS completes the short ones through the pod's search path."""
    return (name, f"{name}.{namespace}", f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.{CLUSTER_DOMAIN}")


def module_dir(path: str, module: Path) -> Path:
    """Where the Go module cache holds the version of ``path`` the tool module ``module`` pins (its go.mod's
    require)."""
    result = subprocess.run(
        [binaries.go(), "list", "-m", "-f", "{{.Dir}}", path], cwd=module, capture_output=True, text=True, check=True
    )
    return Path(result.stdout.strip())


def operator_manifests() -> Path:
    """Upstream's manifests/base of the pinned Training Operator, read from the Go module cache."""
    return module_dir("github.com/kubeflow/training-operator", HERE / "operator") / "manifests" / "base"


def _documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _resources(folder: Path) -> list[str]:
    """The files a kustomization lists as its resources."""
    return yaml.safe_load((folder / "kustomization.yaml").read_text())["resources"]


def in_namespace(documents: list[dict], namespace: str) -> list[dict]:
    """The documents with their service accounts, Roles and RoleBindings, and the bindings' subjects, in
    ``namespace`` (kustomize's `namespace:`)."""
    for doc in documents:
        if doc["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects", []):
            if subject["kind"] == "ServiceAccount":
                subject["namespace"] = namespace
    return documents


def _prefixed(documents: list[dict], prefix: str) -> list[dict]:
    """kustomize's namePrefix on RBAC: every name, and the names the bindings refer to."""
    for doc in documents:
        doc["metadata"]["name"] = prefix + doc["metadata"]["name"]
        if "roleRef" in doc:
            doc["roleRef"]["name"] = prefix + doc["roleRef"]["name"]
        for subject in doc.get("subjects", []):
            subject["name"] = prefix + subject["name"]
    return documents


def _patched(document: dict, patch: list[dict]) -> dict:
    """``document`` with a JSON patch's `replace` and `add` operations applied (the kinds upstream's webhook patches
    use; `add` to an object's member, as Trainer v2.3's objectSelectors)."""
    for operation in patch:
        if operation["op"] not in ("replace", "add"):
            raise ValueError(f"unsupported JSON patch operation {operation['op']!r} at {operation['path']}")
        *parents, last = operation["path"].lstrip("/").split("/")
        target: Any = document
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list) and operation["op"] == "add":
            raise ValueError(f"unsupported JSON patch `add` into a list at {operation['path']}")
        target[int(last) if isinstance(target, list) else last] = operation["value"]
    return document


def _by_url(config: dict, host: str, port: int) -> dict:
    """The webhook configuration calling its webhooks by URL at ``host``: no Service can route to a loopback pod."""
    for hook in config["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": f"https://{host}:{port}{path}"}
    return config


def _webhook_configuration(upstream: Path, port: int) -> dict:
    """Upstream's validating webhooks for TFJob."""
    config = yaml.safe_load((upstream / "webhook" / "manifests.yaml").read_text())
    config["metadata"]["name"] = OPERATOR_WEBHOOKS
    config["webhooks"] = [hook for hook in config["webhooks"] if "tfjobs" in hook["rules"][0]["resources"]]
    return _by_url(config, OPERATOR.host, port)


def start(
    state: Path,
    *,
    venv: Path | None = None,
    kubelet: bool = True,
    ports: Ports | None = None,
    trainer: binaries.TrainerPin = binaries.TRAINERS[0],
    images: Mapping[str, Path] | None = None,
    hosts: Mapping[str, str] | None = None,
    log: Callable[[str], None] = print,
) -> ControlPlane:
    """Builds (once) and starts every component, ``trainer``'s JobSet and Trainer; on a failure stops what started
    and raises StartError. The kubelet runs bakeoff's images in ``venv`` and ``images`` (name → folder) as well, and
    writes ``hosts`` (name → address: `service_names` for a Service outside the cluster) into every pod's hosts
    file."""
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
        starter.named(OPERATOR.component, starter.operator)
        starter.trainers(trainer)
        if kubelet:
            starter.kubelet(certs, venv or Path(sys.prefix), images, hosts)
    except BaseException:
        stop(state)
        raise
    return plane


def use_trainer(plane: ControlPlane, pin: binaries.TrainerPin, log: Callable[[str], None] = print) -> None:
    """Runs ``pin``'s JobSet and Trainer in place of the plane's, on the same API server, ports and webhook Secrets.

    Every TrainJob and JobSet goes first, while their controllers still run (their finalizers, their pods); then
    the controllers and their webhook configurations (v2.3's mutating one has no server at v2.1); then ``pin``'s
    CRDs replace the others (one stored version, v1alpha1 and v1alpha2, at every pin) and its controllers start
    as at `start`. Raises StartError as `start` does; the plane keeps running without a Trainer then.
    """
    if plane.trainer == pin.trainer:
        return
    for kind in ("trainjobs.trainer.kubeflow.org", "jobsets.jobset.x-k8s.io"):
        plane.kubectl("delete", kind, "--all", "--all-namespaces", "--timeout=120s")
    for component in (TRAINER.component, JOBSET.component):
        _stop_group(plane.pids.pop(component))
    plane.trainer = ""
    plane.save()
    hooks = [*JOBSET_WEBHOOKS.items(), *TRAINER_WEBHOOKS.items()]
    plane.kubectl("delete", "--ignore-not-found", *[f"{kind.lower()}/{name}" for kind, name in hooks])
    _Starter(plane, plane.binaries, log).trainers(pin)


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
    pins = {pin.trainer: pin for pin in binaries.TRAINERS}
    parser.add_argument("--trainer", choices=pins, default=binaries.TRAINERS[0].trainer, help="which pinned Trainer")
    args = parser.parse_args(argv)
    state = args.state_dir.resolve()
    if args.action == "down":
        stop(state)
        print(f"control plane in {state} stopped")
        return 0
    try:
        plane = start(
            state,
            kubelet=not args.no_kubelet,
            trainer=pins[args.trainer],
            log=lambda line: print(line, file=sys.stderr),
        )
    except (StartError, binaries.BuildError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(plane.kubeconfig)
    print(plane.kubectl("get", "nodes").stdout.rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
