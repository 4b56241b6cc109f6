"""The train step on the real control plane with `trainer=trainjob`: a pod of the process kubelet submits a 2-worker
TrainJob on bakeoff's ClusterTrainingRuntime, the real Kubeflow Trainer v2 controller makes its JobSet, the real
JobSet controller its Jobs, the Job controller their pods; the workers derive TF_CONFIG from their JobSet identity,
train under MultiWorkerMirroredStrategy and the model lands in the profile's store. Each test runs against every
pinned Trainer release (v2.1.0, v2.3.0: tests/cluster/binaries.py TRAINERS) with the JobSet it pins."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bakeoff.components.backends import cluster_spec
from bakeoff.components.backends.trainjob import COMPLETION_INDEX, JOBSET_LABEL, OVERRIDES, PATCHES, trainjob_name
from bakeoff.components.training.tfjob import job_name
from tests.cluster import binaries, controlplane
from tests.cluster.profile import ACCOUNT, EPOCHS, NAMESPACE, POD_TIMEOUT, TINY, UNIQUE, Profile, processes_of

pytestmark = pytest.mark.cluster


# The field each release takes the workers' pod spec in, as the backend must pick it from the served schema: v2.2
# removed podTemplateOverrides (components/backends/trainjob.py).
IDENTITY_FIELDS = {"v2.1.0": OVERRIDES, "v2.3.0": PATCHES}


@pytest.fixture(scope="module", params=binaries.TRAINERS, ids=lambda pin: f"trainer-{pin.trainer}")
def trainer(control_plane: controlplane.ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """The pinned Trainer release (its version) with the JobSet it pins running, and bakeoff's ClusterTrainingRuntime
    applied as a cluster admin does once (README "On Kubeflow"). The plane's own release is given back after."""
    pin: binaries.TrainerPin = request.param
    pins = {other.trainer: other for other in binaries.TRAINERS}
    before = pins.get(control_plane.trainer, binaries.TRAINERS[0])  # none recorded: a plane from before the pins
    try:
        controlplane.use_trainer(control_plane, pin, log=lambda line: print(line, file=sys.stderr))
    except controlplane.StartError as error:
        pytest.fail(f"Kubeflow Trainer {pin.trainer} did not start: {error}", pytrace=False)
    control_plane.kubectl("apply", "--server-side", "-k", str(controlplane.REPO / "manifests" / "trainer-v2"))
    yield pin.trainer
    controlplane.use_trainer(control_plane, before, log=lambda line: print(line, file=sys.stderr))


def names(test: str, trainer: str) -> tuple[str, str]:
    """The run's and its step pod's names: this session's and this release's own, so that no release's test finds
    another's pods or reads another's model."""
    tag = f"{test}{trainer.replace('.', '')}-{UNIQUE}"
    return f"r-{tag}", f"step-{tag}"


def workers(profile: Profile, name: str) -> list[dict[str, Any]]:
    """The TrainJob's worker pods, by completion index."""
    found = profile.plane.kubectl("get", "pods", "-n", NAMESPACE, "-l", f"{JOBSET_LABEL}={name}", "-o", "json")
    pods = json.loads(found.stdout)["items"]
    return sorted(pods, key=lambda pod: int(pod["metadata"]["annotations"][COMPLETION_INDEX]))


def derived_tf_config(pod: dict[str, Any]) -> dict:
    """The TF_CONFIG the worker derives in this pod: its runtime's variables resolved as the kubelet resolves them."""
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    env = {cluster_spec.COMPLETION_INDEX_ENV: annotations[COMPLETION_INDEX]}
    for variable in pod["spec"]["containers"][0]["env"]:
        field = variable.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")
        if field.startswith("metadata.labels['"):
            env[variable["name"]] = labels[field[len("metadata.labels['") : -2]]
        elif "value" in variable:
            env[variable["name"]] = variable["value"]
    config = cluster_spec.from_jobset(env)
    assert config is not None, env
    return config


