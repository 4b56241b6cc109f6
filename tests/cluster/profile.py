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
from tests.cluster import controlplane
from tests.conftest import KfpStore
from tests.store_policies import BUCKET_2_17, ProfileSetup, make_profile_keys

NAMESPACE = "kubeflow-user-example-com"  # the multi-user overlay's profile namespace
ACCOUNT = "default-editor"  # what multi-user KFP runs a profile's steps as
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
    """A Kubeflow profile's namespace as the platform leaves it: the overlay's Role, its service account, the store
    secret with the profile's own S3 key, and a dataset in its private prefix."""

    def __init__(self, plane: controlplane.ControlPlane, kfp_store: KfpStore, dataset: Path) -> None:
        self.plane = plane
        self.endpoint = kfp_store.server.endpoint
        self.keys = make_profile_keys(kfp_store.server, PROFILE)
        prefix = f"s3://{PROFILE.bucket}/private/{NAMESPACE}/bakeoff"
        self.data_uri, self.store_uri = f"{prefix}/data", f"{prefix}/store"
        plane.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        )
        for overlay in ("multi-user", "multi-user-tfjob"):  # this cluster runs both trainers
            plane.kubectl("apply", "--server-side", "-k", str(controlplane.REPO / "manifests" / "overlays" / overlay))
        plane.kubectl("create", "serviceaccount", ACCOUNT, "-n", NAMESPACE, check=False)
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

    def as_profile(self) -> _Env:
        return _Env({**self.keys, "BAKEOFF_S3_ENDPOINT": self.endpoint, "BAKEOFF_S3_INSECURE": "1"})

    def step_pod(
        self, name: str, run: str, variant: dict = TINY, trainer: str = "tfjob", timeout_seconds: int = 600
    ) -> dict:
        """Starts the train step's pod; ``trainer``: the run's `trainer` parameter (tfjob or trainjob);
        ``timeout_seconds``: the job's activeDeadlineSeconds."""
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
                self.data_uri,
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
