"""The train step on the real control plane: a pod of the process kubelet submits a 2-worker TFJob through the
Kubernetes backend, the real Training Operator makes its pods and TF_CONFIG, the replicas train under
MultiWorkerMirroredStrategy and the model lands in SeaweedFS under the profile's prefix with the profile's key."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.storage import open_store, runs
from components.storage.records import WorkerMetrics
from components.training.tfjob import job_name
from tests.cluster import controlplane
from tests.conftest import KfpStore
from tests.store_policies import BUCKET_2_17, ProfileSetup, make_profile_keys

pytestmark = pytest.mark.cluster

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
from components.errors import reported
from components.training.launch import JobSettings, train_variant
with reported():
    variant, data, store, run = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    settings = JobSettings(image=sys.argv[5], max_train_examples=int(sys.argv[6]), timeout_seconds=600,
                       backend="kubernetes")
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
        plane.kubectl("apply", "--server-side", "-k", str(controlplane.REPO / "manifests" / "overlays" / "multi-user"))
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

    def step_pod(self, name: str, run: str, variant: dict = TINY) -> dict:
        secret = [
            {"name": variable, "valueFrom": {"secretKeyRef": {"name": "mlpipeline-minio-artifact", "key": key}}}
            for variable, key in (("AWS_ACCESS_KEY_ID", "accesskey"), ("AWS_SECRET_ACCESS_KEY", "secretkey"))
        ]
        container = {
            "name": "main",
            "image": controlplane.TEST_IMAGE,
            "command": ["python", "-c", STEP],
            "args": [json.dumps(variant), self.data_uri, self.store_uri, run, controlplane.TEST_IMAGE, str(EXAMPLES)],
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


@pytest.fixture(scope="module")
def profile(control_plane: controlplane.ControlPlane, kfp_store: KfpStore, small_dataset: Path) -> Iterator[Profile]:
    yield Profile(control_plane, kfp_store, small_dataset)


def processes_of(pod: str) -> list[int]:
    """The pids of a pod's processes here: the kubelet gives each container HOSTNAME=<pod name>, as a runtime does."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"HOSTNAME={pod}".encode() in environ:
            found.append(int(entry.name))
    return found


def test_a_train_step_pod_trains_a_two_worker_tfjob_through_the_real_operator(profile: Profile) -> None:
    run = f"r-train-{UNIQUE}"
    profile.step_pod(f"step-train-{UNIQUE}", run)
    pod = profile.wait_pod(f"step-train-{UNIQUE}")
    log = profile.log(f"step-train-{UNIQUE}")
    assert pod["status"]["phase"] == "Succeeded", log[-3000:]

    job = profile.must_get("tfjob", job_name(run, "tiny", 0))
    conditions = {c["type"]: c["status"] for c in job["status"]["conditions"]}
    assert conditions.get("Succeeded") == "True", job["status"]
    # The operator made the replicas and wrote TF_CONFIG naming both by their Services. The chief's pod stays;
    # worker 1's may be gone: cleanPodPolicy Running deletes a replica still running when the chief succeeds.
    chief = profile.must_get("pod", f"{job['metadata']['name']}-worker-0")
    env = {e["name"]: e.get("value") for e in chief["spec"]["containers"][0].get("env", [])}
    tf_config = json.loads(env["TF_CONFIG"])
    assert tf_config["task"] == {"type": "worker", "index": 0}
    assert tf_config["cluster"]["worker"] == [
        f"{job['metadata']['name']}-worker-{i}.{NAMESPACE}.svc:2222" for i in range(2)
    ]
    with profile.as_profile():
        store = open_store(profile.store_uri)
        prefix = runs.variant_prefix(run, "tiny")
        assert store.exists(f"{prefix}/model/saved_model.pb")
        metrics = WorkerMetrics.from_json(store.get_bytes(f"{prefix}/{runs.METRICS}").decode(), runs.METRICS)
    assert (metrics.workers, metrics.num_replicas_in_sync) == (2, 2)  # both replicas joined the all-reduce
    # The step's log carries the chief's: worker 0's epoch lines, prefixed with its pod's name.
    assert f"[{job['metadata']['name']}-worker-0] Epoch {EPOCHS}/{EPOCHS}" in log

    # The step's pod owns the TFJob: deleting the pod lets the real garbage collector delete the job.
    profile.plane.kubectl("delete", "pod", f"step-train-{UNIQUE}", "-n", NAMESPACE, "--wait=false")
    assert profile.wait_gone("tfjob", job["metadata"]["name"]), "the TFJob outlived its step's pod"


def test_a_killed_replica_is_restarted_by_the_kubelet_and_resumes_from_its_backup(profile: Profile) -> None:
    run, epochs = f"r-fault-{UNIQUE}", 12
    name = job_name(run, "tiny", 0)
    profile.step_pod(f"step-fault-{UNIQUE}", run, {**TINY, "training": {**TINY["training"], "epochs": epochs}})
    victim = f"{name}-worker-1"
    deadline = time.monotonic() + POD_TIMEOUT
    # The chief's own log, not the step's relay of it, which may lag: epochs 1 and 2 are backed up by then.
    while f"Epoch 3/{epochs}" not in profile.log(f"{name}-worker-0"):
        assert time.monotonic() < deadline, profile.log(f"step-fault-{UNIQUE}")[-3000:]
        time.sleep(1)
    pids = processes_of(victim)
    assert pids, f"no process of {victim}"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)

    pod = profile.wait_pod(f"step-fault-{UNIQUE}")
    assert pod["status"]["phase"] == "Succeeded", profile.log(f"step-fault-{UNIQUE}")[-3000:]
    # The chief lost its peer mid-all-reduce and was restarted in place too; worker 1's pod may be gone already
    # (cleanPodPolicy Running deletes a replica still running when the chief succeeds).
    chief = profile.must_get("pod", f"{name}-worker-0")
    assert chief["status"]["containerStatuses"][0]["restartCount"] >= 1
    with profile.as_profile():
        raw = open_store(profile.store_uri).get_bytes(f"{runs.variant_prefix(run, 'tiny')}/{runs.METRICS}").decode()
    metrics = WorkerMetrics.from_json(raw, runs.METRICS)
    assert 2 <= metrics.resumed_from_epoch < epochs, metrics
    assert metrics.epochs_trained == epochs - metrics.resumed_from_epoch


def test_a_retried_step_replaces_the_finished_job_of_the_same_name(profile: Profile) -> None:
    """A KFP retry runs the step again with the same run id: the TFJob's name exists (409) and was finished."""
    run = f"r-retry-{UNIQUE}"
    profile.step_pod(f"step-retry-1-{UNIQUE}", run)
    assert profile.wait_pod(f"step-retry-1-{UNIQUE}")["status"]["phase"] == "Succeeded"
    first = profile.must_get("tfjob", job_name(run, "tiny", 0))
    profile.step_pod(f"step-retry-2-{UNIQUE}", run)
    pod = profile.wait_pod(f"step-retry-2-{UNIQUE}")
    assert pod["status"]["phase"] == "Succeeded", profile.log(f"step-retry-2-{UNIQUE}")[-3000:]
    second = profile.must_get("tfjob", job_name(run, "tiny", 0))
    assert second["metadata"]["uid"] != first["metadata"]["uid"]  # deleted and created anew, not the old one read back
