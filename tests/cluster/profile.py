"""A Kubeflow profile on the real control plane, and the train step run as its pod: what the cluster lane's
training tests (TFJob through the Training Operator, TrainJob through Kubeflow Trainer v2) share."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from bakeoff.components.storage import open_store, runs
from bakeoff.components.storage.records import WorkerMetrics
from tests.cluster import controlplane, pki
from tests.conftest import KfpStore
from tests.store_policies import BUCKET_2_17, ProfileSetup, make_profile_keys

NAMESPACE = "kubeflow-user-example-com"  # the multi-user overlay's profile namespace
ACCOUNT = "default-editor"  # what multi-user KFP runs a profile's steps as
OWNER = "user@example.com"  # the profile's owner: a user with a client certificate, no group
# Kubeflow 26.03's user ClusterRoles as shipped (tests/contracts/README.md): what makes the owner's kubeflow-admin.
PLATFORM_ROLES = ("kubeflow-roles_26.03.yaml", "kubeflow-trainer-roles_26.03.yaml")
# The Pod Security label 26.03's profile controller puts on every profile namespace (kubeflow/manifests
# applications/profiles/pss/namespace-labels.yaml), and the binding it makes there for the profile's owner (the
# RoleBinding namespaceAdmin to kubeflow-admin, profile_controller.go of the profile controller).
NAMESPACE_LABELS = {"pod-security.kubernetes.io/enforce": "baseline"}
OWNER_BINDING = "namespaceAdmin"
OWNER_APPLY_SECONDS = 30.0  # the aggregation controller fills kubeflow-admin's rules in soon after the roles apply
PROFILE = ProfileSetup("cluster-profile", NAMESPACE, BUCKET_2_17, made_by="2.17")
EXAMPLES = 2048  # 32 steps of the global batch of 64 an epoch
EPOCHS = 4
TINY: dict[str, Any] = {
    "name": "tiny",
    "model": {"type": "cnn", "filters": [8, 16], "dense_units": 32},
    "training": {"epochs": EPOCHS, "batch_size": 32},
    "workers": 2,
    "resources": {"cpu": "500m", "memory": "1Gi"},
}
UNIQUE = uuid.uuid4().hex[:6]  # a control plane may be reused (BAKEOFF_CLUSTER): this session's names are its own
POD_TIMEOUT = 420.0  # seconds for a step pod to finish; a tiny job trains in well under a minute here
# What a KFP train step does once its inputs are resolved (components/steps/train.py), as a pod's program.
STEP = """
import json, sys
from bakeoff.components.errors import reported
from bakeoff.components.training.launch import JobSettings, train_variant
with reported():
    variant, data, store, run = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    settings = JobSettings(image=sys.argv[5], max_train_examples=int(sys.argv[6]), timeout_seconds=int(sys.argv[8]),
                           backend="kubernetes", trainer=sys.argv[7])
    print(train_variant(variant, data, store, run, settings).to_json())
