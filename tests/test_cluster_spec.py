"""TF_CONFIG from a Trainer v2 pod's JobSet identity, against the names JobSet and the Job controller give pods."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.components.backends import cluster_spec
from bakeoff.components.backends.cluster_spec import ensure_tf_config, from_jobset
from bakeoff.components.environment import (
    COMPLETION_INDEX_ENV,
    JOB_INDEX_ENV,
    JOBSET_ENV,
    NODES_ENV,
    REPLICATED_JOB_ENV,
    TF_CONFIG_ENV,
)
from bakeoff.components.errors import BakeoffError

pytestmark = pytest.mark.unit

TRAINJOB = "bakeoff-batch-norm-1a2b3c4d"  # Trainer v2.1 names the JobSet after the TrainJob (jobset plugin's Build)
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def jobset_pod(jobset: str, replicated_job: str, job_index: int, completion_index: int) -> dict[str, str]:
    """A JobSet pod's hostname, subdomain and labels, as kubernetes-sigs/jobset v0.10.1 and the Job controller make
    them.

    GenJobName (pkg/util/placement/placement.go): ``<jobset>-<replicatedJob>-<jobIndex>``; labelAndAnnotateObject
    (pkg/controllers/jobset_controller.go) labels the pods; GetSubdomain: the JobSet's name when spec.network.subdomain
    is unset, also the headless Service's name (createHeadlessSvcIfNecessary). The Job controller (manageJob,
    k8s.io/kubernetes pkg/controller/job/job_controller.go) sets the hostname ``<job>-<completionIndex>``.
    """
    job = f"{jobset}-{replicated_job}-{job_index}"
    return {
        "hostname": f"{job}-{completion_index}",
        "subdomain": jobset,
        "service": jobset,
        "jobset.sigs.k8s.io/jobset-name": jobset,
        "jobset.sigs.k8s.io/replicatedjob-name": replicated_job,
        "jobset.sigs.k8s.io/job-index": str(job_index),
        "completion-index": str(completion_index),
    }


def runtime_env(pod: dict[str, str], nodes: int) -> dict[str, str]:
    """The pod's variables under bakeoff's runtime: its labels through the downward API, the Job controller's index,
    and the TrainJob's node count."""
    env = {variable: pod[label] for variable, label in cluster_spec.LABELS.items()}
    return env | {COMPLETION_INDEX_ENV: pod["completion-index"], NODES_ENV: str(nodes)}


@pytest.mark.parametrize("nodes", [1, 2, 3])
def test_every_worker_is_addressed_by_its_pod_hostname_under_the_headless_service(nodes: int) -> None:
    pods = [jobset_pod(TRAINJOB, "node", 0, index) for index in range(nodes)]
    expected = [f"{pod['hostname']}.{pod['service']}:2222" for pod in pods]
    assert expected[0] == f"{TRAINJOB}-node-0-0.{TRAINJOB}:2222", (
        "the address Trainer's torch and jax plugins give node 0"
    )
    for index, pod in enumerate(pods):
        assert from_jobset(runtime_env(pod, nodes)) == {
            "cluster": {"worker": expected},
            "task": {"type": "worker", "index": index},
            "environment": "cloud",
        }
        assert _DNS1123_LABEL.fullmatch(pod["hostname"]) and pod["subdomain"] == pod["service"]