def test_a_train_step_pod_trains_a_two_worker_trainjob_through_real_trainer(profile: Profile, trainer: str) -> None:
    run, step = names("tj", trainer)
    name = trainjob_name(job_name(run, "tiny", 0))
    profile.step_pod(step, run, trainer="trainjob")
    pod = profile.wait_pod(step)
    log = profile.log(step)
    assert pod["status"]["phase"] == "Succeeded", log[-3000:]

    job = profile.must_get("trainjob", name)
    conditions = {c["type"]: c["status"] for c in job["status"]["conditions"]}
    assert conditions.get("Complete") == "True", job["status"]
    # The backend set the workers' account in the field this release serves (the other one it would not know).
    assert IDENTITY_FIELDS[trainer] in job["spec"], job["spec"]
    # Trainer made the JobSet, named after the TrainJob and owned by it; JobSet and the Job controller made the pods.
    jobset = profile.must_get("jobset", name)
    assert [(o["kind"], o["name"]) for o in jobset["metadata"]["ownerReferences"]] == [("TrainJob", name)]
    pods = workers(profile, name)
    assert [p["status"]["phase"] for p in pods] == ["Succeeded", "Succeeded"]
    # The workers run as the step's account, set through the field this Trainer honours (components/backends/
    # trainjob.py), admitted under the namespace's baseline Pod Security; they wrote the model read below.
    assert [p["spec"]["serviceAccountName"] for p in pods] == [ACCOUNT, ACCOUNT]
    # The TF_CONFIG each worker derives names every pod by the hostname and subdomain the controllers gave it.
    addresses = [f"{p['spec']['hostname']}.{p['spec']['subdomain']}:2222" for p in pods]
    for index, worker in enumerate(pods):
        assert derived_tf_config(worker) == {
            "cluster": {"worker": addresses},
            "task": {"type": "worker", "index": index},
            "environment": "cloud",
        }
    metrics = profile.metrics(run)
    assert (metrics.workers, metrics.num_replicas_in_sync) == (2, 2)  # both workers joined the all-reduce
    # The step's log carries the chief's: worker 0's epoch lines, prefixed with its pod's name.
    assert f"[{pods[0]['metadata']['name']}] Epoch {EPOCHS}/{EPOCHS}" in log

    # The step's pod owns the TrainJob: deleting the pod lets the real garbage collector delete it, and its JobSet.
    profile.plane.kubectl("delete", "pod", step, "-n", NAMESPACE, "--wait=false")
    assert profile.wait_gone("trainjob", name), "the TrainJob outlived its step's pod"
    assert profile.wait_gone("jobset", name), "the JobSet outlived its TrainJob"


def test_a_killed_worker_restarts_the_jobset_and_every_worker_resumes_from_the_backup(
    profile: Profile, trainer: str
) -> None:
    (run, step), epochs = names("tjfault", trainer), 12
    name = trainjob_name(job_name(run, "tiny", 0))
    profile.step_pod(step, run, {**TINY, "training": {**TINY["training"], "epochs": epochs}}, trainer="trainjob")
    deadline = time.monotonic() + POD_TIMEOUT
    pods: list[dict[str, Any]] = []
    # The chief's own log (epochs 1 and 2 are backed up by then), and the step relays it: it follows this pod.
    while not pods or any(
        f"Epoch 3/{epochs}" not in text for text in (profile.log(pods[0]["metadata"]["name"]), profile.log(step))
    ):
        assert time.monotonic() < deadline, profile.log(step)[-3000:]
        time.sleep(1)
        pods = workers(profile, name)
    first = [pod["metadata"]["name"] for pod in pods]
    pids = processes_of(pods[1]["spec"]["hostname"])  # the Job controller's <job>-<index>, not the pod's name
    assert pids, f"no process of {first[1]}"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)

    pod = profile.wait_pod(step)
    log = profile.log(step)
    assert pod["status"]["phase"] == "Succeeded", log[-3000:]
    # The runtime's failurePolicy: JobSet recreated both workers' pods, and the step followed the chief's new one.
    jobset = profile.must_get("jobset", name)
    assert jobset["status"]["restarts"] == 1, jobset["status"]
    again = [worker["metadata"]["name"] for worker in workers(profile, name)]
    assert len(again) == 2 and not set(again) & set(first), (first, again)
    assert f"{again[0]}: the chief's new pod (its job was started again); following it" in log
    metrics = profile.metrics(run)
    assert 2 <= metrics.resumed_from_epoch < epochs, metrics
    assert metrics.epochs_trained == epochs - metrics.resumed_from_epoch