"""


class Profile:
    """A Kubeflow 26.03 profile's namespace: as the platform leaves it (baseline Pod Security, the owner bound to
    kubeflow-admin, its service account, the store secret with the profile's own S3 key), bakeoff's overlays applied
    by the owner with the owner's own certificate, and a dataset where a real run's ingest step leaves it."""

    def __init__(self, plane: controlplane.ControlPlane, kfp_store: KfpStore, dataset: Path) -> None:
        self.plane = plane
        self.endpoint = kfp_store.server.endpoint
        self.keys = make_profile_keys(kfp_store.server, PROFILE)
        self.data_uri = ingested_data_uri(PROFILE.bucket, NAMESPACE)
        self.store_uri = f"s3://{PROFILE.bucket}/private/{NAMESPACE}/bakeoff/store"
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": NAMESPACE_LABELS},
        }
        plane.kubectl("apply", "-f", "-", input=json.dumps(namespace))
        self.platform(plane)
        plane.kubectl("create", "serviceaccount", ACCOUNT, "-n", NAMESPACE, check=False)
        owner = owner_kubeconfig(plane)
        for overlay in ("multi-user", "multi-user-tfjob"):  # this cluster runs both trainers
            apply_as_owner(plane, owner, controlplane.REPO / "manifests" / "overlays" / overlay)
        # Through stdin, never the command line (which error messages and `ps` show); replaces the example keys
        # that manifests/store-secret may have put there.
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": "mlpipeline-minio-artifact", "namespace": NAMESPACE},
            "stringData": {
                "accesskey": self.keys["AWS_ACCESS_KEY_ID"],
                "secretkey": self.keys["AWS_SECRET_ACCESS_KEY"],
            },
        }
        plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(secret))
        with self.as_profile():
            open_store(self.data_uri).put_dir(dataset, "")

    @staticmethod
    def platform(plane: controlplane.ControlPlane) -> None:
        """What the cluster admin installed: 26.03's roles as they ship, the owner's binding, and bakeoff's admin part
        (manifests/cluster-roles: this cluster has the Training Operator)."""
        for file in PLATFORM_ROLES:
            # Client-side: a server-side apply of `rules: []` again conflicts with the aggregation controller, which
            # owns the rules of kubeflow-admin/edit/view once it has filled them in.
            plane.kubectl("apply", "-f", str(controlplane.CONTRACTS / file))
        plane.kubectl("apply", "--server-side", "-k", str(controlplane.REPO / "manifests" / "cluster-roles"))
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": OWNER_BINDING, "namespace": NAMESPACE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubeflow-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OWNER}],
        }
        plane.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(binding))

    def as_profile(self) -> _Env:
        return _Env({**self.keys, "BAKEOFF_S3_ENDPOINT": self.endpoint, "BAKEOFF_S3_INSECURE": "1"})

    def step_pod(
        self,
        name: str,
        run: str,
        variant: dict = TINY,
        trainer: str = "tfjob",
        timeout_seconds: int = 600,
        data_uri: str = "",
    ) -> dict:
        """Starts the train step's pod; ``trainer``: the run's `trainer` parameter (tfjob or trainjob);
        ``timeout_seconds``: the job's activeDeadlineSeconds; ``data_uri``: its dataset (default: the profile's)."""
        secret = [
            {"name": variable, "valueFrom": {"secretKeyRef": {"name": "mlpipeline-minio-artifact", "key": key}}}
            for variable, key in (("AWS_ACCESS_KEY_ID", "accesskey"), ("AWS_SECRET_ACCESS_KEY", "secretkey"))
        ]
        container = {
            "name": "main",
            "image": controlplane.TEST_IMAGE,
            "command": ["python", "-c", STEP],
            "args": [
                json.dumps(variant),
                data_uri or self.data_uri,
                self.store_uri,
                run,
                controlplane.TEST_IMAGE,
                str(EXAMPLES),
                trainer,
                str(timeout_seconds),
            ],
            "env": [
                {"name": "BAKEOFF_S3_ENDPOINT", "value": self.endpoint},
                {"name": "BAKEOFF_S3_INSECURE", "value": "1"},
                *secret,
            ],
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"serviceAccountName": ACCOUNT, "restartPolicy": "Never", "containers": [container]},
        }
        self.plane.kubectl("create", "-f", "-", input=json.dumps(pod))
        return pod

    def metrics(self, run: str, variant: str = "tiny") -> WorkerMetrics:
        """The variant's training metrics from the profile's store, where its model must be too."""
        with self.as_profile():
            store = open_store(self.store_uri)
            prefix = runs.variant_prefix(run, variant)
            assert store.exists(f"{prefix}/model/saved_model.pb"), f"no model under {prefix}"
            return WorkerMetrics.from_json(store.get_bytes(f"{prefix}/{runs.METRICS}").decode(), runs.METRICS)

    def must_get(self, kind: str, name: str) -> dict:
        """The object; fails the test naming it when the API has none."""
        found = self.get(kind, name)
        if found is None:
            raise AssertionError(f"no {kind} {NAMESPACE}/{name}")
        return found

    def get(self, kind: str, name: str) -> dict | None:
        found = self.plane.kubectl("get", kind, name, "-n", NAMESPACE, "-o", "json", check=False)
        return json.loads(found.stdout) if found.returncode == 0 else None

    def wait_pod(self, name: str, timeout: float = POD_TIMEOUT) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pod = self.get("pod", name)
            if pod and pod["status"].get("phase") in ("Succeeded", "Failed"):
                return pod
            time.sleep(2)
        raise AssertionError(f"pod {name} did not finish in {timeout:.0f} s; its log ends:\n{self.log(name)[-3000:]}")

    def log(self, pod: str) -> str:
        return self.plane.kubectl("logs", pod, "-n", NAMESPACE, check=False).stdout

    def wait_gone(self, kind: str, name: str, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.get(kind, name) is None:
                return True
            time.sleep(1)
        return False


def ingested_data_uri(bucket: str, namespace: str) -> str:
    """Where a real multi-user run's ingest step leaves the dataset the train steps read: the profile's pipeline root
    (private-artifacts/<namespace>/v2/artifacts, the kfp-launcher config sync.py writes), then <pipeline>/<run id>
    (GenerateOutputURI in backend/src/v2/metadata/client.go, line 370 at KFP 2.16.0), then <task>/<salt>/<output>
    (driver.go line 729). The profile's key may read it under each release's policy (tests/store_policies.py)."""
    run, salt = uuid.uuid4(), uuid.uuid4().hex[:8]
    return f"s3://{bucket}/private-artifacts/{namespace}/v2/artifacts/bakeoff/{run}/ingest/{salt}/data"


def owner_kubeconfig(plane: controlplane.ControlPlane) -> Path:
    """A kubeconfig with the profile owner's own client certificate (CN = the user, no group)."""
    ca = pki.Authority.load(plane.state / "pki")
    pair = ca.issue("profile-owner", OWNER, client=True)
    return pki.kubeconfig(plane.state / "owner.kubeconfig", plane.server, plane.ca, user=OWNER, client=pair)


def apply_as_owner(plane: controlplane.ControlPlane, kubeconfig: Path, folder: Path) -> None:
    """``kubectl apply -k folder`` as the owner; retried while the aggregation controller has not yet given
    kubeflow-admin its rules (the refusal says "attempting to grant RBAC permissions not currently held")."""
    deadline = time.monotonic() + OWNER_APPLY_SECONDS
    while True:
        result = plane.kubectl("apply", "--server-side", "-k", str(folder), kubeconfig=kubeconfig, check=False)
        if result.returncode == 0:
            return
        if "not currently held" not in result.stderr or time.monotonic() > deadline:
            raise AssertionError(f"the profile owner could not apply {folder.name}: {result.stderr.strip()}")
        time.sleep(1)


class _Env:
    """Sets environment variables for a block (module-scoped fixtures cannot use monkeypatch)."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        self.saved = {key: os.environ.get(key) for key in self.values}
        os.environ.update(self.values)

    def __exit__(self, *exc: object) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def processes_of(hostname: str) -> list[int]:
    """The pids of a pod's processes here: the kubelet gives each container HOSTNAME=<the pod's spec.hostname, else its
    name>, as a runtime does."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"HOSTNAME={hostname}".encode() in environ:
            found.append(int(entry.name))
    return found
