"""The train step on the real control plane: a pod of the process kubelet submits a 2-worker TFJob through the
Kubernetes backend, the real Training Operator makes its pods and TF_CONFIG, the replicas train under
MultiWorkerMirroredStrategy and the model lands in SeaweedFS under the profile's prefix with the profile's key."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from bakeoff.components.data import artifact
from bakeoff.components.storage import open_store, runs
from bakeoff.components.training import backup
from bakeoff.components.training.tfjob import job_name
from tests.cluster.profile import (
    ACCOUNT,
    EPOCHS,
    NAMESPACE,
    POD_TIMEOUT,
    PROFILE,
    TINY,
    UNIQUE,
    Profile,
    ingested_data_uri,
    processes_of,
)
from tests.images import write_rgb_folder

pytestmark = pytest.mark.cluster


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
    # Admitted under the namespace's baseline Pod Security, and run as the step's account: the store read above.
    assert chief["spec"]["serviceAccountName"] == ACCOUNT
    env = {e["name"]: e.get("value") for e in chief["spec"]["containers"][0].get("env", [])}
    tf_config = json.loads(env["TF_CONFIG"])
    assert tf_config["task"] == {"type": "worker", "index": 0}
    assert tf_config["cluster"]["worker"] == [
        f"{job['metadata']['name']}-worker-{i}.{NAMESPACE}.svc:2222" for i in range(2)
    ]
    metrics = profile.metrics(run)
    assert (metrics.workers, metrics.num_replicas_in_sync) == (2, 2)  # both replicas joined the all-reduce
    # The step's log carries the chief's: worker 0's epoch lines, prefixed with its pod's name.
    assert f"[{job['metadata']['name']}-worker-0] Epoch {EPOCHS}/{EPOCHS}" in log

    # The step's pod owns the TFJob: deleting the pod lets the real garbage collector delete the job.
    profile.plane.kubectl("delete", "pod", f"step-train-{UNIQUE}", "-n", NAMESPACE, "--wait=false")
    assert profile.wait_gone("tfjob", job["metadata"]["name"]), "the TFJob outlived its step's pod"


def test_a_train_step_pod_trains_a_two_worker_tfjob_on_an_rgb_artifact(profile: Profile, tmp_path: Path) -> None:
    """Another dataset than Fashion-MNIST, as ingest leaves it under the profile's pipeline root: 3 classes of RGB
    32x32 images; both replicas read its shards and train a model for that shape."""
    folder = write_rgb_folder(tmp_path / "rgb", per_class=40, splits=("train", "test"))
    metadata = artifact.build(str(folder), tmp_path / "data", validation_size=24, shards=2, seed=0, log=print)
    assert metadata.image_shape == [32, 32, 3]
    data_uri = ingested_data_uri(PROFILE.bucket, NAMESPACE)
    with profile.as_profile():
        open_store(data_uri).put_dir(tmp_path / "data", "")
    run, step = f"r-rgb-{UNIQUE}", f"step-rgb-{UNIQUE}"
    profile.step_pod(step, run, data_uri=data_uri)
    pod = profile.wait_pod(step)
    assert pod["status"]["phase"] == "Succeeded", profile.log(step)[-3000:]
    metrics = profile.metrics(run)  # the model is in the profile's store too
    assert (metrics.epochs, metrics.num_replicas_in_sync) == (EPOCHS, 2)


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
    metrics = profile.metrics(run)
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


def test_a_job_past_its_deadline_fails_the_step_as_a_timeout_and_keeps_its_backup(profile: Profile) -> None:
    """A timeout is not a failure past the job's restarts (JobFailed, which removes the backup): a longer run resumes.

    The Training Operator v1.9.3 fails a job past activeDeadlineSeconds only when some event makes it reconcile
    (its deadline requeue goes to a queue nothing reads, kubeflow/trainer#3358): a job that just trains on is stopped
    by the runner's own deadline, the timeout plus its grace period, and deleted.
    """
    run, epochs = f"r-deadline-{UNIQUE}", 1000
    name, step = job_name(run, "tiny", 0), f"step-deadline-{UNIQUE}"
    profile.step_pod(step, run, {**TINY, "training": {**TINY["training"], "epochs": epochs}}, timeout_seconds=20)
    pod = profile.wait_pod(step)
    log = profile.log(step)
    assert pod["status"]["phase"] == "Failed", log[-3000:]
    error = log.rstrip().rsplit("\n", 1)[-1]
    assert error.startswith(f"bakeoff: error: TFJob {NAMESPACE}/{name} "), error
    assert "ran past its activeDeadlineSeconds" in error or "did not finish in time and was deleted" in error, error
    assert f"Epoch 2/{epochs}" in log, "no epoch ended before the deadline: nothing was backed up"
    with profile.as_profile():
        store = open_store(profile.store_uri)
        assert store.list(backup.backup_prefix(runs.variant_prefix(run, "tiny"))), "the timeout removed the backup"


def test_the_profile_namespace_enforces_baseline_pod_security(profile: Profile) -> None:
    """As 26.03's profile controller labels it: so every pod the tests above saw run was admitted under baseline, and
    a privileged one is refused (the PodSecurity admission plugin)."""
    namespace = profile.must_get("namespace", NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    container = {"name": "main", "image": "busybox", "securityContext": {"privileged": True}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"privileged-{UNIQUE}", "namespace": NAMESPACE},
        "spec": {"containers": [container]},
    }
    refused = profile.plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
    assert refused.returncode != 0 and 'violates PodSecurity "baseline:latest"' in refused.stderr, refused.stderr
