"""The control plane itself, as `make cluster` promises it: a Ready node, the CRDs, RBAC enforced, the webhooks of
the Training Operator, Kubeflow Trainer and JobSet."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.cluster import controlplane

pytestmark = pytest.mark.cluster


def test_the_process_kubelet_is_a_ready_node(control_plane: controlplane.ControlPlane) -> None:
    nodes = json.loads(control_plane.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert [node["metadata"]["name"] for node in nodes] == [controlplane.NODE]
    ready = {c["type"]: c["status"] for c in nodes[0]["status"]["conditions"]}["Ready"]
    assert ready == "True"


def test_the_crds_bakeoff_uses_are_served(control_plane: controlplane.ControlPlane) -> None:
    for crd in (
        "tfjobs.kubeflow.org",
        "inferenceservices.serving.kserve.io",
        "servingruntimes.serving.kserve.io",
        "trainjobs.trainer.kubeflow.org",
        "clustertrainingruntimes.trainer.kubeflow.org",
        "jobsets.jobset.x-k8s.io",
    ):
        control_plane.kubectl("get", "crd", crd)
    served = control_plane.kubectl("api-resources", "--api-group=kubeflow.org", "-o", "name").stdout.split()
    assert "tfjobs.kubeflow.org" in served


def test_the_real_authorizer_refuses_what_no_role_grants(control_plane: controlplane.ControlPlane) -> None:
    """A service account with no binding may not create TFJobs: RBAC is on, not everyone an admin."""
    control_plane.kubectl("create", "serviceaccount", "nobody", "-n", "default")
    answer = control_plane.kubectl(
        "auth",
        "can-i",
        "create",
        "tfjobs.kubeflow.org",
        "-n",
        "default",
        "--as=system:serviceaccount:default:nobody",
        check=False,
    )
    assert answer.stdout.strip() == "no"


def test_the_operators_webhook_validates_tfjobs(control_plane: controlplane.ControlPlane) -> None:
    """The Training Operator's validating webhook is called by the API server: no `tensorflow` container, no TFJob."""
    container = {"name": "main", "image": controlplane.TEST_IMAGE}
    replicas = {"Worker": {"replicas": 1, "template": {"spec": {"containers": [container]}}}}
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "unnamed", "namespace": "default"},
        "spec": {"tfReplicaSpecs": replicas},
    }
    answer = control_plane.kubectl("create", "-f", "-", input=json.dumps(job), check=False)
    assert answer.returncode != 0
    assert 'admission webhook "validator.tfjob.training-operator.kubeflow.org" denied' in answer.stderr
    assert "must have at least one container with name tensorflow" in answer.stderr


def test_trainers_webhook_validates_trainjobs(control_plane: controlplane.ControlPlane) -> None:
    """Kubeflow Trainer's validating webhook is called by URL: a TrainJob on a runtime that does not exist fails."""
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "unnamed", "namespace": "default"},
        "spec": {"runtimeRef": {"name": "no-such-runtime"}},
    }
    answer = control_plane.kubectl("create", "-f", "-", input=json.dumps(job), check=False)
    assert answer.returncode != 0
    assert 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied' in answer.stderr
    assert "clusterTrainingRuntime must be created before the TrainJob is created" in answer.stderr


def jobset(name: str) -> dict:
    container = {"name": "main", "image": controlplane.TEST_IMAGE}
    pods = {"completions": 1, "template": {"spec": {"containers": [container]}}}  # the webhook counts completions
    job = {"name": "node", "replicas": 1, "template": {"spec": pods}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicatedJobs": [job]},
    }


def test_jobsets_webhooks_default_and_validate_jobsets(control_plane: controlplane.ControlPlane) -> None:
    """JobSet's mutating webhook fills in its defaults, its validating webhook refuses pod names past 63 characters."""
    made = control_plane.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(jobset("js")))
    spec = json.loads(made.stdout)["spec"]
    assert spec["network"]["enableDNSHostnames"] is True  # no CRD default: the webhook's (jobSetWebhook.Default)
    assert spec["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    answer = control_plane.kubectl("create", "-f", "-", input=json.dumps(jobset("j" * 50)), check=False)
    assert answer.returncode != 0
    assert 'admission webhook "vjobset.kb.io" denied' in answer.stderr
    assert "pod names generated for this JobSet will exceed 63 characters" in answer.stderr


def test_a_component_that_cannot_start_is_named_with_its_log(tmp_path: Path) -> None:
    """The API server's port taken: start stops what it started and says which component failed, and why."""
    ports = controlplane.Ports.free()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports.api))
        taken.listen()
        with pytest.raises(controlplane.StartError) as error:
            controlplane.start(tmp_path / "cluster", kubelet=False, ports=ports, log=lambda line: None)
    message = str(error.value)
    assert message.startswith("kube-apiserver exited with code"), message
    assert "address already in use" in message
    assert not (tmp_path / "cluster" / "control-plane.json").exists()