@pytest.mark.long_running
def test_tensorflow_reads_it_as_one_worker_of_the_cluster() -> None:
    """The resolver MultiWorkerMirroredStrategy uses takes the derived TF_CONFIG: this pod is worker 1 of 3."""
    env = runtime_env(jobset_pod(TRAINJOB, "node", 0, 1), 3)
    program = (
        "import json, os; from bakeoff.components.backends import cluster_spec; cluster_spec.ensure_tf_config();"
        " import tensorflow as tf; r = tf.distribute.cluster_resolver.TFConfigClusterResolver();"
        " print(json.dumps([r.task_type, r.task_id, r.cluster_spec().as_dict()]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        env=env | {"PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert result.returncode == 0, result.stderr
    task_type, task_id, cluster = json.loads(result.stdout.splitlines()[-1])
    assert (task_type, task_id) == ("worker", 1)
    assert cluster == {"worker": [f"{TRAINJOB}-node-0-{index}.{TRAINJOB}:2222" for index in range(3)]}


def test_a_tf_config_already_set_wins_and_a_pod_of_no_jobset_gets_none() -> None:
    given = {TF_CONFIG_ENV: '{"cluster": {}}', **runtime_env(jobset_pod(TRAINJOB, "node", 0, 0), 2)}
    ensure_tf_config(given)
    assert given[TF_CONFIG_ENV] == '{"cluster": {}}'
    alone: dict[str, str] = {COMPLETION_INDEX_ENV: "0"}  # an indexed Job's pod outside bakeoff's runtime
    ensure_tf_config(alone)
    assert TF_CONFIG_ENV not in alone
    derived = runtime_env(jobset_pod(TRAINJOB, "node", 0, 1), 2)
    ensure_tf_config(derived)
    assert json.loads(derived[TF_CONFIG_ENV]) == from_jobset(derived)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {NODES_ENV: None},
            f"{JOBSET_ENV} is set but {NODES_ENV} is not: submit the TrainJob with bakeoff's runtime"
            f" (manifests/trainer-v2/) and {NODES_ENV} equal to trainer.numNodes, or set TF_CONFIG",
        ),
        (
            {REPLICATED_JOB_ENV: None, COMPLETION_INDEX_ENV: None},
            f"{JOBSET_ENV} is set but {REPLICATED_JOB_ENV}, {COMPLETION_INDEX_ENV} are not: submit the TrainJob with "
            "bakeoff's"
            f" runtime (manifests/trainer-v2/) and {NODES_ENV} equal to trainer.numNodes, or set TF_CONFIG",
        ),
        (
            {JOB_INDEX_ENV: "first"},
            f"{JOB_INDEX_ENV}='first' is not a whole number: this pod does not look like one of"
            " bakeoff's Trainer v2 runtime (manifests/trainer-v2/); set TF_CONFIG instead",
        ),
        (
            {COMPLETION_INDEX_ENV: "2"},
            f"{COMPLETION_INDEX_ENV}=2 is not below {NODES_ENV}=2: set {NODES_ENV} to the TrainJob's trainer.numNodes",
        ),
    ],
)
def test_an_identity_that_does_not_add_up_is_one_line_and_nothing_is_set(change: dict, message: str) -> None:
    env = runtime_env(jobset_pod(TRAINJOB, "node", 0, 1), 2)
    for key, value in change.items():
        if value is None:
            del env[key]
        else:
            env[key] = value
    with pytest.raises(BakeoffError) as raised:
        ensure_tf_config(env)
    assert str(raised.value) == message and TF_CONFIG_ENV not in env


def test_the_worker_program_derives_it_before_training(tmp_path: Path) -> None:
    """Started as the runtime starts it, the worker checks its identity first, before TensorFlow's seconds of
    loading: a broken one is its one error line."""
    env = runtime_env(jobset_pod(TRAINJOB, "node", 0, 2), 2)
    (tmp_path / "tensorflow").mkdir()  # an import of TensorFlow before the check fails with another line
    (tmp_path / "tensorflow" / "__init__.py").write_text("raise ImportError('TensorFlow loaded before the check')")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bakeoff.components.training.worker",
            "--variant",
            "{}",
            "--data",
            "nowhere",
            "--store",
            "nowhere",
            "--prefix",
            "x",
        ],
        env=env | {"PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"bakeoff: error: {COMPLETION_INDEX_ENV}=2 is not below {NODES_ENV}=2:"
        f" set {NODES_ENV} to the TrainJob's trainer.numNodes"
    )
